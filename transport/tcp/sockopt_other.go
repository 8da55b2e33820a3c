//go:build !linux

package tcp

import (
	"net"
	"time"
)

func setUserTimeout(c *net.TCPConn, d time.Duration) {}
