package stacks

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/verdict")

// nativeProc is a native process whose main thread has frames.
func nativeProc(pid int, frames ...Frame) Proc {
	return Proc{PID: pid, Comm: "app", Lang: LangNative, Method: MethodEuStack, State: "S",
		Threads: []Thread{{ID: int64(pid), Main: true, Frames: frames}}}
}

// fixtureThread is the main thread of a fixture, parsed by parse.
func fixtureThread(t *testing.T, parse func([]byte) []Thread, name string) []Frame {
	t.Helper()
	th := parse(fixture(t, name))
	if len(th) == 0 {
		t.Fatalf("%s: no threads", name)
	}
	main := th[0] // the main thread's id is the pid, the lowest
	for _, x := range th {
		if x.ID < main.ID {
			main = x
		}
	}
	return main.Frames
}

// mapped gives the frames of a fixture that gdb printed without a module
// (those with debug information, and a stripped program's) the module at
// their address, as fillModules does for a live process: the C library's
// mapping (at 0x7f...), else the program exe's.
func mapped(frames []Frame, exe string) []Frame {
	for i := range frames {
		if f := &frames[i]; f.Module == "" {
			f.Module = exe
			if f.addr >= 0x7f0000000000 {
				f.Module = libc
			}
		}
	}
	return frames
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	py := func(fn, file string) Frame { return Frame{Func: fn, File: file, Line: 1} }
	const torch = "/usr/lib/python3/dist-packages/torch/"
	tests := []struct {
		name   string
		lang   string
		frames []Frame
		want   string
	}{
		{"eu-stack: libc's read called by the program", LangNative, fixtureThread(t, parseEuStack, "eu-stack/single.txt"), "read <- read_input <- main"},
		{"gdb: the same, without modules, an inlined copy", LangNative, fixtureThread(t, parseGDB, "gdb/multi.txt"), "read <- read_input <- main"},
		{"eu-stack without libc6-dbg: libc's start-up unnamed", LangNative, fixtureThread(t, parseEuStack, "eu-stack/single-nodbg.txt"), "read <- read_input <- main"},
		{"gdb without libc6-dbg", LangNative, fixtureThread(t, parseGDB, "gdb/single-nodbg.txt"), "read <- read_input <- main"},
		{"eu-stack without libc6-dbg: a thread's start unnamed", LangNative, parseEuStack(fixture(t, "eu-stack/multi-nodbg.txt"))[1].Frames, "pause <- waiter"},
		{"gdb without libc6-dbg: a thread's start unnamed", LangNative, parseGDB(fixture(t, "gdb/multi-nodbg.txt"))[0].Frames, "pause <- waiter"},
		{"libc without symbols above the program's code is kept", LangNative, []Frame{
			{Func: "??", Module: libc}, {Func: "main", Module: tExe}, {Func: "??", Module: libc}, {Func: "_start", Module: tExe},
		}, "?? in libc.so.6 <- main"},
		{"a thread of libc without symbols only keeps them", LangNative, []Frame{
			{Func: "??", Module: libc}, {Func: "??", Module: libc},
		}, "?? in libc.so.6"},
		{"a stripped program, eu-stack", LangNative, fixtureThread(t, parseEuStack, "eu-stack/stripped.txt"), "nanosleep <- ?? in sleep"},
		{"a stripped program, eu-stack without libc6-dbg", LangNative, fixtureThread(t, parseEuStack, "eu-stack/stripped-nodbg.txt"), "nanosleep <- ?? in sleep"},
		{"a stripped program, gdb", LangNative, mapped(fixtureThread(t, parseGDB, "gdb/stripped.txt"), "/usr/bin/sleep"), "nanosleep <- ?? in sleep"},
		{"a stripped program, gdb without libc6-dbg", LangNative, mapped(fixtureThread(t, parseGDB, "gdb/stripped-nodbg.txt"), "/usr/bin/sleep"), "nanosleep <- ?? in sleep"},
		{"MPICH spinning, sample 1", LangNative, fixtureThread(t, parseEuStack, "eu-stack/mpich-busy-1.txt"), "MPI_Barrier <- sync_grads <- main"},
		{"MPICH spinning, sample 2: in UCX", LangNative, fixtureThread(t, parseEuStack, "eu-stack/mpich-busy-2.txt"), "MPI_Barrier <- sync_grads <- main"},
		{"MPICH spinning, by gdb", LangNative, fixtureThread(t, parseGDB, "gdb/mpich-busy.txt"), "MPI_Barrier <- sync_grads <- main"},
		{"MPICH rank in read", LangNative, fixtureThread(t, parseEuStack, "eu-stack/mpich-read.txt"), "read <- next_batch <- main"},
		{"Python interpreter, natively", LangNative, fixtureThread(t, parseEuStack, "eu-stack/python.txt"),
			"read <- _Py_read <- ?? in python3.11 <- PyObject_Vectorcall <- ... <- Py_BytesMain"},
		{"a thread's start and libc's internals", LangNative, []Frame{
			{Func: "__futex_abstimed_wait_common64", Module: libc},
			{Func: "___pthread_cond_wait", Module: libc},
			{Func: "worker_loop.isra.0", Module: tExe},
			{Func: "start_thread", Module: libc},
			{Func: "__clone3", Module: libc},
		}, "pthread_cond_wait <- worker_loop"},
		{"C++: parameters, const, clones; a callback into the program", LangNative, []Frame{
			{Func: "poll", Module: libc},
			{Func: "c10d::TCPStore::wait(std::vector<std::string, std::allocator<std::string> > const&)", Module: "/x/libtorch_cpu.so"},
			{Func: "c10d::Store::get(std::string const&) const", Module: "/x/libtorch_cpu.so"},
			{Func: "on_event(int) [clone .cold]", Module: "/x/app"},
			{Func: "event_loop_run", Module: "/usr/lib/libevent-2.1.so.7"},
			{Func: "event_base_loop", Module: "/usr/lib/libevent-2.1.so.7"},
			{Func: "main", Module: "/x/app"},
		}, "c10d::Store::get <- on_event <- event_base_loop <- main"},
		{"Python: the interpreter's stdlib collapsed, threading's start dropped", LangPython,
			parseFaulthandler(fixture(t, "faulthandler/two-threads.txt"), 0)[0].Frames, "wait <- waiter"},
		{"Python: decorators and nn.Module's call passed through", LangPython, []Frame{
			py("conv2d", torch+"nn/functional.py"),
			py("_conv_forward", torch+"nn/modules/conv.py"),
			py("forward", "/w/model.py"),
			py("_call_impl", torch+"nn/modules/module.py"),
			py("_wrapped_call_impl", torch+"nn/modules/module.py"),
			py("evaluate", "/w/train.py"),
			py("decorate_context", torch+"utils/_contextlib.py"),
			py("wrapper", "/w/train.py"),
			py("main", "/w/train.py"),
			py("<module>", "/w/train.py"),
			py("_run_code", "<frozen runpy>"),
			py("_run_module_as_main", "<frozen runpy>"),
		}, "_conv_forward <- forward <- evaluate <- main <- <module>"},
		{"Python: a package's wrapper is not its entry", LangPython, parsePySpy(fixture(t, "py-spy/dump.json"))[1].Frames,
			"barrier <- sync_grads <- <module>"},
		{"Python: recursion is one frame", LangPython, []Frame{
			py("walk", "/w/t.py"), py("walk", "/w/t.py"), py("walk", "/w/t.py"), py("<module>", "/w/t.py"),
		}, "walk <- <module>"},
		{"Python: only a decorator", LangPython, []Frame{py("wrapper", "/w/t.py")}, "wrapper"},
		{"Go: gorun's packages are one library: the program's call into them", LangGo, []Frame{
			{Func: "runtime.gopark"}, {Func: "runtime.chanrecv"}, {Func: "runtime.chanrecv1"},
			{Func: "github.com/gorun/gorun/collectives.(*Comm).Barrier"}, {Func: "main.main"}, {Func: "runtime.main"}, {Func: "runtime.goexit"},
		}, "collectives.(*Comm).Barrier <- main.main"},
		{"MPI profiling names", LangNative, []Frame{{Func: "PMPIX_Grequest_start", Module: "/l/libmpi.so.40"}, {Func: "main", Module: "/x/a"}},
			"MPIX_Grequest_start <- main"},
		{"nothing", LangNative, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Normalize(tt.lang, tt.frames)
			if s := summary(tt.lang, got); s != tt.want {
				t.Fatalf("Normalize = %q, want %q\n(%+v)", s, tt.want, got)
			}
			// Normalising is idempotent.
			if again := summary(tt.lang, Normalize(tt.lang, got)); again != tt.want && tt.lang != LangPython {
				t.Errorf("normalised twice = %q", again)
			}
		})
	}
}

