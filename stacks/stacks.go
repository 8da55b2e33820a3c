package stacks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

// Frame is one stack frame, innermost first in a [Thread].
type Frame struct {
	// Func is the function's name as the source spells it: no address,
	// arguments or offset ("??" where the tool could not name it).
	Func string `json:"func"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Module is the shared object or executable the frame's code lies
	// in (a path) for native frames, the package or standard library
	// module ("torch", "threading") for Python frames, "" for the
	// program's own Python files, and the package path for Go frames.
	Module string `json:"module,omitempty"`

	addr uint64 // the frame's address, where the tool gave it: for filling Module
}

// Thread is one thread of a process, or one goroutine of a Go program.
type Thread struct {
	// ID is the kernel's thread id for native and py-spy stacks, the
	// interpreter's thread identifier (pthread_t) for faulthandler's,
	// the goroutine's number for Go's.
	ID int64 `json:"id"`
	// Name is the thread's name (its comm, or Python's thread name); for
	// a goroutine, what it waits for ("chan receive", "select").
	Name string `json:"name,omitempty"`
	// Main marks the process's main thread (goroutine 1 in Go).
	Main   bool    `json:"main,omitempty"`
	Frames []Frame `json:"frames"`
}

// The languages of a [Proc].
const (
	LangNative = "native"
	LangPython = "python"
	LangGo     = "go"
)

// The methods by which a [Proc]'s stacks were read.
const (
	MethodEuStack      = "eu-stack"
	MethodGDB          = "gdb"
	MethodPySpy        = "py-spy"
	MethodFaulthandler = "faulthandler"
	MethodGoClient     = "go-client" // filled by gorun's agent, not by Collect
	MethodProc         = "proc"      // /proc only: no frames
)

// Proc is one process of a rank: the rank's own or one of its
// descendants.
type Proc struct {
	PID  int    `json:"pid"`
	PPID int    `json:"ppid"`
	Comm string `json:"comm"`
	Exe  string `json:"exe,omitempty"`
	// Lang is LangPython for a Python interpreter, LangGo where the
	// agent read a Go rank's goroutines, LangNative otherwise.
	Lang string `json:"lang"`
	// Method says how Threads were read (MethodEuStack...).
	Method  string   `json:"method"`
	Threads []Thread `json:"threads,omitempty"`
	// State is the process's state letter (R, S, D, T, Z...).
	State string `json:"state"`
	// WChan is the kernel function it sleeps in, if the kernel says.
	WChan string `json:"wchan,omitempty"`
	// Syscall is the system call its main thread is blocked in ("read",
	// "futex", "syscall 321" for one this package cannot name),
	// "running" when it was on a CPU, "" when in none or unknown.
	Syscall string `json:"syscall,omitempty"`
	// CPU is the CPU time it has used, user and system, in seconds.
	CPU float64 `json:"cpu"`
	// Main marks the process the verdict reads the rank by: see
	// [MainProc].
	Main bool `json:"main,omitempty"`
	// Note says why frames are missing or partial, or where they came
	// from when not from the first method tried.
	Note string `json:"note,omitempty"`
	// Notice is the part of Note that the verdict's short form shows
	// too ([Verdict.WriteText]): why a Python process that loaded
	// gorun's hook has no Python frames (its program handles the hook's
	// signal itself, or sent no dump on it).
	Notice string `json:"notice,omitempty"`
}

// Rank is one rank's stacks.
type Rank struct {
	Rank  int    `json:"rank"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Procs []Proc `json:"procs"`
	// Err says why the rank's stacks could not be had at all (its agent
	// did not answer, the process was gone).
	Err string `json:"err,omitempty"`
}

// DumpSignal is the signal by which Collect asks a Python rank that loaded
// gorun's hook ([WritePythonHook]) to write its threads' stacks.
//
// It is real-time signal 45 (SIGRTMIN+11 under glibc, SIGRTMIN+10 under
// musl): SIGUSR1 and SIGUSR2 are taken by applications and by Slurm's and
// other schedulers' preemption warnings (sbatch --signal), SIGQUIT ends a
// Python program, and the libraries that use real-time signals take them
// from either end of the range (glibc keeps 32 and 33, musl 32 to 34,
// POSIX timers and profilers use SIGRTMIN+n for small n, a few tools
// SIGRTMAX-n). A real-time signal's default action ends the process, so
// Collect sends it only to a process whose SigCgt shows a handler for it.
const DumpSignal = 45

