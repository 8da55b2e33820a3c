package procfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// input is the test input: the file under testdata when file is not "",
// else text.
func input(t *testing.T, file, text string) []byte {
	t.Helper()
	if file == "" {
		return []byte(text)
	}
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string // under testdata
		text string // when file is ""
		want Stat
		err  bool
	}{
		{name: "running", file: "stat/running", want: Stat{PID: 32704, Comm: "cat", State: 'R', PPID: 32702}},
		{name: "parentheses and spaces in the name", file: "stat/parens-in-name", want: Stat{PID: 713, Comm: "a) b (c", State: 'S', PPID: 712}},
		{name: "stopped", file: "stat/stopped", want: Stat{PID: 750, Comm: "bash", State: 'T', PPID: 706}},
		{name: "zombie", file: "stat/zombie", want: Stat{PID: 2729, Comm: "python3", State: 'Z', PPID: 2668}},
		{name: "kernel thread, parent 0", file: "stat/kthreadd", want: Stat{PID: 2, Comm: "kthreadd", State: 'S', PPID: 0, STime: 1}},
		{name: "busy, CPU times", file: "stat/busy", want: Stat{PID: 30884, Comm: "mpi", State: 'R', PPID: 30883, UTime: 10067, STime: 9}},
		{name: "times not numbers", text: "7 (sh) S 1 7 7 0 -1 0 0 0 0 0 x y", want: Stat{PID: 7, Comm: "sh", State: 'S', PPID: 1}},
		{name: "empty name", text: "7 () S 1 7", want: Stat{PID: 7, State: 'S', PPID: 1}},
		{name: "empty", text: "", err: true},
		{name: "no parentheses", text: "7 sh S 1 7", err: true},
		{name: "nothing after the name", text: "7 (sh)", err: true},
		{name: "no parent", text: "7 (sh) S", err: true},
		{name: "parent not a number", text: "7 (sh) S x 7", err: true},
		{name: "pid not a number", text: "x (sh) S 1 7", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := input(t, tt.file, tt.text)
			got, err := ParseStat(b)
			if tt.err {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("ParseStat(%q) = %+v, %v; want an ErrFormat", b, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseStat(%q) = %+v, %v; want %+v", b, got, err, tt.want)
			}
		})
	}
}

func TestChildren(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fs   FS
		ppid int
		want []int
	}{
		{"from task/TID/children, every thread", "testdata/children-files", 100, []int{101, 102, 103}},
		{"neither children files nor stat lines", "testdata/children-files", 101, nil},
		{"scan of stat lines, names with spaces", "testdata/children-scan", 100, []int{101, 102}},
		{"scan, another parent", "testdata/children-scan", 1, []int{100, 103}},
		{"scan, a name that reads like the parent", "testdata/children-scan", 1000, []int{104}},
		{"scan, no children", "testdata/children-scan", 103, nil},
		{"no such file system", "testdata/none", 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.fs.Children(tt.ppid); !slices.Equal(got, tt.want) {
				t.Fatalf("%s.Children(%d) = %v, want %v", tt.fs, tt.ppid, got, tt.want)
			}
		})
	}
}

