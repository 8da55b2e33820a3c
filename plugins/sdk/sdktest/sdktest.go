package sdktest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/transport"
)

const (
	// LostWithin is how soon after a peer closed its side, closed its
	// transport or died the pending requests of a connection must fail
	// with sdk.ErrPeerLost, and how soon after Close this side's pending
	// requests must fail with sdk.ErrClosed.
	LostWithin = 5 * time.Second
	// BlockLimit is how long one data-path call (Send, Recv, Test) may
	// take before the suite reports that it blocks.
	BlockLimit = 5 * time.Second
	// envTimeout overrides opTimeout (a Go duration, e.g. "90s"), for slow
	// machines or networks.
	envTimeout = "GORUN_SDKTEST_TIMEOUT"
)

// opTimeout bounds every control call (Listen, Connect, Accept, Close,
// Devices) and every message the tests wait for: a transport that hangs
// fails the test instead of hanging it.
var opTimeout = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envTimeout)); err == nil && d > 0 {
		return d
	}
	return 30 * time.Second
}()

// Run runs the conformance tests against the Transport that newTransport
// makes. newTransport is called once per simulated rank (often twice per
// test, and once in each peer process) and must return a new, independent
// Transport; Run closes it. See the package documentation for the contract
// the tests check.
//
// Call Run from a top-level Test function (one that -test.run can select),
// not in parallel with other tests of the same package.
func Run(t *testing.T, newTransport func(t *testing.T) sdk.Transport) {
	s := &suite{newTransport: newTransport}
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Devices", s.testDevices},
		{"Handle", s.testHandle},
		{"BadHandle", s.testBadHandle},
		{"Sizes", s.testSizes},
		{"InFlight", s.testInFlight},
		{"BothDirections", s.testBothDirections},
		{"Registered", s.testRegistered},
		{"Close", s.testClose},
		{"TransportClose", s.testTransportClose},
		{"Process", s.testProcess},
		{"Handoff", s.testHandoff},
	} {
		t.Run(tc.name, tc.f)
	}
}

// suite holds what the subtests share.
type suite struct {
	newTransport func(t *testing.T) sdk.Transport
}

// transport makes a Transport that is closed when t ends.
func (s *suite) transport(t *testing.T) sdk.Transport {
	t.Helper()
	tr := s.newTransport(t)
	if tr == nil {
		t.Fatal("newTransport returned nil")
	}
	t.Cleanup(func() {
		// Close is idempotent: the tests that closed tr already get
		// here too.
		err, ok := call(opTimeout, tr.Close)
		if !ok {
			t.Errorf("Transport.Close did not return within %v", opTimeout)
		} else if err != nil && !errors.Is(err, sdk.ErrClosed) {
			t.Errorf("Transport.Close: %v", err)
		}
	})
	return tr
}

// call runs f on a goroutine of its own and waits at most limit for it;
// ok is false when f did not return in time. A panic in f is returned as
// an error.
func call(limit time.Duration, f func() error) (err error, ok bool) {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		done <- f()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case err := <-done:
		return err, true
	case <-timer.C:
		return nil, false
	}
}

// control runs a control-plane call (Listen, Connect, Accept, Close,
// Devices, Handle) with a deadline and fails the test when it hangs.
func control(t *testing.T, what string, f func() error) error {
	t.Helper()
	err, ok := call(opTimeout, f)
	if !ok {
		t.Fatalf("%s did not return within %v", what, opTimeout)
	}
	return err
}

// op is a Send or Recv the tests posted, and what its Request reported.
type op struct {
	what   string
	req    sdk.Request
	posted time.Time
	done   bool
	n      int
	err    error
	at     time.Time // when Test reported done
}

// harness makes every data-path call of one test (Send, Recv, Test,
// Register, Deregister) on one goroutine, as the SDK's progress loop does,
// and polls every request in flight whenever the test waits for one.
type harness struct {
	t       *testing.T
	work    chan func()
	stuck   bool
	pending []*op // posted, not yet reported done
}

// newHarness starts the progress goroutine of t.
func newHarness(t *testing.T) *harness {
	h := &harness{t: t, work: make(chan func())}
	go func() {
		for f := range h.work {
			f()
		}
	}()
	t.Cleanup(func() {
		if !h.stuck {
			close(h.work)
		}
	})
	return h
}

