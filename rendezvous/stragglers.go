package rendezvous

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// StragglerReport compares when the ranks of a job entered the same
// collective calls; [Stragglers] makes it.
type StragglerReport struct {
	// Calls is the number of calls compared: those that every rank of
	// their communicator reported.
	Calls int `json:"calls"`
	// Last counts, by rank, the compared calls that the rank entered last.
	// Ranks that were never last are absent.
	Last map[int]int `json:"last"`
	// Rank is the rank that was last in most compared calls (the lowest
	// of those tied), or -1 when no call was compared; MedianLag is the
	// median of its lags in those calls.
	Rank      int           `json:"rank"`
	MedianLag time.Duration `json:"median_lag"`
	// Recent is the most recent compared call (the one its first rank
	// entered latest); its zero value when no call was compared.
	Recent CallLag `json:"recent"`
	// Waiting lists, by communicator, the first call that some of its
	// ranks entered and the others have not reached yet. Ranks report at
	// slightly different times, so in a running job it may name a call
	// that everyone reaches a moment later; in a job that makes no
	// progress it names the ranks that the others wait for.
	Waiting []CallWait `json:"waiting"`
}

// CallLag is one call compared across the ranks of its communicator.
type CallLag struct {
	Comm string `json:"comm"`
	Seq  uint64 `json:"seq"`
	Op   string `json:"op"`
	// First is when the first rank entered the call.
	First time.Time `json:"first"`
	// Last is the rank that entered it last, Lag how long after the first.
	Last int           `json:"last"`
	Lag  time.Duration `json:"lag"`
}

// CallWait is a call that only some ranks of its communicator entered.
type CallWait struct {
	Comm string `json:"comm"`
	Seq  uint64 `json:"seq"`
	Op   string `json:"op"` // "" when no reported arrival holds the call any more
	// Since is when the first rank entered it (zero where unknown, as Op).
	Since time.Time `json:"since"`
	// Arrived are the ranks that entered it, Missing the others.
	Arrived []int `json:"arrived"`
	Missing []int `json:"missing"`
}

// Stragglers aligns the arrivals that ranks reported (byRank: job rank to
// its Progress) by call, (Comm, Seq), and says which rank entered each
// call last and by how much after the first: a rank that is last in most
// calls keeps the others waiting.
//
// A communicator's ranks are the ranks that reported any arrival of it,
// so a rank that reported none (it never entered a call of it, or its
// recent calls pushed them all out of its Progress) does not count. Each
// rank stamps its arrivals with its own host's wall clock: across hosts,
// lags include the clocks' offset, which NTP keeps to a millisecond or
// so; a lag much longer than that is real.
func Stragglers(byRank map[int]Progress) StragglerReport {
	comms := map[string]map[uint64]*call{}
	members := map[string]map[int]uint64{} // comm -> rank -> its newest seq
	for rank, p := range byRank {
		for _, a := range p.Arrivals {
			calls := comms[a.Comm]
			if calls == nil {
				calls = map[uint64]*call{}
				comms[a.Comm] = calls
				members[a.Comm] = map[int]uint64{}
			}
			c := calls[a.Seq]
			if c == nil {
				c = &call{op: a.Op, at: map[int]int64{}}
				calls[a.Seq] = c
			}
			c.at[rank] = a.At
			members[a.Comm][rank] = max(members[a.Comm][rank], a.Seq)
		}
	}
	rep := StragglerReport{Last: map[int]int{}, Rank: -1}
	lags := map[int][]time.Duration{}
	for _, comm := range slices.Sorted(maps.Keys(comms)) {
		ranks := members[comm]
		for seq, c := range comms[comm] {
			if len(ranks) < 2 || len(c.at) < len(ranks) {
				continue
			}
			first, last, lastRank := int64(0), int64(0), -1
			for r, at := range c.at {
				if lastRank < 0 || at < first {
					first = at
				}
				if lastRank < 0 || at > last || at == last && r < lastRank {
					last, lastRank = at, r
				}
			}
			rep.Calls++
			rep.Last[lastRank]++
			lag := time.Duration(last - first)
			lags[lastRank] = append(lags[lastRank], lag)
			cl := CallLag{Comm: comm, Seq: seq, Op: c.op, First: time.Unix(0, first), Last: lastRank, Lag: lag}
			if rep.Calls == 1 || cl.First.After(rep.Recent.First) {
				rep.Recent = cl
			}
		}
		rep.Waiting = append(rep.Waiting, waiting(comm, ranks, comms[comm])...)
	}
	for r, n := range rep.Last {
		if best := rep.Last[rep.Rank]; rep.Rank < 0 || n > best || n == best && r < rep.Rank {
			rep.Rank = r
		}
	}
	if rep.Rank >= 0 {
		rep.MedianLag = median(lags[rep.Rank])
	}
	return rep
}

// call is the ranks' arrivals at one call.
type call struct {
	op string
	at map[int]int64 // rank -> arrival
}

// waiting returns the first call of comm that some of its ranks (rank to
// its newest seq) entered and others did not, if any.
func waiting(comm string, ranks map[int]uint64, calls map[uint64]*call) []CallWait {
	lo, hi := ^uint64(0), uint64(0)
	for _, seq := range ranks {
		lo, hi = min(lo, seq), max(hi, seq)
	}
	if len(ranks) < 2 || lo == hi {
		return nil
	}
	w := CallWait{Comm: comm, Seq: lo + 1}
	if c := calls[w.Seq]; c != nil {
		w.Op = c.op
		w.Since = time.Unix(0, slices.Min(slices.Collect(maps.Values(c.at))))
	}
	for _, r := range slices.Sorted(maps.Keys(ranks)) {
		if ranks[r] > lo {
			w.Arrived = append(w.Arrived, r)
		} else {
			w.Missing = append(w.Missing, r)
		}
	}
	return []CallWait{w}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	if n := len(d); n%2 == 0 {
		return (d[n/2-1] + d[n/2]) / 2
	}
	return d[len(d)/2]
}

// String says who was last in most calls and by how much, the most
// recent call's straggler, and the calls that ranks wait in, as "rank 5
// was last in 87 of 100 calls (median lag 1.2s); the most recent,
// allreduce #100 of world, waited 1.3s for rank 5".
func (r StragglerReport) String() string {
	var parts []string
	if r.Calls == 0 {
		parts = append(parts, "no call was reported by every rank of its communicator")
	} else {
		parts = append(parts, fmt.Sprintf("rank %d was last in %d of %d calls (median lag %v)", r.Rank, r.Last[r.Rank], r.Calls, roundLag(r.MedianLag)),
			fmt.Sprintf("the most recent, %s #%d of %s, waited %v for rank %d", r.Recent.Op, r.Recent.Seq, r.Recent.Comm, roundLag(r.Recent.Lag), r.Recent.Last))
	}
	for _, w := range r.Waiting {
		op := w.Op
		if op == "" {
			op = "call"
		}
		parts = append(parts, fmt.Sprintf("%s #%d of %s: %s entered it, %s not yet", op, w.Seq, w.Comm, ranksText(w.Arrived), ranksText(w.Missing)))
	}
	return strings.Join(parts, "; ")
}

// ranksText names ranks: "rank 3", "ranks 0,2".
func ranksText(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return "ranks " + joinInts(ranks)
}

// roundLag rounds d to 3 significant digits or so, for reading.
func roundLag(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}
