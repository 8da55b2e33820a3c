package collectivestest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
)

func done(x collectives.Transfer) bool {
	select {
	case <-x.(*xfer).done:
		return true
	default:
		return false
	}
}

func TestEagerAndRendezvous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := NewFabric(2, nil)
	a, b := f.Endpoint(0), f.Endpoint(1)
	small := a.Isend(ctx, 1, 1, []byte("hello"))
	if !done(small) {
		t.Fatal("a small send waits for its receiver")
	}
	big := a.Isend(ctx, 1, 1, make([]byte, collectives.EagerBytes+1))
	if done(big) {
		t.Fatal("a large send completed without a receiver")
	}
	buf := make([]byte, 10)
	if n, err := b.Irecv(ctx, 0, 1, buf).Wait(); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	if n, err := b.Irecv(ctx, 0, 1, make([]byte, 1000)).Wait(); err != nil || n != collectives.EagerBytes+1 {
		t.Fatalf("large: %d, %v", n, err)
	}
	if n, err := big.Wait(); err != nil || n != collectives.EagerBytes+1 {
		t.Fatalf("large send: %d, %v", n, err)
	}
	if msgs, bytes := f.Stats(); msgs != 2 || bytes != 5+collectives.EagerBytes+1 {
		t.Errorf("stats: %d, %d", msgs, bytes)
	}
}

func TestMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := NewFabric(2, &Options{EagerBytes: 1 << 20})
	a, b := f.Endpoint(0), f.Endpoint(1)
	// Gather on send, scatter on receive, order per tag, tags independent.
	a.Isend(ctx, 1, 7, []byte("ab"), []byte("cd"))
	a.Isend(ctx, 1, 8, []byte("x"))
	a.Isend(ctx, 1, 7, []byte("efg"))
	h, d := make([]byte, 1), make([]byte, 5)
	if _, err := b.Irecv(ctx, 0, 8, h).Wait(); err != nil || string(h) != "x" {
		t.Fatalf("tag 8: %q %v", h, err)
	}
	n, err := b.Irecv(ctx, 0, 7, h, d).Wait()
	if err != nil || n != 4 || string(h) != "a" || string(d[:3]) != "bcd" {
		t.Fatalf("first of tag 7: %d %q %q %v", n, h, d, err)
	}
	n, err = b.Irecv(ctx, 0, 7, make([]byte, 2)).Wait()
	if !errors.Is(err, collectives.ErrTruncated) || n != 3 {
		t.Fatalf("truncated: %d %v", n, err)
	}
	// A receive posted first is matched by the send.
	r := b.Irecv(ctx, 0, 9, make([]byte, 4))
	if done(r) {
		t.Fatal("receive completed without a message")
	}
	a.Isend(ctx, 1, 9, []byte("late"))
	if n, err := r.Wait(); err != nil || n != 4 {
		t.Fatalf("late: %d %v", n, err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := NewFabric(2, nil)
	a, b := f.Endpoint(0), f.Endpoint(1)
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	r := b.Irecv(ctx, 0, 1, make([]byte, 1))
	s := a.Isend(ctx, 1, 2, make([]byte, 1000))
	cancel(cause)
	if _, err := r.Wait(); !errors.Is(err, cause) {
		t.Errorf("receive: %v", err)
	}
	if _, err := s.Wait(); !errors.Is(err, cause) {
		t.Errorf("send: %v", err)
	}
	// Withdrawn: a later message goes to a later receive.
	a.Isend(context.Background(), 1, 1, []byte{42})
	buf := make([]byte, 1)
	if _, err := b.Irecv(context.Background(), 0, 1, buf).Wait(); err != nil || buf[0] != 42 {
		t.Errorf("after cancel: %v %v", buf, err)
	}
	if _, err := a.Isend(ctx, 1, 1, nil).Wait(); !errors.Is(err, cause) {
		t.Errorf("send on an ended context: %v", err)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := NewFabric(3, &Options{Hosts: []int{0, 0, 1}})
	a, b, c := f.Endpoint(0), f.Endpoint(1), f.Endpoint(2)
	if a.Host(2) != 1 || a.Host(1) != 0 || a.Rank() != 0 || f.Size() != 3 {
		t.Fatal("hosts")
	}
	b.Isend(ctx, 0, 1, []byte("last words")) // eager: survives the sender
	waiting := a.Irecv(ctx, 1, 2, make([]byte, 1))
	pendingTo := a.Isend(ctx, 1, 3, make([]byte, 1000))
	pendingFrom := b.Isend(ctx, 2, 3, make([]byte, 1000))
	own := b.Irecv(ctx, 2, 4, make([]byte, 1))
	f.Kill(1)
	for name, x := range map[string]collectives.Transfer{"receive from it": waiting, "send to it": pendingTo} {
		if _, err := x.Wait(); !errors.Is(err, collectives.ErrPeerGone) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, x := range map[string]collectives.Transfer{"its send": pendingFrom, "its receive": own, "its new send": b.Isend(ctx, 0, 1, nil)} {
		if _, err := x.Wait(); !errors.Is(err, ErrKilled) {
			t.Errorf("%s: %v", name, err)
		}
	}
	buf := make([]byte, 20)
	if n, err := a.Irecv(ctx, 1, 1, buf).Wait(); err != nil || string(buf[:n]) != "last words" {
		t.Errorf("eager message of the dead: %q %v", buf[:n], err)
	}
	if _, err := a.Irecv(ctx, 1, 1, buf).Wait(); !errors.Is(err, collectives.ErrPeerGone) {
		t.Errorf("then: %v", err)
	}
	if _, err := c.Isend(ctx, 1, 0, nil).Wait(); !errors.Is(err, collectives.ErrPeerGone) {
		t.Errorf("new send to it: %v", err)
	}
	// Closing an endpoint is the same to the others.
	c.Close()
	if _, err := a.Irecv(ctx, 2, 0, buf).Wait(); !errors.Is(err, collectives.ErrPeerGone) {
		t.Errorf("closed endpoint: %v", err)
	}
}

func TestKillAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := NewFabric(2, nil)
	a := f.Endpoint(0)
	f.KillAfter(0, 2)
	for i := range 2 {
		if _, err := a.Isend(ctx, 1, 0, nil).Wait(); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if _, err := a.Isend(ctx, 1, 0, nil).Wait(); !errors.Is(err, ErrKilled) {
		t.Fatalf("third send: %v", err)
	}
	start := time.Now()
	if _, err := f.Endpoint(1).Irecv(ctx, 0, 5, nil).Wait(); !errors.Is(err, collectives.ErrPeerGone) || time.Since(start) > time.Second {
		t.Fatalf("receive from the dead: %v", err)
	}
}
