package collectives

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
)

// The collectives. Every rank of the communicator calls the same ones in
// the same order, with the same element type, operator, root and lengths;
// a rank whose call differs is detected and every rank gets an error
// wrapping ErrMismatch. Buffers are not retained after the call returns
// (or, for the Async forms, after the Request completes); until then the
// caller must not touch them.

func invalid(name, format string, args ...any) error {
	return fmt.Errorf("collectives: %s: %w: %s", name, ErrInvalid, fmt.Sprintf(format, args...))
}

func (c *Communicator) checkRoot(name string, root int) error {
	if root < 0 || root >= c.size {
		return invalid(name, "root %d of %d ranks", root, c.size)
	}
	return nil
}

// The run functions of the calls: top-level functions, since a function
// literal in a generic function captures its dictionary and would cost an
// allocation per call.
func runAllReduce(o *task, cl call) error     { return o.allreduce(cl.a) }
func runBroadcast(o *task, cl call) error     { return o.broadcast(cl.a, cl.root) }
func runReduce(o *task, cl call) error        { return o.reduceRoot(cl.a, cl.root) }
func runAllGather(o *task, cl call) error     { return o.allgather(cl.a, cl.b) }
func runReduceScatter(o *task, cl call) error { return o.reduceScatter(cl.a, cl.b) }
func runAllToAll(o *task, cl call) error      { return o.alltoall(cl.a, cl.b) }

func checkOp(name string, op Op) error {
	if !op.valid() {
		return invalid(name, "unknown operator %d", uint8(op))
	}
	return nil
}

// ---- AllReduce ----

func allReduce[T Element](buf []T, op Op) call {
	b := asBytes(buf)
	return call{
		hdr: header{kind: CollAllReduce, dtype: DTypeOf[T](), op: op, count: int64(len(buf))},
		err: checkOp("allreduce", op),
		run: runAllReduce,
		a:   b,
	}
}

// AllReduce reduces buf element-wise over all ranks with op and leaves the
// result, identical on every rank, in buf.
func AllReduce[T Element](ctx context.Context, c *Communicator, buf []T, op Op) error {
	return c.run(ctx, "allreduce", allReduce(buf, op))
}

// AllReduceAsync starts an AllReduce and returns at once.
func AllReduceAsync[T Element](ctx context.Context, c *Communicator, buf []T, op Op) *Request {
	return c.runAsync(ctx, "allreduce", allReduce(buf, op))
}

func (o *task) allreduce(buf []byte) error {
	c := o.c
	if ok, err := o.offload(buf, buf, len(buf)/o.esz(), 0); ok {
		return err
	}
	ch := c.choose(CollAllReduce, int64(len(buf)), false)
	if c.size > 1 {
		if ch.Algorithm == AlgoHierarchical {
			if err := o.allreduceHier(ch, buf); err != nil {
				return err
			}
		} else {
			o.setAlgo(ch.Algorithm, 0)
			if err := o.allreduceAlgo(ch.Algorithm, c.whole(), buf); err != nil {
				return err
			}
		}
	}
	if o.hdr.op == Avg {
		divide(o.hdr.dtype, buf, c.size)
	}
	return nil
}

func (o *task) allreduceHier(ch Choice, buf []byte) error {
	t := o.c.topo
	ph := ch.Phases
	local := t.local()
	if ph[0].Collective == CollReduceScatter {
		off := blocks(len(buf)/o.esz(), local.n(), o.esz())
		o.setAlgo(ph[0].Algorithm, 1)
		if err := o.reduceScatterAlgo(ph[0].Algorithm, local, buf, off); err != nil {
			return err
		}
		o.setAlgo(ph[1].Algorithm, 2)
		if err := o.allreduceAlgo(ph[1].Algorithm, t.cross(t.myLocal), buf[off[local.me]:off[local.me+1]]); err != nil {
			return err
		}
		o.setAlgo(ph[2].Algorithm, 3)
		return o.allgatherAlgo(ph[2].Algorithm, local, buf, off)
	}
	o.setAlgo(ph[0].Algorithm, 1)
	if err := o.reduceAlgo(ph[0].Algorithm, local, buf, 0); err != nil {
		return err
	}
	if t.myLocal == 0 {
		o.setAlgo(ph[1].Algorithm, 2)
		if err := o.allreduceAlgo(ph[1].Algorithm, t.leaders(-1, o.c.rank), buf); err != nil {
			return err
		}
	}
	o.setAlgo(ph[2].Algorithm, 3)
	return o.bcastAlgo(ph[2].Algorithm, local, buf, 0)
}

