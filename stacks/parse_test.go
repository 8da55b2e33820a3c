package stacks

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noAddr returns threads without their frames' addresses, for comparing
// with literals.
func noAddr(threads []Thread) []Thread {
	for i := range threads {
		for j := range threads[i].Frames {
			threads[i].Frames[j].addr = 0
		}
	}
	return threads
}

const (
	libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	tExe = "/tmp/stk/t"
)

func TestParseNative(t *testing.T) {
	t.Parallel()
	readMain := []Frame{
		{Func: "read", File: "../sysdeps/unix/sysv/linux/read.c", Line: 26, Module: libc},
		{Func: "read_input", File: "/tmp/stk/t.c", Line: 7, Module: tExe},
		{Func: "main", File: "/tmp/stk/t.c", Line: 12, Module: tExe},
		{Func: "__libc_start_call_main", File: "../sysdeps/nptl/libc_start_call_main.h", Line: 58, Module: libc},
		{Func: "__libc_start_main@@GLIBC_2.34", File: "../csu/libc-start.c", Line: 360, Module: libc},
		{Func: "_start", Module: tExe},
	}
	pauser := Thread{ID: 28591, Frames: []Frame{
		{Func: "pause", File: "../sysdeps/unix/sysv/linux/pause.c", Line: 29, Module: libc},
		{Func: "waiter", File: "/tmp/stk/t.c", Line: 6, Module: tExe},
		{Func: "start_thread", File: "./nptl/pthread_create.c", Line: 442, Module: libc},
		{Func: "__clone3", File: "../sysdeps/unix/sysv/linux/x86_64/clone3.S", Line: 81, Module: libc},
	}}
	tests := []struct {
		name  string
		parse func([]byte) []Thread
		file  string
		want  []Thread
	}{
		{"eu-stack, one thread", parseEuStack, "eu-stack/single.txt", []Thread{{ID: 31163, Frames: []Frame{
			{Func: "read", File: "../sysdeps/unix/sysv/linux/read.c", Line: 26, Module: libc},
			{Func: "read_input", File: "/tmp/stk/t.c", Line: 7, Module: tExe},
			{Func: "main", File: "/tmp/stk/t.c", Line: 12, Module: tExe},
			readMain[3], readMain[4], readMain[5],
		}}}},
		{"eu-stack, two threads", parseEuStack, "eu-stack/multi.txt", []Thread{{ID: 28590, Frames: readMain}, pauser}},
		{"gdb, one thread", parseGDB, "gdb/single.txt", []Thread{{ID: 31163, Name: "t", Frames: []Frame{
			{Func: "__GI___libc_read", File: "../sysdeps/unix/sysv/linux/read.c", Line: 26},
			{Func: "read_input", File: "t.c", Line: 7},
			{Func: "main", File: "t.c", Line: 12},
		}}}},
		{"gdb, two threads, inlined frames", parseGDB, "gdb/multi.txt", []Thread{
			{ID: 28591, Name: "t", Frames: []Frame{
				{Func: "__libc_pause", File: "../sysdeps/unix/sysv/linux/pause.c", Line: 29},
				{Func: "waiter", File: "t.c", Line: 6},
				{Func: "start_thread", File: "./nptl/pthread_create.c", Line: 442},
				{Func: "clone3", File: "../sysdeps/unix/sysv/linux/x86_64/clone3.S", Line: 81},
			}},
			{ID: 28590, Name: "t", Frames: []Frame{
				{Func: "__GI___libc_read", File: "../sysdeps/unix/sysv/linux/read.c", Line: 26},
				{Func: "__GI___libc_read", File: "../sysdeps/unix/sysv/linux/read.c", Line: 24},
				{Func: "read_input", File: "t.c", Line: 7},
				{Func: "main", File: "t.c", Line: 12},
			}},
		}},
		// Without glibc's detached debug symbols (libc6-dbg), the C
		// library's internal functions have no name.
		{"eu-stack, two threads, no libc6-dbg", parseEuStack, "eu-stack/multi-nodbg.txt", []Thread{
			{ID: 1082, Frames: []Frame{
				{Func: "read", Module: libc},
				readMain[1], readMain[2],
				{Func: "??", Module: libc},
				{Func: "__libc_start_main", Module: libc},
				readMain[5],
			}},
			{ID: 1084, Frames: []Frame{
				{Func: "pause", Module: libc},
				pauser.Frames[1],
				{Func: "??", Module: libc},
				{Func: "??", Module: libc},
			}},
		}},
		{"gdb, two threads, no libc6-dbg", parseGDB, "gdb/multi-nodbg.txt", []Thread{
			{ID: 1084, Name: "t", Frames: []Frame{
				{Func: "pause", Module: "/lib/x86_64-linux-gnu/libc.so.6"},
				{Func: "waiter", File: "t.c", Line: 6},
				{Func: "??", Module: "/lib/x86_64-linux-gnu/libc.so.6"},
				{Func: "??", Module: "/lib/x86_64-linux-gnu/libc.so.6"},
			}},
			{ID: 1082, Name: "t", Frames: []Frame{
				{Func: "read", Module: "/lib/x86_64-linux-gnu/libc.so.6"},
				{Func: "read_input", File: "t.c", Line: 7},
				{Func: "main", File: "t.c", Line: 12},
			}},
		}},
		{"gdb refused", parseGDB, "gdb/eperm.stderr", nil},
		{"eu-stack refused", parseEuStack, "eu-stack/eacces.stderr", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := noAddr(tt.parse(fixture(t, tt.file)))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// The larger native fixtures: frames without a symbol, many threads, and
// eu-stack's partial output for a Go program.
func TestParseNativeLarge(t *testing.T) {
	t.Parallel()
	busy := parseEuStack(fixture(t, "eu-stack/mpich-busy-2.txt"))
	if len(busy) != 2 || busy[0].ID != 30884 || len(busy[0].Frames) != 16 {
		t.Fatalf("mpich-busy-2: %d threads, first %+v", len(busy), busy)
	}
	if f := busy[0].Frames[0]; f.Func != "??" || f.Module != "/usr/lib/x86_64-linux-gnu/libuct.so.0.0.0" || f.addr != 0x7f23a8029489 {
		t.Errorf("frame without a symbol = %+v", f)
	}
	if f := busy[0].Frames[10]; f.Func != "PMPI_Barrier" || f.Module != "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.2" {
		t.Errorf("frame 10 = %+v", f)
	}

	gdb := parseGDB(fixture(t, "gdb/mpich-busy.txt"))
	if len(gdb) != 2 || gdb[1].ID != 30884 || gdb[0].Name != "async" || len(gdb[1].Frames) != 13 {
		t.Fatalf("gdb mpich-busy: %+v", gdb)
	}
	if f := gdb[1].Frames[1]; f.Func != "ucp_worker_progress" || f.Module != "/lib/x86_64-linux-gnu/libucp.so.0" || f.addr != 0x7f23a555bef2 {
		t.Errorf("gdb frame from a library = %+v", f)
	}
	if f := gdb[1].Frames[12]; f.Func != "main" || f.File != "mpi.c" || f.Line != 7 {
		t.Errorf("gdb frame with arguments = %+v", f)
	}

	goNative := parseEuStack(fixture(t, "eu-stack/go.txt"))
	if len(goNative) < 4 || goNative[0].Frames[0].Func != "internal/runtime/syscall/linux.Syscall6" {
		t.Fatalf("eu-stack of a Go program: %+v", goNative)
	}
	if f := goNative[0].Frames[len(goNative[0].Frames)-1]; f.Func != "??" || f.Module != "" {
		t.Errorf("Go's last frame, an address in no file = %+v", f)
	}
}

func TestParseGDBFrame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want Frame
	}{
		{`#2  0x00005588a07d11a5 in read_input (buf=0x7ffca41a0ab0 "", n=64) at t.c:7`, Frame{Func: "read_input", File: "t.c", Line: 7, addr: 0x5588a07d11a5}},
		{`#0  read_input (buf=0x7f "a) at b.c:1 (", n=64) at t.c:7`, Frame{Func: "read_input", File: "t.c", Line: 7}},
		{`#1  0x00007f in f (c=41 ')', s=0x1 "\")") from /lib/libx.so.1`, Frame{Func: "f", Module: "/lib/libx.so.1", addr: 0x7f}},
		{`#3  0x0000000000401136 in ?? ()`, Frame{Func: "??", addr: 0x401136}},
		{`#4  0x00007f in std::vector<int, std::allocator<int> >::push_back (this=0x1, __x=@0x2: 3) at /usr/include/c++/12/bits/stl_vector.h:1287`,
			Frame{Func: "std::vector<int, std::allocator<int> >::push_back", File: "/usr/include/c++/12/bits/stl_vector.h", Line: 1287, addr: 0x7f}},
		{`#5  <signal handler called>`, Frame{Func: "<signal handler called>"}},
	}
	for _, tt := range tests {
		if got, ok := parseGDBFrame(tt.line); !ok || got != tt.want {
			t.Errorf("parseGDBFrame(%s) = %+v, %v; want %+v", tt.line, got, ok, tt.want)
		}
	}
}

func TestParseFaulthandler(t *testing.T) {
	t.Parallel()
	b := fixture(t, "faulthandler/two-threads.txt")
	want := []Thread{
		{ID: 0x00007f57c28706c0, Frames: []Frame{
			{Func: "wait", File: "/usr/lib/python3.11/threading.py", Line: 320, Module: "threading"},
			{Func: "wait", File: "/usr/lib/python3.11/threading.py", Line: 622, Module: "threading"},
			{Func: "waiter", File: "/tmp/stk/prog.py", Line: 4},
			{Func: "run", File: "/usr/lib/python3.11/threading.py", Line: 975, Module: "threading"},
			{Func: "_bootstrap_inner", File: "/usr/lib/python3.11/threading.py", Line: 1038, Module: "threading"},
			{Func: "_bootstrap", File: "/usr/lib/python3.11/threading.py", Line: 995, Module: "threading"},
		}},
		{ID: 0x00007f57c2b2b2c0, Main: true, Frames: []Frame{
			{Func: "blocker", File: "/tmp/stk/prog.py", Line: 7},
			{Func: "<module>", File: "/tmp/stk/prog.py", Line: 10},
		}},
	}
	if got := parseFaulthandler(b, hookMainThread(b)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if id := hookMainThread(b); id != 0x7f57c2b2b2c0 {
		t.Errorf("hookMainThread = %#x", id)
	}
	// Without the hook's header, the thread whose outermost frame is a
	// module's top level is the main one.
	if got := parseFaulthandler(b, 0); !got[1].Main || got[0].Main {
		t.Errorf("main thread without the header: %+v", got)
	}
	// A thread in no Python code, a cut stack, a frozen module, and an
	// idle main thread listed before another whose outermost frame
	// happens to be <module>: the header decides.
	text := `Thread 0x0000000000000010 (most recent call first):
  <no Python frame>

Thread 0x0000000000000020 (most recent call first):
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  ...

Current thread 0x0000000000000030 (most recent call first):
  File "/x.py", line 3 in <module>
`
	got := parseFaulthandler([]byte(text), 0x20)
	if len(got) != 3 || len(got[0].Frames) != 0 || !got[1].Main || got[2].Main ||
		got[1].Frames[0] != (Frame{Func: "_call_with_frames_removed", File: "<frozen importlib._bootstrap>", Line: 241, Module: "importlib"}) {
		t.Fatalf("got %+v", got)
	}
}

func TestParsePySpy(t *testing.T) {
	t.Parallel()
	text := parsePySpy(fixture(t, "py-spy/dump.txt"))
	wantText := []Thread{
		{ID: 31241, Name: "waiter-thread", Frames: []Frame{
			{Func: "wait", File: "threading.py", Line: 320}, {Func: "wait", File: "threading.py", Line: 622},
			{Func: "waiter", File: "train.py", Line: 4}, {Func: "run", File: "threading.py", Line: 975},
			{Func: "_bootstrap_inner", File: "threading.py", Line: 1038}, {Func: "_bootstrap", File: "threading.py", Line: 995},
		}},
		{ID: 0x7F57C2B2B2C0, Name: "MainThread", Frames: []Frame{
			{Func: "_recv", File: "multiprocessing/connection.py", Line: 395},
			{Func: "next_batch", File: "train.py", Line: 7},
			{Func: "train_step", File: "train.py", Line: 12},
			{Func: "<module>", File: "train.py", Line: 20},
		}},
	}
	if !reflect.DeepEqual(text, wantText) {
		t.Errorf("text:\ngot  %+v\nwant %+v", text, wantText)
	}
	js := parsePySpy(fixture(t, "py-spy/dump.json"))
	markPythonMain(js, 31239, 0)
	if len(js) != 2 || js[1].ID != 31239 || !js[1].Main || js[0].Main || js[1].Name != "MainThread" {
		t.Fatalf("json: %+v", js)
	}
	wantMain := []Frame{
		{Func: "barrier", File: "/usr/local/lib/python3.11/dist-packages/torch/distributed/distributed_c10d.py", Line: 3703, Module: "torch"},
		{Func: "wrapper", File: "/usr/local/lib/python3.11/dist-packages/torch/distributed/c10d_logger.py", Line: 72, Module: "torch"},
		{Func: "sync_grads", File: "/work/train.py", Line: 9},
		{Func: "<module>", File: "/work/train.py", Line: 20},
	}
	if !reflect.DeepEqual(js[1].Frames, wantMain) {
		t.Errorf("json main thread:\ngot  %+v\nwant %+v", js[1].Frames, wantMain)
	}
	if got := parsePySpy([]byte("[not json")); got != nil {
		t.Errorf("broken JSON = %+v", got)
	}
}

func TestPyModule(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		"/usr/lib/python3.11/threading.py":                            "threading",
		"/usr/lib/python3.11/multiprocessing/connection.py":           "multiprocessing",
		"/usr/lib/python3.11/lib-dynload/_ssl.so":                     "stdlib",
		"/opt/conda/lib/python3.10/site-packages/torch/nn/module.py":  "torch",
		"/usr/lib/python3/dist-packages/six.py":                       "six",
		"/home/u/venv/lib64/python3.12/site-packages/numpy/core/x.py": "numpy",
		"<frozen runpy>":                          "runpy",
		"<frozen importlib._bootstrap_external>":  "importlib",
		"/work/train.py":                          "",
		"train.py":                                "",
		"/home/u/lib/pythonista/app.py":           "",
		"/home/u/project/site-packages-like/x.py": "",
		"/usr/local/lib/python3.11/dist-packages/torch/_dynamo/eval.py": "torch",
	} {
		if got := pyModule(file); got != want {
			t.Errorf("pyModule(%s) = %q, want %q", file, got, want)
		}
	}
}

// ParseGo on a real Go program's runtime.Stack, with goroutines blocked
// in a channel, a mutex, a wait group, a select and a sleep.
func TestParseGo(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	src := `package main

import (
	"os"
	"runtime"
	"sync"
	"time"
)

func worker(ch chan int) { <-ch }

//go:noinline
func locker(mu *sync.Mutex) { mu.Lock() }

func sleeper() { time.Sleep(time.Hour) }

func main() {
	ch := make(chan int)
	go worker(ch)
	var mu sync.Mutex
	mu.Lock()
	go locker(&mu)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { wg.Wait() }()
	go func() { select {} }()
	go sleeper()
	time.Sleep(200 * time.Millisecond)
	buf := make([]byte, 1<<20)
	os.Stdout.Write(buf[:runtime.Stack(buf, true)])
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "run", "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run: %v", err)
	}
	got := ParseGo(out)
	byFunc := map[string]Thread{}
	for _, g := range got {
		if len(g.Frames) > 0 {
			byFunc[g.Frames[len(g.Frames)-1].Func] = g
		}
	}
	if len(got) < 6 || !got[0].Main || got[0].ID != 1 || got[0].Name != "running" || got[0].Frames[0].Func != "main.main" {
		t.Fatalf("goroutine 1: %+v\n%s", got, out)
	}
	if f := got[0].Frames[0]; f.File != filepath.Join(dir, "main.go") || f.Line != 30 || f.Module != "main" {
		t.Errorf("main.main's frame: %+v", f)
	}
	for fn, want := range map[string]struct{ name, norm string }{
		"main.worker":     {"chan receive", "main.worker"},
		"main.locker":     {"sync.Mutex.Lock", "sync.(*Mutex).Lock <- main.locker"},
		"main.main.func1": {"sync.WaitGroup.Wait", "sync.(*WaitGroup).Wait <- main.main.func1"},
		"main.main.func2": {"select (no cases)", "main.main.func2"},
		"main.sleeper":    {"sleep", "time.Sleep <- main.sleeper"},
	} {
		g, ok := byFunc[fn]
		if !ok {
			t.Errorf("no goroutine of %s in\n%s", fn, out)
			continue
		}
		if g.Name != want.name || g.Main {
			t.Errorf("%s: name %q, main %v; want %q", fn, g.Name, g.Main, want.name)
		}
		if got := summary(LangGo, Normalize(LangGo, g.Frames)); got != want.norm {
			t.Errorf("%s normalised: %q, want %q (frames %+v)", fn, got, want.norm, g.Frames)
		}
	}
	if strings.Contains(string(out), "created by") {
		for _, g := range got {
			for _, f := range g.Frames {
				if strings.HasPrefix(f.Func, "created by") {
					t.Errorf("a 'created by' line became a frame: %+v", f)
				}
			}
		}
	}
}

func TestParseGoText(t *testing.T) {
	t.Parallel()
	dump := "goroutine 7 gp=0xc000007180 m=nil [select, 2 minutes, locked to thread]:\n" +
		"runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)\n\t/go/src/runtime/proc.go:435 +0xce fp=0xc0 sp=0xc0 pc=0x4\n" +
		"github.com/gorun/gorun/collectives.(*Comm).wait[...](0xc0001)\n\t/src/collectives/comm.go:88 +0x1f\n" +
		"...additional frames elided...\n" +
		"created by main.main in goroutine 1\n\t/src/main.go:10 +0x5\n\n" +
		"goroutine x [bad]:\nmain.f()\n" +
		"goroutine 1 [running]:\n\tgoroutine running on other thread; stack unavailable\n"
	want := []Thread{
		{ID: 7, Name: "select", Frames: []Frame{
			{Func: "runtime.gopark", File: "/go/src/runtime/proc.go", Line: 435, Module: "runtime"},
			{Func: "github.com/gorun/gorun/collectives.(*Comm).wait[...]", File: "/src/collectives/comm.go", Line: 88, Module: "github.com/gorun/gorun/collectives"},
		}},
		{ID: 1, Name: "running", Main: true},
	}
	if got := ParseGo([]byte(dump)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}