// do runs f on the progress goroutine and fails the test when it does not
// return within limit: the data path must not block.
func (h *harness) do(limit time.Duration, what string, f func()) {
	h.t.Helper()
	if h.stuck {
		h.t.Fatalf("%s: an earlier data-path call is still blocked", what)
	}
	done := make(chan any, 1)
	wrapped := func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Sprintf("%v\n%s", p, debug.Stack())
				return
			}
			done <- nil
		}()
		f()
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case h.work <- wrapped:
	case <-timer.C:
		h.stuck = true
		h.t.Fatalf("%s: the progress goroutine is blocked", what)
	}
	select {
	case p := <-done:
		if p != nil {
			h.t.Fatalf("%s panicked: %v", what, p)
		}
	case <-timer.C:
		h.stuck = true
		h.t.Fatalf("%s blocked for more than %v: Send, Recv and Test must not block", what, limit)
	}
}

// send posts a Send of buf on sc. An error from Send itself completes the
// op at once with that error.
func (h *harness) send(sc sdk.SendConn, buf []byte, reg sdk.Registration, what string) *op {
	h.t.Helper()
	o := &op{what: what, posted: time.Now()}
	h.do(BlockLimit, "Send ("+what+")", func() { o.req, o.err = sc.Send(buf, reg) })
	h.posted(o, "Send")
	return o
}

// recv posts a Recv into buf on rc, as send does.
func (h *harness) recv(rc sdk.RecvConn, buf []byte, reg sdk.Registration, what string) *op {
	h.t.Helper()
	o := &op{what: what, posted: time.Now()}
	h.do(BlockLimit, "Recv ("+what+")", func() { o.req, o.err = rc.Recv(buf, reg) })
	h.posted(o, "Recv")
	return o
}

func (h *harness) posted(o *op, call string) {
	h.t.Helper()
	switch {
	case o.err != nil:
		o.done, o.at = true, time.Now()
	case o.req == nil:
		h.t.Fatalf("%s (%s) returned a nil Request and no error", call, o.what)
	default:
		h.pending = append(h.pending, o)
	}
}

// poll tests every pending request until all of ops are done or limit
// passed, on the progress goroutine; it reports whether they are all done.
func (h *harness) poll(limit time.Duration, ops ...*op) bool {
	h.t.Helper()
	deadline := time.Now().Add(limit)
	h.do(limit+BlockLimit, "Test", func() {
		for spin := 0; ; spin++ {
			for _, o := range h.pending {
				if o.done {
					continue
				}
				if done, n, err := o.req.Test(); done {
					o.done, o.n, o.err, o.at = true, n, err, time.Now()
				}
			}
			all := true
			for _, o := range ops {
				all = all && o.done
			}
			if all || !time.Now().Before(deadline) {
				return
			}
			if spin < 200 {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
		}
	})
	left := h.pending[:0]
	for _, o := range h.pending {
		if !o.done {
			left = append(left, o)
		}
	}
	clear(h.pending[len(left):])
	h.pending = left
	for _, o := range ops {
		if !o.done {
			return false
		}
	}
	return true
}

// wait polls until ops are done and fails the test when one is not done
// within opTimeout.
func (h *harness) wait(ops ...*op) {
	h.t.Helper()
	if !h.poll(opTimeout, ops...) {
		for _, o := range ops {
			if !o.done {
				h.t.Fatalf("%s: not done after %v", o.what, opTimeout)
			}
		}
	}
}

// ok waits for o and wants it to have moved n bytes without error.
func (h *harness) ok(o *op, n int) {
	h.t.Helper()
	h.wait(o)
	if o.err != nil {
		h.t.Fatalf("%s: %v", o.what, o.err)
	}
	if o.n != n {
		h.t.Fatalf("%s: n = %d, want %d", o.what, o.n, n)
	}
}

// fails wants o to complete with an error wrapping target within limit
// of since.
func (h *harness) fails(o *op, target error, since time.Time, limit time.Duration) {
	h.t.Helper()
	if !h.poll(time.Until(since.Add(limit))+time.Millisecond, o) {
		h.t.Fatalf("%s: still pending %v later, want an error wrapping %q within %v", o.what, time.Since(since).Round(time.Millisecond), target, limit)
	}
	if !errors.Is(o.err, target) {
		h.t.Fatalf("%s: done with n = %d, err = %v; want an error wrapping %q", o.what, o.n, o.err, target)
	}
	if late := o.at.Sub(since); late > limit {
		h.t.Fatalf("%s: failed after %v, want within %v", o.what, late.Round(time.Millisecond), limit)
	}
}

// register registers mem with tr on the progress goroutine.
func (h *harness) register(tr sdk.Transport, mem []byte) sdk.Registration {
	h.t.Helper()
	var reg sdk.Registration
	var err error
	h.do(opTimeout, "Register", func() { reg, err = tr.Register(mem) })
	if err != nil {
		h.t.Fatalf("Register(%d bytes): %v", len(mem), err)
	}
	return reg
}

// deregister releases reg with tr on the progress goroutine.
func (h *harness) deregister(tr sdk.Transport, reg sdk.Registration) {
	h.t.Helper()
	var err error
	h.do(opTimeout, "Deregister", func() { err = tr.Deregister(reg) })
	if err != nil {
		h.t.Errorf("Deregister: %v", err)
	}
}

// listen starts a listener on tr that is closed when the test ends.
func (h *harness) listen(tr sdk.Transport) (sdk.Listener, []byte) {
	h.t.Helper()
	var l sdk.Listener
	err := control(h.t, "Listen", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		var err error
		l, err = tr.Listen(ctx)
		return err
	})
	if err != nil {
		h.t.Fatalf("Listen: %v", err)
	}
	if l == nil {
		h.t.Fatal("Listen returned a nil Listener and no error")
	}
	h.t.Cleanup(func() { call(opTimeout, l.Close) })
	var hd []byte
	control(h.t, "Handle", func() error { hd = l.Handle(); return nil })
	if len(hd) == 0 || len(hd) > transport.MaxHandleSize {
		h.t.Fatalf("Handle is %d bytes, want 1 to %d", len(hd), transport.MaxHandleSize)
	}
	return l, append([]byte(nil), hd...)
}

