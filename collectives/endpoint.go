package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/request"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/transport"
)

// combineBytes is the largest message of several buffers that travels as
// one transport message, copied through a staging buffer; larger ones
// travel as one transport message per buffer, with the same tag, so that
// their data is never copied on the way. Both ends of a connection decide
// from their own buffers: the sizes agree unless the calls do not, and
// then the header, which comes first either way, shows the mismatch.
const combineBytes = 16 << 10

// helloTag carries a connection's first message: the connecting rank.
const helloTag = ^uint64(0)

// link is the pair of one-way connections between this rank and a peer,
// each with a lock that keeps the transport messages of one multi-buffer
// message together.
type link struct {
	name string // the transport's name
	smu  sync.Mutex
	send transport.SendConn
	rmu  sync.Mutex
	recv transport.RecvConn
	srel releaser // send and recv, when they reuse requests
	rrel releaser
}

// endpoint is the P2P of a rank over package transport's connections: one
// link per peer, over shared memory to the ranks of its host and over TCP
// (or the transport Setup names) to the others.
//
// It keeps the P2P contract with two narrowings that the Communicator
// never crosses: a message of several buffers above combineBytes travels
// as one transport message per buffer, so the receive must split its
// buffers alike (the Communicator always sends a header and the data); and
// a transfer whose context ends fails at once, but its transport request
// cannot be withdrawn and may still fill its buffer later, which only a
// broken Communicator (every cancelled operation breaks it) leaves
// behind.
type endpoint struct {
	rank    int
	hosts   []int
	links   []*link // nil at rank
	trs     []transport.Transport
	pollers []poller // the connections that progress when polled
	crowded bool     // this host runs more of the world's ranks than this rank has CPUs
	plugin  *plugins.Client
	device  *plugins.Client // the device plugin (Setup.Device), or nil
	offload Offloader       // the plugin's collectives, when every rank has them
	// The transfers, kept for the next ones (a Communicator hands them
	// back, see recycle), each with its staging buffer once it needed one.
	poolMu sync.Mutex
	xfers  request.FreeList[xfer]
}

// getStage returns the transfer's staging buffer, combineBytes long. It
// stays with the transfer, through recycle, so that a transfer in steady
// state takes no lock for it; a transfer left in flight (held) keeps it.
func (x *xfer) getStage() *[]byte {
	if x.own == nil {
		x.own = make([]byte, combineBytes)
	}
	return &x.own
}

// xfer implements Transfer over one or more transport requests.
type xfer struct {
	ctx   context.Context
	reqs  []transport.Request
	stage *[]byte  // &own while a combined message uses it
	own   []byte   // the staging buffer, made on first use
	bufs  [][]byte // a combined receive's destination
	peer  int
	name  string
	e     *endpoint

	once sync.Once
	n    int
	err  error

	one   [1][]byte            // parts of a combined message
	reqa  [2]transport.Request // backing of reqs for the common cases
	held  bool                 // a request may still be in flight: never reuse
	small bool                 // at most combineBytes
	rel   releaser             // the connection, when it reuses requests
}

// background makes the transfer's Wait a background one: it waits for
// messages that may never come (a watcher's, for control messages), and
// when it parks it does not have its peers wake it (request.Idler). Such
// a message arrives with this rank's next poll, or when one of its
// operations' Waits parks.
func (x *xfer) background() {
	for _, r := range x.reqs {
		if b, ok := r.(interface{ SetBackground() }); ok {
			b.SetBackground()
		}
	}
}

// releaser is a transport connection that reuses the requests its caller
// hands back once it consumed them (shm's).
type releaser interface{ Release(transport.Request) }

func (e *endpoint) newXfer(ctx context.Context, peer int, name string) *xfer {
	e.poolMu.Lock()
	x := e.xfers.Get()
	e.poolMu.Unlock()
	x.ctx, x.peer, x.name, x.e = ctx, peer, name, e
	x.reqs = x.reqa[:0]
	return x
}

// recycle hands back a transfer whose Wait returned and that its caller
// will not use again; one whose requests may still be in flight (its
// context ended first) is left to the garbage collector. The transport
// requests go back to their connections where these reuse them.
func (x *xfer) recycle() {
	if x.held || x.e == nil {
		return
	}
	if x.rel != nil {
		for _, r := range x.reqs {
			x.rel.Release(r)
		}
	}
	e, own := x.e, x.own
	*x = xfer{own: own}
	e.poolMu.Lock()
	e.xfers.Put(x)
	e.poolMu.Unlock()
}

func failed(err error) *xfer {
	x := &xfer{err: err}
	x.once.Do(func() {})
	return x
}

// Wait implements Transfer.
func (x *xfer) Wait() (int, error) {
	x.once.Do(x.wait)
	return x.n, x.err
}

