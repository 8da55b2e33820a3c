package stacks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/atomicfile"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

// readPySpy fills p's threads by py-spy dump, when it is installed. ok
// is false with why ("" when py-spy is absent) otherwise.
func readPySpy(ctx context.Context, pfs procfs.FS, p *Proc, o Options) (ok bool, why string) {
	spy := lookTool(o.PySpy, "py-spy")
	if spy == "" {
		return false, ""
	}
	r := runTool(ctx, pfs, p.PID, o.toolTimeout(), spy, "dump", "--json", "--pid", strconv.Itoa(p.PID))
	th := parsePySpy(r.stdout)
	if len(th) == 0 {
		return false, toolFailure(pfs, p.PID, "py-spy", r)
	}
	p.Threads, p.Method = th, MethodPySpy
	markPythonMain(p.Threads, int64(p.PID), 0)
	return true, ""
}

// HookFile returns the file in which the Python hook of process pid
// writes its dumps, in the directory GORUN_STACKS_DIR names.
func HookFile(stacksDir string, pid int) string {
	return filepath.Join(stacksDir, strconv.Itoa(pid)+".txt")
}

// hookOffFile is what HookFile becomes once the program has taken the
// hook's signal for itself: its last line names the call
// ("gorun stacks: off: signal.signal").
func hookOffFile(stacksDir string, pid int) string {
	return filepath.Join(stacksDir, strconv.Itoa(pid)+".off")
}

// errNoDump is wrapped by waitDump's error when no dump came in time.
var errNoDump = errors.New("no dump")

// readHook asks p's Python hook for a dump and reads it. ok is false with
// why ("" when there is no stacks directory) otherwise, and notice is
// true where why is one the verdict's reader should see (the program
// handles the signal itself, or did not dump on it). The signal is sent
// only when p has its hook's file and catches the signal: a process
// without a handler for a real-time signal would be ended by it, and one
// whose program took the signal for itself has renamed the file.
func readHook(ctx context.Context, pfs procfs.FS, p *Proc, o Options) (ok bool, why string, notice bool) {
	if o.StacksDir == "" {
		return false, "", false
	}
	sig := o.signal()
	name := HookFile(o.StacksDir, p.PID)
	f, err := os.Open(name)
	if err != nil {
		if call, off := hookOff(o.StacksDir, p.PID); off {
			why := fmt.Sprintf("the program handles signal %d itself", sig)
			if call != "" {
				why += " (it called " + call + ")"
			}
			return false, why + ": Python stacks not taken", true
		}
		return false, "gorun's Python hook not loaded (python -I, -S or -E, or another sitecustomize first on sys.path?): no " + filepath.Base(name), false
	}
	defer f.Close()
	caught, err := pfs.CatchesSignal(p.PID, sig)
	if err != nil {
		return false, "Python hook: " + err.Error(), false
	}
	if !caught {
		return false, fmt.Sprintf("gorun's Python hook not armed: the process does not catch signal %d", sig), false
	}
	fi, err := f.Stat()
	if err != nil {
		return false, "Python hook: " + err.Error(), false
	}
	start := fi.Size()
	header := make([]byte, 128)
	n, _ := f.ReadAt(header, 0)
	mainID := hookMainThread(header[:n])
	if err := syscall.Kill(p.PID, syscall.Signal(sig)); err != nil {
		return false, fmt.Sprintf("Python hook: signal %d: %v", sig, err), false
	}
	dump, whole, err := waitDump(ctx, f, start, mainID, o.dumpWait())
	if errors.Is(err, errNoDump) {
		return false, fmt.Sprintf("Python hook: no dump in %v after signal %d (the program blocks it or handles it itself, or every thread is stuck in the kernel): Python stacks not taken",
			o.dumpWait(), sig), true
	}
	if err != nil {
		return false, "Python hook: " + err.Error(), false
	}
	p.Threads, p.Method = parseFaulthandler(dump, mainID), MethodFaulthandler
	if !whole {
		p.Note = fmt.Sprintf("the Python hook's dump was still growing after %v: it may lack threads", o.dumpWait())
	}
	return true, "", false
}

