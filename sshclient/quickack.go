package sshclient

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAckConn acknowledges every segment at once instead of delaying the
// ACK. sshd writes its post-authentication replies as several small
// packets with Nagle's algorithm on (it sets TCP_NODELAY only for
// terminals), so each waits for the client's ACK, which Linux delays by
// up to 40 ms: measured here, that is about 45 ms of every connection.
// Linux clears TCP_QUICKACK after use, so it is set again after each read.
type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

func newQuickAckConn(c *net.TCPConn) net.Conn {
	q := &quickAckConn{TCPConn: c}
	q.raw, _ = c.SyscallConn()
	q.quickAck()
	return q
}

func (q *quickAckConn) quickAck() {
	if q.raw != nil {
		q.raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1) })
	}
}

func (q *quickAckConn) Read(p []byte) (int, error) {
	n, err := q.TCPConn.Read(p)
	q.quickAck()
	return n, err
}
