package connbase

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/gorun/gorun/internal/closers"
	"github.com/gorun/gorun/transport"
)

// Conn is a receive connection that a handshake made: it starts its
// goroutines once accepted (or once discarded, so that Close can end
// them).
type Conn interface {
	transport.RecvConn
	Start()
}

// Stream is the type of the streams a Listener accepts: *net.UnixConn,
// *net.TCPConn.
type Stream interface {
	comparable
	net.Conn
}

// Listener is the listening side of a built-in transport, around the
// transport's own handshake: it accepts streams on a net.Listener of
// streams of type C, runs each stream's handshake on a goroutine of its
// own while keeping track of the streams still in their hello, and queues
// the connections that handshakes make for Accept. Close stops it all.
type Listener[C Stream] struct {
	ln        net.Listener
	name      string        // the transport's name, for errors
	addr      string        // what errors call the listener
	conns     *closers.Set  // the transport's, which an accepted connection joins
	handshake func(C)       // a stream's handshake, which calls Heard and Deliver
	ready     chan Conn     // handshakes' connections, for Accept
	done      chan struct{} // closed by Close

	mu     sync.Mutex
	hellos map[C]struct{} // streams still in their hello
	closed bool

	once sync.Once
	wg   sync.WaitGroup // the accept loop and the handshakes
}

// NewListener returns a Listener on ln for the transport name (errors call
// it addr), whose accepted connections join conns; handshake takes each
// stream's hello, calls Heard once it has it (or failed to get it), and
// Deliver with the connection that it made, if any. Start starts it.
func NewListener[C Stream](ln net.Listener, name, addr string, conns *closers.Set, handshake func(C)) *Listener[C] {
	return &Listener[C]{ln: ln, name: name, addr: addr, conns: conns, handshake: handshake,
		ready: make(chan Conn), done: make(chan struct{}), hellos: make(map[C]struct{})}
}

// Start starts accepting streams.
func (l *Listener[C]) Start() {
	l.wg.Add(1)
	go l.acceptLoop()
}

func (l *Listener[C]) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return
		}
		c := nc.(C)
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.hellos[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.handshake(c)
		}()
	}
}

// Heard says that stream c's hello arrived (or failed to): Close no
// longer cuts it. It reports whether the listener is still open; where it
// is not, the handshake drops c.
func (l *Listener[C]) Heard(c C) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.hellos, c)
	return !l.closed
}

// Deliver hands rc, which a handshake made, to Accept; once the listener
// is closed it starts rc and closes it instead.
func (l *Listener[C]) Deliver(rc Conn) {
	select {
	case l.ready <- rc:
	case <-l.done:
		rc.Start()
		rc.Close()
	}
}

// Accept implements transport.Listener: it starts the next connection and
// adds it to the transport's.
func (l *Listener[C]) Accept(ctx context.Context) (transport.RecvConn, error) {
	select {
	case rc := <-l.ready:
		rc.Start()
		if err := l.conns.Add(rc); err != nil {
			rc.Close()
			return nil, fmt.Errorf("%s: accept: %w", l.name, err)
		}
		return rc, nil
	case <-l.done:
		return nil, fmt.Errorf("%s: accept on %s: %w", l.name, l.addr, transport.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting, cuts the streams still in their hello and waits
// for the handshakes; the connections they make from then on are closed.
// It does not remove the transport's listener from the transport's set:
// the transport's Close does.
func (l *Listener[C]) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.ln.Close()
		l.mu.Lock()
		l.closed = true
		for c := range l.hellos {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return nil
}