// hookOff reports whether process pid's program took the hook's signal
// for itself (its hook file is renamed hookOffFile), and the call by
// which it did, as the hook wrote it ("" where it did not yet).
func hookOff(stacksDir string, pid int) (call string, off bool) {
	f, err := os.Open(hookOffFile(stacksDir, pid))
	if err != nil {
		return "", false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", true
	}
	// The call is the file's last line: read its end only.
	const tail = 256
	at := max(fi.Size()-tail, 0)
	b := make([]byte, tail)
	n, _ := f.ReadAt(b, at)
	b = bytes.TrimRight(b[:n], "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	s, ok := strings.CutPrefix(string(b), hookOffHeader)
	if !ok || len(s) > 64 || strings.IndexFunc(s, func(r rune) bool {
		return !(r == '.' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0 {
		return "", true
	}
	return s, true
}

// hookOffHeader starts the line the hook writes once the program took its
// signal.
const hookOffHeader = "gorun stacks: off: "

// hookMainThread reads the main thread's identifier from the first line
// the hook writes ("gorun stacks: main thread 0x7f57c2b2b2c0"); 0 when it
// is not there.
func hookMainThread(b []byte) int64 {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	s, ok := strings.CutPrefix(string(line), hookHeader)
	if !ok {
		return 0
	}
	id, _ := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(s), "0x"), 16, 64)
	return int64(id)
}

// hookHeader starts the first line of a hook file.
const hookHeader = "gorun stacks: main thread "

// waitDump waits for faulthandler's dump to appear in f after offset
// start and returns it. faulthandler writes it from its signal handler in
// one pass, thread by thread, the interpreter's oldest thread (the main
// one) last, with no end mark: the dump is taken as whole when it ends
// with a newline, holds the main thread's block (where mainID is known)
// and has not grown for 25 ms. whole is false for what was there when
// wait ran out before that.
func waitDump(ctx context.Context, f *os.File, start int64, mainID int64, wait time.Duration) (dump []byte, whole bool, err error) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last []byte
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return nil, false, context.Cause(ctx)
		case <-deadline.C:
			if len(parseFaulthandler(last, 0)) > 0 {
				return last, false, nil
			}
			return nil, false, fmt.Errorf("%w in %v", errNoDump, wait)
		case <-tick.C:
		}
		b, err := io.ReadAll(io.NewSectionReader(f, start, 1<<24))
		if err != nil {
			return nil, false, err
		}
		if !bytes.Equal(b, last) {
			last, since = b, time.Now()
			continue
		}
		if len(b) > 0 && b[len(b)-1] == '\n' && time.Since(since) >= 25*time.Millisecond && hasThread(b, mainID) {
			return b, true, nil
		}
	}
}

// hasThread reports whether dump holds thread id's block (true where id
// is 0, unknown).
func hasThread(dump []byte, id int64) bool {
	if id == 0 {
		return true
	}
	for _, t := range parseFaulthandler(dump, 0) {
		if t.ID == id {
			return true
		}
	}
	return false
}

// parseFaulthandler parses faulthandler's dump of every thread
// (faulthandler.dump_traceback(all_threads=True), and what its registered
// signal writes), one block a thread, most recent call first:
//
//	Thread 0x00007f57c28706c0 (most recent call first):
//	  File "/usr/lib/python3.11/threading.py", line 320 in wait
//
//	Current thread 0x00007f57c2b2b2c0 (most recent call first):
//	  File "/tmp/prog.py", line 7 in blocker
//
// A thread in no Python code reads "  <no Python frame>", and a stack cut
// at 100 frames ends in "  ...". The main thread is mainID where known,
// else the thread whose outermost frame is a module's top level.
func parseFaulthandler(b []byte, mainID int64) []Thread {
	var out []Thread
	var cur *Thread
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		if rest, ok := strings.CutPrefix(line, "Current thread "); ok {
			line = "Thread " + rest
		}
		if rest, ok := strings.CutPrefix(line, "Thread 0x"); ok && strings.HasSuffix(line, ":") {
			hex, _, _ := strings.Cut(rest, " ")
			id, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				cur = nil
				continue
			}
			out = append(out, Thread{ID: int64(id)})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		if f, ok := parseFaulthandlerFrame(line); ok {
			cur.Frames = append(cur.Frames, f)
		}
	}
	markPythonMain(out, 0, mainID)
	return out
}

