package peerproc

import "syscall"

// dieWithParent makes the peer process die with the test process.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
