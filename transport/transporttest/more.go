package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
)

// post retries an Isend or Irecv that returns ErrWouldBlock after waiting
// for the oldest request of window, and appends the new request to window.
func post(t *testing.T, window *[]transport.Request, done func(transport.Request), start func() (transport.Request, error)) {
	t.Helper()
	for {
		r, err := start()
		if err == nil {
			*window = append(*window, r)
			return
		}
		if !errors.Is(err, transport.ErrWouldBlock) || len(*window) == 0 {
			t.Errorf("post: %v", err)
			return
		}
		done((*window)[0])
		*window = (*window)[1:]
	}
}

// testConcurrent has many goroutines send and receive at once, each on its
// own tag, each keeping many requests in flight.
func (s *suite) testConcurrent(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	const workers, each = 8, 64
	size := func(w, i int) int { return (w*131 + i*977) % (96 << 10) }
	var wg sync.WaitGroup
	for w := range workers {
		tag := uint64(100 + w)
		wg.Add(2)
		go func() {
			defer wg.Done()
			var win []transport.Request
			done := func(r transport.Request) {
				if _, err := wait(t, "send", r); err != nil {
					t.Errorf("send on tag %d: %v", tag, err)
				}
			}
			for i := range each {
				b := make([]byte, size(w, i))
				fill(b, uint64(w<<16|i))
				post(t, &win, done, func() (transport.Request, error) { return sc.Isend(b, tag, nil) })
			}
			for _, r := range win {
				done(r)
			}
		}()
		go func() {
			defer wg.Done()
			type recv struct {
				r   transport.Request
				buf []byte
				i   int
			}
			var win []transport.Request
			var recvs []recv
			next := 0
			done := func(r transport.Request) {
				x := recvs[next]
				next++
				n, err := wait(t, "receive", r)
				if err == nil {
					err = check(x.buf[:n], uint64(w<<16|x.i))
				}
				if err == nil && n != size(w, x.i) {
					err = fmt.Errorf("size %d, want %d", n, size(w, x.i))
				}
				if err != nil {
					t.Errorf("receive %d on tag %d: %v", x.i, tag, err)
				}
			}
			for i := range each {
				b := make([]byte, size(w, i))
				post(t, &win, done, func() (transport.Request, error) {
					r, err := rc.Irecv(b, tag, nil)
					if err == nil {
						recvs = append(recvs, recv{r, b, i})
					}
					return r, err
				})
			}
			for _, r := range win {
				done(r)
			}
		}()
	}
	wg.Wait()
}

// testBothDirections sends large and small messages both ways at once.
func (s *suite) testBothDirections(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	ab, atB := connect(t, a, b)
	ba, btA := connect(t, b, a)
	const size = 16 << 20
	var wg sync.WaitGroup
	for dir, c := range []struct {
		sc transport.SendConn
		rc transport.RecvConn
	}{{ab, atB}, {ba, btA}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := make([]byte, size), make([]byte, size)
			fill(src, uint64(dir))
			small := []byte{byte(dir)}
			smallDst := make([]byte, 1)
			rr := irecv(t, c.rc, dst, 7, nil)
			rs := irecv(t, c.rc, smallDst, 8, nil)
			sr := isend(t, c.sc, src, 7, nil)
			ss := isend(t, c.sc, small, 8, nil)
			for _, r := range []transport.Request{sr, ss, rs} {
				if _, err := wait(t, "transfer", r); err != nil {
					t.Errorf("direction %d: %v", dir, err)
				}
			}
			mustWait(t, "large receive", rr, size)
			if err := check(dst, uint64(dir)); err != nil {
				t.Errorf("direction %d: %v", dir, err)
			}
			if smallDst[0] != byte(dir) {
				t.Errorf("direction %d: small message %d", dir, smallDst[0])
			}
		}()
	}
	wg.Wait()
}

