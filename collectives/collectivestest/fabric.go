// Package collectivestest provides an in-process [collectives.P2P]: a
// Fabric connects N endpoints over memory, so that tests (and examples and
// benchmarks) run N ranks as goroutines of one process. It keeps every
// rule of the P2P contract, strictly: messages longer than the eager limit
// wait for their receiver, as on a real transport, so an algorithm that
// would deadlock there deadlocks here too. It also injects faults: a rank
// that dies at once ([Fabric.Kill]) or in the middle of an operation
// ([Fabric.KillAfter]), and an endpoint that closes ([Endpoint.Close]).
package collectivestest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gorun/gorun/collectives"
)

// ErrKilled fails the operations of a rank that Kill or KillAfter killed,
// and of an endpoint that was closed.
var ErrKilled = errors.New("collectivestest: this rank is dead")

// Options configure a Fabric. The zero value (or nil) gives one host and
// the contract's eager limit.
type Options struct {
	// Hosts gives the host of each rank (len size); nil puts every rank on
	// host 0.
	Hosts []int
	// EagerBytes is the largest message whose send completes without
	// waiting for the receiver; 0 means collectives.EagerBytes. Larger
	// values make the fabric buffer more, as a transport with deep socket
	// buffers does; smaller ones make more data messages wait for their
	// receivers, to show that an algorithm does not depend on buffering,
	// but break the P2P contract for the longer control messages (aborts),
	// so use them only where no operation fails.
	EagerBytes int
}

// Fabric connects size endpoints. Its methods are safe for concurrent use.
type Fabric struct {
	size  int
	hosts []int
	eager int
	dead  []atomic.Pointer[string] // why each rank is down, nil while alive
	left  []atomic.Int64           // sends left before KillAfter strikes; 0: none set
	boxes [][]*mailbox             // boxes[dst][src]
	msgs  atomic.Int64
	bytes atomic.Int64
}

// mailbox holds the messages from one rank to another that no receive
// matched yet, and the receives no message matched yet.
type mailbox struct {
	mu    sync.Mutex
	sends []*xfer
	recvs []*xfer
}

// xfer is a send or a receive; it implements collectives.Transfer.
type xfer struct {
	tag     uint64
	bufs    [][]byte
	pending bool // in a mailbox list; guarded by the mailbox's mu
	eager   bool // a send completed when posted; bufs holds a copy
	stop    func() bool
	n       int
	err     error
	done    chan struct{}
}

// Wait implements collectives.Transfer.
func (x *xfer) Wait() (int, error) {
	<-x.done
	return x.n, x.err
}

func (x *xfer) finish(n int, err error) {
	x.n, x.err = n, err
	close(x.done)
}

// NewFabric returns a fabric of size ranks.
func NewFabric(size int, opts *Options) *Fabric {
	var o Options
	if opts != nil {
		o = *opts
	}
	f := &Fabric{size: size, hosts: make([]int, size), eager: o.EagerBytes,
		dead: make([]atomic.Pointer[string], size), left: make([]atomic.Int64, size)}
	if f.eager <= 0 {
		f.eager = collectives.EagerBytes
	}
	if o.Hosts != nil {
		if len(o.Hosts) != size {
			panic(fmt.Sprintf("collectivestest: %d hosts for %d ranks", len(o.Hosts), size))
		}
		copy(f.hosts, o.Hosts)
	}
	f.boxes = make([][]*mailbox, size)
	for d := range f.boxes {
		f.boxes[d] = make([]*mailbox, size)
		for s := range f.boxes[d] {
			f.boxes[d][s] = &mailbox{}
		}
	}
	return f
}

// Size returns the number of ranks.
func (f *Fabric) Size() int { return f.size }

// Stats returns the number of messages and payload bytes sent so far.
func (f *Fabric) Stats() (messages, bytes int64) { return f.msgs.Load(), f.bytes.Load() }

// Endpoint returns rank's endpoint.
func (f *Fabric) Endpoint(rank int) *Endpoint {
	if rank < 0 || rank >= f.size {
		panic(fmt.Sprintf("collectivestest: rank %d of %d", rank, f.size))
	}
	return &Endpoint{f: f, rank: rank}
}

