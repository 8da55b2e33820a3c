package collectives

import "math/bits"

// The algorithms below run among the ranks of a group (the whole
// communicator, the ranks of one host, or one rank per host) on byte
// buffers holding elements of the operation's type. Block boundaries are
// byte offsets that fall between elements.

// span is a byte range [lo, hi).
type span struct{ lo, hi int }

// BlockRange returns the elements [lo, hi) of block i when count elements
// are split into n blocks as evenly as possible, the first count%n blocks
// one element longer. AllGather and ReduceScatter lay out their blocks
// this way.
func BlockRange(count, n, i int) (lo, hi int) {
	q, r := count/n, count%n
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// blocks returns the n+1 byte offsets of the blocks of a buffer of count
// elements of esz bytes.
func blocks(count, n, esz int) []int {
	off := make([]int, n+1)
	for i := range n {
		lo, _ := BlockRange(count, n, i)
		off[i] = lo * esz
	}
	off[n] = count * esz
	return off
}

// chunks splits s into pieces of at most unit bytes; an empty s gives one
// empty piece, so that every step still exchanges a message.
func chunks(s span, unit int) []span {
	if s.hi <= s.lo {
		return []span{s}
	}
	var out []span
	for lo := s.lo; lo < s.hi; lo += unit {
		out = append(out, span{lo, min(lo+unit, s.hi)})
	}
	return out
}

func (o *task) esz() int { return o.hdr.dtype.Size() }

// unit rounds a pipeline unit down to whole elements.
func (o *task) unit(target int) int {
	e := o.esz()
	return max(e, target-target%e)
}

func (o *task) reduce(dst, src []byte) { reduce(o.hdr.dtype, o.hdr.op, dst, src) }

func clone(b []byte) []byte {
	c := alloc(len(b))
	copy(c, b)
	return c
}

// fold maps a group of n ranks onto p = 2^floor(log2 n) virtual ranks: the
// first 2*rem ranks pair up (the even one hands its data to the odd one,
// which stands for both), the others stand for themselves.
type fold struct {
	p, rem int
	v      int // this rank's virtual rank, -1 if it folded away
}

func newFold(n, me int) fold {
	f := fold{p: 1 << (bits.Len(uint(n)) - 1)}
	f.rem = n - f.p
	switch {
	case me >= 2*f.rem:
		f.v = me - f.rem
	case me%2 == 1:
		f.v = me / 2
	default:
		f.v = -1
	}
	return f
}

// real returns the group index that virtual rank v runs on.
func (f fold) real(v int) int {
	if v < f.rem {
		return 2*v + 1
	}
	return v + f.rem
}

// first returns the first group index virtual rank v stands for (v may be
// p, giving n).
func (f fold) first(v int) int {
	if v < f.rem {
		return 2 * v
	}
	return v + f.rem
}

// ---- AllReduce ----

func (o *task) allreduceAlgo(a Algorithm, g group, buf []byte) error {
	if g.n() == 1 {
		return nil
	}
	switch a {
	case AlgoRecursiveDoubling:
		return o.arRecursiveDoubling(g, buf)
	case AlgoRabenseifner:
		return o.arRabenseifner(g, buf)
	default:
		off := blocks(len(buf)/o.esz(), g.n(), o.esz())
		if err := o.rsRing(g, buf, off); err != nil {
			return err
		}
		return o.agRing(g, buf, off)
	}
}

// foldIn hands the whole buffer of the even ranks of the folded pairs to
// their odd partners, which reduce it into theirs.
func (o *task) foldIn(g group, f fold, buf, tmp []byte) error {
	me := g.me
	if me >= 2*f.rem {
		return nil
	}
	if f.v < 0 {
		return o.wait(o.send(g, me+1, buf))
	}
	if err := o.wait(o.recv(g, me-1, tmp[:len(buf)])); err != nil {
		return err
	}
	o.reduce(buf, tmp[:len(buf)])
	return nil
}

// foldOut gives the even ranks of the folded pairs the result.
func (o *task) foldOut(g group, f fold, buf []byte) error {
	me := g.me
	if me >= 2*f.rem {
		return nil
	}
	if f.v < 0 {
		return o.wait(o.recv(g, me+1, buf))
	}
	return o.wait(o.send(g, me-1, buf))
}

func (o *task) arRecursiveDoubling(g group, buf []byte) error {
	f := newFold(g.n(), g.me)
	tmp := o.alloc(len(buf))
	if err := o.foldIn(g, f, buf, tmp); err != nil {
		return err
	}
	if f.v >= 0 {
		for d := 1; d < f.p; d <<= 1 {
			peer := f.real(f.v ^ d)
			if err := o.sendrecv(g, peer, buf, peer, tmp); err != nil {
				return err
			}
			o.reduce(buf, tmp)
		}
	}
	return o.foldOut(g, f, buf)
}

// halve runs a recursive-halving reduce-scatter among the virtual ranks:
// voff gives the byte offset where each virtual rank's block starts
// (len p+1). Virtual rank v ends with its block reduced.
func (o *task) halve(g group, f fold, buf, tmp []byte, voff []int) error {
	lo, hi := 0, f.p
	for d := f.p / 2; d >= 1; d /= 2 {
		peer := f.real(f.v ^ d)
		mid := (lo + hi) / 2
		kLo, kHi, sLo, sHi := lo, mid, mid, hi
		if f.v&d != 0 {
			kLo, kHi, sLo, sHi = mid, hi, lo, mid
		}
		keep := buf[voff[kLo]:voff[kHi]]
		t := tmp[:len(keep)]
		if err := o.sendrecv(g, peer, buf[voff[sLo]:voff[sHi]], peer, t); err != nil {
			return err
		}
		o.reduce(keep, t)
		lo, hi = kLo, kHi
	}
	return nil
}

// double runs a recursive-doubling allgather among the virtual ranks,
// each starting with its own block.
func (o *task) double(g group, f fold, buf []byte, voff []int) error {
	lo, hi := f.v, f.v+1
	for d := 1; d < f.p; d <<= 1 {
		peer := f.real(f.v ^ d)
		w := hi - lo
		oLo, oHi := hi, hi+w
		if f.v&d != 0 {
			oLo, oHi = lo-w, lo
		}
		if err := o.sendrecv(g, peer, buf[voff[lo]:voff[hi]], peer, buf[voff[oLo]:voff[oHi]]); err != nil {
			return err
		}
		lo, hi = min(lo, oLo), max(hi, oHi)
	}
	return nil
}

func (o *task) arRabenseifner(g group, buf []byte) error {
	f := newFold(g.n(), g.me)
	tmp := o.alloc(len(buf))
	if err := o.foldIn(g, f, buf, tmp); err != nil {
		return err
	}
	if f.v >= 0 {
		voff := blocks(len(buf)/o.esz(), f.p, o.esz())
		if err := o.halve(g, f, buf, tmp, voff); err != nil {
			return err
		}
		if err := o.double(g, f, buf, voff); err != nil {
			return err
		}
	}
	return o.foldOut(g, f, buf)
}

// rsRing is the pipelined ring reduce-scatter: index i of the group ends
// with block i (off[i]:off[i+1]) of data reduced over the group. Each
// block travels the ring in chunks; a chunk is forwarded as soon as it is
// reduced, so that every link stays busy.
func (o *task) rsRing(g group, data []byte, off []int) error {
	n, me := g.n(), g.me
	if n == 1 {
		return nil
	}
	right, left := (me+1)%n, (me+n-1)%n
	piece := func(j int) span {
		j = ((j % n) + n) % n
		return span{off[j], off[j+1]}
	}
	unit := o.unit(o.c.chunk)
	type item struct {
		step int
		s    span
	}
	var recvs []item
	maxLen := 0
	for s := 0; s < n-1; s++ {
		for _, sp := range chunks(piece(me-s-2), unit) {
			recvs = append(recvs, item{s, sp})
			maxLen = max(maxLen, sp.hi-sp.lo)
		}
	}
	w := o.c.window
	slots := o.alloc(w * maxLen)
	slot := func(k int) []byte {
		i := (k % w) * maxLen
		return slots[i : i+recvs[k].s.hi-recvs[k].s.lo]
	}
	var sends []*msg
	for _, sp := range chunks(piece(me-1), unit) {
		sends = append(sends, o.send(g, right, data[sp.lo:sp.hi]))
	}
	rq := make([]*msg, len(recvs))
	for k := range min(w, len(recvs)) {
		rq[k] = o.recv(g, left, slot(k))
	}
	for k, it := range recvs {
		if err := o.wait(rq[k]); err != nil {
			return err
		}
		o.reduce(data[it.s.lo:it.s.hi], slot(k))
		if k+w < len(recvs) {
			rq[k+w] = o.recv(g, left, slot(k+w))
		}
		if it.step < n-2 {
			sends = append(sends, o.send(g, right, data[it.s.lo:it.s.hi]))
		}
	}
	return o.wait(sends...)
}

// agRing is the pipelined ring allgather: index i starts with block i and
// every index ends with all blocks.
func (o *task) agRing(g group, data []byte, off []int) error {
	n, me := g.n(), g.me
	if n == 1 {
		return nil
	}
	right, left := (me+1)%n, (me+n-1)%n
	piece := func(j int) span {
		j = ((j % n) + n) % n
		return span{off[j], off[j+1]}
	}
	unit := o.unit(o.c.chunk)
	type item struct {
		step int
		s    span
	}
	var recvs []item
	for s := 0; s < n-1; s++ {
		for _, sp := range chunks(piece(me-s-1), unit) {
			recvs = append(recvs, item{s, sp})
		}
	}
	var sends []*msg
	for _, sp := range chunks(piece(me), unit) {
		sends = append(sends, o.send(g, right, data[sp.lo:sp.hi]))
	}
	w := o.c.window
	rq := make([]*msg, len(recvs))
	for k := range min(w, len(recvs)) {
		rq[k] = o.recv(g, left, data[recvs[k].s.lo:recvs[k].s.hi])
	}
	for k, it := range recvs {
		if err := o.wait(rq[k]); err != nil {
			return err
		}
		if k+w < len(recvs) {
			rq[k+w] = o.recv(g, left, data[recvs[k+w].s.lo:recvs[k+w].s.hi])
		}
		if it.step < n-2 {
			sends = append(sends, o.send(g, right, data[it.s.lo:it.s.hi]))
		}
	}
	return o.wait(sends...)
}

// ---- AllGather and ReduceScatter ----

// allgatherAlgo completes data (laid out in blocks off, this index's block
// in place) with every other index's block.
func (o *task) allgatherAlgo(a Algorithm, g group, data []byte, off []int) error {
	if g.n() == 1 {
		return nil
	}
	switch a {
	case AlgoRecursiveDoubling:
		return o.agRecursiveDoubling(g, data, off)
	case AlgoBruck:
		return o.agBruck(g, data, off)
	default:
		return o.agRing(g, data, off)
	}
}

func (o *task) agRecursiveDoubling(g group, data []byte, off []int) error {
	me := g.me
	f := newFold(g.n(), me)
	if me < 2*f.rem {
		if f.v < 0 {
			if err := o.wait(o.send(g, me+1, data[off[me]:off[me+1]])); err != nil {
				return err
			}
		} else if err := o.wait(o.recv(g, me-1, data[off[me-1]:off[me]])); err != nil {
			return err
		}
	}
	if f.v >= 0 {
		voff := make([]int, f.p+1)
		for v := range voff {
			voff[v] = off[f.first(v)]
		}
		if err := o.double(g, f, data, voff); err != nil {
			return err
		}
	}
	return o.foldOut(g, f, data)
}

// agBruck: log steps for any group size. Index me keeps the blocks in the
// order me, me+1, ... in a scratch buffer; at distance d it sends its
// first min(d, n-d) blocks to me-d and receives the next ones from me+d.
func (o *task) agBruck(g group, data []byte, off []int) error {
	n, me := g.n(), g.me
	pos := make([]int, n+1) // byte offset of position i (block me+i)
	for i := range n {
		j := (me + i) % n
		pos[i+1] = pos[i] + off[j+1] - off[j]
	}
	tmp := o.alloc(pos[n])
	copy(tmp, data[off[me]:off[me+1]])
	for d := 1; d < n; d <<= 1 {
		cnt := min(d, n-d)
		if err := o.sendrecv(g, (me-d+n)%n, tmp[:pos[cnt]], (me+d)%n, tmp[pos[d]:pos[d+cnt]]); err != nil {
			return err
		}
	}
	for i := range n {
		j := (me + i) % n
		copy(data[off[j]:off[j+1]], tmp[pos[i]:pos[i+1]])
	}
	return nil
}

// reduceScatterAlgo reduces data (laid out in blocks off) so that index i
// ends with block i reduced; the rest of data is scratch.
func (o *task) reduceScatterAlgo(a Algorithm, g group, data []byte, off []int) error {
	if g.n() == 1 {
		return nil
	}
	if a == AlgoRecursiveHalving {
		return o.rsRecursiveHalving(g, data, off)
	}
	return o.rsRing(g, data, off)
}

func (o *task) rsRecursiveHalving(g group, data []byte, off []int) error {
	me := g.me
	f := newFold(g.n(), me)
	tmp := o.alloc(len(data))
	if err := o.foldIn(g, f, data, tmp); err != nil {
		return err
	}
	if f.v >= 0 {
		voff := make([]int, f.p+1)
		for v := range voff {
			voff[v] = off[f.first(v)]
		}
		if err := o.halve(g, f, data, tmp, voff); err != nil {
			return err
		}
	}
	if me < 2*f.rem {
		if f.v < 0 {
			return o.wait(o.recv(g, me+1, data[off[me]:off[me+1]]))
		}
		return o.wait(o.send(g, me-1, data[off[me-1]:off[me]]))
	}
	return nil
}

// ---- Broadcast and Reduce ----

// tree returns the parent and children of index vr (root 0) in a chain or
// a binary tree of n.
func tree(vr, n int, binary bool) (parent int, kids []int) {
	if binary {
		parent = (vr - 1) / 2
		for _, k := range []int{2*vr + 1, 2*vr + 2} {
			if k < n {
				kids = append(kids, k)
			}
		}
		return parent, kids
	}
	if vr+1 < n {
		kids = []int{vr + 1}
	}
	return vr - 1, kids
}

func (o *task) bcastAlgo(a Algorithm, g group, buf []byte, root int) error {
	if g.n() == 1 {
		return nil
	}
	rg := g.rotate(root)
	switch a {
	case AlgoChain, AlgoBinaryTree:
		return o.bcastPipelined(rg, buf, a == AlgoBinaryTree)
	case AlgoScatterAllGather:
		return o.bcastScatterAllGather(rg, buf)
	default:
		return o.bcastBinomial(rg, buf)
	}
}

// The broadcast and reduce algorithms take a group rotated so that the
// root is index 0.

func (o *task) bcastBinomial(g group, buf []byte) error {
	n, vr := g.n(), g.me
	mask := 1
	for ; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			if err := o.wait(o.recv(g, vr-mask, buf)); err != nil {
				return err
			}
			break
		}
	}
	var sends []*msg
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			sends = append(sends, o.send(g, vr+mask, buf))
		}
	}
	return o.wait(sends...)
}