// ---- Broadcast ----

func broadcast[T Element](c *Communicator, buf []T, root int) call {
	b := asBytes(buf)
	return call{
		hdr:  header{kind: CollBroadcast, dtype: DTypeOf[T](), root: int32(root), count: int64(len(buf))},
		err:  c.checkRoot("broadcast", root),
		run:  runBroadcast,
		a:    b,
		root: root,
	}
}

// Broadcast copies buf of rank root into buf of every rank.
func Broadcast[T Element](ctx context.Context, c *Communicator, buf []T, root int) error {
	return c.run(ctx, "broadcast", broadcast(c, buf, root))
}

// BroadcastAsync starts a Broadcast and returns at once.
func BroadcastAsync[T Element](ctx context.Context, c *Communicator, buf []T, root int) *Request {
	return c.runAsync(ctx, "broadcast", broadcast(c, buf, root))
}

func (o *task) broadcast(buf []byte, root int) error {
	c := o.c
	if c.size == 1 {
		return nil
	}
	if ok, err := o.offload(buf, buf, len(buf)/o.esz(), root); ok {
		return err
	}
	ch := c.choose(CollBroadcast, int64(len(buf)), false)
	if ch.Algorithm != AlgoHierarchical {
		o.setAlgo(ch.Algorithm, 0)
		return o.bcastAlgo(ch.Algorithm, c.whole(), buf, root)
	}
	t := c.topo
	lead := t.leaders(root, c.rank)
	if lead.me >= 0 {
		o.setAlgo(ch.Phases[0].Algorithm, 1)
		if err := o.bcastAlgo(ch.Phases[0].Algorithm, lead, buf, t.hostOf[root]); err != nil {
			return err
		}
	}
	local := t.local()
	o.setAlgo(ch.Phases[1].Algorithm, 2)
	return o.bcastAlgo(ch.Phases[1].Algorithm, local, buf, indexOf(local.ranks, lead.ranks[t.myHost]))
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// ---- Reduce ----

func reduceCall[T Element](c *Communicator, buf []T, op Op, root int) call {
	b := asBytes(buf)
	err := checkOp("reduce", op)
	if err == nil {
		err = c.checkRoot("reduce", root)
	}
	return call{
		hdr:  header{kind: CollReduce, dtype: DTypeOf[T](), op: op, root: int32(root), count: int64(len(buf))},
		err:  err,
		run:  runReduce,
		a:    b,
		root: root,
	}
}

// Reduce reduces buf element-wise over all ranks with op into buf of rank
// root. The other ranks' buffers are left unchanged.
func Reduce[T Element](ctx context.Context, c *Communicator, buf []T, op Op, root int) error {
	return c.run(ctx, "reduce", reduceCall(c, buf, op, root))
}

// ReduceAsync starts a Reduce and returns at once.
func ReduceAsync[T Element](ctx context.Context, c *Communicator, buf []T, op Op, root int) *Request {
	return c.runAsync(ctx, "reduce", reduceCall(c, buf, op, root))
}

func (o *task) reduceRoot(buf []byte, root int) error {
	c := o.c
	if c.size > 1 {
		ch := c.choose(CollReduce, int64(len(buf)), false)
		if ch.Algorithm != AlgoHierarchical {
			o.setAlgo(ch.Algorithm, 0)
			if err := o.reduceAlgo(ch.Algorithm, c.whole(), buf, root); err != nil {
				return err
			}
		} else {
			t := c.topo
			lead := t.leaders(root, c.rank)
			local := t.local()
			work := buf
			if lead.me >= 0 && c.rank != root {
				work = clone(buf) // a leader's partial result must not land in its buf
			}
			o.setAlgo(ch.Phases[0].Algorithm, 1)
			if err := o.reduceAlgo(ch.Phases[0].Algorithm, local, work, indexOf(local.ranks, lead.ranks[t.myHost])); err != nil {
				return err
			}
			if lead.me >= 0 {
				o.setAlgo(ch.Phases[1].Algorithm, 2)
				if err := o.reduceAlgo(ch.Phases[1].Algorithm, lead, work, t.hostOf[root]); err != nil {
					return err
				}
			}
		}
	}
	if o.hdr.op == Avg && c.rank == root {
		divide(o.hdr.dtype, buf, c.size)
	}
	return nil
}

// ---- AllGather ----

func allGather[T Element](c *Communicator, send, recv []T) call {
	s, r := asBytes(send), asBytes(recv)
	var err error
	if lo, hi := BlockRange(len(recv), c.size, c.rank); len(send) != hi-lo {
		err = invalid("allgather", "rank %d of %d contributes %d elements of %d, not %d", c.rank, c.size, hi-lo, len(recv), len(send))
	}
	return call{
		hdr: header{kind: CollAllGather, dtype: DTypeOf[T](), count: int64(len(recv))},
		err: err,
		run: runAllGather,
		a:   s,
		b:   r,
	}
}

func (o *task) allgather(s, r []byte) error {
	c := o.c
	if len(r) == c.size*len(s) {
		if ok, err := o.offload(s, r, len(s)/o.esz(), 0); ok {
			return err
		}
	}
	off := blocks(len(r)/o.esz(), c.size, o.esz())
	copy(r[off[c.rank]:off[c.rank+1]], s)
	ch := c.choose(CollAllGather, int64(len(r)), false)
	o.setAlgo(ch.Algorithm, 0)
	return o.allgatherAlgo(ch.Algorithm, c.whole(), r, off)
}

// AllGather gathers every rank's send into recv on every rank: recv holds
// the blocks of all ranks in rank order, laid out as [BlockRange] says,
// so len(send) must be the length of this rank's block of len(recv) (with
// equal contributions: len(recv) == Size()*len(send)).
func AllGather[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.run(ctx, "allgather", allGather(c, send, recv))
}

// AllGatherAsync starts an AllGather and returns at once.
func AllGatherAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.runAsync(ctx, "allgather", allGather(c, send, recv))
}

