package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/gorun/gorun/transport"
)

func TestRegion(t *testing.T) {
	a, err := transport.Alloc(10000)
	if errors.Is(err, transport.ErrNotSupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := transport.Alloc(1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() < 10000 || a.Len()%4096 != 0 || b.Len() == 0 || a.ID() == b.ID() || a.FD() < 0 {
		t.Fatalf("regions: len %d and %d, ids %d and %d, fd %d", a.Len(), b.Len(), a.ID(), b.ID(), a.FD())
	}
	for _, r := range []*transport.Region{a, b} {
		buf := r.Bytes()
		buf[len(buf)-1] = 7
		got, off, ok := transport.FindRegion(buf[3:5])
		if !ok || got != r || off != 3 {
			t.Errorf("FindRegion(region %d [3:5]) = %v, %d, %v", r.ID(), got, off, ok)
		}
		if got, off, ok := transport.FindRegion(buf); !ok || got != r || off != 0 {
			t.Errorf("FindRegion(whole region %d) = %v, %d, %v", r.ID(), got, off, ok)
		}
	}
	if _, _, ok := transport.FindRegion(make([]byte, 10)); ok {
		t.Error("FindRegion found heap memory")
	}
	if _, _, ok := transport.FindRegion(nil); ok {
		t.Error("FindRegion found an empty buffer")
	}
	buf := a.Bytes()
	for range 2 {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := transport.FindRegion(buf[:1]); ok {
		t.Error("FindRegion found a closed region")
	}
	b.Close()
	if _, err := transport.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

func TestContains(t *testing.T) {
	mem := make([]byte, 100)
	for _, tc := range []struct {
		buf  []byte
		want bool
	}{
		{mem, true}, {mem[10:20], true}, {mem[99:], true}, {nil, true}, {mem[100:], true},
		{make([]byte, 1), false}, {append(mem[:0:0], 1), false},
	} {
		if got := transport.Contains(mem[:100], tc.buf); got != tc.want {
			t.Errorf("Contains(mem, %d bytes) = %v", len(tc.buf), got)
		}
	}
	if transport.Contains(mem[:50], mem[40:60]) {
		t.Error("Contains accepts a buffer that runs past the end")
	}
}

func TestPeerError(t *testing.T) {
	err := error(&transport.PeerError{Transport: "tcp", Op: "irecv", Peer: "10.0.0.2:4000", Err: fmt.Errorf("%w: %v", transport.ErrPeerLost, io.EOF)})
	if got, want := err.Error(), "tcp irecv, peer 10.0.0.2:4000: transport: peer lost: EOF"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerLost) || !errors.As(err, &pe) || pe.Peer != "10.0.0.2:4000" {
		t.Errorf("%v does not unwrap to ErrPeerLost and its PeerError", err)
	}
}

// doneRequest is a transport.Request that is already done.
type doneRequest struct{ err error }

func (r doneRequest) Test() (bool, int, error)                 { return true, 0, r.err }
func (r doneRequest) Wait(ctx context.Context) (int, error)    { return 0, r.err }
func (r blockedRequest) Test() (bool, int, error)              { return false, 0, nil }
func (r blockedRequest) Wait(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }

type blockedRequest struct{}

func TestWaitAll(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	ctx := context.Background()
	if err := transport.WaitAll(ctx, doneRequest{}, doneRequest{e1}, doneRequest{e2}); err != e1 {
		t.Errorf("WaitAll = %v, want the first error", err)
	}
	if err := transport.WaitAll(ctx); err != nil {
		t.Errorf("WaitAll() = %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := transport.WaitAll(cctx, doneRequest{}, blockedRequest{}); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitAll with a cancelled context = %v", err)
	}
}
