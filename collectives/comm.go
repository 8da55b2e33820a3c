package collectives

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/plugins"
)

// Defaults of [Options].
const (
	DefaultTimeout      = 5 * time.Minute
	DefaultChunkBytes   = 128 << 10
	DefaultSegmentBytes = 64 << 10
	DefaultWindow       = 4
)

// Options tune a Communicator. The zero value (or a nil *Options) gives
// the defaults.
type Options struct {
	// Timeout bounds each operation, from the moment it starts running to
	// its end; an operation that has not completed by then fails with
	// ErrTimeout on this rank and tells the others. 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Thresholds is the algorithm table. nil means DefaultThresholds with
	// the entries of the environment variable GORUN_COLL_THRESHOLDS
	// applied (read once, by New). Every rank must use the same table; a
	// rank whose table differs is detected as a mismatch.
	Thresholds *Thresholds
	// Model is the cost model whose estimates [Communicator.Choose]
	// reports (with the communicator's ChunkBytes and SegmentBytes). nil
	// means DefaultCostModel.
	Model *CostModel
	// ChunkBytes is the unit the ring algorithms pipeline; SegmentBytes
	// the unit of the pipelined trees. 0 means DefaultChunkBytes and
	// DefaultSegmentBytes.
	ChunkBytes, SegmentBytes int
	// Window is how many chunk or segment receives each pipeline keeps
	// posted ahead, and how many exchanges the linear all-to-all keeps in
	// flight. 0 means DefaultWindow.
	Window int
	// Strict makes every rank get the error of a failed collective from
	// that same call. Each collective then starts with a dissemination
	// barrier whose messages carry the call (collective, type, operator,
	// count, root), so that a mismatched call is detected before any data
	// moves, and ends with another, so that no rank returns before every
	// rank has done its part. It costs 2*ceil(log2 size) message latencies
	// per collective.
	//
	// Without it, a rank that still needed something from the failed rank
	// gets the error from the call, and a rank whose part was done returns
	// normally and gets the error from its next call, the communicator
	// being broken: a Broadcast root whose sends were buffered, or, when a
	// rank dies halfway through an AllReduce, a rank that had already
	// received all it needed. Mismatched types, operators, counts and
	// collectives are always detected; a mismatched root only where a
	// message crosses it (two ranks that both believe they are the root of
	// a small Broadcast only send), or always with Strict.
	Strict bool
	// Logger receives InitWith's warnings, one line each: a plugin that
	// cannot start, under the TCP fallback, and a rank without the
	// collective plugin. The plugin InitWith starts writes its log to
	// Logger.Writer(). nil means standard error, with no prefix or flags.
	Logger *log.Logger
}

// logger returns o's Logger, or a logger to standard error; o may be nil.
func (o *Options) logger() *log.Logger {
	if o == nil || o.Logger == nil {
		return log.New(os.Stderr, "", 0)
	}
	return o.Logger
}

// family is what the communicators split from one New share: the next
// communicator id this process may use, and the record of their calls.
type family struct {
	mu   sync.Mutex // held for the whole of a Split
	next uint32
	log  *progressLog
}

const maxCommID = 1<<24 - 1