func (o *task) bcastPipelined(g group, buf []byte, binary bool) error {
	vr := g.me
	parent, kids := tree(vr, g.n(), binary)
	segs := chunks(span{0, len(buf)}, o.unit(o.c.segment))
	w := o.c.window
	rq := make([]*msg, len(segs))
	if vr != 0 {
		for k := range min(w, len(segs)) {
			rq[k] = o.recv(g, parent, buf[segs[k].lo:segs[k].hi])
		}
	}
	var sends []*msg
	for k, s := range segs {
		if vr != 0 {
			if err := o.wait(rq[k]); err != nil {
				return err
			}
			if k+w < len(segs) {
				rq[k+w] = o.recv(g, parent, buf[segs[k+w].lo:segs[k+w].hi])
			}
		}
		for _, kid := range kids {
			sends = append(sends, o.send(g, kid, buf[s.lo:s.hi]))
		}
	}
	return o.wait(sends...)
}

// bcastScatterAllGather scatters the blocks down a binomial tree, then
// gathers them around the ring (van de Geijn).
func (o *task) bcastScatterAllGather(g group, buf []byte) error {
	n, vr := g.n(), g.me
	off := blocks(len(buf)/o.esz(), n, o.esz())
	mask := 1
	for ; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			if err := o.wait(o.recv(g, vr-mask, buf[off[vr]:off[min(vr+mask, n)]])); err != nil {
				return err
			}
			break
		}
	}
	var sends []*msg
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			sends = append(sends, o.send(g, vr+mask, buf[off[vr+mask]:off[min(vr+2*mask, n)]]))
		}
	}
	if err := o.wait(sends...); err != nil {
		return err
	}
	return o.agRing(g, buf, off)
}

