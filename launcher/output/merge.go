// This file holds --merge-output: identical lines of several ranks written
// as one line tagged with their ranks.

package output

import (
	"bytes"
	"cmp"
	"slices"
	"sort"
	"strconv"
	"time"
)

// DefaultMergeWindow is the MergeWindow used when Options.MergeWindow is 0.
// The ranks of a synchronous job print a step's line within milliseconds of
// each other, and a group that every running rank joined is written at once,
// so the window only delays the lines that some ranks never print (rank 0's
// own messages, a straggler's): 200 ms covers the skew of ranks between two
// collectives and the relay from remote hosts many times over, and is short
// enough that a line printed alone still shows up promptly.
const DefaultMergeWindow = 200 * time.Millisecond

// Bounds on what merging holds back. Past either, the group at the head of
// the queue is written at once, whole but with the ranks that joined it so
// far.
const (
	// mergeMaxLines is the least bound on the ranks' lines held; a job of
	// more than a quarter of that many ranks may hold four lines per rank.
	mergeMaxLines = 64 << 10
	// mergeMaxBytes bounds the bytes held: each group's text once, plus
	// mergeLineCost per line.
	mergeMaxBytes = 16 << 20
	// mergeLineCost is what one rank's line in a group costs besides the
	// text: its rank and predecessor in the group, the group in the rank's
	// chain.
	mergeLineCost = 24
)

// Bounds on the work of placing one line.
const (
	// mergeTries is how many older groups of the same text a line tries
	// to join by moving its rank's recent lines before them.
	mergeTries = 2
	// mergeScan is how many groups of the same text are looked at.
	mergeScan = 8
	// mergeMoveMax bounds the groups one move may search and move.
	mergeMoveMax = 64
	// mergeEdgeMax bounds the predecessors one move may look at.
	mergeEdgeMax = 4096
)

// labelGap is the distance between the labels of groups appended to the
// queue or relabelled; a group put between two others takes the middle.
const labelGap = 1 << 32

// group is one line of text that one or more ranks printed, waiting to be
// written.
type group struct {
	label      uint64 // its place in the queue: labels grow from head to tail
	prev, next *group
	s          Stream
	text       string     // the line with its newline
	t          time.Time  // the first rank's time of the line, for timestamps
	due        time.Time  // when the window of its first line ends
	ranks      []int      // the ranks that printed it, in order of arrival
	preds      []*group   // preds[i]: ranks[i]'s line before it, if pending then
	live       int        // how many of ranks have not ended
	first      *rankState // the first rank's state: its tag, for a group of one
	done       bool       // written
	seen       uint64     // the last search that visited it
}

// merger is the state of merging.
//
// Each rank's complete lines on a stream form a chain of groups, in the
// rank's order. The queue holds every pending group in an order that
// keeps every chain's (a topological order of the chains), labelled so
// that two groups compare in constant time; it is written from its head.
// A new group goes to the tail: groups come out in the order of their
// first line, unless a rank that lags behind the others joins an older
// group of the same text than its last one: then its last group, and
// those of its pending groups (and of other ranks') that must stay before
// it, move to just before the group joined, when that keeps every chain's
// order (see join).
type merger struct {
	window     time.Duration
	nranks     int                    // the ranks waited for; 0 = unknown
	only       map[int]bool           // the ranks waited for (Options.Only); nil = 0 to nranks-1
	running    int                    // ranks below nranks that have not ended
	over       map[int]bool           // ranks that ended (CloseRank) and have not written since
	head, tail *group                 // the queue
	born       deque[*group]          // groups in order of creation, so of due; written ones linger
	byText     [3]map[string][]*group // by stream: pending groups with that text, in queue order
	chains     map[key]*deque[*group] // each (rank, stream)'s pending groups, in its order
	lines      int                    // ranks' lines pending
	bytes      int                    // bytes pending, as mergeMaxBytes counts them
	maxLines   int                    // bounds on lines and bytes
	maxBytes   int
	search     uint64   // the number of the last search
	stack      []*group // scratch for join
	moved      []*group
}

