//go:build !linux

package main

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not available;
// keep-alive alone then detects hosts that went away while idle.
func setUserTimeout(conn *net.TCPConn, d time.Duration) error { return nil }
