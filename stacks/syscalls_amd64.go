package stacks

import "golang.org/x/sys/unix"

// syscallNames names the system calls a blocked process is most often
// found in, by their numbers on amd64.
var syscallNames = mergeNames(commonSyscalls, map[int]string{
	unix.SYS_POLL:       "poll",
	unix.SYS_SELECT:     "select",
	unix.SYS_EPOLL_WAIT: "epoll_wait",
	unix.SYS_PAUSE:      "pause",
	unix.SYS_OPEN:       "open",
	unix.SYS_ACCEPT:     "accept",
	unix.SYS_VFORK:      "vfork",
	unix.SYS_MSGRCV:     "msgrcv",
	unix.SYS_SEMTIMEDOP: "semtimedop",
})
