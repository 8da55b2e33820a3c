package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/gorun/gorun/plugins/sdk"
)

// On the wire every message is a frame: its length as 8 little-endian
// bytes, then its bytes. TCP is a byte stream; the length is what lets the
// receiver find where one message ends and the next begins.
const headerSize = 8

// request is a send or a receive in flight. The goroutine that moves its
// bytes (or Close) completes it, once; the SDK's progress loop polls it
// with Test, which never blocks.
type request struct {
	buf  []byte
	once sync.Once
	done chan struct{} // closed when n and err are set
	n    int
	err  error
	wake func() // sdk.Config.Wake: tells the SDK to look now
}

func newRequest(buf []byte, wake func()) *request {
	return &request{buf: buf, done: make(chan struct{}), wake: wake}
}

// complete records the outcome and wakes the SDK's progress loop, which
// may be asleep; later calls are ignored.
func (r *request) complete(n int, err error) {
	r.once.Do(func() {
		r.n, r.err = n, err
		close(r.done)
		r.wake()
	})
}

// Test reports whether the request is done, and then its outcome.
func (r *request) Test() (bool, int, error) {
	select {
	case <-r.done:
		return true, r.n, r.err
	default:
		return false, 0, nil
	}
}

// connErr says why a connection stopped working: sdk.ErrClosed when this
// side closed it (which is why the I/O failed), else sdk.ErrPeerLost:
// end of file, a reset and a broken pipe all mean the peer is gone.
func connErr(op, peer string, closing bool, cause error) error {
	if closing {
		return fmt.Errorf("tcpexample: %s, peer %s: %w", op, peer, sdk.ErrClosed)
	}
	return fmt.Errorf("tcpexample: %s, peer %s: %w: %w", op, peer, sdk.ErrPeerLost, cause)
}

func isClosedErr(err error) bool { return errors.Is(err, net.ErrClosed) }

// closeStreams closes a connection's streams and returns the first
// error other than "already closed".
func closeStreams(socks []*net.TCPConn) error {
	var first error
	for _, c := range socks {
		if err := c.Close(); err != nil && !isClosedErr(err) && first == nil {
			first = err
		}
	}
	return first
}

// sendConn is an sdk.SendConn. Send appends to a queue and returns; the
// writer goroutine writes the queued frames in order.
type sendConn struct {
	t     *tcpTransport
	c     net.Conn       // the first stream: the one frames go on
	socks []*net.TCPConn // every stream (the others only serve a hand-off)
	peer  string
	wake  chan struct{} // a Send happened (capacity 1: one wakeup is enough)

	mu      sync.Mutex
	queue   []*request
	err     error // why the connection stopped working, or nil
	closing bool  // Close was called
}

func newSendConn(t *tcpTransport, socks []*net.TCPConn) *sendConn {
	return &sendConn{t: t, c: socks[0], socks: socks, peer: socks[0].RemoteAddr().String(), wake: make(chan struct{}, 1)}
}

// Send queues buf for the writer and wakes it. It never blocks.
func (s *sendConn) Send(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	r := newRequest(buf, s.t.wake)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a wakeup is already pending
	}
	return r, nil
}

// writer writes frames until the connection fails or is closed. It takes
// the whole queue at once, so that Send never waits for a write.
func (s *sendConn) writer() {
	for {
		s.mu.Lock()
		batch, err := s.queue, s.err
		s.queue = nil
		s.mu.Unlock()
		if err != nil {
			return // Close or fail completed what was queued
		}
		if len(batch) == 0 {
			<-s.wake
			continue
		}
		for i, r := range batch {
			var hdr [headerSize]byte
			binary.LittleEndian.PutUint64(hdr[:], uint64(len(r.buf)))
			// net.Buffers writes both with one writev system call.
			frame := net.Buffers{hdr[:], r.buf}
			if _, err := frame.WriteTo(s.c); err != nil {
				err = s.fail(err)
				for _, r := range batch[i:] {
					r.complete(0, err)
				}
				break
			}
			r.complete(len(r.buf), nil)
		}
	}
}

