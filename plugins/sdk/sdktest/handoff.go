package sdktest

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins/sdk"
	"github.com/gorun/gorun/transport"
	"github.com/gorun/gorun/transport/tcp"
)

// testHandoff checks a transport that implements sdk.Handoff as the rank
// uses it: both sides of a new connection give up the same number of
// sockets, which gorun's TCP protocol adopts and moves messages over, and
// which stay open when the plugin's transports close (the plugin forgot
// them). A transport without the hand-off has nothing to check here.
func (s *suite) testHandoff(t *testing.T) {
	a, b := s.transport(t), s.transport(t)
	ha, ok := a.(sdk.Handoff)
	if !ok {
		t.Skip("the transport does not implement sdk.Handoff")
	}
	hb := b.(sdk.Handoff)
	h := newHarness(t)
	l, handle := h.listen(b)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	accepted := make(chan sdk.RecvConn, 1)
	go func() {
		rc, err := l.Accept(ctx)
		if err != nil {
			t.Errorf("Accept: %v", err)
		}
		accepted <- rc
	}()
	var sc sdk.SendConn
	if err := control(t, "Connect", func() (err error) { sc, err = a.Connect(ctx, handle); return err }); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	rc := <-accepted
	if rc == nil {
		t.FailNow()
	}
	var sf, rf []*os.File
	if err := control(t, "HandOff (send side)", func() (err error) { sf, err = ha.HandOff(sc); return err }); err != nil {
		t.Fatalf("HandOff of the send side: %v", err)
	}
	if err := control(t, "HandOff (receive side)", func() (err error) { rf, err = hb.HandOff(rc); return err }); err != nil {
		t.Fatalf("HandOff of the receive side: %v", err)
	}
	if len(sf) != len(rf) || len(sf) < 1 || len(sf) > 16 {
		t.Fatalf("HandOff gave %d sockets on the send side and %d on the receive side, want the same number, 1 to 16", len(sf), len(rf))
	}
	adopter, err := tcp.ForSockets("handed off", tcp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer adopter.Close()
	asc, err := adopter.AdoptSend(sf, "peer")
	if err != nil {
		t.Fatalf("adopting the send side's sockets: %v", err)
	}
	arc, err := adopter.AdoptRecv(rf, "peer")
	if err != nil {
		t.Fatalf("adopting the receive side's sockets: %v", err)
	}
	exchange := func(when string) {
		t.Helper()
		for _, size := range []int{4093, 8 << 20} {
			msg := make([]byte, size)
			fill(msg, uint64(size))
			got := make([]byte, size)
			r, err := arc.Irecv(got, 3, nil)
			if err != nil {
				t.Fatalf("%s: Irecv: %v", when, err)
			}
			w, err := asc.Isend(msg, 3, nil)
			if err != nil {
				t.Fatalf("%s: Isend: %v", when, err)
			}
			wctx, cancel := context.WithTimeout(context.Background(), LostWithin+opTimeout)
			err = transport.WaitAll(wctx, w, r)
			cancel()
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("%s: %d bytes over the handed-off sockets: %v (intact %v): are they in the connecting side's order, and was nothing read or written on them?", when, size, err, bytes.Equal(got, msg))
			}
		}
	}
	exchange("after the hand-off")
	for _, tr := range []sdk.Transport{a, b} {
		if err := control(t, "Transport.Close", tr.Close); err != nil {
			t.Logf("Transport.Close: %v", err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	exchange("after the plugin's transports closed")
}
