package sdk

import "golang.org/x/sys/unix"

// osYield gives the CPU to another thread or process that is ready to run
// (sched_yield).
func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
