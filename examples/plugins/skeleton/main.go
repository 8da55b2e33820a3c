// Command gorun-plugin-skeleton is the smallest complete gorun transport
// plugin, to copy and start from. It moves messages between the ranks of
// one host over Unix domain sockets; replace the socket calls with your
// network's and keep the shape.
//
// What the SDK (github.com/gorun/gorun/plugins/sdk) does for you: tags,
// matching, message lengths, sharing memory with the rank, and the rank's
// requests. What is left here: listen, connect, and move whole messages in
// order on one-way connections, without ever blocking in Send, Recv or
// Test.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
)

func main() {
	sdk.Serve(sdk.Plugin{
		Name:        "skeleton",
		Version:     "0.1.0",
		Description: "example transport over Unix domain sockets (this host only)",
		Transport:   newTransport,
	})
}

// prefix starts every handle. A handle is the name of an abstract Unix
// socket (no file on disk), and the prefix tells ours from other bytes.
const prefix = "gorun-skeleton/"

// transport is the sdk.Transport of one rank. It only remembers what it
// opened, for Close.
type transport struct {
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]bool
}

func newTransport(sdk.Config) (sdk.Transport, error) {
	return &transport{open: make(map[io.Closer]bool)}, nil
}

// add remembers c for Close, or closes it when the transport is closed.
func (t *transport) add(c io.Closer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return fmt.Errorf("skeleton: %w", sdk.ErrClosed)
	}
	t.open[c] = true
	return nil
}

// Devices names the one "device": the host's Unix sockets.
func (t *transport) Devices(context.Context) ([]sdk.Device, error) {
	return []sdk.Device{{Name: "unix", NUMA: -1, Note: "this host only"}}, nil
}

// Listen listens on a new abstract socket whose name is the handle.
func (t *transport) Listen(ctx context.Context) (sdk.Listener, error) {
	name := fmt.Sprintf("%s%d/%s", prefix, os.Getpid(), rand.Text())
	ln, err := new(net.ListenConfig).Listen(ctx, "unix", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("skeleton: listen: %w", err)
	}
	l := &listener{t: t, ln: ln, name: name}
	if err := t.add(l); err != nil {
		return nil, err
	}
	return l, nil
}

