// This file holds the readers of what a process is doing, for gorun's
// stacks: its threads, their names and states, its executable, the
// kernel function it sleeps in, the system call it is in, and the fields
// of its status file (signal masks, owner).

package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Tasks lists the threads of process pid (their ids, the first being pid
// itself for a live process), in the order of /proc/PID/task; nil when
// pid is gone or may not be read.
func (fs FS) Tasks(pid int) []int {
	ents, _ := os.ReadDir(fs.path(pidDir(pid), "task"))
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// TaskStat reads and parses the stat line of thread tid of process pid
// (see [ParseStat]).
func (fs FS) TaskStat(pid, tid int) (Stat, error) {
	b, err := os.ReadFile(fs.path(pidDir(pid), "task", strconv.Itoa(tid), "stat"))
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// TaskComm returns the name of thread tid of process pid (its comm file:
// what pthread_setname_np or prctl(PR_SET_NAME) set, at most 15 bytes);
// "" when it cannot be read.
func (fs FS) TaskComm(pid, tid int) string {
	b, err := os.ReadFile(fs.path(pidDir(pid), "task", strconv.Itoa(tid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// Exe returns the path of process pid's executable (what /proc/PID/exe
// reads, " (deleted)" appended when it was unlinked since); "" when pid
// is gone, is a kernel thread or may not be read.
func (fs FS) Exe(pid int) string {
	s, _ := os.Readlink(fs.path(pidDir(pid), "exe"))
	return s
}

// WChan returns the kernel function process pid sleeps in (its wchan
// file, as "do_epoll_wait" or "futex_wait_queue"); "" when it runs, or
// the file cannot be read or is hidden (kernels print "0" then).
func (fs FS) WChan(pid int) string {
	b, err := os.ReadFile(fs.path(pidDir(pid), "wchan"))
	if s := strings.TrimSpace(string(b)); err == nil && s != "0" {
		return s
	}
	return ""
}

// Syscall is what a /proc/PID/syscall file says of a thread.
type Syscall struct {
	// Running is true when the thread was running on a CPU: the kernel
	// does not say in what then.
	Running bool
	// Nr is the number of the system call the thread is blocked in, in
	// the numbering of the kernel's architecture; -1 when it is blocked
	// outside of any (stopped, or in a page fault), or running.
	Nr int
}

// ParseSyscall parses a /proc/PID/syscall file: "running", "-1 SP PC",
// or the call's number followed by its six arguments, SP and PC.
func ParseSyscall(b []byte) (Syscall, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return Syscall{}, fmt.Errorf("%w: syscall: empty", ErrFormat)
	}
	if f[0] == "running" {
		return Syscall{Running: true, Nr: -1}, nil
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil || nr < -1 {
		return Syscall{}, fmt.Errorf("%w: syscall: %q is not a call number", ErrFormat, f[0])
	}
	return Syscall{Nr: nr}, nil
}

// Syscall reads and parses process pid's syscall file (its main
// thread's). Reading it takes the right to trace pid (the same user, not
// a process made undumpable, or CAP_SYS_PTRACE), but stops nothing.
func (fs FS) Syscall(pid int) (Syscall, error) {
	b, err := os.ReadFile(fs.path(pidDir(pid), "syscall"))
	if err != nil {
		return Syscall{}, err
	}
	return ParseSyscall(b)
}

// ParseStatus returns the value of field key of a /proc/PID/status file
// ("SigCgt", "Uid", "State"), its blanks trimmed; "" when it has no such
// field.
func ParseStatus(b []byte, key string) string {
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// StatusField returns field key of process pid's status (see
// [ParseStatus]); "" when it cannot be read.
func (fs FS) StatusField(pid int, key string) string {
	b, err := os.ReadFile(fs.path(pidDir(pid), "status"))
	if err != nil {
		return ""
	}
	return ParseStatus(b, key)
}

// ParseSigMask parses a signal mask of a status file (SigCgt, SigBlk,
// SigIgn, SigPnd: 16 hex digits): bit n-1 stands for signal n.
func ParseSigMask(s string) (uint64, error) {
	m, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: signal mask %q: %v", ErrFormat, s, err)
	}
	return m, nil
}

// CatchesSignal reports whether process pid has a handler for signal sig
// (its SigCgt mask): sending it a signal it neither catches nor ignores
// does the signal's default action, which for most is to end it. The
// error wraps [io/fs.ErrNotExist] when pid is gone.
func (fs FS) CatchesSignal(pid, sig int) (bool, error) {
	b, err := os.ReadFile(fs.path(pidDir(pid), "status"))
	if err != nil {
		return false, err
	}
	m, err := ParseSigMask(ParseStatus(b, "SigCgt"))
	if err != nil || sig < 1 || sig > 64 {
		return false, err
	}
	return m&(1<<(sig-1)) != 0, nil
}

// PtraceScope returns the Yama security module's ptrace_scope (0: any
// process of the same user may attach, 1: only an ancestor or a tracer
// the process named, 2: only CAP_SYS_PTRACE, 3: none); -1 when the
// kernel has no Yama.
func (fs FS) PtraceScope() int {
	b, err := os.ReadFile(fs.path("sys", "kernel", "yama", "ptrace_scope"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}