// Communicator runs collectives among a fixed set of ranks, each rank
// calling the same operations in the same order with matching arguments.
//
// Operations run one at a time, in the order they were called, blocking
// and asynchronous ones alike; Send and Recv run beside them. All methods
// and functions on a Communicator are safe for concurrent use, but
// concurrent collective calls are ordered by whichever goroutine calls
// first, which must be the same order on every rank.
//
// After an operation fails (on any rank), the Communicator is broken:
// that operation and every later one fail, at once if they have not
// started, with an error that wraps the first failure. Operations before
// it complete normally where they can.
type Communicator struct {
	p2p   P2P
	rank  int
	size  int
	world []int // comm rank -> endpoint rank
	hosts []int // comm rank -> host
	topo  topology
	id    uint32
	fam   *family
	name  *string // the Comm of its arrivals (see Progress)

	timeout time.Duration
	chunk   int
	segment int
	window  int
	strict  bool
	thr     *Thresholds
	model   CostModel

	ctx    context.Context // ends at Close
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // watchers and control sends

	mu        sync.Mutex
	seq       uint32     // the last operation queued
	ended     uint32     // the last operation that ended: they end in order
	turn      *sync.Cond // on mu: signalled when an operation ends
	completed uint32
	broken    error  // the first failure
	brokenSeq uint32 // operations from this one on fail with broken
	closed    bool
	left      map[int]uint32 // peer -> operations it completed before Close
	watched   map[int]bool
	cur       *task

	arena arena       // scratch of the running operation
	timer *time.Timer // the running operation's timeout
	// timerSet says the timer will fire (armTimeout, timedOut).
	timerSet bool
	op       task    // the running operation: one runs at a time
	msgs     msgSlab // and its messages
	all      group   // every rank, in order
	// opCtx is the context of the operations whose caller's context
	// cannot end (context.Background), so that they need none of their
	// own: cancelling an operation breaks the communicator, so a context
	// that ended is made anew only after an operation that succeeded all
	// the same (it lost a race with its cancellation) or that withdrew
	// messages it no longer needed.
	opCtx      context.Context
	opCancel   context.CancelCauseFunc
	release    func()          // closes what Init opened for the world communicator
	transports string          // what Init connected with ("shm+tcp"), "" for New
	offload    Offloader       // the world communicator's collective plugin, or nil
	device     *plugins.Memory // the world communicator's device plugin's memory, or nil
	devMu      sync.Mutex
	devSplit   *deviceSplit // the communicators of hierarchical device collectives, once made
	offloaded  atomic.Uint64
}

// New returns the Communicator of rank among size ranks, communicating
// through p. Making it sends no message. Call New once per endpoint; more
// communicators come from [Communicator.Split].
//
// New is the seam with gorun's environment: [Init] builds p from the
// rendezvous store and package transport, and calls New.
func New(p P2P, rank, size int, opts *Options) (*Communicator, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil P2P", ErrInvalid)
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrInvalid, rank, size)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	thr := o.Thresholds
	if thr == nil {
		thr = DefaultThresholds()
		if spec := os.Getenv(EnvThresholds); spec != "" {
			if err := thr.Set(spec); err != nil {
				return nil, err
			}
		}
	} else {
		thr = thr.Clone()
	}
	model := DefaultCostModel()
	if o.Model != nil {
		model = *o.Model
	}
	world := make([]int, size)
	hosts := make([]int, size)
	for i := range world {
		world[i] = i
		hosts[i] = p.Host(i)
	}
	c := newComm(p, rank, world, hosts, 0, &family{next: 1, log: new(progressLog)}, worldName, thr, model, o)
	return c, nil
}

func newComm(p P2P, rank int, world, hosts []int, id uint32, fam *family, name string, thr *Thresholds, model CostModel, o Options) *Communicator {
	c := &Communicator{
		p2p: p, rank: rank, size: len(world), world: world, hosts: hosts, id: id, fam: fam, name: &name,
		timeout: o.Timeout, chunk: o.ChunkBytes, segment: o.SegmentBytes, window: o.Window, strict: o.Strict,
		thr: thr, model: model,
		left: map[int]uint32{}, watched: map[int]bool{},
	}
	c.turn = sync.NewCond(&c.mu)
	all := make([]int, c.size)
	for i := range all {
		all[i] = i
	}
	c.all = group{ranks: all, me: rank}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.chunk == 0 {
		if n, err := strconv.Atoi(os.Getenv(EnvChunk)); err == nil && n > 0 {
			c.chunk = n
		}
	}
	c.chunk = orDefault(c.chunk, DefaultChunkBytes)
	c.segment = orDefault(c.segment, DefaultSegmentBytes)
	c.window = orDefault(c.window, DefaultWindow)
	model.ChunkBytes, model.SegmentBytes = c.chunk, c.segment
	c.model = model
	c.topo = newTopology(hosts, rank)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.opCtx, c.opCancel = context.WithCancelCause(context.Background())
	return c
}

func (c *Communicator) options() Options {
	return Options{Timeout: c.timeout, ChunkBytes: c.chunk, SegmentBytes: c.segment, Window: c.window, Strict: c.strict}
}