// ---- ReduceScatter ----

func reduceScatter[T Element](c *Communicator, send, recv []T, op Op) call {
	s, r := asBytes(send), asBytes(recv)
	err := checkOp("reducescatter", op)
	if lo, hi := BlockRange(len(send), c.size, c.rank); err == nil && len(recv) != hi-lo {
		err = invalid("reducescatter", "rank %d of %d receives %d elements of %d, not %d", c.rank, c.size, hi-lo, len(send), len(recv))
	}
	return call{
		hdr: header{kind: CollReduceScatter, dtype: DTypeOf[T](), op: op, count: int64(len(send))},
		err: err,
		run: runReduceScatter,
		a:   s,
		b:   r,
	}
}

func (o *task) reduceScatter(s, r []byte) error {
	c := o.c
	if len(s) == c.size*len(r) {
		if ok, err := o.offload(s, r, len(r)/o.esz(), 0); ok {
			return err
		}
	}
	off := blocks(len(s)/o.esz(), c.size, o.esz())
	work := clone(s)
	if c.size > 1 {
		ch := c.choose(CollReduceScatter, int64(len(s)), false)
		o.setAlgo(ch.Algorithm, 0)
		if err := o.reduceScatterAlgo(ch.Algorithm, c.whole(), work, off); err != nil {
			return err
		}
	}
	copy(r, work[off[c.rank]:off[c.rank+1]])
	if o.hdr.op == Avg {
		divide(o.hdr.dtype, r, c.size)
	}
	return nil
}

// ReduceScatter reduces send element-wise over all ranks with op and
// leaves block Rank() of the result, laid out as [BlockRange] says, in
// recv (with equal blocks: len(send) == Size()*len(recv)).
func ReduceScatter[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) error {
	return c.run(ctx, "reducescatter", reduceScatter(c, send, recv, op))
}

