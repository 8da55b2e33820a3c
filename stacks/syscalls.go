package stacks

import (
	"maps"

	"golang.org/x/sys/unix"
)

// commonSyscalls names, by number, the blocking system calls that every
// Linux architecture has (their numbers differ between architectures;
// package unix has each one's).
var commonSyscalls = map[int]string{
	unix.SYS_READ:            "read",
	unix.SYS_WRITE:           "write",
	unix.SYS_READV:           "readv",
	unix.SYS_WRITEV:          "writev",
	unix.SYS_PREAD64:         "pread64",
	unix.SYS_PWRITE64:        "pwrite64",
	unix.SYS_OPENAT:          "openat",
	unix.SYS_CLOSE:           "close",
	unix.SYS_PPOLL:           "ppoll",
	unix.SYS_PSELECT6:        "pselect6",
	unix.SYS_EPOLL_PWAIT:     "epoll_pwait",
	unix.SYS_EPOLL_PWAIT2:    "epoll_pwait2",
	unix.SYS_FUTEX:           "futex",
	unix.SYS_FUTEX_WAITV:     "futex_waitv",
	unix.SYS_NANOSLEEP:       "nanosleep",
	unix.SYS_CLOCK_NANOSLEEP: "clock_nanosleep",
	unix.SYS_WAIT4:           "wait4",
	unix.SYS_WAITID:          "waitid",
	unix.SYS_ACCEPT4:         "accept4",
	unix.SYS_CONNECT:         "connect",
	unix.SYS_RECVFROM:        "recvfrom",
	unix.SYS_RECVMSG:         "recvmsg",
	unix.SYS_RECVMMSG:        "recvmmsg",
	unix.SYS_SENDTO:          "sendto",
	unix.SYS_SENDMSG:         "sendmsg",
	unix.SYS_RT_SIGSUSPEND:   "rt_sigsuspend",
	unix.SYS_RT_SIGTIMEDWAIT: "rt_sigtimedwait",
	unix.SYS_IOCTL:           "ioctl",
	unix.SYS_SCHED_YIELD:     "sched_yield",
	unix.SYS_FSYNC:           "fsync",
	unix.SYS_FDATASYNC:       "fdatasync",
	unix.SYS_FLOCK:           "flock",
	unix.SYS_FCNTL:           "fcntl",
	unix.SYS_IO_GETEVENTS:    "io_getevents",
	unix.SYS_IO_URING_ENTER:  "io_uring_enter",
	unix.SYS_MQ_TIMEDRECEIVE: "mq_timedreceive",
	unix.SYS_GETRANDOM:       "getrandom",
	unix.SYS_MMAP:            "mmap",
	unix.SYS_CLONE:           "clone",
	unix.SYS_CLONE3:          "clone3",
	unix.SYS_EXECVE:          "execve",
	unix.SYS_MUNMAP:          "munmap",
}

// mergeNames returns a copy of a with b's names added.
func mergeNames(a, b map[int]string) map[int]string {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}
