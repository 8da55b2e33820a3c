package collectives

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// task is one running operation: its context, its header template and the
// messages it has in flight.
type task struct {
	c        *Communicator
	ctx      context.Context
	cancel   context.CancelCauseFunc
	own      bool // ctx is the operation's own, not the communicator's opCtx
	name     string
	seq      uint32
	tag      uint64
	hdr      header   // kind, dtype, op, root, count, seq; algo and phase as they run
	step     []uint32 // per peer and direction: messages so far in this phase
	inflight []*msg
	msgs     *msgSlab  // where its messages come from; nil: the heap
	start    time.Time // when the operation started running (its timeout)
}

// msgSlab keeps the messages of the running operation, reused by the
// next: an operation in steady state allocates none.
type msgSlab struct {
	all  []*msg
	used int
}

func (s *msgSlab) reset() { s.used = 0 }

func (s *msgSlab) get() *msg {
	if s.used == len(s.all) {
		s.all = append(s.all, new(msg))
	}
	m := s.all[s.used]
	s.used++
	*m = msg{}
	return m
}

func (o *task) newMsg() *msg {
	if o.msgs == nil {
		return new(msg)
	}
	return o.msgs.get()
}

// msg is one message in flight.
type msg struct {
	req  Transfer
	peer int // comm rank
	recv bool
	hbuf []byte
	hb   [hdrLen]byte // hbuf's memory, in the message
	bufs [2][]byte    // hbuf and data, as P2P takes them
	want header
	data []byte
	done bool
}

// recycler is a Transfer that may be reused once its caller is done
// with it (the endpoint's).
type recycler interface{ recycle() }

// release hands the message's transfer back once it was waited for.
func (m *msg) release() {
	if r, ok := m.req.(recycler); ok {
		r.recycle()
	}
	m.req = nil
}

// group is a set of ranks an algorithm runs among, in the order it
// numbers them, and this rank's index in it.
type group struct {
	ranks []int // comm ranks
	me    int
}

func (g group) n() int { return len(g.ranks) }

// whole returns every rank, in order; its ranks must not be changed.
func (c *Communicator) whole() group { return c.all }

// rotate returns g renumbered so that index root becomes 0.
func (g group) rotate(root int) group {
	n := g.n()
	r := make([]int, n)
	for i := range r {
		r[i] = g.ranks[(i+root)%n]
	}
	return group{ranks: r, me: (g.me - root + n) % n}
}

// alloc returns n bytes of scratch for the operation, not zeroed.
func (o *task) alloc(n int) []byte { return o.c.arena.get(n) }

// setAlgo sets the algorithm and phase the next messages carry, and
// restarts the step counters.
func (o *task) setAlgo(a Algorithm, phase uint8) {
	o.hdr.algo, o.hdr.phase = a, phase
	if o.step == nil {
		o.step = make([]uint32, 2*o.c.size)
	}
	clear(o.step)
}

// nextStep numbers the messages exchanged with one peer in each direction,
// so that both sides agree on which one is which.
func (o *task) nextStep(peer int, recv bool) uint32 {
	k := peer << 1
	if recv {
		k |= 1
	}
	s := o.step[k]
	o.step[k] = s + 1
	return s
}

func (o *task) send(g group, to int, data []byte) *msg {
	peer := g.ranks[to]
	h := o.hdr
	h.step = o.nextStep(peer, false)
	m := o.newMsg()
	m.peer, m.data = peer, data
	m.hbuf = m.hb[:]
	h.put(m.hbuf)
	m.bufs = [2][]byte{m.hbuf, data}
	o.c.watch(peer)
	m.req = o.c.p2p.Isend(o.ctx, o.c.world[peer], o.tag, m.bufs[:]...)
	o.track(m)
	return m
}

func (o *task) recv(g group, from int, data []byte) *msg {
	peer := g.ranks[from]
	m := o.newMsg()
	m.peer, m.recv, m.want, m.data = peer, true, o.hdr, data
	m.hbuf = m.hb[:]
	m.want.step = o.nextStep(peer, true)
	m.bufs = [2][]byte{m.hbuf, data}
	o.c.watch(peer)
	m.req = o.c.p2p.Irecv(o.ctx, o.c.world[peer], o.tag, m.bufs[:]...)
	o.track(m)
	return m
}

