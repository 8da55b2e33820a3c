package collectives

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/rendezvous"
)

// ProgressArrivals is how many recent collective calls a rank's Progress
// holds.
const ProgressArrivals = 1024

// worldName is the Comm of a world communicator's arrivals.
const worldName = "world"

// progressLog records the collective calls of the communicators of one
// family: a fixed ring of arrivals, written without a lock, that a reader
// may copy at any time (Communicator.Progress), even from another
// goroutine while calls are being made.
type progressLog struct {
	arrivals atomic.Uint64 // collective calls recorded
	p2p      atomic.Uint64 // sends and receives
	ring     [ProgressArrivals]arrivalSlot
}

// arrivalSlot holds one arrival. gen is the arrival's number plus 1 once
// it is written, and that with slotBusy set while it is being written: a
// reader that sees the same gen before and after reading the fields read
// one arrival whole. Arrivals n and n+ProgressArrivals share a slot; a
// writer that finds a later arrival in it (written or being written)
// leaves its own out, and one that finds an earlier one being written
// waits for it, so that the latest arrival is the one that stays.
// slotBusy marks an arrivalSlot's gen while the slot is being written.
const slotBusy = 1 << 63

type arrivalSlot struct {
	gen  atomic.Uint64
	seq  atomic.Uint64
	at   atomic.Int64
	kind atomic.Uint32
	comm atomic.Pointer[string]
}

// arrive records that this rank entered call seq, a kind, of the
// communicator named *comm (a string that never changes).
func (l *progressLog) arrive(comm *string, seq uint32, kind Collective) {
	at := time.Now().UnixNano()
	l.write(l.arrivals.Add(1)-1, at, comm, seq, kind)
}

// write puts arrival n in its slot, unless a later one has it.
func (l *progressLog) write(n uint64, at int64, comm *string, seq uint32, kind Collective) {
	s := &l.ring[n%ProgressArrivals]
	for {
		old := s.gen.Load()
		if old&^slotBusy > n+1 {
			return // a later arrival has the slot
		}
		if old&slotBusy != 0 {
			runtime.Gosched() // an earlier one is being written: let it end
			continue
		}
		if s.gen.CompareAndSwap(old, (n+1)|slotBusy) {
			break
		}
	}
	s.seq.Store(uint64(seq))
	s.at.Store(at)
	s.kind.Store(uint32(kind))
	s.comm.Store(comm)
	s.gen.Store(n + 1)
}

// progress copies what the log holds, oldest arrival first. An arrival
// being written while it reads is left out.
func (l *progressLog) progress() rendezvous.Progress {
	n := l.arrivals.Load()
	p := rendezvous.Progress{Calls: n + l.p2p.Load()}
	first := uint64(0)
	if n > ProgressArrivals {
		first = n - ProgressArrivals
	}
	p.Arrivals = make([]rendezvous.Arrival, 0, n-first)
	for i := first; i < n; i++ {
		s := &l.ring[i%ProgressArrivals]
		if s.gen.Load() != i+1 {
			continue
		}
		a := rendezvous.Arrival{Seq: s.seq.Load(), At: s.at.Load(), Op: Collective(s.kind.Load()).String()}
		comm := s.comm.Load()
		if s.gen.Load() != i+1 || comm == nil {
			continue
		}
		a.Comm = *comm
		p.Arrivals = append(p.Arrivals, a)
	}
	return p
}

// splitName is the Comm of the communicator split from the one named
// parent by its call seq, for color: the same on all its ranks, and
// different from any other communicator's.
func splitName(parent string, seq uint32, color int) string {
	return parent + "/" + strconv.FormatUint(uint64(seq), 10) + "." + strconv.Itoa(color)
}

// Progress returns what this rank recorded of its calls on this
// communicator, the one it was split from and every one split from
// either (all that share its world): how many calls it made, and when it
// entered each of its recent (ProgressArrivals) collective calls, oldest
// first. Send and Recv count as calls but have no arrival. A call's Comm
// and Seq are the same on every rank of its communicator: the world is
// "world", the communicator that its call #3, a Split, made for color 1
// is "world/3.1". [rendezvous.Stragglers] compares the ranks' Progress.
//
// It is safe to call at any time from any goroutine, also after Close;
// [Init] and [InitWith] have the rendezvous client report it to gorun.
func (c *Communicator) Progress() rendezvous.Progress { return c.fam.log.progress() }