// Connect connects to the socket a handle names and returns the send side.
func (t *transport) Connect(ctx context.Context, handle []byte) (sdk.SendConn, error) {
	if !validHandle(handle) {
		return nil, fmt.Errorf("skeleton: connect to %q: %w", handle, sdk.ErrBadHandle)
	}
	c, err := new(net.Dialer).DialContext(ctx, "unix", "@"+string(handle))
	if err != nil {
		return nil, fmt.Errorf("skeleton: connect: %w", err)
	}
	s := &conn{c: c, peer: string(handle)}
	if err := t.add(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Register has nothing to do: sockets read and write any memory.
func (t *transport) Register([]byte) (sdk.Registration, error) { return nil, nil }

// Deregister has nothing to release.
func (t *transport) Deregister(sdk.Registration) error { return nil }

// Close closes every listener and connection (see conn.Close).
func (t *transport) Close() error {
	t.mu.Lock()
	t.closed = true
	open := t.open
	t.open = nil
	t.mu.Unlock()
	for c := range open {
		c.Close()
	}
	return nil
}

type listener struct {
	t    *transport
	ln   net.Listener
	name string
	// accepting is held by one Accept at a time: the deadline that ends
	// an Accept whose ctx ended is the listener's, and would end another
	// that the caller, over RPC, started before the first returned here.
	accepting sync.Mutex
}

// validHandle reports whether h has the form Listen gives names: the
// prefix, a pid, "/" and 26 random letters and digits (rand.Text), so that
// a cut or extended handle is refused rather than dialled.
func validHandle(h []byte) bool {
	pid, text, ok := bytes.Cut(bytes.TrimPrefix(h, []byte(prefix)), []byte("/"))
	if !bytes.HasPrefix(h, []byte(prefix)) || !ok || len(pid) == 0 || len(text) != 26 {
		return false
	}
	for _, c := range pid {
		if c < '0' || c > '9' {
			return false
		}
	}
	for _, c := range text {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Handle returns the socket's name.
func (l *listener) Handle() []byte { return []byte(l.name) }

// Accept waits for the next connection and returns its receive side.
func (l *listener) Accept(ctx context.Context) (sdk.RecvConn, error) {
	l.accepting.Lock()
	defer l.accepting.Unlock()
	// Accept knows no context: a deadline in the past interrupts it.
	set := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { l.ln.(*net.UnixListener).SetDeadline(time.Unix(1, 0)); close(set) })
	c, err := l.ln.Accept()
	if !stop() {
		<-set // and clear it, so that the next Accept waits again
		l.ln.(*net.UnixListener).SetDeadline(time.Time{})
	}
	switch {
	case errors.Is(err, net.ErrClosed):
		return nil, fmt.Errorf("skeleton: accept: %w", sdk.ErrClosed)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("skeleton: accept: %w", ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("skeleton: accept: %w", err)
	}
	r := &conn{c: c, peer: "a local process"}
	if err := l.t.add(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops listening.
func (l *listener) Close() error { return l.ln.Close() }

// conn is a connection's send side (made by Connect) or receive side (made
// by Accept). Every message is a frame: its length (8 bytes), then its
// bytes. Each Send and Recv runs on a goroutine of its own, so that the
// calls return at once; a Send's goroutine waits for the previous Send's,
// to keep the messages in order.
type conn struct {
	c      net.Conn
	peer   string
	closed atomic.Bool
	last   chan struct{} // done by the latest Send; only Send touches it
}

// Send writes buf as one frame, on a goroutine, after the previous Send.
func (c *conn) Send(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("skeleton: send: %w", sdk.ErrClosed)
	}
	r, prev := newRequest(), c.last
	c.last = r.done
	go func() {
		if prev != nil {
			<-prev
		}
		frame := net.Buffers{binary.LittleEndian.AppendUint64(nil, uint64(len(buf))), buf}
		_, err := frame.WriteTo(c.c)
		r.finish(len(buf), c.why("send", err))
	}()
	return r, nil
}

// Recv reads the next frame into buf, on a goroutine.
func (c *conn) Recv(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("skeleton: receive: %w", sdk.ErrClosed)
	}
	r := newRequest()
	go func() {
		var hdr [8]byte
		_, err := io.ReadFull(c.c, hdr[:])
		n := binary.LittleEndian.Uint64(hdr[:])
		if err == nil && n > uint64(len(buf)) {
			err = fmt.Errorf("message of %d bytes for a buffer of %d", n, len(buf))
		}
		if err == nil {
			_, err = io.ReadFull(c.c, buf[:n])
		}
		r.finish(int(n), c.why("receive", err))
	}()
	return r, nil
}

// why turns an I/O error into what the SDK wants to hear: ErrClosed when
// we closed the socket, else ErrPeerLost (end of file, reset, broken pipe).
func (c *conn) why(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case c.closed.Load():
		return fmt.Errorf("skeleton: %s: %w", op, sdk.ErrClosed)
	}
	return fmt.Errorf("skeleton: %s, peer %s: %w: %w", op, c.peer, sdk.ErrPeerLost, err)
}

// Peer names the other end.
func (c *conn) Peer() string { return c.peer }

// Close closes the socket: the pending I/O fails (ErrClosed, see why) and
// the peer reads end of file.
func (c *conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.c.Close()
}

// request is a Send or Recv in flight, completed once by its goroutine.
type request struct {
	done chan struct{}
	n    int
	err  error
}

func newRequest() *request { return &request{done: make(chan struct{})} }

func (r *request) finish(n int, err error) {
	if err != nil {
		n = 0
	}
	r.n, r.err = n, err
	close(r.done)
}

// Test reports whether the request is done, and then how it went.
func (r *request) Test() (bool, int, error) {
	select {
	case <-r.done:
		return true, r.n, r.err
	default:
		return false, 0, nil
	}
}
