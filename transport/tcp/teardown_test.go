package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/gorun/gorun/transport"
)

// A send written by its caller (an eager message on an idle stream)
// completes without an error even when the receiver closes the connection
// between the write and the completion: the sender's teardown waits for
// the write in progress instead of failing its request.
func TestInlineWriteSurvivesTeardown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := New(Options{Iface: "lo"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Options{Iface: "lo"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan transport.RecvConn, 1)
	go func() {
		rc, err := l.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		acc <- rc
	}()
	sc, err := a.Connect(ctx, l.Handle())
	if err != nil {
		t.Fatal(err)
	}
	rc := <-acc
	dst := make([]byte, 8)
	rr, err := rc.Irecv(dst, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The receiver gets the message and closes while the sender sits
	// between its write and the completion.
	afterInlineWrite = func() {
		if _, err := rr.Wait(ctx); err != nil {
			t.Errorf("receive: %v", err)
		}
		rc.Close()
		<-sc.(*sendConn).dead // the sender saw the close
		time.Sleep(20 * time.Millisecond)
	}
	defer func() { afterInlineWrite = nil }()
	sr, err := sc.Isend([]byte("12345678"), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sr.Wait(ctx); err != nil || n != 8 {
		t.Fatalf("the send of a delivered message: %d, %v", n, err)
	}
}
