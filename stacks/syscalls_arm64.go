package stacks

import "golang.org/x/sys/unix"

// syscallNames names the system calls a blocked process is most often
// found in, by their numbers on arm64.
var syscallNames = mergeNames(commonSyscalls, map[int]string{
	unix.SYS_ACCEPT:     "accept",
	unix.SYS_MSGRCV:     "msgrcv",
	unix.SYS_SEMTIMEDOP: "semtimedop",
})
