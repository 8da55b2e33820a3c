package stacks_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/stacks"
)

// readerC reads lines on stdin in read_input and echoes them, while a
// second thread, "pauser", waits in pause.
const readerC = `#include <pthread.h>
#include <unistd.h>
#include <string.h>

static void *waiter(void *a) { for (;;) pause(); return 0; }

__attribute__((noinline)) int read_input(char *buf, int n) {
	return read(0, buf, n);
}

int main(void) {
	pthread_t th;
	char buf[64];
	pthread_create(&th, 0, waiter, 0);
	pthread_setname_np(th, "pauser");
	for (;;) {
		int n = read_input(buf, sizeof buf);
		if (n <= 0) return 0;
		write(1, buf, n);
	}
}
`

// echoer is a running program that echoes the lines written to it.
type echoer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startEchoer starts cmd with pipes, ready once it echoes a first line.
func startEchoer(t *testing.T, cmd *exec.Cmd) *echoer {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its children too are killed at the end
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &echoer{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		in.Close()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	e.ping(t, "start")
	return e
}

// ping checks that the program still runs and answers: it echoes word.
func (e *echoer) ping(t *testing.T, word string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := e.out.ReadString('\n')
		got <- line
	}()
	if _, err := io.WriteString(e.in, word+"\n"); err != nil {
		t.Fatalf("the program does not read any more: %v", err)
	}
	select {
	case line := <-got:
		if strings.TrimSpace(line) != word {
			t.Fatalf("the program answered %q to %q", line, word)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the program did not answer %q in 10s (stopped?)", word)
	}
}

// waitBlocked waits until process pid sleeps in a system call.
func waitBlocked(t *testing.T, pid int, syscall string) {
	t.Helper()
	for range 500 {
		if p, err := stacks.ProcInfo(pid); err == nil && p.Syscall == syscall {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	p, err := stacks.ProcInfo(pid)
	t.Fatalf("pid %d not in %s: %+v, %v", pid, syscall, p, err)
}

func buildReader(t *testing.T) string {
	t.Helper()
	cc := testenv.NeedTool(t, "gcc", "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "reader.c")
	if err := os.WriteFile(src, []byte(readerC), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "reader")
	if out, err := exec.Command(cc, "-g", "-O0", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// funcs returns the functions of the thread marked Main, and whether each
// has a file and line.
func mainFuncs(t *testing.T, p stacks.Proc) ([]string, []stacks.Frame) {
	t.Helper()
	for _, th := range p.Threads {
		if th.Main {
			var fns []string
			for _, f := range th.Frames {
				fns = append(fns, f.Func)
			}
			return fns, th.Frames
		}
	}
	t.Fatalf("no main thread in %+v", p)
	return nil, nil
}

func frameOf(frames []stacks.Frame, fn string) (stacks.Frame, bool) {
	for _, f := range frames {
		if f.Func == fn {
			return f, true
		}
	}
	return stacks.Frame{}, false
}

// A C program blocked in read, read by eu-stack and by gdb: both name
// read_input with its line, the thread named pauser, and the same
// normalised place; the program runs on, unchanged.
func TestCollectNative(t *testing.T) {
	bin := buildReader(t)
	e := startEchoer(t, exec.Command(bin))
	pid := e.cmd.Process.Pid

	tools := []struct {
		method string
		opts   stacks.Options
	}{
		{stacks.MethodEuStack, stacks.Options{GDB: "-"}},
		{stacks.MethodGDB, stacks.Options{EuStack: "-"}},
	}
	var sigs []string
	for _, tool := range tools {
		testenv.NeedTool(t, tool.method, map[string]string{"eu-stack": "elfutils", "gdb": "gdb"}[tool.method])
		waitBlocked(t, pid, "read") // back in read after the last ping
		start := time.Now()
		procs, err := stacks.Collect(context.Background(), pid, tool.opts)
		took := time.Since(start)
		if err != nil || len(procs) != 1 {
			t.Fatalf("%s: Collect = %+v, %v", tool.method, procs, err)
		}
		p := procs[0]
		t.Logf("%s: %v", tool.method, took)
		if p.Method != tool.method || p.Lang != stacks.LangNative || !p.Main || p.Note != "" || p.PID != pid || p.Comm != "reader" || p.Exe != bin {
			t.Errorf("%s: proc %+v", tool.method, p)
		}
		if len(p.Threads) != 2 || !slices.ContainsFunc(p.Threads, func(th stacks.Thread) bool { return th.Name == "pauser" && !th.Main }) {
			t.Errorf("%s: threads %+v", tool.method, p.Threads)
		}
		fns, frames := mainFuncs(t, p)
		if f, ok := frameOf(frames, "read_input"); !ok || !strings.HasSuffix(f.File, "reader.c") || f.Line != 8 || f.Module != bin {
			t.Errorf("%s: read_input frame %+v in %v", tool.method, f, fns)
		}
		if !slices.ContainsFunc(fns, func(fn string) bool { return strings.Contains(fn, "read") && fn != "read_input" }) {
			t.Errorf("%s: no read frame in %v", tool.method, fns)
		}
		r := stacks.Rank{Rank: 0, Host: "h", PID: pid, Procs: procs}
		sigs = append(sigs, r.Signature())
		e.ping(t, "after-"+tool.method)
	}
	if len(sigs) == 2 && sigs[0] != sigs[1] || sigs[0] != "native|read;read_input;main" {
		t.Errorf("signatures by eu-stack and gdb: %q", sigs)
	}

	// Without either tool: /proc only, saying so.
	waitBlocked(t, pid, "read")
	procs, err := stacks.Collect(context.Background(), pid, stacks.Options{EuStack: "-", GDB: "-"})
	if err != nil || procs[0].Method != stacks.MethodProc || len(procs[0].Threads) != 0 ||
		!strings.Contains(procs[0].Note, "neither eu-stack nor gdb") || procs[0].Syscall != "read" || procs[0].State != "S" {
		t.Errorf("without tools: %+v, %v", procs, err)
	}
	sig := stacks.Rank{Procs: procs}.Signature()
	if !strings.Contains(sig, "in read") {
		t.Errorf("a frameless rank's signature lacks its system call: %q", sig)
	}
	e.ping(t, "end")
}

// A tool that hangs is killed with its process group on time, and a stop
// it left pending or in force is undone: the program answers.
func TestCollectToolTimeout(t *testing.T) {
	bin := buildReader(t)
	e := startEchoer(t, exec.Command(bin))
	pid := e.cmd.Process.Pid
	waitBlocked(t, pid, "read")
	dir := t.TempDir()
	// The fake eu-stack stops its target, as a killed PTRACE_ATTACH
	// could leave it, starts a child in its group, and hangs.
	tool := filepath.Join(dir, "eu-stack")
	script := "#!/bin/sh\nfor a; do pid=$a; done\nkill -STOP $pid\nsleep 60 &\necho $! > " + dir + "/child\nwait\n"
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	procs, err := stacks.Collect(context.Background(), pid, stacks.Options{EuStack: tool, GDB: "-", ToolTimeout: 300 * time.Millisecond})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Collect took %v with a 300ms tool timeout", took)
	}
	if err != nil || !strings.Contains(procs[0].Note, "eu-stack did not finish in time") || procs[0].Method != stacks.MethodProc {
		t.Errorf("Collect = %+v, %v", procs, err)
	}
	e.ping(t, "resumed")
	b, _ := os.ReadFile(filepath.Join(dir, "child"))
	if child, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		if syscall.Kill(child, 0) == nil {
			time.Sleep(100 * time.Millisecond) // a killed child may be a zombie a moment
			if p, err := stacks.ProcInfo(child); err == nil && p.State != "Z" {
				t.Errorf("the tool's child %d outlived it: %+v", child, p)
				syscall.Kill(child, syscall.SIGKILL)
			}
		}
	}

	// A context that ends first ends the tool too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	stacks.Collect(ctx, pid, stacks.Options{EuStack: tool, GDB: "-"})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Collect took %v with a 200ms context", took)
	}
	e.ping(t, "resumed again")
}

// An attach the kernel refuses (eu-stack run as nobody on root's
// process) is a Note that says so, not an error.
func TestCollectRefused(t *testing.T) {
	testenv.NeedRoot(t, "to run eu-stack as another user")
	eu := testenv.NeedTool(t, "eu-stack", "elfutils")
	setpriv := testenv.NeedTool(t, "setpriv", "util-linux")
	bin := buildReader(t)
	e := startEchoer(t, exec.Command(bin))
	pid := e.cmd.Process.Pid
	tool := filepath.Join(t.TempDir(), "eu-stack")
	script := "#!/bin/sh\nexec " + setpriv + " --reuid=65534 --regid=65534 --clear-groups " + eu + " \"$@\"\n"
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	procs, err := stacks.Collect(context.Background(), pid, stacks.Options{EuStack: tool, GDB: "-"})
	if err != nil || procs[0].Method != stacks.MethodProc || !strings.Contains(procs[0].Note, "eu-stack: ptrace refused") {
		t.Errorf("Collect = %+v, %v", procs, err)
	}
	t.Logf("note: %s", procs[0].Note)
	e.ping(t, "still")
}

// pythonProg's main thread echoes lines in blocker while a second thread
// waits in waiter; with "fork", a forked child waits in child_wait.
const pythonProg = `import os, sys, threading
ev = threading.Event()

def waiter():
    ev.wait()  # WAITER_LINE

def child_wait():
    os.read(os.pipe()[0], 1)  # CHILD_LINE

def blocker():
    while True:
        line = sys.stdin.readline()  # BLOCKER_LINE
        if not line:
            return
        print(line.strip(), flush=True)

threading.Thread(target=waiter, name="waiter", daemon=True).start()
if "fork" in sys.argv and os.fork() == 0:
    child_wait()
blocker()
`

// lineOf is the line of src that holds mark.
func lineOf(src, mark string) int {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, mark) {
			return i + 1
		}
	}
	return 0
}

// pythonRank starts pythonProg as gorun's agent would start a rank: its
// environment from env.Build with a stacks directory, the hook written
// there.
func pythonRank(t *testing.T, hook bool, args ...string) (*echoer, string, string) {
	t.Helper()
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	dir := t.TempDir()
	script := filepath.Join(dir, "prog.py")
	if err := os.WriteFile(script, []byte(pythonProg), 0o644); err != nil {
		t.Fatal(err)
	}
	stacksDir := filepath.Join(dir, "stacks")
	if err := os.Mkdir(stacksDir, 0o700); err != nil {
		t.Fatal(err)
	}
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHON") })
	environ := base
	if hook {
		if err := stacks.WritePythonHook(env.StacksHookDir(stacksDir)); err != nil {
			t.Fatal(err)
		}
		environ = env.Build(base, env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, nil)
	}
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Env = environ
	return startEchoer(t, cmd), script, stacksDir
}

// A Python rank with gorun's hook: both threads' Python frames, with
// files and lines, by faulthandler; the program runs on; a second
// collection reads only its own dump.
func TestCollectPythonHook(t *testing.T) {
	e, script, stacksDir := pythonRank(t, true)
	pid := e.cmd.Process.Pid
	opts := stacks.Options{StacksDir: stacksDir, PySpy: "-"}
	for round := range 2 {
		waitBlocked(t, pid, "read") // back in readline after the last ping
		procs, err := stacks.Collect(context.Background(), pid, opts)
		if err != nil || len(procs) != 1 {
			t.Fatalf("Collect = %+v, %v", procs, err)
		}
		p := procs[0]
		if p.Method != stacks.MethodFaulthandler || p.Lang != stacks.LangPython || p.Note != "" || len(p.Threads) != 2 {
			t.Fatalf("round %d: %+v", round, p)
		}
		fns, frames := mainFuncs(t, p)
		if f, ok := frameOf(frames, "blocker"); !ok || fns[0] != "blocker" || f.File != script || f.Line != lineOf(pythonProg, "BLOCKER_LINE") {
			t.Errorf("round %d: main thread %+v", round, frames)
		}
		other := p.Threads[0]
		if other.Main {
			other = p.Threads[1]
		}
		if f, ok := frameOf(other.Frames, "waiter"); !ok || f.File != script || f.Line != lineOf(pythonProg, "WAITER_LINE") {
			t.Errorf("round %d: other thread %+v", round, other)
		}
		if got := stacks.NewVerdict([]stacks.Rank{{Procs: procs}}).Groups[0].Summary; got != "blocker <- <module>" {
			t.Errorf("round %d: summary %q", round, got)
		}
		e.ping(t, "round"+strconv.Itoa(round))
	}
	b, err := os.ReadFile(stacks.HookFile(stacksDir, pid))
	if err != nil || strings.Count(string(b), "in blocker") != 2 {
		t.Errorf("hook file after two dumps: %v\n%s", err, b)
	}
	if fi, err := os.Stat(stacks.HookFile(stacksDir, pid)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("hook file mode: %v, %v", fi.Mode(), err)
	}
}

// Under a shell, with a forked child: the shell is a wrapper, the Python
// process is the rank's main one, and the forked child is read through
// its own hook file.
func TestCollectPythonTree(t *testing.T) {
	testenv.NeedTool(t, "/usr/bin/python3", "python3")
	dir := t.TempDir()
	stacksDir := filepath.Join(dir, "stacks")
	if err := stacks.WritePythonHook(env.StacksHookDir(stacksDir)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "prog.py")
	if err := os.WriteFile(script, []byte(pythonProg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "/usr/bin/python3 "+script+" fork; true")
	cmd.Env = env.Build(os.Environ(), env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, nil)
	e := startEchoer(t, cmd)
	var procs []stacks.Proc
	for range 200 { // until the child has forked and armed its hook
		var err error
		procs, err = stacks.Collect(context.Background(), e.cmd.Process.Pid, stacks.Options{StacksDir: stacksDir, PySpy: "-"})
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) == 3 && procs[2].Method == stacks.MethodFaulthandler {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(procs) != 3 || procs[0].Comm != "sh" || procs[0].Main || len(procs[0].Threads) != 0 {
		t.Fatalf("procs %+v", procs)
	}
	if !procs[1].Main || procs[1].Method != stacks.MethodFaulthandler || procs[2].Method != stacks.MethodFaulthandler || procs[2].PPID != procs[1].PID {
		t.Fatalf("python and its child: %+v", procs[1:])
	}
	if fns, _ := mainFuncs(t, procs[2]); len(fns) == 0 || fns[0] != "child_wait" {
		t.Errorf("forked child's main thread: %v", fns)
	}
	if got := (stacks.Rank{Procs: procs}).Signature(); got != "python|blocker;<module>" {
		t.Errorf("signature %q", got)
	}
	e.ping(t, "tree")
}

// A Python without the hook is never sent the signal, which would end it:
// without a hook file, and with one it did not write (python -I ignores
// PYTHONPATH). Its native frames come instead, with a Note.
func TestCollectPythonNoHook(t *testing.T) {
	e, _, stacksDir := pythonRank(t, false)
	pid := e.cmd.Process.Pid
	procs, err := stacks.Collect(context.Background(), pid, stacks.Options{StacksDir: stacksDir, PySpy: "-"})
	if err != nil || len(procs) != 1 {
		t.Fatalf("Collect = %+v, %v", procs, err)
	}
	p := procs[0]
	if p.Lang != stacks.LangPython || !strings.Contains(p.Note, "hook not loaded") {
		t.Errorf("proc %+v", p)
	}
	if _, ok := testenv.HaveTool(t, "eu-stack", "elfutils"); ok && p.Method != stacks.MethodEuStack {
		t.Errorf("fallback method %q, want eu-stack", p.Method)
	}
	e.ping(t, "alive")

	// A file as the hook would leave it, but no handler.
	if err := os.WriteFile(stacks.HookFile(stacksDir, pid), []byte("gorun stacks: main thread 0x1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	procs, err = stacks.Collect(context.Background(), pid, stacks.Options{StacksDir: stacksDir, PySpy: "-", EuStack: "-", GDB: "-"})
	if err != nil || !strings.Contains(procs[0].Note, "does not catch signal 45") {
		t.Errorf("Collect = %+v, %v", procs, err)
	}
	e.ping(t, "still alive")
}

// The hook chains to the sitecustomize it shadows: Debian's, and one of
// the user's on PYTHONPATH, which still runs, sees sys.path without the
// hook's directory, and whose failure is reported as site.py would.
func TestPythonHookChain(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	dir := t.TempDir()
	stacksDir := filepath.Join(dir, "stacks")
	hookDir := env.StacksHookDir(stacksDir)
	if err := stacks.WritePythonHook(hookDir); err != nil {
		t.Fatal(err)
	}
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHON") })
	run := func(t *testing.T, extra []string, code string) (string, string) {
		t.Helper()
		cmd := exec.Command(python, "-c", code)
		cmd.Env = env.Build(base, env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, extra)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, stderr.String())
		}
		return strings.TrimSpace(string(out)), stderr.String()
	}
	const show = `import sys, sitecustomize, os
print(sitecustomize.__file__)
print(sys.path.count(os.environ["PYTHONPATH"].split(":")[0]))
print(open("/proc/self/status").read().split("SigCgt:")[1].split()[0])
`
	t.Run("debian", func(t *testing.T) {
		debian, err := filepath.Glob("/usr/lib/python3*/sitecustomize.py")
		if err != nil || len(debian) == 0 {
			t.Skip("no Debian sitecustomize")
		}
		out, _ := run(t, nil, show)
		lines := strings.Split(out, "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "/usr/lib/python3") || lines[1] != "1" {
			t.Fatalf("output %q", out)
		}
		m, _ := strconv.ParseUint(lines[2], 16, 64)
		if m&(1<<(stacks.DumpSignal-1)) == 0 {
			t.Errorf("the hook did not arm: SigCgt %s", lines[2])
		}
	})
	t.Run("user", func(t *testing.T) {
		user := filepath.Join(dir, "user")
		os.Mkdir(user, 0o755)
		src := "import builtins, sys\nbuiltins.GORUN_CHAIN = 42\nbuiltins.SEEN = [p for p in sys.path if 'stacks' in p]\n"
		if err := os.WriteFile(filepath.Join(user, "sitecustomize.py"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := run(t, []string{"PYTHONPATH=" + user}, "print(GORUN_CHAIN, SEEN)")
		if out != "42 []" {
			t.Errorf("output %q, want the user's sitecustomize's value and no hook directory on its sys.path", out)
		}
	})
	t.Run("broken", func(t *testing.T) {
		broken := filepath.Join(dir, "broken")
		os.Mkdir(broken, 0o755)
		if err := os.WriteFile(filepath.Join(broken, "sitecustomize.py"), []byte("raise RuntimeError('boom')\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr := run(t, []string{"PYTHONPATH=" + broken}, "print('ran')")
		if out != "ran" || !strings.Contains(stderr, "Error in sitecustomize") || !strings.Contains(stderr, "RuntimeError: boom") {
			t.Errorf("output %q, stderr %q", out, stderr)
		}
	})
	t.Run("unwritable directory", func(t *testing.T) {
		out, stderr := run(t, []string{env.StacksDirVar + "=/proc/no/such"}, "print('ran')")
		if out != "ran" || stderr != "" {
			t.Errorf("output %q, stderr %q", out, stderr)
		}
	})
	t.Run("bad signal", func(t *testing.T) {
		out, stderr := run(t, []string{env.StacksSignalVar + "=x"}, "print('ran')")
		if out != "ran" || stderr != "" {
			t.Errorf("output %q, stderr %q", out, stderr)
		}
	})
}

// A pid that is not there is an error; a rank's descendants are bounded.
func TestCollectGone(t *testing.T) {
	t.Parallel()
	if _, err := stacks.Collect(context.Background(), 1<<30, stacks.Options{}); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("Collect(no such pid) = %v", err)
	}
	if _, err := stacks.ProcInfo(1 << 30); err == nil {
		t.Errorf("ProcInfo(no such pid) succeeded")
	}
	cmd := exec.Command("/bin/sh", "-c", "for i in 1 2 3 4 5 6; do sleep 30 & done; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var procs []stacks.Proc
	for range 200 {
		procs, _ = stacks.Collect(context.Background(), cmd.Process.Pid, stacks.Options{MaxProcs: 4, EuStack: "-", GDB: "-"})
		// Until the shell's children have exec'd sleep (a fork is sh).
		if len(procs) == 4 && procs[1].Comm == "sleep" && procs[3].Comm == "sleep" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(procs) != 4 || procs[0].Comm != "sh" || procs[1].Comm != "sleep" || !procs[1].Main {
		t.Errorf("procs %+v", procs)
	}
}

// A Python whose hook is armed but that blocks the signal: Collect gives
// up on the dump after DumpWait and reads it natively, with a Notice that
// says so; the program runs on, the signal pending.
func TestCollectPythonHookBlocked(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	stacksDir := filepath.Join(t.TempDir(), "stacks")
	if err := stacks.WritePythonHook(env.StacksHookDir(stacksDir)); err != nil {
		t.Fatal(err)
	}
	code := "import signal, sys\nsignal.pthread_sigmask(signal.SIG_BLOCK, {" + strconv.Itoa(stacks.DumpSignal) + "})\n" +
		"for line in sys.stdin:\n    print(line.strip(), flush=True)\n"
	cmd := exec.Command(python, "-c", code)
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHON") })
	cmd.Env = env.Build(base, env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, nil)
	e := startEchoer(t, cmd)
	start := time.Now()
	procs, err := stacks.Collect(context.Background(), e.cmd.Process.Pid, stacks.Options{StacksDir: stacksDir, PySpy: "-", DumpWait: 300 * time.Millisecond})
	if err != nil || !strings.Contains(procs[0].Note, "Python hook: no dump in 300ms after signal 45") || procs[0].Method == stacks.MethodFaulthandler ||
		!strings.Contains(procs[0].Notice, "no dump in 300ms after signal 45") || !strings.Contains(procs[0].Notice, "Python stacks not taken") {
		t.Errorf("Collect = %+v, %v", procs, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Collect took %v", took)
	}
	e.ping(t, "alive")
}

// A process in uninterruptible sleep (a vfork parent waits in D for its
// child) is not attached to: a tool would wait for a stop that cannot
// come. Its /proc state says where it is, and it resumes unharmed.
func TestCollectUninterruptible(t *testing.T) {
	cc := testenv.NeedTool(t, "gcc", "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "vf.c")
	prog := "#include <unistd.h>\n#include <stdio.h>\nint main(void) {\n\tif (vfork() == 0) { pause(); _exit(0); }\n\tputs(\"resumed\");\n\treturn 0;\n}\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "vf")
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	for range 500 { // until it waits for its child
		if p, err := stacks.ProcInfo(pid); err == nil && p.State == "D" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	procs, err := stacks.Collect(context.Background(), pid, stacks.Options{})
	if err != nil || len(procs) != 2 || procs[0].State != "D" || procs[0].Method != stacks.MethodProc ||
		!strings.Contains(procs[0].Note, "uninterruptible sleep (D)") || procs[0].Syscall != "vfork" {
		t.Fatalf("procs %+v, %v", procs, err)
	}
	if err := syscall.Kill(procs[1].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || out.String() != "resumed\n" {
			t.Errorf("the parent ended with %v, output %q", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the parent did not resume (stopped?): %+v", procs)
	}
}

// A process that goes into uninterruptible sleep while a tool works on it
// ends the tool in a fraction of its time limit, and is resumed.
func TestCollectStuckMeanwhile(t *testing.T) {
	cc := testenv.NeedTool(t, "gcc", "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "vf.c")
	prog := "#include <unistd.h>\n#include <stdio.h>\nint main(void) {\n\tusleep(300000);\n\tif (vfork() == 0) { pause(); _exit(0); }\n\tputs(\"resumed\");\n\treturn 0;\n}\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "vf")
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	tool := filepath.Join(dir, "eu-stack") // a tool as slow as one waiting for a stop
	if err := os.WriteFile(tool, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	start := time.Now()
	procs, err := stacks.Collect(context.Background(), cmd.Process.Pid, stacks.Options{EuStack: tool, GDB: "-", MaxProcs: 1})
	if took := time.Since(start); err != nil || took > 5*time.Second || !strings.Contains(procs[0].Note, "eu-stack stopped: thread") {
		t.Fatalf("Collect took %v: %+v, %v", took, procs, err)
	}
	kids, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", strconv.Itoa(cmd.Process.Pid), "children"))
	for _, k := range strings.Fields(string(kids)) {
		n, _ := strconv.Atoi(k)
		syscall.Kill(n, syscall.SIGKILL)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil || out.String() != "resumed\n" {
			t.Errorf("the parent ended with %v, output %q", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parent did not resume")
	}
}

// ownHandlerProg is a Python program that takes the hook's signal for
// itself, then echoes the lines it reads: with "signal", a handler of its
// own (signal.signal) that writes the file argv[1]; with "faulthandler",
// faulthandler's dump into that file (faulthandler.register).
const ownHandlerProg = `import faulthandler, signal, sys
mark, how, sig = sys.argv[1], sys.argv[2], int(sys.argv[3])
if how == "signal":
    def handler(signum, frame):
        with open(mark, "w") as f:
            f.write("MY OWN handler for signal %d ran\n" % signum)
    signal.signal(sig, handler)
else:
    out = open(mark, "w")
    faulthandler.register(sig, file=out, all_threads=True)
for line in sys.stdin:
    print(line.strip(), flush=True)
`

// Row 4c of the security review: a program that handles the hook's
// signal itself is not sent it (its handler does not run, its own
// faulthandler writes nothing), and the rank's stacks say why they have
// no Python frames.
func TestCollectPythonOwnHandler(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	for _, how := range []string{"signal", "faulthandler"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			stacksDir := filepath.Join(dir, "stacks")
			if err := stacks.WritePythonHook(env.StacksHookDir(stacksDir)); err != nil {
				t.Fatal(err)
			}
			mark := filepath.Join(dir, "mark")
			cmd := exec.Command(python, "-c", ownHandlerProg, mark, how, strconv.Itoa(stacks.DumpSignal))
			base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHON") })
			cmd.Env = env.Build(base, env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, nil)
			e := startEchoer(t, cmd)
			procs, err := stacks.Collect(context.Background(), e.cmd.Process.Pid, stacks.Options{StacksDir: stacksDir, PySpy: "-"})
			if err != nil || len(procs) != 1 {
				t.Fatalf("Collect = %+v, %v", procs, err)
			}
			e.ping(t, "alive") // a handler that ran has run by now: Python runs it before it reads on
			if b, _ := os.ReadFile(mark); len(b) > 0 {
				t.Errorf("the program's own %s ran: %q", how, b)
			}
			p := procs[0]
			want := "the program handles signal 45 itself (it called " + how
			if p.Method == stacks.MethodFaulthandler || !strings.Contains(p.Notice, want) ||
				!strings.Contains(p.Notice, "Python stacks not taken") || !strings.Contains(p.Note, want) {
				t.Errorf("proc %+v, want a notice %q", p, want)
			}
			var text strings.Builder
			stacks.NewVerdict([]stacks.Rank{{Rank: 3, Host: "h1", Procs: procs}}).WriteText(&text, false)
			if !strings.Contains(text.String(), "gorun: note: rank 3 on h1: "+want) {
				t.Errorf("verdict:\n%s", text.String())
			}
		})
	}
}

// The hook steps aside for a program that takes its signal: its file is
// renamed (gorun sends the signal only where it finds it), the program's
// handler stays in place and runs, in a forked child too (which makes no
// file of its own); a call for another signal, or one that fails,
// changes nothing (and does not undo an earlier one).
func TestPythonHookOwnHandler(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	stacksDir := filepath.Join(t.TempDir(), "stacks")
	if err := stacks.WritePythonHook(env.StacksHookDir(stacksDir)); err != nil {
		t.Fatal(err)
	}
	const prog = `import os, signal, sys, threading, time
d, sig = os.environ["GORUN_STACKS_DIR"], int(os.environ["GORUN_STACKS_SIGNAL"])
def has(pid, ext):
    return os.path.exists(os.path.join(d, "%d.%s" % (pid, ext)))
def caught(pid):
    for l in open("/proc/%d/status" % pid):
        if l.startswith("SigCgt:"):
            return int(l.split()[1], 16) >> (sig - 1) & 1
me, ran = os.getpid(), []
def handler(signum, frame):
    ran.append(signum)
def wait_ran(n):
    for _ in range(500):
        if len(ran) >= n:
            break
        time.sleep(0.01)
    return len(ran)
print("armed", has(me, "txt"))
signal.signal(signal.SIGUSR1, handler)
print("other signal", has(me, "txt"))
errs = []
def off_main():
    try:
        signal.signal(sig, handler)
    except ValueError as e:
        errs.append(e)
t = threading.Thread(target=off_main)
t.start()
t.join()
print("from a thread", len(errs), has(me, "txt"))
signal.signal(sig, handler)
print("own handler", has(me, "txt"), has(me, "off"), signal.getsignal(sig) is handler, caught(me))
t = threading.Thread(target=off_main)
t.start()
t.join()
print("failed after", len(errs), has(me, "txt"))
os.kill(me, sig)
print("ran", wait_ran(1), flush=True)
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), sig)
    print("child", has(os.getpid(), "txt"), wait_ran(2), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("off file", open(os.path.join(d, "%d.off" % me)).read().splitlines()[-1])
`
	cmd := exec.Command(python, "-c", prog)
	base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PYTHON") })
	cmd.Env = env.Build(base, env.Rank{StacksDir: stacksDir, StacksSignal: stacks.DumpSignal}, nil)
	out, err := cmd.CombinedOutput()
	want := `armed True
other signal True
from a thread 1 True
own handler False True True 1
failed after 2 False
ran 1
child False 2
off file gorun stacks: off: signal.signal
`
	if err != nil || string(out) != want {
		t.Errorf("python: %v\n%s\nwant\n%s", err, out, want)
	}
}
