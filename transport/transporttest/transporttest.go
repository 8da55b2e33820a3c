package transporttest

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/peerproc"
	"github.com/gorun/gorun/transport"
)

const (
	// opTimeout bounds every operation the tests wait for: a transport
	// that hangs fails instead.
	opTimeout = 30 * time.Second
	// LostWithin is how soon after a peer's death or close its
	// connections' pending requests must fail.
	LostWithin = 5 * time.Second
	// big is the largest message size the tests use (64 MiB).
	big = 64 << 20
)

// suite holds what the subtests share.
type suite struct {
	newT func(t *testing.T) transport.Transport
	mu   sync.Mutex
	pkg  string // package path of the transport's concrete type
}

// Run runs the contract tests against the transport that newTransport
// makes. newTransport is called once per simulated rank (often twice per
// test) and must return a new, independent transport; Run closes it.
func Run(t *testing.T, newTransport func(t *testing.T) transport.Transport) {
	s := &suite{newT: newTransport}
	if !peerproc.InPeer(envPeer) {
		t.Cleanup(func() { s.checkLeaks(t) })
	}
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"HandleRoundTrip", s.testHandleRoundTrip},
		{"Sizes", s.testSizes},
		{"OrderPerTag", s.testOrderPerTag},
		{"Concurrent", s.testConcurrent},
		{"BothDirections", s.testBothDirections},
		{"Truncated", s.testTruncated},
		{"Registered", s.testRegistered},
		{"MemHandleMisuse", s.testMemHandleMisuse},
		{"BadHandle", s.testBadHandle},
		{"RequestMisuse", s.testRequestMisuse},
		{"WouldBlock", s.testWouldBlock},
		{"Close", s.testClose},
		{"PeerClose", s.testPeerClose},
		{"DeliveredThenClosed", s.testDeliveredThenClosed},
		{"Process", s.testProcess},
	} {
		t.Run(tc.name, tc.f)
	}
}

// transport makes a transport that is closed when t ends (twice: Close
// must be idempotent).
func (s *suite) transport(t *testing.T) transport.Transport {
	t.Helper()
	tr := s.newT(t)
	if tr == nil {
		t.Fatal("newTransport returned nil")
	}
	s.mu.Lock()
	if s.pkg == "" {
		ty := reflect.TypeOf(tr)
		for ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		s.pkg = ty.PkgPath()
	}
	s.mu.Unlock()
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Transport.Close: %v", err)
		}
		if err := tr.Close(); err != nil {
			t.Errorf("second Transport.Close: %v", err)
		}
	})
	return tr
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Connect makes a connection from one transport to another, as the suite
// does, for tests of a transport's own: through a Handle copied as bytes,
// as the rendezvous store would; both sides close when t ends.
func Connect(t *testing.T, from, to transport.Transport) (transport.SendConn, transport.RecvConn) {
	t.Helper()
	return connect(t, from, to)
}

// connect makes a connection from one transport to another through a
// Handle copied as bytes, as the rendezvous store would.
func connect(t *testing.T, from, to transport.Transport) (transport.SendConn, transport.RecvConn) {
	t.Helper()
	ctx := ctxFor(t, opTimeout)
	l, err := to.Listen(ctx)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	h := l.Handle()
	if len(h) == 0 || len(h) > transport.MaxHandleSize {
		t.Fatalf("handle of %d bytes, want 1 to %d", len(h), transport.MaxHandleSize)
	}
	type accepted struct {
		rc  transport.RecvConn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		rc, err := l.Accept(ctx)
		ch <- accepted{rc, err}
	}()
	sc, err := from.Connect(ctx, append(transport.Handle(nil), h...))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { closeConn(t, sc) })
	a := <-ch
	if a.err != nil {
		t.Fatalf("Accept: %v", a.err)
	}
	t.Cleanup(func() { closeConn(t, a.rc) })
	return sc, a.rc
}

func closeConn(t *testing.T, c transport.Conn) {
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(opTimeout):
		t.Errorf("Close of the connection to %s hangs", c.Peer())
	}
}

// pair makes two transports and a connection from the first to the second.
func (s *suite) pair(t *testing.T) (transport.SendConn, transport.RecvConn) {
	a, b := s.transport(t), s.transport(t)
	return connect(t, a, b)
}

func wait(t *testing.T, what string, r transport.Request) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	n, err := r.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s: no completion within %v", what, opTimeout)
	}
	return n, err
}

