package stacks

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/procfs"
)

var execLookPath = exec.LookPath

// toolResult is what a tool run gave.
type toolResult struct {
	stdout, stderr []byte
	err            error // the run's error: a start failure, an exit status, a timeout
	timedOut       bool  // the tool was killed: time was up, or why says why
	why            string
}

// errStuck ends a tool's run when its target went into uninterruptible
// sleep meanwhile.
type errStuck struct{ tid int }

func (e errStuck) Error() string {
	return fmt.Sprintf("thread %d went into uninterruptible sleep (D)", e.tid)
}

// runTool runs a tool that attaches to process pid, bounded by ctx and
// timeout, in its own process group, which is killed when either ends. A
// tool killed while attaching may leave the SIGSTOP of its PTRACE_ATTACH
// pending, which would stop pid once the kernel delivers it; so, when the
// tool was killed and pid was not stopped before, runTool sends pid a
// SIGCONT, which discards a pending stop signal and resumes a stopped
// process (a program with a SIGCONT handler sees it run).
//
// A thread of pid that goes into uninterruptible sleep for 200 ms while
// the tool runs ends it too: the tool would wait for a stop that cannot
// come until the thread wakes.
func runTool(ctx context.Context, pfs procfs.FS, pid int, timeout time.Duration, path string, args ...string) toolResult {
	wasStopped := stopped(pfs, pid)
	ctx, cancelCause := context.WithCancelCause(ctx)
	defer cancelCause(nil)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go watchStuck(ctx, pfs, pid, cancelCause)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	cmd.Env = toolEnv(os.Environ())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := toolResult{stdout: stdout.Bytes(), stderr: stderr.Bytes(), err: err}
	if ctx.Err() != nil && cmd.ProcessState != nil && !cmd.ProcessState.Exited() {
		r.timedOut = true
		if stuck, ok := context.Cause(ctx).(errStuck); ok {
			r.why = stuck.Error()
		}
		if !wasStopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	return r
}

// watchStuck cancels ctx with an errStuck when a thread of pid stays in
// uninterruptible sleep for 200 ms, until ctx ends.
func watchStuck(ctx context.Context, pfs procfs.FS, pid int, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	seen, last := 0, -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tid := -1
		for _, t := range pfs.Tasks(pid) {
			if st, err := pfs.TaskStat(pid, t); err == nil && st.State == 'D' {
				tid = t
				break
			}
		}
		if tid < 0 || tid != last {
			seen, last = 0, tid
			continue
		}
		if seen++; seen >= 4 {
			cancel(errStuck{tid})
			return
		}
	}
}

// toolEnv is the tools' environment: env in the C locale (their messages
// are matched in English) and without DEBUGINFOD_URLS, which would have
// eu-stack fetch debug symbols over the network while the process waits.
func toolEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DEBUGINFOD_URLS", "LC_ALL", "LANGUAGE":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LC_ALL=C")
}

// stopped reports whether process pid or one of its threads is stopped
// (T, by a signal) or traced (t).
func stopped(pfs procfs.FS, pid int) bool {
	for _, tid := range pfs.Tasks(pid) {
		if st, err := pfs.TaskStat(pid, tid); err == nil && (st.State == 'T' || st.State == 't') {
			return true
		}
	}
	return false
}

// uninterruptible returns the first thread of pid in uninterruptible sleep
// (D) that stays there for about 200 ms, or -1. Such a thread cannot stop
// for ptrace: a tool would wait for it, and a tool killed meanwhile would
// leave its stop pending.
func uninterruptible(pfs procfs.FS, pid int) int {
	for try := 0; ; try++ {
		tid := -1
		for _, t := range pfs.Tasks(pid) {
			if st, err := pfs.TaskStat(pid, t); err == nil && st.State == 'D' {
				tid = t
				break
			}
		}
		if tid < 0 || try == 4 {
			return tid
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// toolFailure says why a tool gave no stacks of pid, from its result:
// which tool, the first line of its complaint, and for a refused attach
// what in this system refuses it.
func toolFailure(pfs procfs.FS, pid int, tool string, r toolResult) string {
	if r.timedOut && r.why != "" {
		return fmt.Sprintf("%s stopped: %s", tool, r.why)
	}
	if r.timedOut {
		return fmt.Sprintf("%s did not finish in time (killed)", tool)
	}
	msg := firstLine(r.stderr)
	if msg == "" && r.err != nil {
		msg = r.err.Error()
	}
	if msg == "" {
		msg = "no stacks in its output"
	}
	// Without the pid, the same failure reads the same on every rank.
	msg = strings.ReplaceAll(msg, " pid "+strconv.Itoa(pid), "")
	msg = strings.ReplaceAll(msg, strconv.Itoa(pid), "PID")
	if refused(msg) {
		return fmt.Sprintf("%s: ptrace refused (%s): %s", tool, msg, ptraceCause(pfs, pid))
	}
	return fmt.Sprintf("%s: %s", tool, msg)
}

// refused reports whether a tool's message says the kernel refused it the
// process (EPERM from ptrace, EACCES on /proc/PID/maps).
func refused(msg string) bool {
	return strings.Contains(msg, "Operation not permitted") || strings.Contains(msg, "Permission denied")
}

// ptraceCause names what refuses this process ptrace on pid.
func ptraceCause(pfs procfs.FS, pid int) string {
	uid := strings.Fields(pfs.StatusField(pid, "Uid"))
	if len(uid) > 1 && uid[1] != fmt.Sprint(os.Geteuid()) && os.Geteuid() != 0 {
		return fmt.Sprintf("the process belongs to uid %s, gorun runs as uid %d", uid[1], os.Geteuid())
	}
	switch pfs.PtraceScope() {
	case 1:
		return "kernel.yama.ptrace_scope is 1: only an ancestor may attach (sysctl kernel.yama.ptrace_scope=0, or a rank that names gorun's agent its tracer, see AllowTracer)"
	case 2:
		return "kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may attach"
	case 3:
		return "kernel.yama.ptrace_scope is 3: no process may attach"
	}
	if tp := pfs.StatusField(pid, "TracerPid"); tp != "" && tp != "0" {
		return "another tracer (pid " + tp + ") is attached"
	}
	return "the process is not dumpable, or a container or seccomp policy forbids ptrace"
}

// firstLine is b's first non-empty line, trimmed, without the
// "/usr/bin/eu-stack: " that starts eu-stack's.
func firstLine(b []byte) string {
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" {
			if i := strings.Index(line, "eu-stack: "); i >= 0 && !strings.Contains(line[:i], " ") {
				line = line[i+len("eu-stack: "):]
			}
			return line
		}
	}
	return ""
}