// parseFaulthandlerFrame parses `  File "PATH", line N in FUNC`.
func parseFaulthandlerFrame(line string) (Frame, bool) {
	rest, ok := strings.CutPrefix(line, `  File "`)
	if !ok {
		return Frame{}, false
	}
	i := strings.LastIndex(rest, `", line `)
	if i < 0 {
		return Frame{}, false
	}
	file, rest := rest[:i], rest[i+len(`", line `):]
	num, fn, _ := strings.Cut(rest, " in ")
	n, _ := strconv.Atoi(num)
	return Frame{Func: fn, File: file, Line: n, Module: pyModule(file)}, true
}

// markPythonMain marks the main thread among threads: the one whose ID is
// id where it is not 0, else the one whose outermost frame is a module's
// top level ("<module>", or runpy's for python -m), else the last one
// (faulthandler lists the interpreter's threads newest first).
func markPythonMain(threads []Thread, osID, id int64) {
	if len(threads) == 0 {
		return
	}
	for _, want := range []int64{id, osID} {
		if want == 0 {
			continue
		}
		for i := range threads {
			if threads[i].ID == want {
				threads[i].Main = true
				return
			}
		}
	}
	for i := range threads {
		if threads[i].Name == "MainThread" {
			threads[i].Main = true
			return
		}
	}
	for i := range threads {
		fr := threads[i].Frames
		if len(fr) > 0 && (fr[len(fr)-1].Func == "<module>" || fr[len(fr)-1].Func == "_run_module_as_main") {
			threads[i].Main = true
			return
		}
	}
	threads[len(threads)-1].Main = true
}

// pySpyTrace is one thread of py-spy dump --json: the fields gorun reads
// of py-spy's StackTrace (src/stack_trace.rs in github.com/benfred/py-spy,
// serialised by serde with its field names).
type pySpyTrace struct {
	ThreadID   uint64  `json:"thread_id"`
	ThreadName *string `json:"thread_name"`
	OSThreadID *int64  `json:"os_thread_id"`
	Active     bool    `json:"active"`
	Frames     []struct {
		Name     string `json:"name"`
		Filename string `json:"filename"`
		Line     int    `json:"line"`
	} `json:"frames"`
}

// parsePySpy parses py-spy dump's output: the JSON of --json, or the text
// that py-spy prints without it (src/dump.rs in github.com/benfred/py-spy;
// its README and bug reports show it):
//
//	Process 31239: /usr/bin/python3 prog.py
//	Python v3.11.2 (/usr/bin/python3.11)
//
//	Thread 31239 (idle): "MainThread"
//	    blocker (prog.py:7)
//	    <module> (prog.py:10)
//
// The text gives file names shortened to their path under sys.path, so
// its frames have no Module; the JSON's are whole.
func parsePySpy(b []byte) []Thread {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		var traces []pySpyTrace
		if json.Unmarshal(t, &traces) != nil {
			return nil
		}
		var out []Thread
		for _, tr := range traces {
			th := Thread{ID: int64(tr.ThreadID)}
			if tr.OSThreadID != nil {
				th.ID = *tr.OSThreadID
			}
			if tr.ThreadName != nil {
				th.Name = *tr.ThreadName
			}
			for _, f := range tr.Frames {
				th.Frames = append(th.Frames, Frame{Func: f.Name, File: f.Filename, Line: f.Line, Module: pyModule(f.Filename)})
			}
			out = append(out, th)
		}
		return out
	}
	var out []Thread
	var cur *Thread
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		if rest, ok := strings.CutPrefix(line, "Thread "); ok {
			idText, rest, _ := strings.Cut(rest, " ")
			var id int64
			if h, ok := strings.CutPrefix(strings.ToLower(idText), "0x"); ok {
				u, _ := strconv.ParseUint(h, 16, 64)
				id = int64(u)
			} else {
				id, _ = strconv.ParseInt(idText, 10, 64)
			}
			th := Thread{ID: id}
			if _, name, ok := strings.Cut(rest, `: "`); ok {
				th.Name = strings.TrimSuffix(name, `"`)
			}
			out = append(out, th)
			cur = &out[len(out)-1]
			continue
		}
		// Frames are indented by 4; their locals (--locals) by 8 and 12.
		if cur == nil || !strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "        ") {
			continue
		}
		line = strings.TrimSpace(line)
		i := strings.LastIndex(line, " (")
		if i < 0 || !strings.HasSuffix(line, ")") {
			continue
		}
		f := Frame{Func: line[:i]}
		f.File, f.Line = splitFileLine(line[i+2 : len(line)-1])
		cur.Frames = append(cur.Frames, f)
	}
	return out
}