// Rank returns this rank's number in the communicator.
func (c *Communicator) Rank() int { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Communicator) Size() int { return c.size }

// Hosts returns the number of hosts the communicator spans.
func (c *Communicator) Hosts() int { return len(c.topo.hostRanks) }

// Thresholds returns a copy of the algorithm table the communicator uses.
func (c *Communicator) Thresholds() *Thresholds { return c.thr.Clone() }

// Close ends the communicator: an operation in flight fails with
// ErrClosed, as do later ones, and the other ranks learn that this rank
// left after the operations it completed, so that their operations that
// need it fail with ErrPeerGone instead of waiting. Close releases the
// goroutines the communicator started; it does not close a P2P given to
// New (its owner does, after Close), but the world communicator of Init
// and InitWith closes its connections. Closing a closed Communicator does nothing.
func (c *Communicator) Close() error {
	c.devMu.Lock()
	split := c.devSplit
	c.devSplit = nil
	c.devMu.Unlock()
	if split != nil { // the device collectives' communicators, over the same links
		split.local.Close()
		split.cross.Close()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.cur != nil {
		c.cur.cancel(ErrClosed)
	}
	c.mu.Unlock()
	c.cancel(ErrClosed)
	c.mu.Lock()
	for c.ended != c.seq { // the operations queued fail at once
		c.turn.Wait()
	}
	done := c.completed
	if c.timer != nil {
		c.timer.Stop() // set by the last operation (armTimeout)
		c.timerSet = false
	}
	c.mu.Unlock()
	c.tellAll(ctrlMsg{typ: ctrlLeave, subject: int32(c.rank), seq: done})
	c.wg.Wait()
	if c.release != nil {
		c.release()
	}
	c.arena.free()
	return nil
}

// Offloaded returns how many operations a collective plugin ran for this
// communicator (see EnvPlugin); it declined the others.
func (c *Communicator) Offloaded() uint64 { return c.offloaded.Load() }

// Transports says which transports the communicator's world was connected
// with by Init ("shm", "tcp", "shm+tcp", "self" for one rank), or "" for
// a P2P given to New.
func (c *Communicator) Transports() string { return c.transports }

func (c *Communicator) tag(class uint8, low uint32) uint64 {
	return uint64(c.id)<<40 | uint64(class)<<32 | uint64(low)
}

// tellAll sends a control message to every other rank, without waiting
// for a receiver (control messages are eager). P2P.Isend does not block, so
// tellAll may be called with c.mu held.
func (c *Communicator) tellAll(m ctrlMsg) {
	b := m.encode()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	reqs := make([]Transfer, 0, c.size)
	for r := range c.size {
		if r != c.rank {
			reqs = append(reqs, c.p2p.Isend(ctx, c.world[r], c.tag(classCtrl, 0), b))
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		for _, r := range reqs {
			r.Wait()
		}
	}()
}

// watch makes sure this rank listens for control messages from peer.
func (c *Communicator) watch(peer int) {
	c.mu.Lock()
	if c.watched[peer] || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.watched[peer] = true
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		buf := make([]byte, EagerBytes)
		for {
			t := c.p2p.Irecv(c.ctx, c.world[peer], c.tag(classCtrl, 0), buf)
			if b, ok := t.(interface{ background() }); ok {
				b.background()
			}
			n, err := t.Wait()
			if c.ctx.Err() != nil {
				return
			}
			if err != nil {
				// A lost peer is not an error by itself: it may have done
				// its part and exited. The operations that need it fail
				// on their own messages, and tell the others.
				return
			}
			m, ok := decodeCtrl(buf[:n])
			if !ok {
				continue
			}
			switch m.typ {
			case ctrlAbort:
				c.fail(m.seq, &PeerError{Op: c.curName(), Rank: int(m.subject), ReportedBy: peer, Err: sentinelOf(m.code), Detail: m.detail})
			case ctrlLeave:
				c.peerLeft(peer, m.seq)
			}
		}
	}()
}

func (c *Communicator) curName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur.name
	}
	return "communicator"
}