func (s *suite) testTruncated(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	for _, size := range []int{100, 1 << 20} {
		for _, posted := range []bool{true, false} {
			src := make([]byte, size)
			fill(src, 3)
			dst := make([]byte, 10+size/1000)
			var rr transport.Request
			if posted {
				rr = irecv(t, rc, dst, 1, nil)
			}
			sr := isend(t, sc, src, 1, nil)
			if !posted {
				rr = irecv(t, rc, dst, 1, nil)
			}
			n, err := wait(t, "truncated receive", rr)
			if !errors.Is(err, transport.ErrTruncated) || n != len(dst) {
				t.Fatalf("%d bytes into %d: got %d, %v; want %d, ErrTruncated", size, len(dst), n, err, len(dst))
			}
			if err := check(dst, 3); err != nil {
				t.Fatalf("truncated receive: %v", err)
			}
			if _, err := wait(t, "send", sr); err != nil {
				t.Fatalf("send of a message received truncated: %v", err)
			}
		}
	}
	transfer(t, sc, rc, 1000, 1, false) // still usable
}

// testRegistered moves messages between registered Regions, with and
// without registration on each side.
func (s *suite) testRegistered(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	const size = 8 << 20
	src, err := transport.Alloc(size)
	if errors.Is(err, transport.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := transport.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	smh, err := sc.RegMR(src.Bytes())
	if err != nil {
		t.Fatalf("RegMR on the send side: %v", err)
	}
	rmh, err := rc.RegMR(dst.Bytes())
	if err != nil {
		t.Fatalf("RegMR on the receive side: %v", err)
	}
	plain := make([]byte, size)
	for i, c := range []struct {
		src, dst     []byte
		smhOK, rmhOK bool
		off, n       int
		recvFirst    bool
	}{
		{src.Bytes(), dst.Bytes(), true, true, 0, size, true},
		{src.Bytes(), dst.Bytes(), true, true, 4096 + 3, 1<<20 + 5, false},
		{src.Bytes(), plain, true, false, 0, 3 << 20, true},
		{src.Bytes(), dst.Bytes(), true, true, 17, 100, true},
		{plain, dst.Bytes(), false, true, 0, 2 << 20, false},
	} {
		in := c.src[c.off : c.off+c.n]
		out := c.dst[c.off : c.off+c.n]
		fill(in, uint64(i))
		clear(out)
		var sm, rm transport.MemHandle
		if c.smhOK {
			sm = smh
		}
		if c.rmhOK {
			rm = rmh
		}
		var rr transport.Request
		if c.recvFirst {
			rr = irecv(t, rc, out, 5, rm)
		}
		sr := isend(t, sc, in, 5, sm)
		if !c.recvFirst {
			rr = irecv(t, rc, out, 5, rm)
		}
		mustWait(t, "registered send", sr, c.n)
		mustWait(t, "registered receive", rr, c.n)
		if err := check(out, uint64(i)); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
	}
	// A registration in use cannot be released; a released one is gone.
	rr := irecv(t, rc, dst.Bytes()[:10], 6, rmh)
	if err := rc.DeregMR(rmh); !errors.Is(err, transport.ErrBadMemHandle) {
		t.Errorf("DeregMR of a handle in use = %v, want ErrBadMemHandle", err)
	}
	mustWait(t, "send", isend(t, sc, src.Bytes()[:10], 6, smh), 10)
	mustWait(t, "receive", rr, 10)
	for _, c := range []transport.Conn{sc, rc} {
		mh := smh
		if c == transport.Conn(rc) {
			mh = rmh
		}
		if err := c.DeregMR(mh); err != nil {
			t.Errorf("DeregMR: %v", err)
		}
		if err := c.DeregMR(mh); !errors.Is(err, transport.ErrBadMemHandle) {
			t.Errorf("second DeregMR = %v, want ErrBadMemHandle", err)
		}
	}
	if _, err := sc.Isend(src.Bytes()[:10], 6, smh); !errors.Is(err, transport.ErrBadMemHandle) {
		t.Errorf("Isend with a released handle = %v, want ErrBadMemHandle", err)
	}
}

func (s *suite) testMemHandleMisuse(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	sc, rc := connect(t, a, b)
	sc2, rc2 := connect(t, a, b)
	buf := make([]byte, 100)
	smh, err := sc.RegMR(buf[:50])
	if err != nil {
		t.Fatal(err)
	}
	rmh, err := rc.RegMR(buf[:50])
	if err != nil {
		t.Fatal(err)
	}
	if got := smh.Bytes(); len(got) != 50 || &got[0] != &buf[0] {
		t.Errorf("MemHandle.Bytes() is not the registered memory")
	}
	for _, c := range []struct {
		what string
		err  func() error
	}{
		{"Isend outside the registered memory", func() error { _, err := sc.Isend(buf[40:60], 1, smh); return err }},
		{"Irecv outside the registered memory", func() error { _, err := rc.Irecv(buf[40:60], 1, rmh); return err }},
		{"Isend with another connection's handle", func() error { _, err := sc2.Isend(buf[:10], 1, smh); return err }},
		{"Irecv with another connection's handle", func() error { _, err := rc2.Irecv(buf[:10], 1, rmh); return err }},
		{"Isend with a receive handle", func() error { _, err := sc.Isend(buf[:10], 1, rmh); return err }},
		{"DeregMR of another connection's handle", func() error { return sc2.DeregMR(smh) }},
	} {
		if err := c.err(); !errors.Is(err, transport.ErrBadMemHandle) {
			t.Errorf("%s = %v, want ErrBadMemHandle", c.what, err)
		}
	}
	transfer(t, sc, rc, 10, 1, true)
}

func (s *suite) testBadHandle(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	ctx := ctxFor(t, opTimeout)
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := l.Handle()
	flipLast := append(transport.Handle(nil), good...)
	flipLast[len(flipLast)-1] ^= 0x5a
	for _, c := range []struct {
		name string
		h    transport.Handle
		bad  bool // must be ErrBadHandle; else any error will do
	}{
		{"nil", nil, true},
		{"garbage", transport.Handle("not a handle at all"), true},
		{"truncated", good[:len(good)-1], true},
		{"one byte", good[:1], true},
		{"extended", append(append(transport.Handle(nil), good...), 0), true},
		{"last byte changed", flipLast, false},
	} {
		start := time.Now()
		sc, err := a.Connect(ctxFor(t, 2*LostWithin), c.h)
		if err == nil {
			sc.Close()
			t.Errorf("Connect with a %s handle succeeded", c.name)
			continue
		}
		if c.bad && !errors.Is(err, transport.ErrBadHandle) {
			t.Errorf("Connect with a %s handle = %v, want ErrBadHandle", c.name, err)
		}
		if d := time.Since(start); d > LostWithin {
			t.Errorf("Connect with a %s handle took %v", c.name, d)
		}
	}
	// The listener still works for the right handle.
	acc := make(chan error, 1)
	go func() {
		rc, err := l.Accept(ctx)
		if err == nil {
			rc.Close()
		}
		acc <- err
	}()
	sc, err := a.Connect(ctx, good)
	if err != nil {
		t.Fatalf("Connect after bad handles: %v", err)
	}
	sc.Close()
	if err := <-acc; err != nil {
		t.Fatalf("Accept after bad handles: %v", err)
	}
	// A closed listener's handle fails, in bounded time.
	l.Close()
	start := time.Now()
	if sc, err := a.Connect(ctxFor(t, 2*LostWithin), good); err == nil {
		sc.Close()
		t.Errorf("Connect to a closed listener succeeded")
	} else if d := time.Since(start); d > LostWithin {
		t.Errorf("Connect to a closed listener took %v: %v", d, err)
	}
}

func (s *suite) testRequestMisuse(t *testing.T) {
	t.Parallel()
	sc, rc := s.pair(t)
	buf := make([]byte, 8)
	// Wait with a context that ends leaves the request in flight.
	rr := irecv(t, rc, buf, 1, nil)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := rr.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with an expired context = %v, want DeadlineExceeded", err)
	}
	if done, _, err := rr.Test(); done || err != nil {
		t.Fatalf("Test of a receive with no message = %v, %v", done, err)
	}
	sr := isend(t, sc, []byte("12345678"), 1, nil)
	mustWait(t, "receive", rr, 8)
	mustWait(t, "send", sr, 8)
	if _, err := rr.Wait(context.Background()); !errors.Is(err, transport.ErrRequestDone) {
		t.Errorf("second Wait = %v, want ErrRequestDone", err)
	}
	if done, _, err := rr.Test(); !done || !errors.Is(err, transport.ErrRequestDone) {
		t.Errorf("Test after Wait = %v, %v; want true, ErrRequestDone", done, err)
	}
	// Test that reports done consumes the request too.
	sr = isend(t, sc, buf, 2, nil)
	rr = irecv(t, rc, make([]byte, 8), 2, nil)
	deadline := time.Now().Add(opTimeout)
	for {
		done, n, err := rr.Test()
		if done {
			if err != nil || n != 8 {
				t.Fatalf("Test = %d, %v", n, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Test never reports done")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := rr.Wait(context.Background()); !errors.Is(err, transport.ErrRequestDone) {
		t.Errorf("Wait after Test reported done = %v, want ErrRequestDone", err)
	}
	mustWait(t, "send", sr, 8)
	// WaitAll returns the first error.
	r1 := irecv(t, rc, make([]byte, 1), 3, nil)
	r2 := irecv(t, rc, make([]byte, 8), 4, nil)
	isend(t, sc, []byte("xx"), 3, nil)
	isend(t, sc, []byte("y"), 4, nil)
	if err := transport.WaitAll(ctxFor(t, opTimeout), r1, r2); !errors.Is(err, transport.ErrTruncated) {
		t.Errorf("WaitAll = %v, want ErrTruncated", err)
	}
}

func (s *suite) testWouldBlock(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	max := a.Info().MaxRequests
	if max > 1<<14 {
		t.Skipf("MaxRequests %d is too many to fill", max)
	}
	sc, rc := connect(t, a, b)
	bufs := make([]byte, max+2) // one byte each
	var recvs []transport.Request
	for i := range max {
		r, err := rc.Irecv(bufs[i:i+1], uint64(i), nil)
		if err != nil {
			t.Fatalf("Irecv %d of %d: %v", i+1, max, err)
		}
		recvs = append(recvs, r)
	}
	if _, err := rc.Irecv(bufs[max:max+1], 0, nil); !errors.Is(err, transport.ErrWouldBlock) {
		t.Fatalf("Irecv beyond MaxRequests = %v, want ErrWouldBlock", err)
	}
	mustWait(t, "send", isend(t, sc, []byte{1}, 0, nil), 1)
	mustWait(t, "receive", recvs[0], 1)
	r, err := rc.Irecv(bufs[max+1:], 1<<40, nil)
	if err != nil {
		t.Fatalf("Irecv after one completed: %v", err)
	}
	recvs = append(recvs[1:], r)
	rc.Close()
	for _, r := range recvs {
		if _, err := wait(t, "receive on a closed connection", r); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("receive on a closed connection = %v, want ErrClosed", err)
		}
	}
}

func (s *suite) testClose(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	sc, rc := connect(t, a, b)
	rr := irecv(t, rc, make([]byte, 10), 1, nil)
	start := time.Now()
	for range 2 {
		if err := rc.Close(); err != nil {
			t.Errorf("RecvConn.Close: %v", err)
		}
	}
	if _, err := wait(t, "receive of a closed connection", rr); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("pending receive of a closed connection = %v, want ErrClosed", err)
	}
	if _, err := rc.Irecv(make([]byte, 1), 1, nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Irecv after Close = %v, want ErrClosed", err)
	}
	for range 2 {
		if err := sc.Close(); err != nil {
			t.Errorf("SendConn.Close: %v", err)
		}
	}
	if _, err := sc.Isend(make([]byte, 1), 1, nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Isend after Close = %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > LostWithin {
		t.Errorf("closing took %v", d)
	}

	ctx := ctxFor(t, opTimeout)
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Accept with nobody connecting = %v, want DeadlineExceeded", err)
	}
	acc := make(chan error, 1)
	go func() { _, err := l.Accept(ctx); acc <- err }()
	time.Sleep(10 * time.Millisecond)
	for range 2 {
		if err := l.Close(); err != nil {
			t.Errorf("Listener.Close: %v", err)
		}
	}
	if err := <-acc; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Accept in progress when the listener closed = %v, want ErrClosed", err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Accept after Close = %v, want ErrClosed", err)
	}

	// Closing a transport closes its connections.
	sc, rc = connect(t, a, b)
	rr = irecv(t, rc, make([]byte, 10), 1, nil)
	b.Close()
	if _, err := wait(t, "receive after its transport closed", rr); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("receive after its transport closed = %v, want ErrClosed", err)
	}
	if _, err := b.Listen(ctx); err == nil {
		t.Errorf("Listen on a closed transport succeeded")
	}
}

