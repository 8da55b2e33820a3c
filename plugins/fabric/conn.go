package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/plugins/fabric/ofi"
	"github.com/gorun/gorun/plugins/sdk"
)

// conn is one side of a one-way connection: the send side (from Connect)
// or the receive side (from Accept). Its messages carry the tag
// dataTag(receiver's id, sequence number): the receiver assigns the id,
// unique on its endpoint, and both sides count messages, so every receive
// matches exactly the message of its turn.
type conn struct {
	t        *transportImpl
	ep       *ofi.Endpoint
	p        *peer
	localID  uint32 // this side's id: the receiver's id on the receive side
	remoteID uint32 // the other side's id
	send     bool

	seq    atomic.Uint64 // next sequence number (data path; Close reads it)
	sentOK atomic.Uint64 // sends reported done without error
	closed atomic.Bool   // this side closed it
	// The peer closed its side after sending peerCount messages.
	peerClosed   atomic.Bool
	peerCount    atomic.Uint64
	peerClosedAt atomic.Int64
	broken       atomic.Pointer[error] // a post failed: the sequence is lost

	mu   sync.Mutex
	recv *request // the receive in flight (receive side)
	once sync.Once
}

// peerClose records the peer's close message (n: messages it sent).
func (c *conn) peerClose(n uint64, now time.Time) {
	c.peerCount.Store(n)
	c.peerClosedAt.Store(now.UnixNano())
	c.peerClosed.Store(true)
}

// Peer names the other end.
func (c *conn) Peer() string { return c.p.label }

// failure is why a request of c with sequence number seq cannot complete
// any more, or nil.
func (c *conn) failure(seq uint64) error {
	switch {
	case c.closed.Load():
		return fmt.Errorf("fabric: connection with %s: %w", c.p.label, sdk.ErrClosed)
	case c.p.lost.Load():
		return c.p.lostErr()
	case c.p.gone.Load() && (c.send || c.t.choice.provider == "shm"):
		// With shm, a message may still lie in the closed peer's memory:
		// receiving it after the peer's endpoint is gone faults inside
		// the provider (libfabric 1.17), so such receives fail too.
		return fmt.Errorf("fabric: %s closed its transport: %w", c.p.label, sdk.ErrPeerLost)
	case c.peerClosed.Load():
		// A message whose send was done before the peer's close still
		// arrives (the provider keeps the order of a pair's messages),
		// unless the peer's endpoint went away before it could: wait for
		// it a while. Later ones fail.
		if c.send || seq >= c.peerCount.Load() ||
			time.Since(time.Unix(0, c.peerClosedAt.Load())) > drainGrace {
			return fmt.Errorf("fabric: %s closed the connection: %w", c.p.label, sdk.ErrPeerLost)
		}
	}
	if e := c.broken.Load(); e != nil {
		return *e
	}
	return nil
}

// post posts a send or a receive of buf, as the connection's next message.
func (c *conn) post(buf []byte, reg sdk.Registration, send bool) (sdk.Request, error) {
	what := "receive from"
	if send {
		what = "send to"
	}
	seq := c.seq.Load()
	if err := c.failure(seq); err != nil {
		return nil, err
	}
	var mr *ofi.MR
	if reg != nil {
		r, ok := reg.(*registration)
		if !ok {
			return nil, fmt.Errorf("fabric: %s %s: %T is not a registration of this transport", what, c.p.label, reg)
		}
		if len(buf) > 0 {
			mr = r.mr
		}
	}
	c.seq.Store(seq + 1)
	tag := dataTag(c.localID, seq)
	var r *ofi.Request
	var err error
	if send {
		tag = dataTag(c.remoteID, seq)
		r, err = c.ep.Send(c.p.addr, tag, buf, mr)
	} else {
		// From any source: the tag alone identifies the message (the id
		// is unique on this endpoint), and a directed receive from a
		// peer whose endpoint is gone crashes some providers (shm, rxm
		// in libfabric 1.17) when they look the address up.
		r, err = c.ep.Recv(ofi.AddrUnspec, tag, buf, mr)
	}
	if err != nil {
		err = c.t.errOf(what, c.p, err)
		if !errors.Is(err, sdk.ErrClosed) {
			c.broken.Store(&err)
		}
		return nil, err
	}
	q := &request{c: c, r: r, seq: seq, recv: !send}
	c.p.pending.Add(1)
	if !send {
		c.mu.Lock()
		c.recv = q
		c.mu.Unlock()
	}
	return q, nil
}

// Send sends buf as the connection's next message.
func (c *conn) Send(buf []byte, reg sdk.Registration) (sdk.Request, error) {
	if !c.send {
		return nil, fmt.Errorf("fabric: send on the receive side of a connection with %s", c.p.label)
	}
	return c.post(buf, reg, true)
}

// Recv receives the connection's next message into buf.
func (c *conn) Recv(buf []byte, reg sdk.Registration) (sdk.Request, error) {
	if c.send {
		return nil, fmt.Errorf("fabric: receive on the send side of a connection with %s", c.p.label)
	}
	return c.post(buf, reg, false)
}