func (x *xfer) wait() {
	total, i := 0, 0
	// What is done already (an eager send, a message that had arrived)
	// needs no spin.
	for ; i < len(x.reqs); i++ {
		done, n, err := x.reqs[i].Test()
		if !done {
			break
		}
		total += n
		if err != nil {
			x.end(total, err)
			return
		}
	}
	if i < len(x.reqs) && x.e != nil && len(x.e.pollers) > 0 {
		// Spin, making progress on every connection that can be polled,
		// not only this transfer's: while this rank waits for a receive,
		// its sends to other peers (and the rendezvous answers they
		// wait for) must go on too, and waking the transport's own
		// goroutines costs more than the messages.
		x.e.polling()
		spin := spinFor
		if x.e.crowded && x.small {
			spin = spinCrowded
		}
		// The spin ends after spin without progress, measured every 16
		// turns: progress marks the clock stale (moved) instead of
		// reading it on every turn that made some.
		last := time.Now()
		moved := false
		for k := 0; i < len(x.reqs); k++ {
			if done, n, err := x.reqs[i].Test(); done {
				total += n
				if err != nil {
					x.e.stopPolling()
					x.end(total, err)
					return
				}
				i++
				moved = true
				continue
			}
			if x.e.poll() {
				moved = true
				continue
			}
			if k&15 == 15 {
				if x.ctx.Err() != nil {
					break
				}
				if moved {
					last, moved = time.Now(), false
				} else if time.Since(last) > spin {
					break
				}
			}
			if x.e.crowded {
				// More ranks than CPUs here: give the CPU to the ranks
				// that have work, as Open MPI's yield_when_idle does.
				osYield()
			} else {
				runtime.Gosched()
			}
		}
		// Before blocking: each request's Wait has its own connection's
		// peer ring it (request.Idler), the others ring for what needs
		// this side's progress.
		x.e.stopPolling()
	}
	for ; i < len(x.reqs); i++ {
		n, err := x.reqs[i].Wait(x.ctx)
		total += n
		if err != nil {
			x.end(total, err)
			return
		}
	}
	x.end(total, nil)
}

// end records the transfer's outcome: total bytes and the first error.
func (x *xfer) end(total int, err error) {
	switch {
	case err == nil:
		x.n = total
		if x.bufs != nil {
			x.scatter(total)
		}
	case x.ctx.Err() != nil:
		// The request stays in flight: its staging buffer is not reused,
		// and the link is not used again by a working communicator (a
		// cancelled operation breaks it).
		x.stage, x.held = nil, true
		x.err = context.Cause(x.ctx)
		return
	default:
		x.n, x.err = total, x.mapErr(err)
		if errors.Is(err, transport.ErrTruncated) && x.stage != nil {
			x.scatter(len(*x.stage))
		}
	}
	x.release()
}

// spinFor is how long a Transfer's Wait polls without progress before it
// blocks, and spinCrowded the same for a transfer of at most combineBytes
// where ranks share CPUs, where each turn yields the CPU: spinning longer
// there, even yielding, was slower (4 ranks on 2 CPUs, a 4 KiB AllReduce:
// 10 ms doubled its time; 1 ms took 1.2x, 20 us 0.7x the time of 100 us),
// but 20 us for every transfer halved the busbw of a 256 KiB one (its
// steps wait longer for their peers).
const (
	spinFor     = 100 * time.Microsecond
	spinCrowded = 20 * time.Microsecond
)

// poller is a connection that makes progress when polled (shm's); TCP's
// make progress on their own goroutines. Between Polling and Parking the
// peer need not wake the connection's goroutine: someone polls it.
type poller interface {
	Poll() bool
	Polling()
	Parking()
}

// polling and stopPolling bracket a spin over every poller. A poller
// that is a request.Idler is told Idle: it has its peer ring it for
// everything only while a Wait is parked on it.
func (e *endpoint) polling() {
	for _, p := range e.pollers {
		p.Polling()
	}
}

func (e *endpoint) stopPolling() {
	for _, p := range e.pollers {
		if id, ok := p.(request.Idler); ok {
			id.Idle()
		} else {
			p.Parking()
		}
	}
}

// poll polls every pollable connection once and reports whether any made
// progress.
func (e *endpoint) poll() bool {
	worked := false
	for _, p := range e.pollers {
		if p.Poll() {
			worked = true
		}
	}
	return worked
}

// scatter copies a combined receive's first n bytes to its buffers.
func (x *xfer) scatter(n int) {
	b := (*x.stage)[:n]
	for _, d := range x.bufs {
		k := copy(d, b)
		b = b[k:]
	}
}

func (x *xfer) release() { x.stage = nil }

// peerGone is a transport's error that means ErrPeerGone, without
// repeating that sentinel's text.
type peerGone struct{ err error }