// lostIn waits for a request that must fail with ErrPeerLost, naming the
// peer, within LostWithin of since.
func lostIn(t *testing.T, what string, r transport.Request, peer string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LostWithin+time.Until(since))
	defer cancel()
	_, err := r.Wait(ctx)
	switch {
	case ctx.Err() != nil:
		t.Errorf("%s: still pending %v after the peer went", what, LostWithin)
	case !errors.Is(err, transport.ErrPeerLost):
		t.Errorf("%s = %v, want ErrPeerLost", what, err)
	case !strings.Contains(err.Error(), peer):
		t.Errorf("%s = %q, which does not name the peer %q", what, err, peer)
	}
}

// sendLostIn is lostIn for a send of size bytes, except that a transport
// that sends that size eagerly (size <= Info().EagerLimit) may have
// completed it before the peer went: its bytes had left. Plugin transports
// send every size eagerly: whether a send waits for its receiver is up to
// the plugin's network.
func sendLostIn(t *testing.T, what string, tr transport.Transport, size int, r transport.Request, peer string, since time.Time) {
	t.Helper()
	if size > tr.Info().EagerLimit {
		lostIn(t, what, r, peer, since)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), LostWithin+time.Until(since))
	defer cancel()
	_, err := r.Wait(ctx)
	switch {
	case ctx.Err() != nil:
		t.Errorf("%s: still pending %v after the peer went", what, LostWithin)
	case err != nil && !errors.Is(err, transport.ErrPeerLost):
		t.Errorf("%s = %v, want ErrPeerLost or success (an eager send)", what, err)
	}
}

