package sdktest_test

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
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/plugins/sdk/sdktest"
)

// TestSuite runs the suite against a correct Transport.
func TestSuite(t *testing.T) {
	sdktest.Run(t, func(t *testing.T) sdk.Transport { return newUnixTransport("") })
}

// envBroken names the way TestBrokenChild's Transport is broken.
const envBroken = "SDKTEST_TEST_BROKEN"

// TestBrokenChild runs the suite against a broken Transport; only
// TestSuiteFails runs it, in a process of its own, and wants it to fail.
func TestBrokenChild(t *testing.T) {
	broken := os.Getenv(envBroken)
	if broken == "" {
		t.Skip("run by TestSuiteFails")
	}
	sdktest.Run(t, func(t *testing.T) sdk.Transport { return newUnixTransport(broken) })
}

// TestSuiteFails proves that the suite fails (and does not hang) for
// Transports that break the contract.
func TestSuiteFails(t *testing.T) {
	if os.Getenv(envBroken) != "" {
		t.Skip("in a broken child")
	}
	for _, tc := range []struct {
		broken string // what newUnixTransport breaks
		run    string // the subtests to run
		fail   string // a subtest that must fail
		why    string // a word of its failure message
	}{
		{"truncate", "Sizes", "Sizes", "n = 4092, want 4093"},
		{"reorder", "InFlight", "InFlight", "receive "},
		{"block", "Sizes", "Sizes", "must not block"},
		{"deaf", "Close", "Close/PeerRecvPending", "want an error wrapping"},
		{"deaf", "Process", "Process/Kill", "want an error wrapping"},
	} {
		t.Run(tc.broken+"/"+tc.run, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenChild$/^"+tc.run+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envBroken+"="+tc.broken)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the suite hung on a %s transport:\n%s", tc.broken, out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a %s transport (%v):\n%s", tc.broken, err, out)
			}
			if !bytes.Contains(out, []byte("--- FAIL: TestBrokenChild/"+tc.fail+" ")) || !bytes.Contains(out, []byte(tc.why)) {
				t.Fatalf("want %s to fail with %q:\n%s", tc.fail, tc.why, out)
			}
		})
	}
}

// unixTransport is a small Transport over Unix domain sockets, with ways
// to break it: "truncate" reports one byte less for messages of 4093 bytes
// or more, "reorder" swaps queued messages, "block" blocks in Send for
// messages of 1 MiB or more, "deaf" never notices that the peer went away.
type unixTransport struct {
	broken string
	mu     sync.Mutex
	closed bool
	open   map[io.Closer]bool
}

func newUnixTransport(broken string) *unixTransport {
	return &unixTransport{broken: broken, open: make(map[io.Closer]bool)}
}

// track registers c to be closed by Close.
func (u *unixTransport) track(c io.Closer) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return fmt.Errorf("unix transport: %w", sdk.ErrClosed)
	}
	u.open[c] = true
	return nil
}

func (u *unixTransport) untrack(c io.Closer) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.open, c)
}

// Devices names the one device, "unix".
func (u *unixTransport) Devices(ctx context.Context) ([]sdk.Device, error) {
	return []sdk.Device{{Name: "unix", NUMA: -1}}, nil
}

const handlePrefix = "sdktest-unix/"

// Listen listens on a new abstract Unix socket, whose name is the handle.
func (u *unixTransport) Listen(ctx context.Context) (sdk.Listener, error) {
	var id [8]byte
	rand.Read(id[:])
	name := fmt.Sprintf("%s%d/%x", handlePrefix, os.Getpid(), id)
	nl, err := net.Listen("unix", "@"+name)
	if err != nil {
		return nil, fmt.Errorf("unix transport: listen: %w", err)
	}
	l := &unixListener{u: u, l: nl.(*net.UnixListener), handle: []byte(name)}
	if err := u.track(l); err != nil {
		nl.Close()
		return nil, err
	}
	return l, nil
}