// ReduceScatterAsync starts a ReduceScatter and returns at once.
func ReduceScatterAsync[T Element](ctx context.Context, c *Communicator, send, recv []T, op Op) *Request {
	return c.runAsync(ctx, "reducescatter", reduceScatter(c, send, recv, op))
}

// ---- AllToAll ----

func allToAll[T Element](c *Communicator, send, recv []T) call {
	s, r := asBytes(send), asBytes(recv)
	var err error
	if len(send) != len(recv) || len(send)%c.size != 0 {
		err = invalid("alltoall", "send and receive buffers of %d and %d elements: both must be the same multiple of %d", len(send), len(recv), c.size)
	}
	return call{
		hdr: header{kind: CollAllToAll, dtype: DTypeOf[T](), count: int64(len(send))},
		err: err,
		run: runAllToAll,
		a:   s,
		b:   r,
	}
}

func (o *task) alltoall(s, r []byte) error {
	c := o.c
	b := len(s) / c.size
	if ok, err := o.offload(s, r, b/o.esz(), 0); ok {
		return err
	}
	ch := c.choose(CollAllToAll, int64(b), false)
	o.setAlgo(ch.Algorithm, 0)
	return o.alltoallAlgo(ch.Algorithm, c.whole(), s, r, b)
}

// AllToAll sends block j of send to rank j, which receives it as block
// Rank() of its recv: both buffers hold Size() blocks of the same length.
func AllToAll[T Element](ctx context.Context, c *Communicator, send, recv []T) error {
	return c.run(ctx, "alltoall", allToAll(c, send, recv))
}

// AllToAllAsync starts an AllToAll and returns at once.
func AllToAllAsync[T Element](ctx context.Context, c *Communicator, send, recv []T) *Request {
	return c.runAsync(ctx, "alltoall", allToAll(c, send, recv))
}

// ---- Barrier ----

func (c *Communicator) barrier() call {
	return call{hdr: header{kind: CollBarrier, dtype: Uint8}, run: func(o *task, _ call) error {
		o.setAlgo(AlgoDissemination, 0)
		return o.barrierDissemination(o.c.whole())
	}}
}

// Barrier returns once every rank has called it.
func (c *Communicator) Barrier(ctx context.Context) error {
	return c.run(ctx, "barrier", c.barrier())
}

// BarrierAsync starts a Barrier and returns at once.
func (c *Communicator) BarrierAsync(ctx context.Context) *Request {
	return c.runAsync(ctx, "barrier", c.barrier())
}

// ---- Split ----

// Split partitions the communicator: the ranks that pass the same color
// get a new Communicator together, ranked by key (ties by their rank
// here). A rank that passes a negative color takes part but gets nil.
// Every rank of c must call Split; Split calls on communicators that share
// ranks must be made in the same order on every rank (as in MPI). The new
// communicator has its own order of operations, independent of c's, and
// inherits c's options and algorithm table.
func (c *Communicator) Split(ctx context.Context, color, key int) (*Communicator, error) {
	var child *Communicator
	c.fam.mu.Lock()
	defer c.fam.mu.Unlock()
	err := c.run(ctx, "split", call{hdr: header{kind: kindSplit, dtype: Int64, count: int64(3 * c.size)}, run: func(o *task, _ call) error {
		mine := []int64{int64(color), int64(key), int64(c.fam.next)}
		all := make([]int64, 3*c.size)
		copy(all[3*c.rank:], mine)
		off := blocks(len(all), c.size, 8)
		ch := c.choose(CollAllGather, int64(8*len(all)), false)
		o.setAlgo(ch.Algorithm, 0)
		if err := o.allgatherAlgo(ch.Algorithm, c.whole(), asBytes(all), off); err != nil {
			return err
		}
		next := int64(0)
		colors := map[int64]bool{}
		for r := range c.size {
			next = max(next, all[3*r+2])
			if all[3*r] >= 0 {
				colors[all[3*r]] = true
			}
		}
		sorted := make([]int64, 0, len(colors))
		for k := range colors {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		if next+int64(len(sorted)) > maxCommID {
			return fmt.Errorf("collectives: split: %w: out of communicator ids", ErrInvalid)
		}
		c.fam.next = uint32(max(int64(c.fam.next), next+int64(len(sorted))))
		if color < 0 {
			return nil
		}
		var members []int
		for r := range c.size {
			if all[3*r] == int64(color) {
				members = append(members, r)
			}
		}
		slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(all[3*a+1], all[3*b+1]) })
		index, _ := slices.BinarySearch(sorted, int64(color))
		id := next + int64(index)
		world := make([]int, len(members))
		hosts := make([]int, len(members))
		rank := 0
		for i, m := range members {
			world[i], hosts[i] = c.world[m], c.hosts[m]
			if m == c.rank {
				rank = i
			}
		}
		child = newComm(c.p2p, rank, world, hosts, uint32(id), c.fam, splitName(*c.name, o.seq, color), c.thr.Clone(), c.model, c.options())
		return nil
	}})
	if err != nil {
		return nil, err
	}
	return child, nil
}