// Options set how [Collect] reads stacks. The zero value reads with the
// tools found on PATH and without the Python hook.
type Options struct {
	// StacksDir is where ranks' Python hook writes its dumps (their
	// GORUN_STACKS_DIR); "" = ranks have no hook.
	StacksDir string
	// Signal is the hook's dump signal; 0 = DumpSignal.
	Signal int
	// EuStack, GDB and PySpy are the tools' paths; "" = looked up on
	// PATH ("eu-stack", "gdb", "py-spy"), "-" = not used.
	EuStack, GDB, PySpy string
	// ToolTimeout bounds each run of a tool on one process; 0 = 10 s
	// (gdb may take seconds to read a large program's symbols).
	ToolTimeout time.Duration
	// DumpWait bounds the wait for a Python hook's dump; 0 = 2 s.
	DumpWait time.Duration
	// NoLines leaves out native frames' files and lines (eu-stack's -s):
	// eu-stack then takes about 2 ms instead of 50 (on a small C program
	// with libc's debug symbols installed); the process is stopped under
	// 1 ms either way.
	NoLines bool
	// MaxProcs bounds the processes read: the rank's process and its
	// descendants, breadth first; 0 = 16.
	MaxProcs int
}

func (o Options) signal() int {
	if o.Signal > 0 {
		return o.Signal
	}
	return DumpSignal
}

func (o Options) toolTimeout() time.Duration {
	if o.ToolTimeout > 0 {
		return o.ToolTimeout
	}
	return 10 * time.Second
}

func (o Options) dumpWait() time.Duration {
	if o.DumpWait > 0 {
		return o.DumpWait
	}
	return 2 * time.Second
}

func (o Options) maxProcs() int {
	if o.MaxProcs > 0 {
		return o.MaxProcs
	}
	return 16
}

// ErrGone is wrapped by Collect's and ProcInfo's error when the process is
// not there (any more).
var ErrGone = errors.New("stacks: no such process")

// ProcInfo reads process pid's state without its frames: comm, exe,
// parent, state letter, wait channel, system call and CPU time, and its
// language. Method is MethodProc. The error wraps ErrGone when pid is
// not there.
func ProcInfo(pid int) (Proc, error) {
	return procInfo(procfs.Proc, pid)
}