func mustWait(t *testing.T, what string, r transport.Request, want int) {
	t.Helper()
	n, err := wait(t, what, r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if n != want {
		t.Fatalf("%s: size %d, want %d", what, n, want)
	}
}

func isend(t *testing.T, c transport.SendConn, buf []byte, tag uint64, mh transport.MemHandle) transport.Request {
	t.Helper()
	r, err := c.Isend(buf, tag, mh)
	if err != nil {
		t.Fatalf("Isend(%d bytes, tag %d): %v", len(buf), tag, err)
	}
	return r
}

func irecv(t *testing.T, c transport.RecvConn, buf []byte, tag uint64, mh transport.MemHandle) transport.Request {
	t.Helper()
	r, err := c.Irecv(buf, tag, mh)
	if err != nil {
		t.Fatalf("Irecv(%d bytes, tag %d): %v", len(buf), tag, err)
	}
	return r
}

// transfer sends one message of size bytes and checks what arrives;
// posted says whether the receive is posted before the send.
func transfer(t *testing.T, sc transport.SendConn, rc transport.RecvConn, size int, tag uint64, posted bool) {
	t.Helper()
	transferIn(t, sc, rc, make([]byte, size), make([]byte, size), tag, posted)
}

// transferIn is transfer with the caller's buffers, of equal sizes.
func transferIn(t *testing.T, sc transport.SendConn, rc transport.RecvConn, src, dst []byte, tag uint64, posted bool) {
	t.Helper()
	size := len(src)
	fill(src, uint64(size)+tag)
	var sr, rr transport.Request
	if posted {
		rr = irecv(t, rc, dst, tag, nil)
		sr = isend(t, sc, src, tag, nil)
	} else {
		sr = isend(t, sc, src, tag, nil)
		rr = irecv(t, rc, dst, tag, nil)
	}
	mustWait(t, fmt.Sprintf("send of %d bytes", size), sr, size)
	mustWait(t, fmt.Sprintf("receive of %d bytes", size), rr, size)
	if err := check(dst, uint64(size)+tag); err != nil {
		t.Fatalf("%d-byte message: %v", size, err)
	}
}

func (s *suite) testHandleRoundTrip(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	ctx := ctxFor(t, opTimeout)
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	h := l.Handle()
	if !bytes.Equal(h, l.Handle()) {
		t.Fatal("Handle changes between calls")
	}
	// Through text, as a key-value store holds it.
	wire := fmt.Sprintf("%x", []byte(h))
	var back []byte
	if _, err := fmt.Sscanf(wire, "%x", &back); err != nil {
		t.Fatal(err)
	}
	h[0] ^= 0xff // the caller's copy is its own
	acc := make(chan transport.RecvConn, 1)
	go func() {
		rc, err := l.Accept(ctx)
		if err != nil {
			t.Errorf("Accept: %v", err)
		}
		acc <- rc
	}()
	sc, err := a.Connect(ctx, back)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer sc.Close()
	rc := <-acc
	if rc == nil {
		return
	}
	defer rc.Close()
	if sc.Peer() == "" || rc.Peer() == "" {
		t.Errorf("Peer() is empty: send side %q, receive side %q", sc.Peer(), rc.Peer())
	}
	transfer(t, sc, rc, 5, 1, true)
	if info := a.Info(); info.Name == "" || info.MaxRequests <= 0 {
		t.Errorf("Info() = %+v: Name and MaxRequests must be set", info)
	}
}

func (s *suite) testSizes(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	sizes := []int{0, 1, 3, 8, 4093, 64<<10 - 1, 64<<10 + 1, 1<<20 + 13, big}
	if testing.Short() {
		sizes = sizes[:len(sizes)-1]
	}
	src, dst := make([]byte, sizes[len(sizes)-1]), make([]byte, sizes[len(sizes)-1])
	for _, posted := range []bool{true, false} {
		for _, n := range sizes {
			transferIn(t, sc, rc, src[:n], dst[:n], uint64(n%7), posted)
		}
	}
}

// testOrderPerTag sends messages of mixed sizes on three tags and receives
// them in another order of tags: within a tag, order must hold.
func (s *suite) testOrderPerTag(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	sizes := []int{8, 100 << 10, 1, 300 << 10, 0, 70 << 10, 33}
	const perTag, tags = 12, 3
	size := func(tag, i int) int { return sizes[(tag+i)%len(sizes)] }
	for _, posted := range []bool{false, true} {
		var recvs [tags][]transport.Request
		var bufs [tags][][]byte
		postRecvs := func() {
			for _, tag := range []int{2, 0, 1} {
				for i := range perTag {
					b := make([]byte, size(tag, i))
					bufs[tag] = append(bufs[tag], b)
					recvs[tag] = append(recvs[tag], irecv(t, rc, b, uint64(tag), nil))
				}
			}
		}
		if posted {
			postRecvs()
		}
		var sends []transport.Request
		for i := range perTag {
			for tag := range tags {
				b := make([]byte, size(tag, i))
				fill(b, uint64(tag*1000+i))
				sends = append(sends, isend(t, sc, b, uint64(tag), nil))
			}
		}
		if !posted {
			postRecvs()
		}
		for i, r := range sends {
			if _, err := wait(t, "send", r); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		for tag := range tags {
			for i, r := range recvs[tag] {
				mustWait(t, fmt.Sprintf("receive %d of tag %d", i, tag), r, size(tag, i))
				if err := check(bufs[tag][i], uint64(tag*1000+i)); err != nil {
					t.Fatalf("receive %d of tag %d does not hold message %d: %v", i, tag, i, err)
				}
			}
		}
	}
}

// goroutinesIn returns the stacks of the goroutines that run code of
// package pkg (or its subpackages).
func goroutinesIn(pkg string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		// The main goroutine runs the tests (and, under gorun plugins
		// test, code of the plugins package): it is not a leak.
		if strings.Contains(g, "\nmain.main()") {
			continue
		}
		if strings.Contains(g, "\n"+pkg+".") || strings.Contains(g, "\n"+pkg+"/") {
			out = append(out, g)
		}
	}
	return out
}