// ---- Send and Recv ----

// MaxTag is the largest tag Send and Recv take.
const MaxTag = math.MaxUint32

// p2pStart posts a Send or Recv and returns the function that waits for
// it. Posting in the caller's goroutine keeps the order of messages.
func (c *Communicator) p2pStart(ctx context.Context, name string, recv bool, peer, tag int, dt DType, count int, data []byte) func() error {
	c.fam.log.p2p.Add(1)
	if peer < 0 || peer >= c.size || peer == c.rank {
		err := invalid(name, "peer %d (this is rank %d of %d)", peer, c.rank, c.size)
		return func() error { return err }
	}
	if tag < 0 || tag > MaxTag {
		err := invalid(name, "tag %d outside 0..%d", tag, MaxTag)
		return func() error { return err }
	}
	if err := c.brokenErr(name); err != nil {
		return func() error { return err }
	}
	octx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.ctx, func() { cancel(context.Cause(c.ctx)) })
	tctx, tcancel := context.WithTimeoutCause(octx, c.timeout, errOpTimeout)
	o := &task{c: c, ctx: tctx, cancel: cancel, name: name, tag: c.tag(classUser, uint32(tag)),
		hdr: header{class: classData, kind: kindSend, dtype: dt, count: int64(count)}}
	o.setAlgo(AlgoNone, 0)
	g := group{ranks: []int{peer}}
	var m *msg
	if recv {
		m = o.recv(g, 0, data)
	} else {
		m = o.send(g, 0, data)
	}
	return func() error {
		err := o.wait(m)
		o.finish()
		stop()
		tcancel()
		cancel(nil)
		return err
	}
}

// Send sends buf to rank peer with a tag (0..MaxTag). It returns when buf
// may be used again, which for large messages is when peer received it.
// Messages to one peer with one tag arrive in the order they were sent
// (for SendAsync, the order of the calls). A failed Send or Recv does not
// break the communicator; on a broken or closed one they fail at once.
func Send[T Element](ctx context.Context, c *Communicator, buf []T, peer, tag int) error {
	return c.p2pStart(ctx, "send", false, peer, tag, DTypeOf[T](), len(buf), asBytes(buf))()
}

// Recv receives into buf the next message that rank peer sent with tag.
// The message must have buf's type and length, or Recv fails with
// ErrMismatch.
func Recv[T Element](ctx context.Context, c *Communicator, buf []T, peer, tag int) error {
	return c.p2pStart(ctx, "recv", true, peer, tag, DTypeOf[T](), len(buf), asBytes(buf))()
}

// SendAsync starts a Send and returns at once.
func SendAsync[T Element](ctx context.Context, c *Communicator, buf []T, peer, tag int) *Request {
	return goRequest(c.p2pStart(ctx, "send", false, peer, tag, DTypeOf[T](), len(buf), asBytes(buf)))
}

// RecvAsync starts a Recv and returns at once.
func RecvAsync[T Element](ctx context.Context, c *Communicator, buf []T, peer, tag int) *Request {
	return goRequest(c.p2pStart(ctx, "recv", true, peer, tag, DTypeOf[T](), len(buf), asBytes(buf)))
}

func goRequest(wait func() error) *Request {
	r := newRequest()
	go func() { r.finish(wait()) }()
	return r
}