// reduceAlgo reduces buf over the group into buf at index root; the other
// indexes' buffers are left as they were.
func (o *task) reduceAlgo(a Algorithm, g group, buf []byte, root int) error {
	if g.n() == 1 {
		return nil
	}
	rg := g.rotate(root)
	switch a {
	case AlgoChain, AlgoBinaryTree:
		return o.reducePipelined(rg, buf, a == AlgoBinaryTree)
	case AlgoReduceScatterGather:
		return o.reduceScatterGather(rg, buf)
	default:
		return o.reduceBinomial(rg, buf)
	}
}

func (o *task) reduceBinomial(g group, buf []byte) error {
	n, vr := g.n(), g.me
	acc := buf
	var tmp []byte
	if vr%2 == 0 && vr+1 < n { // has children
		tmp = o.alloc(len(buf))
		if vr != 0 {
			acc = clone(buf)
		}
	}
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			return o.wait(o.send(g, vr-mask, acc))
		}
		if vr|mask < n {
			if err := o.wait(o.recv(g, vr|mask, tmp)); err != nil {
				return err
			}
			o.reduce(acc, tmp)
		}
	}
	return nil
}

func (o *task) reducePipelined(g group, buf []byte, binary bool) error {
	vr := g.me
	parent, kids := tree(vr, g.n(), binary)
	acc := buf
	if vr != 0 && len(kids) > 0 {
		acc = clone(buf)
	}
	segs := chunks(span{0, len(buf)}, o.unit(o.c.segment))
	maxSeg := segs[0].hi - segs[0].lo
	w := o.c.window
	slots := o.alloc(len(kids) * w * maxSeg)
	slot := func(ki, k int) []byte {
		i := (ki*w + k%w) * maxSeg
		return slots[i : i+segs[k].hi-segs[k].lo]
	}
	rq := make([][]*msg, len(kids))
	for ki, kid := range kids {
		rq[ki] = make([]*msg, len(segs))
		for k := range min(w, len(segs)) {
			rq[ki][k] = o.recv(g, kid, slot(ki, k))
		}
	}
	var sends []*msg
	for k, s := range segs {
		for ki, kid := range kids {
			if err := o.wait(rq[ki][k]); err != nil {
				return err
			}
			o.reduce(acc[s.lo:s.hi], slot(ki, k))
			if k+w < len(segs) {
				rq[ki][k+w] = o.recv(g, kid, slot(ki, k+w))
			}
		}
		if vr != 0 {
			sends = append(sends, o.send(g, parent, acc[s.lo:s.hi]))
		}
	}
	return o.wait(sends...)
}