// Kill kills rank at once, as a crash would: its pending and later
// operations fail with ErrKilled, and the other ranks' operations with it
// fail with an error wrapping collectives.ErrPeerGone once the messages it
// sent before are consumed.
func (f *Fabric) Kill(rank int) { f.down(rank, "killed") }

// KillAfter arranges for rank to die when it starts its (sends+1)-th send
// from now, which fails: the way to kill a rank in the middle of a
// collective.
func (f *Fabric) KillAfter(rank, sends int) { f.left[rank].Store(int64(sends) + 1) }

func (f *Fabric) down(rank int, why string) {
	if !f.dead[rank].CompareAndSwap(nil, &why) {
		return
	}
	var fail []*xfer
	var errs []error
	sweep := func(b *mailbox, list *[]*xfer, keep func(*xfer) bool, err error) {
		k := 0
		for _, x := range *list {
			if keep(x) {
				(*list)[k] = x
				k++
				continue
			}
			x.pending = false
			if !x.eager { // an eager send is done already: just drop it
				fail, errs = append(fail, x), append(errs, err)
			}
		}
		clear((*list)[k:])
		*list = (*list)[:k]
	}
	all := func(*xfer) bool { return false }
	eagerOnly := func(x *xfer) bool { return x.eager } // delivered eager messages stay
	for p := range f.size {
		// This rank's receives, and its sends that were waiting: gone.
		b := f.boxes[rank][p]
		b.mu.Lock()
		sweep(b, &b.recvs, all, f.selfErr(rank))
		b.mu.Unlock()
		b = f.boxes[p][rank]
		b.mu.Lock()
		sweep(b, &b.sends, eagerOnly, f.selfErr(rank))
		// Others' receives from it: nothing will come.
		sweep(b, &b.recvs, all, f.peerErr(rank))
		b.mu.Unlock()
		// Others' sends to it that were waiting: nobody will take them.
		b = f.boxes[rank][p]
		b.mu.Lock()
		sweep(b, &b.sends, all, f.peerErr(p))
		b.mu.Unlock()
	}
	for i, x := range fail {
		if x.stop != nil {
			x.stop()
		}
		x.finish(0, errs[i])
	}
}

func (f *Fabric) selfErr(rank int) error {
	return fmt.Errorf("rank %d: %w (%s)", rank, ErrKilled, *f.dead[rank].Load())
}

func (f *Fabric) peerErr(peer int) error {
	why := "down"
	if w := f.dead[peer].Load(); w != nil {
		why = *w
	}
	return fmt.Errorf("collectivestest: rank %d %s: %w", peer, why, collectives.ErrPeerGone)
}

// Endpoint is one rank's end of a Fabric; it implements collectives.P2P.
type Endpoint struct {
	f    *Fabric
	rank int
}

var _ collectives.P2P = (*Endpoint)(nil)

// Rank returns the endpoint's rank.
func (e *Endpoint) Rank() int { return e.rank }

// Host returns the host the fabric's options gave rank.
func (e *Endpoint) Host(rank int) int { return e.f.hosts[rank] }

// Close closes the endpoint, as a process that exits does: to the other
// ranks it is gone, as after Kill.
func (e *Endpoint) Close() error {
	e.f.down(e.rank, "closed")
	return nil
}

func newXfer(tag uint64, bufs [][]byte) *xfer {
	return &xfer{tag: tag, bufs: bufs, done: make(chan struct{})}
}

func failed(err error) *xfer {
	x := newXfer(0, nil)
	x.finish(0, err)
	return x
}