// fail stops the connection after an I/O error: it records why, fails
// the queued requests and wakes the writer so that it exits.
func (s *sendConn) fail(cause error) error {
	s.mu.Lock()
	if s.err == nil {
		s.err = connErr("send", s.peer, s.closing, cause)
	}
	err, queued := s.err, s.queue
	s.queue = nil
	s.mu.Unlock()
	for _, r := range queued {
		r.complete(0, err)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return err
}

// Peer returns the peer's IP and port.
func (s *sendConn) Peer() string { return s.peer }

// Close closes the socket. A write in progress fails, and the writer
// completes its request with sdk.ErrClosed; queued requests fail here.
// The peer's reader sees end of file: that is all the peer needs to know.
func (s *sendConn) Close() error {
	s.mu.Lock()
	already := s.closing
	s.closing = true
	s.mu.Unlock()
	if already {
		return nil
	}
	s.fail(nil)
	s.t.untrack(s)
	if err := closeStreams(s.socks); err != nil {
		return fmt.Errorf("tcpexample: close connection to %s: %w", s.peer, err)
	}
	return nil
}

// recvConn is an sdk.RecvConn. Recv hands its request to the reader
// goroutine, which reads the next frame into the request's buffer.
type recvConn struct {
	t      *tcpTransport
	c      net.Conn // the first stream, as for sendConn
	socks  []*net.TCPConn
	peer   string
	posted chan *request // the pending Recv (the SDK posts one at a time)
	closed chan struct{} // closed by Close

	mu      sync.Mutex
	err     error // why the connection stopped working, or nil
	closing bool
}

func newRecvConn(t *tcpTransport, socks []*net.TCPConn) *recvConn {
	return &recvConn{t: t, c: socks[0], socks: socks, peer: socks[0].RemoteAddr().String(),
		posted: make(chan *request, 1), closed: make(chan struct{})}
}

// Recv gives buf to the reader. It never blocks: the channel has room for
// the one receive the SDK may have pending.
func (rc *recvConn) Recv(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	r := newRequest(buf, rc.t.wake)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err != nil {
		return nil, rc.err
	}
	select {
	case rc.posted <- r:
		return r, nil
	default:
		return nil, fmt.Errorf("tcpexample: receive from %s: a receive is already pending", rc.peer)
	}
}

// reader waits for a Recv, reads one frame into its buffer, completes it,
// and starts over, until the connection fails or is closed.
func (rc *recvConn) reader() {
	for {
		var r *request
		select {
		case r = <-rc.posted:
		case <-rc.closed:
			rc.fail(nil)
			return
		}
		n, err := rc.readFrame(r.buf)
		if err != nil {
			r.complete(0, rc.fail(err))
			return
		}
		r.complete(n, nil)
	}
}

// readFrame reads one frame into buf and returns the message's length.
func (rc *recvConn) readFrame(buf []byte) (int, error) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(rc.c, hdr[:]); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint64(hdr[:])
	if n > uint64(len(buf)) {
		// The SDK never posts a buffer shorter than the message, so
		// the stream is corrupt: give up on the connection.
		return 0, fmt.Errorf("frame of %d bytes for a buffer of %d", n, len(buf))
	}
	if _, err := io.ReadFull(rc.c, buf[:n]); err != nil {
		return 0, err
	}
	return int(n), nil
}

// fail records why the connection stopped working and fails a Recv that
// was posted meanwhile; later Recvs return the error.
func (rc *recvConn) fail(cause error) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.err == nil {
		rc.err = connErr("receive", rc.peer, rc.closing, cause)
	}
	select {
	case r := <-rc.posted:
		r.complete(0, rc.err)
	default:
	}
	return rc.err
}

// Peer returns the peer's IP and port.
func (rc *recvConn) Peer() string { return rc.peer }

// Close closes the socket: a read in progress fails, and the reader
// completes its request with sdk.ErrClosed. If the peer still sends, its
// kernel gets a reset and its writer fails with sdk.ErrPeerLost.
func (rc *recvConn) Close() error {
	rc.mu.Lock()
	already := rc.closing
	rc.closing = true
	rc.mu.Unlock()
	if already {
		return nil
	}
	close(rc.closed)
	rc.t.untrack(rc)
	if err := closeStreams(rc.socks); err != nil {
		return fmt.Errorf("tcpexample: close connection from %s: %w", rc.peer, err)
	}
	return nil
}