// Two samples of a rank that spins in MPI_Barrier have one signature,
// whichever tool read them.
func TestSignatureStable(t *testing.T) {
	t.Parallel()
	rank := func(parse func([]byte) []Thread, file string) Rank {
		return Rank{Rank: 0, Procs: []Proc{nativeProc(1, fixtureThread(t, parse, file)...)}}
	}
	a := rank(parseEuStack, "eu-stack/mpich-busy-1.txt").Signature()
	b := rank(parseEuStack, "eu-stack/mpich-busy-2.txt").Signature()
	c := rank(parseGDB, "gdb/mpich-busy.txt").Signature()
	if a != b || a != c || a != "native|MPI_Barrier;sync_grads;main" {
		t.Fatalf("signatures: %q, %q, %q", a, b, c)
	}
	if d := rank(parseEuStack, "eu-stack/mpich-read.txt").Signature(); d == a {
		t.Fatalf("a rank in read has the spinning ranks' signature %q", d)
	}
}

// The main process of a rank: through shells and wrappers to the program,
// not to the program's own children.
func TestMainProc(t *testing.T) {
	t.Parallel()
	p := func(pid, ppid int, comm string) Proc { return Proc{PID: pid, PPID: ppid, Comm: comm} }
	tests := []struct {
		name  string
		procs []Proc
		want  int
	}{
		{"none", nil, -1},
		{"the program itself", []Proc{p(10, 1, "python3"), p(11, 10, "python3")}, 0},
		{"sh -c, then timeout", []Proc{p(10, 1, "sh"), p(11, 10, "timeout"), p(12, 11, "python3"), p(13, 12, "pt_data_worker")}, 2},
		{"a wrapper without children", []Proc{p(10, 1, "bash")}, 0},
		{"by executable", []Proc{{PID: 10, Comm: "x", Exe: "/usr/bin/numactl"}, p(11, 10, "a.out")}, 1},
		{"marked", []Proc{p(10, 1, "sh"), {PID: 11, PPID: 10, Comm: "b", Main: true}, p(12, 10, "c")}, 1},
	}
	for _, tt := range tests {
		if got := MainProc(tt.procs); got != tt.want {
			t.Errorf("%s: MainProc = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestFormatRanks(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{2}, "2"},
		{[]int{0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, "0-1,3-15"},
		{[]int{5, 3, 4, 3, 9}, "3-5,9"},
		{[]int{1, 3, 5}, "1,3,5"},
	} {
		if got := FormatRanks(tt.in); got != tt.want {
			t.Errorf("FormatRanks(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatHosts(t *testing.T) {
	t.Parallel()
	many := []string{"alpha", "beta", "gamma", "gpu-a17", "gpu-b3", "login", "x1", "y22", "z9"}
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{"h1"}, "h1"},
		{[]string{"h1", "h2", "h3", "h4"}, "h1-h4"},
		{[]string{"h1", "h2", "h4", "login"}, "h1-h2,h4,login"},
		{[]string{"node09", "node10", "node11"}, "node09-node11"},
		{[]string{"n9", "n10"}, "n9-n10"},
		{[]string{"n009", "n10"}, "n009,n10"},
		{[]string{"a.example.com", "b.example.com"}, "a.example.com,b.example.com"},
		{many, "9 hosts"},
	} {
		if got := formatHosts(tt.in); got != tt.want {
			t.Errorf("formatHosts(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// ranks16 is the documentation's job: 16 ranks on h1-h4, rank 2 reading
// while the others spin in MPI_Barrier (two samples, from two tools).
func ranks16(t *testing.T) []Rank {
	busy := [][]Frame{
		fixtureThread(t, parseEuStack, "eu-stack/mpich-busy-1.txt"),
		fixtureThread(t, parseEuStack, "eu-stack/mpich-busy-2.txt"),
		fixtureThread(t, parseGDB, "gdb/mpich-busy.txt"),
	}
	var ranks []Rank
	for r := 15; r >= 0; r-- { // out of order: the verdict sorts
		frames := busy[r%3]
		if r == 2 {
			frames = []Frame{
				{Func: "__GI___libc_read", File: "read.c", Line: 26, Module: libc},
				{Func: "next_batch", File: "train.c", Line: 40, Module: "/w/train"},
				{Func: "train_step", File: "train.c", Line: 61, Module: "/w/train"},
				{Func: "main", File: "train.c", Line: 90, Module: "/w/train"},
				{Func: "__libc_start_call_main", Module: libc},
			}
		}
		sh := Proc{PID: 1000 + r, PPID: 1, Comm: "sh", Lang: LangNative, Method: MethodProc, State: "S", Syscall: "wait4",
			Note: "a wrapper of its child: frames not read"}
		app := nativeProc(2000+r, frames...)
		app.PPID, app.CPU, app.Syscall = 1000+r, 12.5, "running"
		ranks = append(ranks, Rank{Rank: r, Host: []string{"h1", "h2", "h3", "h4"}[r%4], PID: 1000 + r, Procs: []Proc{sh, app}})
	}
	return ranks
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	frameless := func(r int, host, note, syscall string) Rank {
		return Rank{Rank: r, Host: host, Procs: []Proc{{PID: 50 + r, Comm: "a.out", Lang: LangNative, Method: MethodProc,
			State: "S", Syscall: syscall, Note: note}}}
	}
	at := func(r int, host string, fns ...string) Rank {
		var frames []Frame
		for _, f := range fns {
			frames = append(frames, Frame{Func: f, Module: "/w/a.out"})
		}
		return Rank{Rank: r, Host: host, Procs: []Proc{nativeProc(50+r, frames...)}}
	}
	tests := []struct {
		name    string
		ranks   []Rank
		verbose bool
		odd     []int
	}{
		{"odd-one", ranks16(t), false, []int{2}},
		{"odd-one-verbose", ranks16(t)[12:], true, []int{2}}, // ranks 3, 2, 1, 0
		// With or without glibc's debug symbols, by eu-stack or gdb: one
		// place.
		{"debug-symbols", []Rank{
			{Rank: 0, Host: "n1", Procs: []Proc{nativeProc(10, fixtureThread(t, parseEuStack, "eu-stack/single.txt")...)}},
			{Rank: 1, Host: "n2", Procs: []Proc{nativeProc(11, fixtureThread(t, parseEuStack, "eu-stack/single-nodbg.txt")...)}},
			{Rank: 2, Host: "n1", Procs: []Proc{nativeProc(12, fixtureThread(t, parseGDB, "gdb/single.txt")...)}},
			{Rank: 3, Host: "n2", Procs: []Proc{nativeProc(13, fixtureThread(t, parseGDB, "gdb/single-nodbg.txt")...)}},
			{Rank: 4, Host: "n3", Procs: []Proc{nativeProc(14, fixtureThread(t, parseEuStack, "eu-stack/multi-nodbg.txt")...)}},
		}, false, nil},
		{"debug-symbols-stripped", []Rank{
			{Rank: 0, Host: "n1", Procs: []Proc{nativeProc(10, fixtureThread(t, parseEuStack, "eu-stack/stripped.txt")...)}},
			{Rank: 1, Host: "n2", Procs: []Proc{nativeProc(11, fixtureThread(t, parseEuStack, "eu-stack/stripped-nodbg.txt")...)}},
			{Rank: 2, Host: "n1", Procs: []Proc{nativeProc(12, mapped(fixtureThread(t, parseGDB, "gdb/stripped.txt"), "/usr/bin/sleep")...)}},
			{Rank: 3, Host: "n2", Procs: []Proc{nativeProc(13, mapped(fixtureThread(t, parseGDB, "gdb/stripped-nodbg.txt"), "/usr/bin/sleep")...)}},
		}, false, nil},
		{"same", []Rank{at(0, "n1", "MPI_Barrier", "main"), at(1, "n1", "MPI_Barrier", "main")}, false, nil},
		{"one", []Rank{at(0, "n1", "main")}, false, nil},
		{"equal-groups", []Rank{at(0, "n1", "a", "main"), at(1, "n2", "b", "main"), at(2, "n1", "a", "main"), at(3, "n2", "b", "main")}, false, nil},
		{"two-odd-places", []Rank{
			at(0, "n1", "MPI_Allreduce", "main"), at(1, "n1", "MPI_Allreduce", "main"), at(2, "n2", "MPI_Allreduce", "main"),
			at(3, "n2", "compute", "main"), at(4, "n3", "read", "main"), at(5, "n3", "MPI_Allreduce", "main"),
		}, false, []int{3, 4}},
		{"no-frames", []Rank{
			at(0, "n1", "MPI_Barrier", "main"), at(1, "n1", "MPI_Barrier", "main"), at(2, "n2", "MPI_Barrier", "main"),
			frameless(3, "n2", "eu-stack: ptrace refused (Operation not permitted): kernel.yama.ptrace_scope is 3: no process may attach", "futex"),
			frameless(4, "n3", "eu-stack: ptrace refused (Operation not permitted): kernel.yama.ptrace_scope is 3: no process may attach", "futex"),
			{Rank: 5, Host: "n4", Err: "the agent on n4 did not answer in 10s"},
		}, true, []int{3, 4, 5}},
		{"notices", func() []Rank {
			own := "the program handles signal 45 itself (it called signal.signal): Python stacks not taken"
			rs := []Rank{at(0, "n1", "read", "main"), at(1, "n2", "read", "main"), at(2, "n1", "read", "main"), at(3, "n1", "read", "main")}
			for r, n := range []string{own, own, "Python hook: no dump in 2s after signal 45 (the program blocks it or handles it itself, or every thread is stuck in the kernel): Python stacks not taken"} {
				rs[r].Procs[0].Notice, rs[r].Procs[0].Note = n, n+"; Python frames not read: the interpreter's native frames"
			}
			for r := range rs {
				rs[r].Procs[0].Lang = LangPython
			}
			return rs
		}(), false, nil},
		{"mixed-languages", []Rank{
			at(0, "n1", "main"), at(1, "n1", "main"),
			{Rank: 2, Host: "n1", Procs: []Proc{{PID: 9, Lang: LangPython, Method: MethodFaulthandler, State: "S",
				Threads: []Thread{{ID: 0x7f00, Main: true, Frames: []Frame{{Func: "main", File: "/w/x.py", Line: 3}}}}}}},
		}, false, []int{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := NewVerdict(tt.ranks)
			if !reflect.DeepEqual(v.Odd, tt.odd) {
				t.Errorf("Odd = %v, want %v", v.Odd, tt.odd)
			}
			for i := 1; i < len(v.Groups); i++ {
				if a, b := v.Groups[i-1], v.Groups[i]; len(a.Ranks) > len(b.Ranks) || len(a.Ranks) == len(b.Ranks) && a.Ranks[0] > b.Ranks[0] {
					t.Errorf("groups out of order: %v before %v", a.Ranks, b.Ranks)
				}
			}
			var buf bytes.Buffer
			v.WriteText(&buf, tt.verbose)
			golden(t, filepath.Join("testdata", "verdict", tt.name+".txt"), buf.Bytes())
		})
	}
}

// golden compares got with the file name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// The verdict's JSON carries the groups, the odd ranks and every rank's
// stacks under the documented names, and reads back the same.
func TestVerdictJSON(t *testing.T) {
	t.Parallel()
	v := NewVerdict(ranks16(t))
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"groups":`, `"odd":[2]`, `"summary":"read \u003c- next_batch \u003c- train_step \u003c- main"`,
		`"ranks":[0,1,3,4,5,6,7,8,9,10,11,12,13,14,15]`, `"hosts":["h1","h2","h3","h4"]`, `"func":"MPI_Barrier"`,
		`"method":"eu-stack"`, `"main":true`, `"syscall":"running"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s:\n%.600s", key, b)
		}
	}
	var back Verdict
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Groups, v.Groups) || !reflect.DeepEqual(back.Odd, v.Odd) {
		t.Errorf("groups read back differ")
	}
	// A rank read back from JSON (as the head gets it) has the same
	// signature.
	for i := range back.Ranks {
		if a, b := back.Ranks[i].Signature(), v.Ranks[i].Signature(); a != b {
			t.Errorf("rank %d: signature %q after JSON, %q before", i, a, b)
		}
	}
}