func (s *suite) testPeerClose(t *testing.T) {
	t.Parallel()
	a, b := s.transport(t), s.transport(t)
	t.Run("SenderCloses", func(t *testing.T) {
		sc, rc := connect(t, a, b)
		// Sends completed before Close are delivered, even if their
		// receives are posted after it.
		var sends []transport.Request
		for i := range 3 {
			sends = append(sends, isend(t, sc, []byte{byte(i), 1, 2}, 1, nil))
		}
		for _, r := range sends {
			mustWait(t, "send", r, 3)
		}
		pending := irecv(t, rc, make([]byte, 10), 2, nil)
		start := time.Now()
		sc.Close()
		for i := range 3 {
			buf := make([]byte, 3)
			mustWait(t, "receive of a message sent before Close", irecv(t, rc, buf, 1, nil), 3)
			if buf[0] != byte(i) {
				t.Errorf("message %d arrived as %d", i, buf[0])
			}
		}
		lostIn(t, "receive from a closed sender", pending, rc.Peer(), start)
		if r, err := rc.Irecv(make([]byte, 1), 3, nil); err == nil {
			lostIn(t, "receive posted after the sender closed", r, rc.Peer(), start)
		} else if !errors.Is(err, transport.ErrPeerLost) {
			t.Errorf("Irecv after the sender closed = %v, want ErrPeerLost", err)
		}
	})
	t.Run("ReceiverCloses", func(t *testing.T) {
		sc, rc := connect(t, a, b)
		pending := isend(t, sc, make([]byte, 4<<20), 1, nil) // nobody receives it
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		rc.Close()
		sendLostIn(t, "large send to a closed receiver", a, 4<<20, pending, sc.Peer(), start)
		deadline := start.Add(LostWithin)
		for {
			r, err := sc.Isend(make([]byte, 1), 1, nil)
			if err != nil {
				if !errors.Is(err, transport.ErrPeerLost) {
					t.Errorf("Isend after the receiver closed = %v, want ErrPeerLost", err)
				}
				break
			}
			if _, err := wait(t, "send", r); err != nil && !errors.Is(err, transport.ErrPeerLost) {
				t.Errorf("send after the receiver closed = %v, want ErrPeerLost", err)
			}
			if time.Now().After(deadline) {
				t.Errorf("Isend still accepted %v after the receiver closed", LostWithin)
				break
			}
			time.Sleep(time.Millisecond)
		}
	})
	t.Run("TransportCloses", func(t *testing.T) {
		c := s.transport(t)
		sc, _ := connect(t, a, c)
		_, backRc := connect(t, c, a)
		rr := irecv(t, backRc, make([]byte, 10), 1, nil)
		sr := isend(t, sc, make([]byte, 4<<20), 1, nil)
		start := time.Now()
		c.Close()
		lostIn(t, "receive from a closed transport", rr, backRc.Peer(), start)
		sendLostIn(t, "send to a closed transport", a, 4<<20, sr, sc.Peer(), start)
	})
}