// Close closes the connection and tells the peer. A receive in flight is
// cancelled (so that libfabric no longer writes into its buffer) and
// completes with ErrClosed.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		t := c.t
		t.mu.Lock()
		if !t.closing {
			if c.send {
				delete(t.sendConns, c.localID)
			} else {
				delete(t.recvConns, c.localID)
			}
			c.p.conns--
			t.closeMsgLocked(c)
		}
		t.mu.Unlock()
		c.mu.Lock()
		q := c.recv
		c.mu.Unlock()
		if q != nil {
			if done, _, _ := q.r.Status(); !done {
				q.r.Cancel()
				deadline := time.Now().Add(100 * time.Millisecond)
				for time.Now().Before(deadline) {
					if done, _, _ := q.r.Test(); done {
						break
					}
					time.Sleep(20 * time.Microsecond)
				}
			}
		}
	})
	return nil
}

// request is a send or receive of a connection.
type request struct {
	c    *conn
	r    *ofi.Request
	seq  uint64
	recv bool
	done bool
	n    int
	err  error
}

// Test progresses the endpoint once and reports whether the request is
// done. A request that completed in libfabric reports that, even after a
// close; one still in flight fails when its connection was closed (this
// side: ErrClosed) or its peer closed it or went away (ErrPeerLost).
func (q *request) Test() (bool, int, error) {
	if q.done {
		return true, q.n, q.err
	}
	c := q.c
	done, n, err := q.r.Test()
	if done {
		if err != nil {
			err = q.completionErr(err)
		} else if q.recv {
			// The peer's close message may have arrived with the
			// message: a message whose send the peer reported as
			// failed (ErrClosed) at its Close must not be delivered.
			c.t.handleCtrlDone()
			if c.peerClosed.Load() && q.seq >= c.peerCount.Load() {
				n, err = 0, fmt.Errorf("fabric: %s closed the connection: %w", c.p.label, sdk.ErrPeerLost)
			}
		}
		q.finish(n, err)
		return true, n, err
	}
	if err != nil { // the endpoint's progress failed
		q.finish(0, c.t.errOf("progress with", c.p, err))
		return true, 0, q.err
	}
	if why := c.failure(q.seq); why != nil {
		if q.recv {
			q.r.Cancel()
		}
		q.finish(0, why)
		return true, 0, why
	}
	return false, 0, nil
}

func (q *request) finish(n int, err error) {
	q.done, q.n, q.err = true, n, err
	q.c.p.pending.Add(-1)
	if !q.recv && err == nil {
		q.c.sentOK.Add(1)
	}
	if q.recv {
		q.c.mu.Lock()
		if q.c.recv == q {
			q.c.recv = nil
		}
		q.c.mu.Unlock()
	}
}

// completionErr maps the error a libfabric operation completed with.
func (q *request) completionErr(err error) error {
	c := q.c
	what := "send to"
	if q.recv {
		what = "receive from"
	}
	switch {
	case c.closed.Load() || errors.Is(err, ofi.ErrClosed):
		return fmt.Errorf("fabric: %s %s: %w", what, c.p.label, sdk.ErrClosed)
	case errors.Is(err, ofi.ErrTruncated):
		return fmt.Errorf("fabric: %s %s (provider %q): %w", what, c.p.label, c.t.choice.provider, err)
	}
	// Anything else the provider reports on an operation is the
	// connection to the peer failing.
	return fmt.Errorf("fabric: %s %s (provider %q): %w: %w", what, c.p.label, c.t.choice.provider, sdk.ErrPeerLost, err)
}

// listener queues the connections opened with its handle until Accept.
type listener struct {
	t      *transportImpl
	id     uint32
	handle []byte

	mu     sync.Mutex
	queue  []*conn
	closed bool
	notify chan struct{}
	done   chan struct{}
}

// Handle returns the listener's handle.
func (l *listener) Handle() []byte { return append([]byte(nil), l.handle...) }

// push queues an incoming connection. Called with t.mu held.
func (l *listener) push(c *conn) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// Accept waits for the next connection and returns its receive side.
func (l *listener) Accept(ctx context.Context) (sdk.RecvConn, error) {
	tick := time.NewTicker(500 * time.Microsecond)
	defer tick.Stop()
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, fmt.Errorf("fabric: accept on listener %d: %w", l.id, sdk.ErrClosed)
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.notify:
		case <-l.done:
		case <-tick.C:
			l.t.poll()
		case <-ctx.Done():
			return nil, fmt.Errorf("fabric: accept on listener %d: %w", l.id, ctx.Err())
		}
	}
}

// Close stops listening; connections not accepted yet are closed.
func (l *listener) Close() error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	l.closeLocked()
	return nil
}

// closeLocked closes l. Called with t.mu held.
func (l *listener) closeLocked() {
	t := l.t
	delete(t.listeners, l.id)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	q := l.queue
	l.queue = nil
	close(l.done)
	l.mu.Unlock()
	for _, c := range q {
		c.closed.Store(true)
		delete(t.recvConns, c.localID)
		c.p.conns--
		t.closeMsgLocked(c)
	}
}