func (e peerGone) Error() string        { return e.err.Error() }
func (e peerGone) Unwrap() error        { return e.err }
func (e peerGone) Is(target error) bool { return target == ErrPeerGone }

// mapErr turns a transport's error into the P2P contract's.
func (x *xfer) mapErr(err error) error {
	switch {
	case errors.Is(err, transport.ErrTruncated):
		return fmt.Errorf("%w (%s, rank %d): %w", ErrTruncated, x.name, x.peer, err)
	case errors.Is(err, transport.ErrPeerLost), errors.Is(err, transport.ErrClosed):
		return peerGone{fmt.Errorf("rank %d over %s: %w", x.peer, x.name, err)}
	}
	return fmt.Errorf("rank %d over %s: %w", x.peer, x.name, err)
}

func total(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// Isend implements P2P.
func (e *endpoint) Isend(ctx context.Context, peer int, tag uint64, bufs ...[]byte) Transfer {
	l := e.links[peer]
	x := e.newXfer(ctx, peer, l.name)
	x.rel = l.srel
	x.small = total(bufs) <= combineBytes
	parts := bufs
	if len(bufs) > 1 && total(bufs) <= combineBytes {
		x.stage = x.getStage()
		b := (*x.stage)[:0]
		for _, p := range bufs {
			b = append(b, p...)
		}
		x.one[0] = b
		parts = x.one[:]
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	for _, p := range parts {
		r, err := l.send.Isend(p, tag, nil)
		if errors.Is(err, transport.ErrWouldBlock) {
			r, err = retrySend(ctx, l.send, p, tag)
		}
		if err != nil {
			return x.start(err)
		}
		x.reqs = append(x.reqs, r)
	}
	return x
}

// Irecv implements P2P.
func (e *endpoint) Irecv(ctx context.Context, peer int, tag uint64, bufs ...[]byte) Transfer {
	l := e.links[peer]
	x := e.newXfer(ctx, peer, l.name)
	x.rel = l.rrel
	x.small = total(bufs) <= combineBytes
	parts := bufs
	if len(bufs) > 1 && total(bufs) <= combineBytes {
		x.stage = x.getStage()
		x.bufs = bufs
		x.one[0] = (*x.stage)[:total(bufs)]
		parts = x.one[:]
	}
	l.rmu.Lock()
	defer l.rmu.Unlock()
	for _, p := range parts {
		r, err := l.recv.Irecv(p, tag, nil)
		if errors.Is(err, transport.ErrWouldBlock) {
			r, err = retryRecv(ctx, l.recv, p, tag)
		}
		if err != nil {
			return x.start(err)
		}
		x.reqs = append(x.reqs, r)
	}
	return x
}

// start fails a transfer whose request could not be started. The parts
// already started stay in flight, as after a cancellation.
func (x *xfer) start(err error) *xfer {
	x.stage, x.held = nil, true
	if x.ctx.Err() != nil {
		err = context.Cause(x.ctx)
	} else {
		err = x.mapErr(err)
	}
	return failed(err)
}

func retrySend(ctx context.Context, c transport.SendConn, b []byte, tag uint64) (transport.Request, error) {
	return retry(ctx, func() (transport.Request, error) { return c.Isend(b, tag, nil) })
}

func retryRecv(ctx context.Context, c transport.RecvConn, b []byte, tag uint64) (transport.Request, error) {
	return retry(ctx, func() (transport.Request, error) { return c.Irecv(b, tag, nil) })
}

// retry calls start, after a first try failed with ErrWouldBlock, until it
// does not fail with ErrWouldBlock (the
// connection's requests in flight are at their limit) or ctx ends.
func retry(ctx context.Context, start func() (transport.Request, error)) (transport.Request, error) {
	for wait := time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		r, err := start()
		if !errors.Is(err, transport.ErrWouldBlock) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Host implements P2P.
func (e *endpoint) Host(rank int) int { return e.hosts[rank] }

// ready sets what transfers need to know once the links are up: whether
// host, this rank's, runs more of the world's ranks than there are CPUs,
// and which connections progress when polled.
func (e *endpoint) ready(host int) {
	local := 0
	for _, h := range e.hosts {
		if h == host {
			local++
		}
	}
	e.crowded = local > runtime.NumCPU()
	for _, l := range e.links {
		if l == nil {
			continue
		}
		for _, c := range []any{l.send, l.recv} {
			if p, ok := c.(poller); ok {
				e.pollers = append(e.pollers, p)
			}
		}
		l.srel, _ = l.send.(releaser)
		l.rrel, _ = l.recv.(releaser)
	}
}

// close closes every connection and transport.
func (e *endpoint) close() {
	for _, t := range e.trs {
		t.Close()
	}
	if e.plugin != nil {
		e.plugin.Close()
	}
	if e.device != nil {
		e.device.Close()
	}
}

// hello is the first message on a connection: who opened it.
func hello(rank int) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(rank)) }
