package rendezvous

import (
	"reflect"
	"testing"
	"time"
)

// arrivals builds a Progress of calls of comm, op "allreduce", numbered
// from seq 1, entered at the given milliseconds.
func arrivals(comm string, ms ...int64) Progress {
	p := Progress{Calls: uint64(len(ms))}
	for i, at := range ms {
		p.Arrivals = append(p.Arrivals, Arrival{Comm: comm, Seq: uint64(i + 1), Op: "allreduce", At: at * 1e6})
	}
	return p
}

func join(ps ...Progress) Progress {
	var out Progress
	for _, p := range ps {
		out.Calls += p.Calls
		out.Arrivals = append(out.Arrivals, p.Arrivals...)
	}
	return out
}

func TestStragglers(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		byRank map[int]Progress
		calls  int
		last   map[int]int
		rank   int
		median time.Duration
		recent CallLag
		wait   []CallWait
		str    string
	}{{
		name:   "no progress",
		byRank: map[int]Progress{0: {}, 1: {}},
		last:   map[int]int{}, rank: -1,
		str: "no call was reported by every rank of its communicator",
	}, {
		name: "rank 2 always last",
		byRank: map[int]Progress{
			0: arrivals("world", 0, 100, 200, 300),
			1: arrivals("world", 10, 110, 210, 310),
			2: arrivals("world", 500, 700, 1400, 2300),
		},
		calls: 4, last: map[int]int{2: 4}, rank: 2, median: 900 * ms,
		recent: CallLag{Comm: "world", Seq: 4, Op: "allreduce", First: time.Unix(0, 300e6), Last: 2, Lag: 2000 * ms},
		str:    "rank 2 was last in 4 of 4 calls (median lag 900ms); the most recent, allreduce #4 of world, waited 2s for rank 2",
	}, {
		name: "mixed, a tie goes to the lower rank",
		byRank: map[int]Progress{
			0: arrivals("world", 0, 105, 200, 300),
			1: arrivals("world", 10, 100, 215, 300),
		},
		calls: 4, last: map[int]int{0: 2, 1: 2}, rank: 0, median: 2500 * time.Microsecond,
		recent: CallLag{Comm: "world", Seq: 4, Op: "allreduce", First: time.Unix(0, 300e6), Last: 0, Lag: 0},
	}, {
		name: "a rank that has not entered the newest call",
		byRank: map[int]Progress{
			0: arrivals("world", 0, 100, 200),
			1: arrivals("world", 30, 130),
			2: arrivals("world", 10, 110, 210),
		},
		calls: 2, last: map[int]int{1: 2}, rank: 1, median: 30 * ms,
		recent: CallLag{Comm: "world", Seq: 2, Op: "allreduce", First: time.Unix(0, 100e6), Last: 1, Lag: 30 * ms},
		wait:   []CallWait{{Comm: "world", Seq: 3, Op: "allreduce", Since: time.Unix(0, 200e6), Arrived: []int{0, 2}, Missing: []int{1}}},
		str:    "rank 1 was last in 2 of 2 calls (median lag 30ms); the most recent, allreduce #2 of world, waited 30ms for rank 1; allreduce #3 of world: ranks 0,2 entered it, rank 1 not yet",
	}, {
		name: "sub-communicators are compared among their own ranks",
		byRank: map[int]Progress{
			0: join(arrivals("world", 0), arrivals("world/1.0", 100, 200)),
			1: join(arrivals("world", 5), arrivals("world/1.1", 100, 900)),
			2: join(arrivals("world", 1), arrivals("world/1.0", 150, 260)),
			3: join(arrivals("world", 2), arrivals("world/1.1", 100, 100)),
		},
		// world #1: rank 1 by 5ms; world/1.0: rank 2 by 50 and 60ms;
		// world/1.1: rank 1 (a tie at 100 goes to the lower rank) by 0,
		// then by 800ms. The most recent call started at 200.
		calls: 5, last: map[int]int{1: 3, 2: 2}, rank: 1, median: 5 * ms,
		recent: CallLag{Comm: "world/1.0", Seq: 2, Op: "allreduce", First: time.Unix(0, 200e6), Last: 2, Lag: 60 * ms},
	}, {
		name: "calls that left a rank's Progress are not compared",
		byRank: map[int]Progress{
			0: {Calls: 5, Arrivals: arrivals("world", 0, 10, 20, 30, 40).Arrivals[3:]},
			1: arrivals("world", 1, 11, 21, 35, 41),
		},
		calls: 2, last: map[int]int{1: 2}, rank: 1, median: 3 * ms,
		recent: CallLag{Comm: "world", Seq: 5, Op: "allreduce", First: time.Unix(0, 40e6), Last: 1, Lag: ms},
	}, {
		name: "a communicator that one rank alone reported",
		byRank: map[int]Progress{
			0: arrivals("solo", 0, 10),
			1: {},
		},
		last: map[int]int{}, rank: -1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := Stragglers(tc.byRank)
			if r.Calls != tc.calls || !reflect.DeepEqual(r.Last, tc.last) || r.Rank != tc.rank || r.MedianLag != tc.median {
				t.Errorf("Stragglers: %d calls, last %v, rank %d, median %v; want %d, %v, %d, %v",
					r.Calls, r.Last, r.Rank, r.MedianLag, tc.calls, tc.last, tc.rank, tc.median)
			}
			if !reflect.DeepEqual(r.Recent, tc.recent) {
				t.Errorf("Recent = %+v, want %+v", r.Recent, tc.recent)
			}
			if !reflect.DeepEqual(r.Waiting, tc.wait) {
				t.Errorf("Waiting = %+v, want %+v", r.Waiting, tc.wait)
			}
			if tc.str != "" && r.String() != tc.str {
				t.Errorf("String() = %q\nwant       %q", r.String(), tc.str)
			}
		})
	}
}
