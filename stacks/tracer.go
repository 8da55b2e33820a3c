package stacks

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// AllowTracer names process tracer (gorun's agent) the calling process's
// tracer for the Yama security module: where kernel.yama.ptrace_scope is
// 1 (Ubuntu's default), only a process's ancestors may attach to it, and
// eu-stack, gdb and py-spy, which the agent starts, are not the ancestors
// of the ranks it started; with this call, made in a rank before it execs
// the program (Yama keeps it across execve), tracer and its descendants
// may attach. It does nothing, and returns nil, on a kernel without Yama.
func AllowTracer(tracer int) error {
	err := unix.Prctl(unix.PR_SET_PTRACER, uintptr(tracer), 0, 0, 0)
	if errors.Is(err, unix.EINVAL) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stacks: prctl(PR_SET_PTRACER, %d): %w", tracer, err)
	}
	return nil
}