func (s *suite) checkLeaks(t *testing.T) {
	s.mu.Lock()
	pkg := s.pkg
	s.mu.Unlock()
	if pkg == "" || t.Failed() {
		return
	}
	var left []string
	for deadline := time.Now().Add(LostWithin); ; {
		left = goroutinesIn(pkg)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d goroutines of %s left after every transport closed:\n%s", len(left), pkg, strings.Join(left, "\n\n"))
	}
}

// testDeliveredThenClosed: a message that its receiver got completes its
// send without an error, even when the receiver closes the connection at
// once (as a rank that has what it needs and exits does). The teardown
// that the close sets off on the sender's side must not fail a send whose
// bytes already left. A race, so many rounds, small and large.
func (s *suite) testDeliveredThenClosed(t *testing.T) {
	a, b := s.transport(t), s.transport(t)
	ctx := ctxFor(t, opTimeout)
	for round := range 100 {
		size := 8
		if round%4 == 3 {
			size = 256 << 10
		}
		sc, rc := connect(t, a, b)
		src, dst := make([]byte, size), make([]byte, size)
		fill(src, uint64(round))
		rr, err := rc.Irecv(dst, 5, nil)
		if err != nil {
			t.Fatalf("Irecv: %v", err)
		}
		sr, err := sc.Isend(src, 5, nil)
		if err != nil {
			t.Fatalf("Isend: %v", err)
		}
		if _, err := rr.Wait(ctx); err != nil {
			t.Fatalf("round %d: receive: %v", round, err)
		}
		rc.Close()
		if n, err := sr.Wait(ctx); err != nil || n != size {
			t.Fatalf("round %d: the send of a delivered %d-byte message: %d, %v", round, size, n, err)
		}
		if err := check(dst, uint64(round)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sc.Close()
	}
}
