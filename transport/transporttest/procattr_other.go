//go:build !linux

package transporttest

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
