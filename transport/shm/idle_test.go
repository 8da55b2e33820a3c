//go:build linux

package shm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestIdleReceiverNotRung checks the doorbell policy of request.Idler: a
// receiver whose Waits ended without parking is not rung for an eager
// message, and finds it at its next poll.
func TestIdleReceiverNotRung(t *testing.T) {
	sc, rc := pair(t, Options{EagerLimit: 4 << 10})
	ctx := waitCtx(t)
	flag := func() uint32 { return atomic.LoadUint32(rc.myFlag) }

	// A Wait that completes while it spins leaves the receiver idle.
	r, _ := rc.Irecv(make([]byte, 64), 1, nil)
	s, _ := sc.Isend(make([]byte, 64), 1, nil)
	if _, err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if f := flag(); f != flagIdle {
		t.Fatalf("receiver's flag after a Wait that did not park = %d, want flagIdle (%d)", f, flagIdle)
	}
	// An eager message to an idle receiver: not rung (ringPeer clears
	// the flag it rings on), and there for the next Wait.
	s, _ = sc.Isend([]byte("eager"), 2, nil)
	if f := flag(); f != flagIdle {
		t.Fatalf("receiver's flag after an eager send to it = %d: it was rung", f)
	}
	buf := make([]byte, 64)
	r, _ = rc.Irecv(buf, 2, nil)
	if n, err := r.Wait(ctx); err != nil || string(buf[:n]) != "eager" {
		t.Fatalf("receive of the eager message: %q, %v", buf[:n], err)
	}
	s.Wait(ctx)
}

// TestParkedWaitRungAfterIdle checks that a Wait parked on a connection
// is still rung for when another Wait on it ends without parking (Idle):
// the receiver asks for every message while any Wait is parked on it.
func TestParkedWaitRungAfterIdle(t *testing.T) {
	sc, rc := pair(t, Options{Spin: 200 * time.Millisecond})
	ctx := waitCtx(t)

	parked := make(chan error, 1)
	r1, _ := rc.Irecv(make([]byte, 64), 1, nil)
	go func() {
		_, err := r1.Wait(ctx)
		parked <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		rc.mu.Lock()
		b := rc.blocked
		rc.mu.Unlock()
		if b == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first Wait did not park")
		}
	}
	// A second Wait spins until its message comes, and ends Idle.
	r2, _ := rc.Irecv(make([]byte, 64), 2, nil)
	go func() {
		time.Sleep(time.Millisecond)
		sc.Isend([]byte("two"), 2, nil)
	}()
	if _, err := r2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if f := atomic.LoadUint32(rc.myFlag); f&flagParked == 0 {
		t.Errorf("receiver's flag with a Wait parked = %d, want flagParked set", f)
	}
	if _, err := sc.Isend([]byte("one"), 1, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-parked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked Wait was not woken by its message")
	}
}

// TestParkingRingsForEverything checks the fallback for a caller that
// says only Parking, not whether its Wait parks or when it resumes: the
// side is rung for every message from then on, also after later polls.
func TestParkingRingsForEverything(t *testing.T) {
	_, rc := pair(t, Options{})
	rc.Polling()
	rc.Idle()
	if f := atomic.LoadUint32(rc.myFlag); f != flagIdle {
		t.Fatalf("flag after Idle = %d, want flagIdle", f)
	}
	rc.Polling()
	rc.Parking()
	rc.Polling()
	rc.Poll()
	rc.Idle()
	rc.Poll()
	if f := atomic.LoadUint32(rc.myFlag); f&flagParked == 0 {
		t.Fatalf("flag after Parking and later polls = %d, want flagParked set", f)
	}
}