func newMerger(window time.Duration, ranks int, only []int) *merger {
	if window <= 0 {
		window = DefaultMergeWindow
	}
	mg := &merger{
		window:   window,
		maxBytes: mergeMaxBytes,
		over:     make(map[int]bool),
		chains:   make(map[key]*deque[*group]),
	}
	if only != nil {
		mg.only = make(map[int]bool, len(only))
		for _, r := range only {
			mg.only[r] = true
		}
	}
	for _, s := range []Stream{Stdout, Stderr} {
		mg.byText[s] = make(map[string][]*group)
	}
	mg.setRanks(ranks)
	return mg
}

// setRanks records that the job has n ranks; with only, those are the
// ranks waited for whatever n is.
func (mg *merger) setRanks(n int) {
	if mg.only != nil {
		n = len(mg.only)
	}
	mg.nranks = max(n, 0)
	mg.running = mg.nranks
	for r := range mg.over {
		if mg.member(r) {
			mg.running--
		}
	}
	mg.maxLines = max(mergeMaxLines, 4*mg.nranks)
}

// member reports whether lines wait for rank.
func (mg *merger) member(rank int) bool {
	if mg.only != nil {
		return mg.only[rank]
	}
	return rank >= 0 && rank < mg.nranks
}

// SetRanks tells the Mux that the job has n ranks (see Options.Ranks), for
// a plan that changed after New. In StyleOpenMPI's directory mode it
// creates the files of the ranks that New did not, and returns the first
// error, naming the file.
func (m *Mux) SetRanks(n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.o.Ranks = n
	if m.mg != nil {
		m.mg.setRanks(n)
		m.drain(m.now())
		m.flushOuts()
	}
	if m.o.Dir != "" {
		return m.makeFiles(n)
	}
	return nil
}

// ended records that rank has ended: groups need not wait for it.
func (mg *merger) ended(rank int) {
	if mg.over[rank] {
		return
	}
	mg.over[rank] = true
	if mg.member(rank) {
		mg.running--
	}
	mg.countLive(rank, -1)
}

// started records that rank writes again after it ended (a restarted job).
func (mg *merger) started(rank int) {
	if !mg.over[rank] {
		return
	}
	delete(mg.over, rank)
	if mg.member(rank) {
		mg.running++
	}
	mg.countLive(rank, +1)
}

// countLive adds d to the live count of every pending group of rank.
func (mg *merger) countLive(rank, d int) {
	for _, s := range []Stream{Stdout, Stderr} {
		if q := mg.chains[key{rank, s}]; q != nil {
			for i := range q.len() {
				q.at(i).live += d
			}
		}
	}
}

// add puts the complete line (with its newline) of k's rank, written at t
// and arrived at now, into a group and returns it: the earliest group of
// the same text that it may join (see join), or a new one at the tail.
func (mg *merger) add(k key, st *rankState, t, now time.Time, line []byte) *group {
	q := mg.chains[k]
	var last *group
	if q != nil {
		last = q.at(q.len() - 1)
	}
	l := mg.byText[k.s][string(line)]
	g := mg.join(k, last, l)
	if g == nil {
		g = &group{s: k.s, text: string(line), t: t, due: now.Add(mg.window), first: st}
		mg.insert(g, mg.tail)
		mg.byText[k.s][g.text] = append(l, g)
		mg.born.push(g)
		mg.bytes += len(g.text)
	}
	g.ranks = append(g.ranks, k.rank)
	g.preds = append(g.preds, last)
	g.live++
	if q == nil {
		q = &deque[*group]{}
		mg.chains[k] = q
	}
	q.push(g)
	mg.lines++
	mg.bytes += mergeLineCost
	return g
}

