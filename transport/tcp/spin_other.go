//go:build !linux

package tcp

import (
	"io"
	"net"
	"time"
)

// streamReader returns sc: the spinning reader is Linux's.
func streamReader(sc *net.TCPConn, _ time.Duration) io.Reader { return sc }