func (o *task) track(m *msg) {
	if len(o.inflight) >= 64 {
		k := 0
		for _, x := range o.inflight {
			if !x.done {
				o.inflight[k] = x
				k++
			}
		}
		clear(o.inflight[k:])
		o.inflight = o.inflight[:k]
	}
	o.inflight = append(o.inflight, m)
}

// wait waits for messages in order and returns the first error.
func (o *task) wait(ms ...*msg) error {
	for _, m := range ms {
		if err := o.wait1(m); err != nil {
			return err
		}
	}
	return nil
}

func (o *task) wait1(m *msg) error {
	if m.done {
		return nil
	}
	n, err := m.req.Wait()
	m.done = true
	m.release()
	if o.ctx.Err() != nil {
		return o.ctxError(m.peer)
	}
	if m.recv && (err == nil || errors.Is(err, ErrTruncated)) {
		if got, ok := parseHeader(m.hbuf); !ok {
			err = fmt.Errorf("collectives: %s: rank %d sent a message without a valid header", o.name, m.peer)
		} else if d := m.want.mismatch(got); d != "" {
			return &PeerError{Op: o.name, Rank: m.peer, ReportedBy: -1, Err: ErrMismatch, Detail: d}
		} else if n != hdrLen+len(m.data) {
			return &PeerError{Op: o.name, Rank: m.peer, ReportedBy: -1, Err: ErrMismatch,
				Detail: fmt.Sprintf("%s: a message of %d bytes arrived where %d were expected", m.want.call(), n-hdrLen, len(m.data))}
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrPeerGone) {
		// A peer that aborts or leaves says so before its connection
		// closes, but the receive may see the close before this rank's
		// watcher has read the message: give it a moment, so that the
		// error says why the peer went.
		t := time.NewTimer(peerGoneGrace)
		defer t.Stop()
		select {
		case <-o.ctx.Done():
			return o.ctxError(m.peer)
		case <-t.C:
		}
		return &PeerError{Op: o.name, Rank: m.peer, ReportedBy: -1, Err: ErrPeerGone, Detail: err.Error()}
	}
	return fmt.Errorf("collectives: %s: rank %d: %w", o.name, m.peer, err)
}

// peerGoneGrace is how long a receive that failed because its peer went
// waits for the control message that may say why.
const peerGoneGrace = 50 * time.Millisecond

// ctxError says why the operation's context ended.
func (o *task) ctxError(peer int) error {
	cause := context.Cause(o.ctx)
	if cause == errOpTimeout {
		return &PeerError{Op: o.name, Rank: peer, ReportedBy: -1, Err: ErrTimeout,
			Detail: fmt.Sprintf("no message exchanged with it within %v", o.c.timeout)}
	}
	var pe *PeerError
	if errors.As(cause, &pe) {
		return cause
	}
	o.c.mu.Lock()
	b := o.c.broken
	o.c.mu.Unlock()
	if b != nil {
		return b
	}
	return fmt.Errorf("collectives: %s: %w", o.name, cause)
}

// finish withdraws what is still in flight and waits for it, so that no
// buffer is touched after the operation returns. An operation that
// waited for all its messages has nothing to withdraw.
func (o *task) finish() {
	for _, m := range o.inflight {
		if !m.done {
			o.cancel(context.Canceled)
			break
		}
	}
	for _, m := range o.inflight {
		if !m.done {
			m.req.Wait()
			m.done = true
			m.release()
		}
	}
	clear(o.inflight)
	o.inflight = o.inflight[:0]
}

// sendrecv sends to one index and receives from another, and waits for
// both.
func (o *task) sendrecv(g group, to int, sdata []byte, from int, rdata []byte) error {
	r := o.recv(g, from, rdata)
	s := o.send(g, to, sdata)
	return o.wait(r, s)
}
