package connbase

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/closers"
	"github.com/gorun/gorun/transport"
)

// fakeConn is a connection a handshake made: it notes that it started
// and closed.
type fakeConn struct {
	transport.RecvConn // not called
	c                  net.Conn
	started, closed    atomic.Bool
}

func (f *fakeConn) Start() { f.started.Store(true) }
func (f *fakeConn) Close() error {
	f.closed.Store(true)
	return f.c.Close()
}

// A listener hands Accept the connections that handshakes made, started
// and in the transport's set; Close cuts the streams still in their
// hello, and fails Accept from then on.
func TestListener(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns closers.Set
	var l *Listener[*net.TCPConn]
	l = NewListener(ln, "tcp", ln.Addr().String(), &conns, func(c *net.TCPConn) {
		var hello [1]byte
		_, err := io.ReadFull(c, hello[:])
		if open := l.Heard(c); err != nil || !open {
			c.Close()
			return
		}
		l.Deliver(&fakeConn{c: c})
	})
	l.Start()

	greeter, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer greeter.Close()
	greeter.Write([]byte{1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f := rc.(*fakeConn); !f.started.Load() || f.closed.Load() {
		t.Errorf("accepted: started %v, closed %v", f.started.Load(), f.closed.Load())
	}

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	time.Sleep(50 * time.Millisecond) // in its hello
	done := make(chan struct{})
	go func() { l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a stream in its hello")
	}
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("a stream in its hello after Close: read %v, want its end", err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, transport.ErrClosed) || !strings.HasPrefix(err.Error(), "tcp: accept on 127.0.0.1:") {
		t.Errorf("Accept after Close: %v", err)
	}
	conns.CloseAll() // the accepted connection was in the set
	if !rc.(*fakeConn).closed.Load() {
		t.Error("the accepted connection was not in the transport's set")
	}
}

// A connection that a handshake makes after Close is started and closed.
func TestListenerDeliverAfterClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns closers.Set
	l := NewListener(ln, "tcp", ln.Addr().String(), &conns, func(*net.TCPConn) {})
	l.Start()
	l.Close()
	a, b := net.Pipe()
	defer b.Close()
	f := &fakeConn{c: a}
	l.Deliver(f)
	if !f.started.Load() || !f.closed.Load() {
		t.Errorf("delivered after Close: started %v, closed %v", f.started.Load(), f.closed.Load())
	}
}