var pythonDir = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^python[0-9.]*t?$`) })

// pyModule returns the package or standard library module of a Python
// file: the top directory (or module file) under site-packages or
// dist-packages ("torch"), under the standard library's lib/pythonX.Y
// ("threading", "multiprocessing"), or a frozen module's top name
// ("<frozen runpy>": "runpy"); "" for the program's own files.
func pyModule(file string) string {
	if rest, ok := strings.CutPrefix(file, "<frozen "); ok {
		top, _, _ := strings.Cut(strings.TrimSuffix(rest, ">"), ".")
		return top
	}
	parts := strings.Split(filepath.ToSlash(file), "/")
	for i := len(parts) - 2; i >= 0; i-- {
		if parts[i] == "site-packages" || parts[i] == "dist-packages" {
			return strings.TrimSuffix(parts[i+1], ".py")
		}
	}
	for i := 0; i+2 < len(parts); i++ {
		if (parts[i] == "lib" || parts[i] == "lib64") && pythonDir().MatchString(parts[i+1]) {
			if parts[i+2] == "lib-dynload" {
				return "stdlib"
			}
			return strings.TrimSuffix(parts[i+2], ".py")
		}
	}
	return ""
}

// WritePythonHook writes gorun's Python start-up hook, a sitecustomize.py,
// into dir (made if need be). A Python that finds dir first on sys.path
// (PYTHONPATH=dir, as env.Build sets it) runs the hook at start-up:
//
//   - Where GORUN_STACKS_DIR is set, it opens GORUN_STACKS_DIR/<pid>.txt
//     (mode 0600), writes one line naming the main thread, and has
//     faulthandler write every thread's stack there on signal
//     GORUN_STACKS_SIGNAL (default DumpSignal), from its C signal handler:
//     the dump needs neither the GIL nor the interpreter's loop, and the
//     program goes on. A forked child (multiprocessing, DataLoader
//     workers) opens its own file.
//   - It wraps signal.signal (through _signal.signal, which it calls:
//     importing signal would cost milliseconds), faulthandler.register
//     and faulthandler.unregister: a program that calls one of them for
//     that signal takes it for itself, and keeps it. The hook renames
//     its file <pid>.off before the call (back, where the call fails),
//     and writes the call's name into it after ("gorun stacks: off:
//     signal.signal"): Collect then sends no signal, and says why there
//     are no Python frames. A child forked after that makes no file. A
//     handler that native code installs (sigaction from C) is not seen:
//     the signal then brings no dump, and Collect says that too.
//   - It then imports the sitecustomize it shadows, if any (Debian's
//     /usr/lib/python3.X/sitecustomize.py, a virtual environment's),
//     with dir left out of sys.path, and leaves that module as
//     sys.modules["sitecustomize"]; it reports an error there as site.py
//     would.
//
// The hook never raises: anything that fails leaves the program as it
// would be without it. It costs about 0.4 ms of start-up (python3 -c pass
// takes 8.7 ms with it, 8.3 without, here).
//
// gorun's agent writes it to env.StacksHookDir(stacksDir), the directory
// env.Build puts on the ranks' PYTHONPATH.
func WritePythonHook(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("stacks: Python hook: %w", err)
	}
	name := filepath.Join(dir, "sitecustomize.py")
	hook := strings.ReplaceAll(pythonHook, "@SIGNAL@", strconv.Itoa(DumpSignal))
	if err := atomicfile.Write(name, []byte(hook), atomicfile.Options{Mode: 0o644}); err != nil {
		return fmt.Errorf("stacks: Python hook %s: %w", name, err)
	}
	return nil
}
