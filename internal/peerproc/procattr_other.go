//go:build !linux

package peerproc

import "syscall"

// dieWithParent is a no-op where the peer cannot be tied to the test
// process.
func dieWithParent() *syscall.SysProcAttr { return nil }