// join returns the group of l (the pending groups of the line's text, in
// queue order) that k's next line joins, or nil; last is k's last group.
// A group after last may be joined as it is. An older one may be joined
// if last, and the groups between the two that must stay before last,
// can move to just before it without a cycle (the group joined is not
// one of last's predecessors): a rank that lags behind the others thus
// joins their lines instead of leaving every line it prints alone, as a
// rank's own line, put at the tail, would make it. The oldest group that
// may be joined is taken, within bounds on the work.
func (mg *merger) join(k key, last *group, l []*group) *group {
	if len(l) == 0 {
		return nil
	}
	if last == nil {
		return l[0] // no pending group holds the rank
	}
	i := sort.Search(len(l), func(i int) bool { return l[i].label > last.label })
	tries := 0
	for j := 0; j < min(i, mergeScan) && tries < mergeTries; j++ {
		g := l[j] // a move sorts l again when last has the same text
		if mg.holds(k, g) {
			continue
		}
		tries++
		if mg.moveBefore(last, g) {
			return g
		}
	}
	if i < len(l) {
		return l[i]
	}
	return nil
}

// holds reports whether g is one of k's pending groups.
func (mg *merger) holds(k key, g *group) bool {
	if len(g.ranks) <= 8 {
		return slices.Contains(g.ranks, k.rank)
	}
	q := mg.chains[k]
	if q == nil {
		return false
	}
	i := sort.Search(q.len(), func(i int) bool { return q.at(i).label >= g.label })
	return i < q.len() && q.at(i) == g
}

// moveBefore moves last and its pending predecessors that come after g
// to just before g, in their order, and reports whether it did: not when
// g is one of them (joining g would put a rank's lines out of order), or
// when they are too many to look at.
func (mg *merger) moveBefore(last, g *group) bool {
	mg.search++
	mark := mg.search
	stack, moved := mg.stack[:0], mg.moved[:0]
	defer func() { mg.stack, mg.moved = stack[:0], moved[:0] }()
	last.seen = mark
	stack = append(stack, last)
	edges := 0
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		moved = append(moved, x)
		if len(moved) > mergeMoveMax {
			return false
		}
		for _, p := range x.preds {
			if edges++; edges > mergeEdgeMax {
				return false
			}
			if p == g {
				return false
			}
			if p == nil || p.done || p.label < g.label || p.seen == mark {
				continue
			}
			p.seen = mark
			stack = append(stack, p)
		}
	}
	slices.SortFunc(moved, func(a, b *group) int { return cmp.Compare(a.label, b.label) })
	for _, x := range moved {
		mg.unlink(x)
	}
	prev := g.prev
	for _, x := range moved {
		mg.insert(x, prev)
		prev = x
	}
	for _, x := range moved {
		// Keep the lists of their texts in queue order.
		slices.SortFunc(mg.byText[x.s][x.text], func(a, b *group) int { return cmp.Compare(a.label, b.label) })
	}
	return true
}

// insert puts g into the queue after prev (at the head if prev is nil),
// with a label between theirs.
func (mg *merger) insert(g, prev *group) {
	next := mg.head
	var lo uint64
	if prev != nil {
		next, lo = prev.next, prev.label
	}
	switch {
	case next == nil && lo <= ^uint64(0)-labelGap:
		g.label = lo + labelGap
	case next != nil && next.label-lo >= 2:
		g.label = lo + (next.label-lo)/2
	default:
		mg.relabel()
		mg.insert(g, prev)
		return
	}
	g.prev, g.next = prev, next
	if prev != nil {
		prev.next = g
	} else {
		mg.head = g
	}
	if next != nil {
		next.prev = g
	} else {
		mg.tail = g
	}
}

// unlink takes g out of the queue.
func (mg *merger) unlink(g *group) {
	if g.prev != nil {
		g.prev.next = g.next
	} else {
		mg.head = g.next
	}
	if g.next != nil {
		g.next.prev = g.prev
	} else {
		mg.tail = g.prev
	}
	g.prev, g.next = nil, nil
}