// Connect dials the socket a handle names and starts its writer.
func (u *unixTransport) Connect(ctx context.Context, handle []byte) (sdk.SendConn, error) {
	if i := bytes.LastIndexByte(handle, '/'); !bytes.HasPrefix(handle, []byte(handlePrefix)) || len(handle) > 100 || len(handle)-i-1 != 16 {
		return nil, fmt.Errorf("unix transport: connect to %q: %w", handle, sdk.ErrBadHandle)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "@"+string(handle))
	if err != nil {
		return nil, fmt.Errorf("unix transport: connect: %w", err)
	}
	s := &sendConn{u: u, c: c, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	if err := u.track(s); err != nil {
		c.Close()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// Register needs to do nothing.
func (u *unixTransport) Register(mem []byte) (sdk.Registration, error) { return nil, nil }

// Deregister needs to do nothing.
func (u *unixTransport) Deregister(r sdk.Registration) error { return nil }

// Close closes every listener and connection.
func (u *unixTransport) Close() error {
	u.mu.Lock()
	u.closed = true
	open := u.open
	u.open = make(map[io.Closer]bool)
	u.mu.Unlock()
	for c := range open {
		c.Close()
	}
	return nil
}

type unixListener struct {
	u      *unixTransport
	l      *net.UnixListener
	handle []byte
	closed atomic.Bool
}

// Handle returns the socket's name.
func (l *unixListener) Handle() []byte { return l.handle }

// Accept returns the receive side of the next connection.
func (l *unixListener) Accept(ctx context.Context) (sdk.RecvConn, error) {
	stop := context.AfterFunc(ctx, func() { l.l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := l.l.Accept()
	switch {
	case err != nil && l.closed.Load():
		return nil, fmt.Errorf("unix transport: accept: %w", sdk.ErrClosed)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("unix transport: accept: %w", ctx.Err())
	case err != nil:
		return nil, fmt.Errorf("unix transport: accept: %w", err)
	}
	r := &recvConn{u: l.u, c: c}
	if err := l.u.track(r); err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// Close stops listening.
func (l *unixListener) Close() error {
	l.closed.Store(true)
	l.u.untrack(l)
	return l.l.Close()
}

// request is completed once, by the goroutine that moves its bytes or by
// Close.
type request struct {
	once sync.Once
	done chan struct{}
	buf  []byte
	n    int
	err  error
}

func newRequest(buf []byte) *request { return &request{done: make(chan struct{}), buf: buf} }

func (r *request) finish(n int, err error) {
	r.once.Do(func() { r.n, r.err = n, err; close(r.done) })
}

// Test reports whether the request is done, and how.
func (r *request) Test() (bool, int, error) {
	select {
	case <-r.done:
		return true, r.n, r.err
	default:
		return false, 0, nil
	}
}

type sendConn struct {
	u       *unixTransport
	c       net.Conn
	wake    chan struct{}
	closed  chan struct{}
	closing atomic.Bool
	mu      sync.Mutex
	queue   []*request
	err     error
}

// Send queues buf for the writer.
func (s *sendConn) Send(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	if s.u.broken == "block" && len(buf) >= 1<<20 {
		<-s.closed
	}
	r := newRequest(buf)
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
	default:
	}
	return r, nil
}

// writer writes the queued messages, each after its length.
func (s *sendConn) writer() {
	for {
		s.mu.Lock()
		batch, err := s.queue, s.err
		s.queue = nil
		s.mu.Unlock()
		if err != nil {
			for _, r := range batch {
				r.finish(0, err)
			}
			return
		}
		if len(batch) == 0 {
			select {
			case <-s.wake:
			case <-s.closed:
			}
			continue
		}
		if s.u.broken == "reorder" && len(batch) >= 2 {
			batch[0], batch[1] = batch[1], batch[0]
		}
		for i, r := range batch {
			hdr := binary.LittleEndian.AppendUint64(nil, uint64(len(r.buf)))
			bufs := net.Buffers{hdr, r.buf}
			if _, err := bufs.WriteTo(s.c); err != nil {
				err = s.fail(err)
				for _, r := range batch[i:] {
					r.finish(0, err)
				}
				break
			}
			r.finish(len(r.buf), nil)
		}
	}
}

// fail records why the connection failed and returns it.
func (s *sendConn) fail(cause error) error {
	err := fmt.Errorf("unix transport: send: %w: %v", sdk.ErrPeerLost, cause)
	if s.closing.Load() {
		err = fmt.Errorf("unix transport: send: %w", sdk.ErrClosed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// Peer names the other end.
func (s *sendConn) Peer() string { return "local" }

// Close fails the queued sends and closes the socket.
func (s *sendConn) Close() error {
	if s.closing.Swap(true) {
		return nil
	}
	s.fail(sdk.ErrClosed)
	close(s.closed)
	s.u.untrack(s)
	return s.c.Close()
}

type recvConn struct {
	u       *unixTransport
	c       net.Conn
	closing atomic.Bool
}

// Recv reads the next message into buf on a goroutine of its own.
func (rc *recvConn) Recv(buf []byte, _ sdk.Registration) (sdk.Request, error) {
	if rc.closing.Load() {
		return nil, fmt.Errorf("unix transport: receive: %w", sdk.ErrClosed)
	}
	r := newRequest(buf)
	go func() {
		var hdr [8]byte
		_, err := io.ReadFull(rc.c, hdr[:])
		n := int(binary.LittleEndian.Uint64(hdr[:]))
		if err == nil && n > len(buf) {
			err = fmt.Errorf("message of %d bytes for a buffer of %d", n, len(buf))
		}
		if err == nil {
			_, err = io.ReadFull(rc.c, buf[:n])
		}
		switch {
		case err == nil && rc.u.broken == "truncate" && n >= 4093:
			r.finish(n-1, nil)
		case err == nil:
			r.finish(n, nil)
		case rc.closing.Load():
			r.finish(0, fmt.Errorf("unix transport: receive: %w", sdk.ErrClosed))
		case rc.u.broken == "deaf":
		default:
			r.finish(0, fmt.Errorf("unix transport: receive: %w: %v", sdk.ErrPeerLost, err))
		}
	}()
	return r, nil
}

// Peer names the other end.
func (rc *recvConn) Peer() string { return "local" }

// Close closes the socket, which fails a pending Recv.
func (rc *recvConn) Close() error {
	if rc.closing.Swap(true) {
		return nil
	}
	rc.u.untrack(rc)
	return rc.c.Close()
}