func leftError(name string, peer int, done uint32) *PeerError {
	return &PeerError{Op: name, Rank: peer, ReportedBy: -1, Err: ErrPeerGone,
		Detail: fmt.Sprintf("it closed its communicator after %d operations", done)}
}

func (c *Communicator) peerLeft(peer int, done uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left[peer] = done
	if o := c.cur; o != nil && o.seq > done { // c.cur is reused: read it locked
		o.cancel(leftError(o.name, peer, done))
	}
}

// fail breaks the communicator with err from operation seq on, cancels
// the operation in flight if that dooms it, and tells the other ranks. If
// the communicator was broken already, from seq or earlier, there is
// nothing new to tell. It returns err.
func (c *Communicator) fail(seq uint32, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil && seq >= c.brokenSeq {
		c.cancelCur()
		return err
	}
	if c.broken == nil {
		c.broken = err
	}
	c.brokenSeq = seq
	if !c.closed { // else Close tells the others
		// Posted before anyone can see the communicator broken, so that
		// the abort reaches every peer before this rank's departure does.
		m := ctrlMsg{typ: ctrlAbort, code: codeAborted, subject: int32(c.rank), seq: seq, detail: err.Error()}
		var pe *PeerError
		if errors.As(err, &pe) {
			// A relayed report keeps its text: the receivers add that this
			// rank reported it.
			m.code, m.subject, m.detail = codeOf(pe.Err), int32(pe.Rank), pe.Detail
		} else if errors.Is(err, ErrInvalid) {
			m.detail = fmt.Sprintf("its call failed: %v", err)
		}
		c.tellAll(m)
	}
	c.cancelCur()
	return err
}

// cancelCur cancels the operation in flight if the break dooms it. c.mu is
// held.
func (c *Communicator) cancelCur() {
	if o := c.cur; o != nil && o.seq >= c.brokenSeq {
		o.cancel(c.broken)
	}
}

func (c *Communicator) brokenErr(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("collectives: %s: %w", name, ErrClosed)
	}
	if c.broken != nil {
		return fmt.Errorf("collectives: %s: communicator broken by an earlier failure: %w", name, c.broken)
	}
	return nil
}

// Request is an operation started by one of the ...Async functions.
type Request struct {
	done chan struct{}
	err  error
}

func newRequest() *Request { return &Request{done: make(chan struct{})} }

func (r *Request) finish(err error) {
	r.err = err
	close(r.done)
}

// Wait blocks until the operation completes and returns its error. The
// buffers given to the operation may be used again once Wait returns.
func (r *Request) Wait() error {
	<-r.done
	return r.err
}

// Done returns a channel that is closed when the operation completes.
func (r *Request) Done() <-chan struct{} { return r.done }