func procInfo(pfs procfs.FS, pid int) (Proc, error) {
	st, err := pfs.Stat(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Proc{}, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return Proc{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	p := Proc{
		PID: pid, PPID: st.PPID, Comm: st.Comm, Exe: pfs.Exe(pid),
		Method: MethodProc, State: string(st.State), WChan: pfs.WChan(pid),
		CPU: float64(st.UTime+st.STime) / procfs.UserHZ,
	}
	if sc, err := pfs.Syscall(pid); err == nil {
		p.Syscall = syscallName(sc)
	}
	p.Lang = LangNative
	if isPython(pfs, p) {
		p.Lang = LangPython
	}
	return p, nil
}

// syscallName names what a syscall file says.
func syscallName(sc procfs.Syscall) string {
	switch {
	case sc.Running:
		return "running"
	case sc.Nr < 0:
		return ""
	}
	if n, ok := syscallNames[sc.Nr]; ok {
		return n
	}
	return fmt.Sprintf("syscall %d", sc.Nr)
}

var pythonName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^python[0-9.]*[dmu]?$`) })

// isPython reports whether p is a Python interpreter: its executable or
// command is python*, or it has libpython mapped (an embedded one, or an
// interpreter built with --enable-shared).
func isPython(pfs procfs.FS, p Proc) bool {
	exe := strings.TrimSuffix(p.Exe, " (deleted)")
	if pythonName().MatchString(filepath.Base(exe)) || pythonName().MatchString(p.Comm) {
		return true
	}
	for m := range pfs.FileMappings(p.PID) {
		if strings.HasPrefix(filepath.Base(m.Path), "libpython") {
			return true
		}
	}
	return false
}

// wrappers are the programs that run another and wait for it: a rank that
// is one of them is read by its child.
var wrappers = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "env": true, "timeout": true,
	"nice": true, "ionice": true, "chrt": true, "nohup": true, "numactl": true, "taskset": true,
	"stdbuf": true, "time": true,
}

// isWrapper reports whether p is a shell or a wrapper program, by its
// command or its executable's name.
func isWrapper(p Proc) bool {
	return wrappers[p.Comm] || wrappers[filepath.Base(strings.TrimSuffix(p.Exe, " (deleted)"))]
}

// MainProc returns the index in procs of the process a rank is judged by:
// the one marked Main, or else, from procs[0] (the rank's own process),
// the first that is not a shell or wrapper (sh, bash, dash, zsh, ksh,
// env, timeout, nice, ionice, chrt, nohup, numactl, taskset, stdbuf,
// time) with a child, going down through each wrapper's first child in
// procs: for `sh -c 'python3 x.py'` the Python process, for a Python
// program with DataLoader workers the program, not a worker. -1 when
// procs is empty.
func MainProc(procs []Proc) int {
	if len(procs) == 0 {
		return -1
	}
	for i, p := range procs {
		if p.Main {
			return i
		}
	}
	i := 0
	for seen := 0; seen < len(procs) && isWrapper(procs[i]); seen++ {
		child := -1
		for j, p := range procs {
			if p.PPID == procs[i].PID && j != i {
				child = j
				break
			}
		}
		if child < 0 {
			break
		}
		i = child
	}
	return i
}

// Collect reads the stacks of process pid (a rank's process) and of its
// descendants, at most Options.MaxProcs of them, breadth first, pid's
// first. A process is read in its own language: a Python interpreter by
// py-spy, else by gorun's hook, else natively; any other by eu-stack,
// else gdb, else from /proc alone. What could not be read of a process is
// said in its Note, never an error: the error, wrapping ErrGone, is only
// for a pid that is not there. The process marked Main is the one
// [MainProc] picks. ctx bounds the whole; each tool runs in its own
// process group, killed when ctx ends or the tool's time is up.
//
// Collect does not stop or change the processes it reads beyond the
// tools' ptrace stops (under 1 ms for eu-stack, about 150 ms for gdb,
// measured on a small C program timing its own pauses) and, for Python,
// one signal that the hook answers from its handler. It takes about
// 50 ms a process with eu-stack (2 ms with NoLines), 150 to 200 ms with
// gdb, 30 ms with the Python hook.
func Collect(ctx context.Context, pid int, o Options) ([]Proc, error) {
	return collect(ctx, procfs.Proc, pid, o)
}

func collect(ctx context.Context, pfs procfs.FS, pid int, o Options) ([]Proc, error) {
	root, err := procInfo(pfs, pid)
	if err != nil {
		return nil, err
	}
	procs := []Proc{root}
	for _, k := range pfs.Tree(pid, o.maxProcs())[1:] {
		if p, err := procInfo(pfs, k); err == nil {
			procs = append(procs, p)
		}
	}
	m := MainProc(procs)
	procs[m].Main = true
	for i := range procs {
		if ctx.Err() != nil {
			procs[i].Note = joinNote(procs[i].Note, "not read: "+context.Cause(ctx).Error())
			continue
		}
		hasChild := slices.ContainsFunc(procs, func(c Proc) bool { return c.PPID == procs[i].PID })
		if i != m && isWrapper(procs[i]) && hasChild {
			procs[i].Note = "a wrapper of its child: frames not read"
			continue
		}
		readProc(ctx, pfs, &procs[i], o)
	}
	return procs, nil
}

// readProc fills p's threads by the first method that works for its
// language, the reasons the others failed in its Note.
func readProc(ctx context.Context, pfs procfs.FS, p *Proc, o Options) {
	switch p.State {
	case "Z", "X":
		p.Note = "exited, not yet reaped: no stacks"
		return
	}
	var notes []string
	if p.Lang == LangPython {
		if ok, why := readPySpy(ctx, pfs, p, o); ok {
			return
		} else if why != "" {
			notes = append(notes, why)
		}
		if ok, why, notice := readHook(ctx, pfs, p, o); ok {
			return
		} else if why != "" {
			notes = append(notes, why)
			if notice {
				p.Notice = why
			}
		}
		if len(notes) == 0 {
			notes = append(notes, "py-spy not installed and gorun's Python hook off")
		}
		notes = append(notes, "Python frames not read: the interpreter's native frames")
	}
	why := readNative(ctx, pfs, p, o)
	p.Note = joinNote(append(notes, why)...)
}

// joinNote joins the non-empty notes with "; ".
func joinNote(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}

// lookTool returns the path of a tool: set (a path, or "-" for none) or
// found on PATH by name.
func lookTool(set, name string) string {
	if set == "-" {
		return ""
	}
	if set != "" {
		return set
	}
	p, _ := execLookPath(name)
	return p
}

// mainOf returns the index of the thread marked Main, or 0.
func mainOf(threads []Thread) int {
	for i, t := range threads {
		if t.Main {
			return i
		}
	}
	return 0
}