// reduceScatterGather runs a ring reduce-scatter, then each index sends
// its reduced block to the root.
func (o *task) reduceScatterGather(g group, buf []byte) error {
	n, vr := g.n(), g.me
	off := blocks(len(buf)/o.esz(), n, o.esz())
	acc := buf
	if vr != 0 {
		acc = clone(buf)
	}
	if err := o.rsRing(g, acc, off); err != nil {
		return err
	}
	if vr != 0 {
		return o.wait(o.send(g, 0, acc[off[vr]:off[vr+1]]))
	}
	rs := make([]*msg, 0, n-1)
	for j := 1; j < n; j++ {
		rs = append(rs, o.recv(g, j, buf[off[j]:off[j+1]]))
	}
	return o.wait(rs...)
}

// ---- AllToAll ----

// alltoallAlgo sends block j of send to index j and receives index j's
// block into block j of recv; blocks are b bytes.
func (o *task) alltoallAlgo(a Algorithm, g group, send, recv []byte, b int) error {
	n, me := g.n(), g.me
	blk := func(s []byte, j int) []byte { return s[j*b : (j+1)*b] }
	switch a {
	case AlgoBruck:
		tmp := o.alloc(n * b)
		for i := range n {
			copy(blk(tmp, i), blk(send, (me+i)%n))
		}
		half := o.alloc((n + 1) / 2 * b)
		in := o.alloc((n + 1) / 2 * b)
		var idx []int
		for d := 1; d < n; d <<= 1 {
			idx = idx[:0]
			for i := range n {
				if i&d != 0 {
					idx = append(idx, i)
				}
			}
			for k, i := range idx {
				copy(blk(half, k), blk(tmp, i))
			}
			l := len(idx) * b
			if err := o.sendrecv(g, (me+d)%n, half[:l], (me-d+n)%n, in[:l]); err != nil {
				return err
			}
			for k, i := range idx {
				copy(blk(tmp, i), blk(in, k))
			}
		}
		for i := range n {
			copy(blk(recv, (me-i+n)%n), blk(tmp, i))
		}
		return nil
	case AlgoLinear:
		copy(blk(recv, me), blk(send, me))
		var pend []*msg
		for i := 1; i < n; i++ {
			to, from := (me+i)%n, (me-i+n)%n
			pend = append(pend, o.recv(g, from, blk(recv, from)), o.send(g, to, blk(send, to)))
			if len(pend) >= 2*o.c.window {
				if err := o.wait(pend[0], pend[1]); err != nil {
					return err
				}
				pend = pend[2:]
			}
		}
		return o.wait(pend...)
	default: // pairwise
		copy(blk(recv, me), blk(send, me))
		pow2 := n&(n-1) == 0
		for s := 1; s < n; s++ {
			to, from := (me+s)%n, (me-s+n)%n
			if pow2 {
				to, from = me^s, me^s
			}
			if err := o.sendrecv(g, to, blk(send, to), from, blk(recv, from)); err != nil {
				return err
			}
		}
		return nil
	}
}

// ---- Barrier ----

func (o *task) barrierDissemination(g group) error {
	n, me := g.n(), g.me
	for d := 1; d < n; d <<= 1 {
		if err := o.sendrecv(g, (me+d)%n, nil, (me-d+n)%n, nil); err != nil {
			return err
		}
	}
	return nil
}