// Test reports whether the operation completed and, if so, its error.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// WaitAll waits for every request and returns the errors of those that
// failed, joined.
func WaitAll(reqs ...*Request) error {
	var errs []error
	for _, r := range reqs {
		if err := r.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// enqueue takes the next place in the order of operations and returns
// its number.
func (c *Communicator) enqueue(kind Collective) uint32 {
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	c.fam.log.arrive(c.name, seq, kind)
	return seq
}

// runQueued runs operation seq once the operations before it ended, and
// returns its error.
func (c *Communicator) runQueued(ctx context.Context, name string, seq uint32, cl call) error {
	c.mu.Lock()
	for c.ended != seq-1 {
		c.turn.Wait()
	}
	c.mu.Unlock()
	err := c.execute(ctx, name, seq, cl)
	c.mu.Lock()
	c.ended = seq
	c.mu.Unlock()
	c.turn.Broadcast()
	return err
}

func (c *Communicator) run(ctx context.Context, name string, cl call) error {
	return c.runQueued(ctx, name, c.enqueue(cl.hdr.kind), cl)
}

func (c *Communicator) runAsync(ctx context.Context, name string, cl call) *Request {
	seq := c.enqueue(cl.hdr.kind)
	r := newRequest()
	go func() { r.finish(c.runQueued(ctx, name, seq, cl)) }()
	return r
}

var errOpTimeout = errors.New("operation timed out")

// armTimeout starts the timeout of operation o; c.mu is held. The timer
// is set once for a run of operations, not reset and stopped for each: a
// timer set for an earlier operation fires before this one's time is up,
// and timedOut sets it again for what is left.
func (c *Communicator) armTimeout(o *task) {
	o.start = time.Now()
	switch {
	case c.timer == nil:
		c.timer = time.AfterFunc(c.timeout, c.timedOut)
	case !c.timerSet:
		c.timer.Reset(c.timeout)
	}
	c.timerSet = true
}

// timedOut cancels the running operation if its time is up, else sets
// the timer again for the running operation's time left; with none
// running, it leaves the timer unset.
func (c *Communicator) timedOut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.cur
	switch {
	case o == nil:
		c.timerSet = false
	case time.Since(o.start) >= c.timeout:
		o.cancel(errOpTimeout)
		c.timerSet = false
	default:
		c.timer.Reset(c.timeout - time.Since(o.start))
	}
}

// The phases of the barriers of Options.Strict.
const (
	strictBefore = 254
	strictAfter  = 255
)

// call is an operation: its header, what its arguments' checks found
// wrong (checks that need no communication), what it does, and its
// arguments. run is a function that captures nothing, so that a call
// costs no allocation.
type call struct {
	hdr  header
	err  error
	run  func(o *task, cl call) error
	a, b []byte // the buffers
	root int
}

func (o *task) call(cl call) error {
	if cl.err != nil {
		return cl.err
	}
	strict := o.c.strict && o.c.size > 1
	if strict {
		o.setAlgo(AlgoDissemination, strictBefore)
		if err := o.barrierDissemination(o.c.whole()); err != nil {
			return err
		}
	}
	if err := cl.run(o, cl); err != nil {
		return err
	}
	if strict {
		o.setAlgo(AlgoDissemination, strictAfter)
		return o.barrierDissemination(o.c.whole())
	}
	return nil
}

func (c *Communicator) execute(ctx context.Context, name string, seq uint32, cl call) error {
	// The operation's context ends with the caller's, at Close (which
	// cancels c.cur) and at the timeout, kept by one timer per
	// communicator: no timer, no second context per operation, and none
	// at all for a caller's context that cannot end (see opCtx).
	hdr := cl.hdr
	hdr.class = classData
	hdr.seq = seq

	c.mu.Lock()
	var err error
	switch {
	case c.closed:
		err = fmt.Errorf("collectives: %s: %w", name, ErrClosed)
	case c.broken != nil && seq >= c.brokenSeq:
		err = fmt.Errorf("collectives: %s: communicator broken by an earlier failure: %w", name, c.broken)
	}
	for peer, done := range c.left {
		if err == nil && done < seq {
			err = leftError(name, peer, done)
		}
	}
	o := &c.op // one operation runs at a time
	if err == nil {
		octx, cancel := c.opCtx, c.opCancel
		own := ctx.Done() != nil
		if own {
			octx, cancel = context.WithCancelCause(ctx)
		}
		*o = task{c: c, ctx: octx, cancel: cancel, own: own, name: name, seq: seq, tag: c.tag(classData, seq), hdr: hdr,
			step: o.step, inflight: o.inflight[:0], msgs: &c.msgs}
		if o.step == nil {
			o.step = make([]uint32, 2*c.size)
		}
		c.msgs.reset()
		c.cur = o
		c.arena.reset()
		c.armTimeout(o)
	}
	c.mu.Unlock()
	if err == nil {
		if err = ctx.Err(); err == nil {
			err = o.call(cl)
		} else {
			err = fmt.Errorf("collectives: %s: %w", name, context.Cause(ctx))
		}
		o.finish()
		c.mu.Lock()
		c.cur = nil
		if err == nil {
			c.completed = seq
			if !o.own && c.opCtx.Err() != nil {
				c.opCtx, c.opCancel = context.WithCancelCause(context.Background())
			}
		}
		c.mu.Unlock()
		if o.own {
			o.cancel(nil)
		}
	}
	if err != nil {
		return c.fail(seq, err)
	}
	return nil
}