func total(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// deliver copies a send's bytes into a receive's buffers and completes
// both.
func deliver(s, r *xfer) {
	n := total(s.bufs)
	di, doff := 0, 0
	for _, src := range s.bufs {
		for len(src) > 0 && di < len(r.bufs) {
			c := copy(r.bufs[di][doff:], src)
			src = src[c:]
			doff += c
			if doff == len(r.bufs[di]) {
				di, doff = di+1, 0
			}
		}
	}
	var err error
	if n > total(r.bufs) {
		err = fmt.Errorf("collectivestest: message of %d bytes, receive of %d: %w", n, total(r.bufs), collectives.ErrTruncated)
	}
	for _, x := range []*xfer{s, r} {
		if x.stop != nil {
			x.stop()
		}
	}
	if !s.eager {
		s.finish(n, nil)
	}
	r.finish(n, err)
}

// withdraw removes x from a mailbox list when ctx ends first.
func (b *mailbox) withdraw(ctx context.Context, x *xfer, list *[]*xfer) {
	x.stop = context.AfterFunc(ctx, func() {
		b.mu.Lock()
		if !x.pending {
			b.mu.Unlock()
			return
		}
		x.pending = false
		for i, y := range *list {
			if y == x {
				*list = append((*list)[:i], (*list)[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		x.finish(0, context.Cause(ctx))
	})
}

// Isend implements collectives.P2P.
func (e *Endpoint) Isend(ctx context.Context, peer int, tag uint64, bufs ...[]byte) collectives.Transfer {
	f := e.f
	if n := f.left[e.rank].Load(); n > 0 && f.left[e.rank].Add(-1) == 0 {
		f.Kill(e.rank)
	}
	if f.dead[e.rank].Load() != nil {
		return failed(f.selfErr(e.rank))
	}
	if err := context.Cause(ctx); err != nil {
		return failed(err)
	}
	f.msgs.Add(1)
	f.bytes.Add(int64(total(bufs)))
	x := newXfer(tag, bufs)
	b := f.boxes[peer][e.rank]
	b.mu.Lock()
	if f.dead[peer].Load() != nil {
		b.mu.Unlock()
		return failed(f.peerErr(peer))
	}
	if f.dead[e.rank].Load() != nil {
		b.mu.Unlock()
		return failed(f.selfErr(e.rank))
	}
	for i, r := range b.recvs {
		if r.tag == tag {
			b.recvs = append(b.recvs[:i], b.recvs[i+1:]...)
			r.pending = false
			b.mu.Unlock()
			deliver(x, r)
			return x
		}
	}
	if n := total(bufs); n <= f.eager {
		data := make([]byte, n)
		off := 0
		for _, s := range bufs {
			off += copy(data[off:], s)
		}
		x.bufs = [][]byte{data}
		x.pending, x.eager = true, true
		x.finish(n, nil) // the mailbox keeps the copy
		b.sends = append(b.sends, x)
		b.mu.Unlock()
		return x
	}
	x.pending = true
	b.sends = append(b.sends, x)
	b.withdraw(ctx, x, &b.sends)
	b.mu.Unlock()
	return x
}

// Irecv implements collectives.P2P.
func (e *Endpoint) Irecv(ctx context.Context, peer int, tag uint64, bufs ...[]byte) collectives.Transfer {
	f := e.f
	if f.dead[e.rank].Load() != nil {
		return failed(f.selfErr(e.rank))
	}
	if err := context.Cause(ctx); err != nil {
		return failed(err)
	}
	x := newXfer(tag, bufs)
	b := f.boxes[e.rank][peer]
	b.mu.Lock()
	if f.dead[e.rank].Load() != nil {
		b.mu.Unlock()
		return failed(f.selfErr(e.rank))
	}
	for i, s := range b.sends {
		if s.tag == tag {
			b.sends = append(b.sends[:i], b.sends[i+1:]...)
			s.pending = false
			b.mu.Unlock()
			deliver(s, x)
			return x
		}
	}
	if f.dead[peer].Load() != nil {
		b.mu.Unlock()
		return failed(f.peerErr(peer))
	}
	x.pending = true
	b.recvs = append(b.recvs, x)
	b.withdraw(ctx, x, &b.recvs)
	b.mu.Unlock()
	return x
}

// Run makes a Communicator for every rank of the fabric with opts, runs fn
// for each in its own goroutine, closes each communicator when its fn
// returns, and returns the ranks' errors (New's, fn's or Close's).
func (f *Fabric) Run(opts *collectives.Options, fn func(c *collectives.Communicator) error) []error {
	errs := make([]error, f.size)
	var wg sync.WaitGroup
	for r := range f.size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := collectives.New(f.Endpoint(r), r, f.size, opts)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(c)
			if err := c.Close(); err != nil && errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	return errs
}