// relabel spreads the labels of the queue's groups labelGap apart again;
// their order does not change.
func (mg *merger) relabel() {
	l := uint64(labelGap)
	for g := mg.head; g != nil; g = g.next {
		g.label = l
		l += labelGap
	}
}

// pop takes the group at the head of the queue out of the merger.
func (mg *merger) pop() *group {
	g := mg.head
	mg.unlink(g)
	g.done = true
	g.preds = nil // written: what came before it is, too
	if l := mg.byText[g.s][g.text]; len(l) == 1 {
		delete(mg.byText[g.s], g.text)
	} else {
		l[0] = nil
		mg.byText[g.s][g.text] = l[1:]
	}
	for _, r := range g.ranks {
		k := key{r, g.s}
		q := mg.chains[k]
		q.pop()
		if q.len() == 0 {
			delete(mg.chains, k)
		}
	}
	mg.lines -= len(g.ranks)
	mg.bytes -= len(g.text) + mergeLineCost*len(g.ranks)
	return g
}

// nextDue returns when the oldest pending group's window ends, the
// earliest window of all; zero if none is pending.
func (mg *merger) nextDue() time.Time {
	for mg.born.len() > 0 && mg.born.at(0).done {
		mg.born.pop()
	}
	if mg.born.len() == 0 {
		return time.Time{}
	}
	return mg.born.at(0).due
}

// ready reports whether the head of the queue must be written at now:
// every rank still running has joined it, a window has ended (its own or
// that of a group behind it, which waits for it), or too much is held.
func (mg *merger) ready(now time.Time) bool {
	h := mg.head
	if h == nil {
		return false
	}
	return mg.nranks > 0 && h.live >= mg.running ||
		mg.lines > mg.maxLines || mg.bytes > mg.maxBytes || !now.Before(mg.nextDue())
}

// writeMerged handles a chunk in merge mode. Complete lines go to their
// groups; a partial line waits in st.pend as in the other modes; what is
// not merged (the rest of a line whose start was written, a line longer
// than MaxPartial, an overlong partial line) is written as without
// merging, after the rank's lines that wait in groups.
func (m *Mux) writeMerged(st *rankState, t time.Time, p []byte) {
	m.mg.started(st.k.rank)
	now := m.now()
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		seg := p[:i+1]
		p = p[i+1:]
		lt := t
		if len(st.pend) > 0 {
			lt = st.pendT
		}
		switch {
		case st.cont:
			m.passLine(st, lt, seg)
		case len(st.pend)+len(seg) > MaxPartial:
			m.forceRank(st.k)
			m.passLine(st, lt, seg)
		default:
			line := seg
			if len(st.pend) > 0 {
				st.pend = append(st.pend, seg...)
				line = st.pend
			}
			m.addLine(st, lt, now, line)
			st.pend = st.pend[:0]
		}
	}
	if st.hold(p, t) {
		return
	}
	m.forceRank(st.k)
	out := st.out
	if m.prefixed {
		m.lineStart(st, t)
		out.midLine, out.owner = true, st.k
	}
	out.put(st.pend)
	out.put(p)
	st.pend = st.pend[:0]
	st.cont = true
}

// passLine writes st's pending bytes and seg, which ends a line, as they
// would be written without merging.
func (m *Mux) passLine(st *rankState, t time.Time, seg []byte) {
	out := st.out
	if m.prefixed {
		m.lineStart(st, t)
	}
	out.put(st.pend)
	out.put(seg)
	out.midLine = false
	st.pend = st.pend[:0]
	st.cont = false
}