// The readers on the running kernel's /proc: a child and an open file of
// this process are seen.
func TestProc(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if got := Proc.Children(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("Children(self) = %v, want %d among them", got, cmd.Process.Pid)
	}
	if st, err := Proc.Stat(cmd.Process.Pid); err != nil || st.PPID != os.Getpid() {
		t.Errorf("Stat(child) = %+v, %v; want parent %d", st, err, os.Getpid())
	}
	if !slices.Contains(Proc.PIDs(), os.Getpid()) {
		t.Errorf("PIDs() lacks this process, %d", os.Getpid())
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	found := false
	for link, target := range Proc.FDs(os.Getpid()) {
		if target == f.Name() {
			found = true
			if _, err := os.Stat(link); err != nil {
				t.Errorf("the link %s of %s cannot be followed: %v", link, target, err)
			}
		}
	}
	if !found {
		t.Errorf("FDs(self) did not yield %s", f.Name())
	}
	if _, err := Proc.Stat(-1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(-1) = %v, want ErrNotExist", err)
	}
	for range Proc.FileMappings(-1) {
		t.Errorf("FileMappings(-1) yielded a mapping")
	}
}

func TestParseMaps(t *testing.T) {
	t.Parallel()
	libc := func(start, end uint64) Mapping {
		return Mapping{Dev{0xfe, 0}, 326269, "/usr/lib/x86_64-linux-gnu/libc.so.6", start, end}
	}
	tests := []struct {
		name string
		file string // under testdata
		text string // when file is ""
		want []Mapping
	}{
		{name: "shared memory, deleted and with a space", file: "maps/shm", want: []Mapping{
			libc(0x7f488a41e000, 0x7f488a444000), libc(0x7f488a444000, 0x7f488a59a000),
			libc(0x7f488a59a000, 0x7f488a5ed000), libc(0x7f488a5ed000, 0x7f488a5f1000),
			libc(0x7f488a5f1000, 0x7f488a5f3000),
			{Dev{0, 0x1b}, 4887, "/dev/shm/gorun-cap-del (deleted)", 0x7f488ac31000, 0x7f488ac32000},
			{Dev{0, 0x1b}, 4886, "/dev/shm/gorun-cap (x)", 0x7f488ac32000, 0x7f488ac33000},
		}},
		{name: "no trailing newline", text: "7f-8f rw-s 00000000 00:1b 12 /dev/shm/a", want: []Mapping{{Dev{0, 0x1b}, 12, "/dev/shm/a", 0x7f, 0x8f}}},
		{name: "no path", text: "7f-8f rw-s 00000000 08:01 12\n", want: []Mapping{{Dev{8, 1}, 12, "", 0x7f, 0x8f}}},
		{name: "anonymous", text: "7f-8f rw-p 00000000 00:00 0 \n"},
		{name: "bad device", text: "7f-8f rw-s 00000000 0001b 12 /x\n7f-8f rw-s 00000000 zz:1b 12 /x\n"},
		{name: "bad inode", text: "7f-8f rw-s 00000000 00:1b -1 /x\n"},
		{name: "short line", text: "7f-8f rw-s\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := slices.Collect(ParseMaps(input(t, tt.file, tt.text)))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("ParseMaps = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Every file mapping of a real process is found, and the caller may stop
// early.
func TestParseMapsSleep(t *testing.T) {
	t.Parallel()
	b := input(t, "maps/sleep", "")
	var paths []string
	for m := range ParseMaps(b) {
		if m.Inode == 0 || m.Dev != (Dev{0xfe, 0}) {
			t.Errorf("mapping %+v", m)
		}
		paths = append(paths, m.Path)
	}
	if len(paths) != 28 || paths[0] != "/usr/bin/sleep" || paths[27] != "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
		t.Fatalf("paths = %q", paths)
	}
	n := 0
	for range ParseMaps(b) {
		if n++; n == 3 {
			break
		}
	}
}

func TestParseVMStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string // under testdata
		text string // when file is ""
		key  string
		want int
	}{
		{"oom_kill", "vmstat/6.18", "", "oom_kill", 1},
		{"first line, a prefix of the next one", "vmstat/6.18", "", "nr_free_pages", 4488696},
		{"the next one", "vmstat/6.18", "", "nr_free_pages_blocks", 4155392},
		{"after a longer key", "vmstat/6.18", "", "pgmajfault", 60336},
		{"missing", "vmstat/6.18", "", "no_such_counter", 0},
		{"not a number", "", "oom_kill x\n", "oom_kill", 0},
		{"no trailing newline", "", "a 1\noom_kill 5", "oom_kill", 5},
		{"empty", "", "", "oom_kill", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ParseVMStat(input(t, tt.file, tt.text), tt.key); got != tt.want {
				t.Fatalf("ParseVMStat(%s) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
	if got := FS("testdata/none").VMStat("oom_kill"); got != 0 {
		t.Errorf("VMStat without the file = %d", got)
	}
}

func TestParsePortRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		file   string // under testdata
		text   string // when file is ""
		lo, hi int
		ok     bool
	}{
		{"default", "portrange/default", "", 32768, 60999, true},
		{"spaces", "", " 1024   65000 \n", 1024, 65000, true},
		{"one number", "", "1024\n", 0, 0, false},
		{"three", "", "1 2 3\n", 0, 0, false},
		{"not numbers", "", "a b\n", 0, 0, false},
		{"empty", "", "", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := input(t, tt.file, tt.text)
			if lo, hi, ok := ParsePortRange(b); lo != tt.lo || hi != tt.hi || ok != tt.ok {
				t.Fatalf("ParsePortRange(%q) = %d, %d, %v; want %d, %d, %v", b, lo, hi, ok, tt.lo, tt.hi, tt.ok)
			}
		})
	}
	if _, _, ok := FS("testdata/none").PortRange(); ok {
		t.Errorf("PortRange without the file is ok")
	}
}

func TestParseSyscall(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string // under testdata
		text string // when file is ""
		want Syscall
		err  bool
	}{
		{name: "read", file: "syscall/read", want: Syscall{Nr: 0}},
		{name: "wait4", file: "syscall/wait4", want: Syscall{Nr: 61}},
		{name: "running", file: "syscall/running", want: Syscall{Running: true, Nr: -1}},
		{name: "blocked outside a call", text: "-1 0x7ffd2043bf08 0x7f674a253bd3\n", want: Syscall{Nr: -1}},
		{name: "empty", text: "", err: true},
		{name: "not a number", text: "x 0x0\n", err: true},
		{name: "below -1", text: "-2 0x0\n", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := input(t, tt.file, tt.text)
			got, err := ParseSyscall(b)
			if tt.err {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("ParseSyscall(%q) = %+v, %v; want an ErrFormat", b, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSyscall(%q) = %+v, %v; want %+v", b, got, err, tt.want)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	b := input(t, "status/mpi", "")
	tests := []struct{ key, want string }{
		{"Name", "mpi"},
		{"State", "R (running)"},
		{"PPid", "30883"},
		{"Uid", "0\t0\t0\t0"},
		{"SigCgt", "00000001000006c9"},
		{"Sig", ""}, // a prefix of SigCgt, no field of its own
		{"NoSuchField", ""},
	}
	for _, tt := range tests {
		if got := ParseStatus(b, tt.key); got != tt.want {
			t.Errorf("ParseStatus(%s) = %q, want %q", tt.key, got, tt.want)
		}
	}
	m, err := ParseSigMask(ParseStatus(b, "SigCgt"))
	// SIGHUP, SIGILL, SIGBUS, SIGFPE, SIGUSR1, SIGSEGV and 33 (glibc's SIGSETXID).
	want := uint64(1<<0 | 1<<3 | 1<<6 | 1<<7 | 1<<9 | 1<<10 | 1<<32)
	if err != nil || m != want {
		t.Errorf("ParseSigMask(SigCgt) = %#x, %v; want %#x", m, err, want)
	}
	for _, bad := range []string{"", "xyz", "1000000000000000000"} {
		if _, err := ParseSigMask(bad); !errors.Is(err, ErrFormat) {
			t.Errorf("ParseSigMask(%q) = %v, want an ErrFormat", bad, err)
		}
	}
}

// The readers of what a process does, on a real one: a thread named by
// this test, blocked in nanosleep.
func TestProcTask(t *testing.T) {
	t.Parallel()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep: %v", err)
	}
	cmd := exec.Command(sleep, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	if got := Proc.Tasks(pid); !slices.Equal(got, []int{pid}) {
		t.Errorf("Tasks = %v, want [%d]", got, pid)
	}
	if got, _ := filepath.EvalSymlinks(sleep); Proc.Exe(pid) != got {
		t.Errorf("Exe = %q, want %q", Proc.Exe(pid), got)
	}
	// Wait until it sleeps.
	var sc Syscall
	for range 200 {
		if sc, err = Proc.Syscall(pid); err == nil && !sc.Running && sc.Nr >= 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || sc.Running || sc.Nr < 0 {
		t.Errorf("Syscall = %+v, %v; want a call", sc, err)
	}
	if st, err := Proc.TaskStat(pid, pid); err != nil || st.State != 'S' || Proc.TaskComm(pid, pid) != "sleep" {
		t.Errorf("TaskStat = %+v, %v, TaskComm = %q; want S and sleep", st, err, Proc.TaskComm(pid, pid))
	}
	if w := Proc.WChan(pid); w == "" {
		t.Logf("no wchan (hidden by this kernel)")
	}
	// sleep catches nothing; this test binary catches SIGURG (Go's
	// preemption signal, 23).
	if c, err := Proc.CatchesSignal(pid, 15); c || err != nil {
		t.Errorf("CatchesSignal(sleep, SIGTERM) = %v, %v", c, err)
	}
	if c, err := Proc.CatchesSignal(os.Getpid(), 23); !c || err != nil {
		t.Errorf("CatchesSignal(self, SIGURG) = %v, %v", c, err)
	}
	if _, err := Proc.CatchesSignal(-1, 15); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CatchesSignal(-1) = %v, want ErrNotExist", err)
	}
	if Proc.Exe(-1) != "" || Proc.WChan(-1) != "" || Proc.Tasks(-1) != nil || Proc.TaskComm(-1, -1) != "" || Proc.StatusField(-1, "Uid") != "" {
		t.Errorf("readers of a process that is not there returned something")
	}
	if s := FS("testdata/none").PtraceScope(); s != -1 {
		t.Errorf("PtraceScope without Yama = %d", s)
	}
}

// Tree starts with the process itself and finds a child of it; max
// bounds it; StatusKB reads a live process's resident set.
func TestTreeAndStatusKB(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	self := os.Getpid()
	tree := Proc.Tree(self, 64)
	if tree[0] != self || !slices.Contains(tree, cmd.Process.Pid) {
		t.Errorf("Tree(%d) = %v, want it first and its child %d", self, tree, cmd.Process.Pid)
	}
	if got := Proc.Tree(self, 1); len(got) != 1 {
		t.Errorf("Tree(%d, 1) = %v", self, got)
	}
	if kb := Proc.StatusKB(cmd.Process.Pid, "VmRSS"); kb <= 0 {
		t.Errorf("StatusKB(VmRSS) = %d", kb)
	}
}

// FDCount counts two more descriptors after a pipe, and says -1 for a
// process that is not there.
func TestFDCount(t *testing.T) {
	before := Proc.FDCount(os.Getpid())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := Proc.FDCount(os.Getpid()); got != before+2 {
		t.Errorf("FDCount = %d with a pipe open, %d before", got, before)
	}
	if got := Proc.FDCount(1 << 30); got != -1 {
		t.Errorf("FDCount of no process = %d, want -1", got)
	}
}
