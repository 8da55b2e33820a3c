package rendezvous

import (
	"encoding/json"
	"fmt"
	"runtime"
)

// Progress is what a Go rank reports of its collective calls: how many it
// made and when it entered the recent ones. A rank's [Client] sends it
// when its agent asks ([KVServer.Progress]) and with its goodbye
// ([KVServer.Final]); package collectives keeps it ([Client.SetProgress]).
type Progress struct {
	// Calls counts the rank's calls so far: collectives, and
	// point-to-point sends and receives (which have no Arrival).
	Calls uint64 `json:"calls"`
	// Arrivals are the rank's recent collective calls, oldest first.
	Arrivals []Arrival `json:"arrivals,omitempty"`
}

// Arrival is a rank's entry into one collective call.
type Arrival struct {
	// Comm and Seq name the call: the same on every rank of the
	// communicator that made it. Comm names the communicator ("world",
	// and for one split from it at its call #3 with color 1, "world/3.1");
	// Seq numbers its collective calls from 1.
	Comm string `json:"comm"`
	Seq  uint64 `json:"seq"`
	// Op is the collective ("allreduce", "broadcast", "barrier", ...).
	Op string `json:"op"`
	// At is when the rank entered the call, in Unix nanoseconds of its
	// host's wall clock.
	At int64 `json:"at"`
}

// MaxDump bounds what a rank sends in answer to a request of its agent:
// the goroutine dump ([KVServer.Dump]) is cut to it, and a Progress is
// sent without its oldest arrivals until it fits.
const MaxDump = 2 << 20

// stacks returns the stacks of every goroutine of this process, as
// runtime.Stack writes them, cut to at most limit bytes with a line that
// says so.
func stacks(limit int) []byte {
	for n := 64 << 10; ; n *= 2 {
		n = min(n, limit)
		buf := make([]byte, n)
		m := runtime.Stack(buf, true)
		if m < n {
			return buf[:m]
		}
		if n == limit {
			note := fmt.Sprintf("\n... truncated: the goroutine dump is longer than %d bytes\n", limit)
			return append(buf[:limit-len(note)], note...)
		}
	}
}

// marshalProgress encodes p as JSON of at most limit bytes, leaving out
// its oldest arrivals where it would be longer.
func marshalProgress(p Progress, limit int) []byte {
	for {
		b, err := json.Marshal(p)
		if err == nil && len(b) <= limit {
			return b
		}
		if err != nil || len(p.Arrivals) == 0 {
			b, _ = json.Marshal(Progress{Calls: p.Calls})
			return b
		}
		p.Arrivals = p.Arrivals[len(p.Arrivals)/2+1:]
	}
}