// addLine adds st's complete line (with its newline), which the rank
// wrote at t and which arrived at now, to its group, and writes what is
// due.
func (m *Mux) addLine(st *rankState, t, now time.Time, line []byte) {
	mg := m.mg
	if mg.head == nil && mg.nranks > 0 && mg.running <= 1 {
		// Nothing waits and nobody else could join: write it now.
		if out := m.lineHead(st.k.s, st, t, nil); out != nil {
			out.buf = append(out.buf, line...)
			out.lineEnd()
		}
		return
	}
	if g := mg.add(st.k, st, t, now, line); len(g.ranks) == 1 {
		m.arm(g.due) // a new group: wakes the flusher only if nothing earlier is due
	}
	m.drain(now)
}

// drain writes the groups at the head of the queue that are due at now.
func (m *Mux) drain(now time.Time) {
	for m.mg.ready(now) {
		m.emitHead()
	}
}

// drainAll writes every pending group.
func (m *Mux) drainAll() {
	for m.mg.head != nil {
		m.emitHead()
	}
}

// forceRank writes the groups up to the last one of k's rank and stream,
// so that what k writes next comes after them.
func (m *Mux) forceRank(k key) {
	for m.mg.chains[k] != nil {
		m.emitHead()
	}
}

// emitHead writes the group at the head of the queue.
func (m *Mux) emitHead() {
	g := m.mg.pop()
	if out := m.lineHead(g.s, g.first, g.t, g.ranks); out != nil {
		out.buf = append(out.buf, g.text...)
		out.lineEnd()
	}
}

// lineHead starts a line of the output of stream s that ranks printed
// and returns the output to append the line to, or nil after a write
// error. With one rank (or none given) the line starts as it would without
// merging (st is the rank's state); with more it starts with "[ranks] "
// after the timestamp, if asked. A prefixed line always starts a line of
// the output. ranks may be reordered.
func (m *Mux) lineHead(s Stream, st *rankState, t time.Time, ranks []int) *outState {
	out := m.outs[s]
	if out.err != nil {
		return nil
	}
	tagged := len(ranks) > 1
	if m.prefixed && out.midLine || tagged && !m.prefixed && out.lastByte() != 0 && out.lastByte() != '\n' {
		out.put([]byte{'\n'})
	}
	out.midLine = false
	if m.o.Timestamp {
		out.buf = append(out.buf, m.timestamp(t)...)
	}
	if tagged {
		slices.Sort(ranks)
		out.buf = append(out.buf, '[')
		out.buf = appendRanks(out.buf, ranks)
		out.buf = append(out.buf, ']', ' ')
	} else {
		out.buf = append(out.buf, st.tag...)
	}
	return out
}

// lineEnd writes out's batch once it is large.
func (o *outState) lineEnd() {
	if len(o.buf) >= batchMax {
		o.flush()
	}
}

// lastByte returns the last byte given to the output, written or batched
// (0 before any).
func (o *outState) lastByte() byte {
	if len(o.buf) > 0 {
		return o.buf[len(o.buf)-1]
	}
	return o.last
}

// appendRanks appends sorted, distinct ranks as a list: runs of three or
// more as first-last, the others one by one, separated by commas:
// "0-7", "0,2,4-6", "3", "0,1".
func appendRanks(b []byte, ranks []int) []byte {
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(ranks[i]), 10)
		switch {
		case j-i >= 2:
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(ranks[j]), 10)
		case j == i+1:
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(ranks[j]), 10)
		}
		i = j + 1
	}
	return b
}

// deque is a queue that is popped at its front.
type deque[T any] struct {
	items []T
	head  int
}

func (d *deque[T]) len() int { return len(d.items) - d.head }

func (d *deque[T]) at(i int) T { return d.items[d.head+i] }

func (d *deque[T]) push(x T) { d.items = append(d.items, x) }

func (d *deque[T]) pop() T {
	x := d.items[d.head]
	var zero T
	d.items[d.head] = zero
	d.head++
	switch {
	case d.head == len(d.items):
		d.items, d.head = d.items[:0], 0
	case d.head >= 64 && 2*d.head >= len(d.items):
		n := copy(d.items, d.items[d.head:])
		clear(d.items[n:])
		d.items, d.head = d.items[:n], 0
	}
	return x
}