// dial connects from to l with handle (a copy of l's Handle) and returns
// both sides; they are closed when the test ends.
func (h *harness) dial(from sdk.Transport, l sdk.Listener, handle []byte) (sdk.SendConn, sdk.RecvConn) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	type accepted struct {
		rc  sdk.RecvConn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				acc <- accepted{err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
			}
		}()
		rc, err := l.Accept(ctx)
		acc <- accepted{rc, err}
	}()
	var sc sdk.SendConn
	err := control(h.t, "Connect", func() error {
		var err error
		sc, err = from.Connect(ctx, handle)
		return err
	})
	if err != nil {
		h.t.Fatalf("Connect: %v", err)
	}
	if sc == nil {
		h.t.Fatal("Connect returned a nil SendConn and no error")
	}
	h.t.Cleanup(func() { call(opTimeout, sc.Close) })
	var a accepted
	select {
	case a = <-acc:
	case <-time.After(opTimeout + BlockLimit):
		h.t.Fatalf("Accept did not return within %v of a Connect to its listener", opTimeout)
	}
	if a.err != nil {
		h.t.Fatalf("Accept: %v", a.err)
	}
	if a.rc == nil {
		h.t.Fatal("Accept returned a nil RecvConn and no error")
	}
	h.t.Cleanup(func() { call(opTimeout, a.rc.Close) })
	return sc, a.rc
}

// link opens a connection from from to to.
func (h *harness) link(from, to sdk.Transport) (sdk.SendConn, sdk.RecvConn) {
	h.t.Helper()
	l, hd := h.listen(to)
	return h.dial(from, l, hd)
}

// closeConn closes c from the test's goroutine (not the progress one),
// as the SDK's control plane does.
func closeConn(t *testing.T, what string, c interface{ Close() error }) error {
	t.Helper()
	return control(t, what+".Close", c.Close)
}

// fill writes a pattern that depends on seed and on each byte's offset.
func fill(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x^uint64(i))
	}
	for ; i < len(b); i++ {
		b[i] = byte(x>>(8*(i%8))) ^ byte(i)
	}
}

// check reports where b differs from fill's pattern for seed.
func check(b []byte, seed uint64) error {
	want := make([]byte, len(b))
	fill(want, seed)
	for i := range b {
		if b[i] != want[i] {
			return fmt.Errorf("byte %d of %d is %#02x, want %#02x (a message sent with seed %d)", i, len(b), b[i], want[i], seed)
		}
	}
	return nil
}

// seedOf returns which seed filled b (among seeds 0..max-1), or -1.
func seedOf(b []byte, max int) int {
	for s := range max {
		if check(b, uint64(s)) == nil {
			return s
		}
	}
	return -1
}
