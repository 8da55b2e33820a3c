package netrank

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
	"github.com/gorun/gorun/netcheck"
)

// lockedBuffer is rank 0's standard output.
type lockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// Every directed pair of 2 to 5 ranks is measured once, with a rate and
// (from its pair) a round trip, and reaches the collector with the
// hosts' names and reports.
func TestRunMeasuresEveryPair(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := collectivestest.NewFabric(n, nil)
			var out lockedBuffer
			cfg := netcheck.Config{Duration: 5 * time.Millisecond, ChunkBytes: 64 << 10, Pings: 3, Window: 3}
			errs := f.Run(nil, func(c *collectives.Communicator) error {
				node := []byte(fmt.Sprintf(`{"host":"n%d"}`, c.Rank()))
				return Run(context.Background(), c, cfg, fmt.Sprintf("n%d", c.Rank()), node, &out)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			col := netcheck.NewCollector(&bytes.Buffer{})
			col.Write(out.Bytes())
			if err := col.Close(); err != nil {
				t.Fatal(err)
			}
			if info := col.Info(); len(info.Hosts) != n || info.Rounds != len(netcheck.Rounds(n)) {
				t.Errorf("info %+v: want %d hosts, %d rounds", info, n, len(netcheck.Rounds(n)))
			}
			if got := len(col.Nodes()); got != n {
				t.Errorf("%d host reports, want %d", got, n)
			}
			seen := map[[2]string]bool{}
			for _, k := range col.Links() {
				if k.Gbps <= 0 || k.RTTus <= 0 {
					t.Errorf("link %+v: want a positive rate and round trip", k)
				}
				seen[[2]string{k.From, k.To}] = true
			}
			if len(seen) != n*(n-1) || len(col.Links()) != n*(n-1) {
				t.Errorf("%d links (%d distinct), want %d", len(col.Links()), len(seen), n*(n-1))
			}
		})
	}
}

// The byte cap ends a direction before its time does.
func TestSendStopsAtMaxBytes(t *testing.T) {
	f := collectivestest.NewFabric(2, nil)
	cfg := netcheck.Config{Duration: time.Hour, ChunkBytes: 4096, MaxBytes: 64 << 10, Window: 2}.WithDefaults()
	start := time.Now()
	errs := f.Run(nil, func(c *collectives.Communicator) error {
		if c.Rank() == 0 {
			_, err := send(context.Background(), c, cfg, 1)
			return err
		}
		return receive(context.Background(), c, cfg, 0)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: the byte cap did not stop the sender", d)
	}
}

// The gathered rows become every directed link, the round trip from
// whichever rank of the pair timed it; the pairs to measure again are
// those of the slow links, each once.
func TestLinksAndSlowPairs(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	n := len(names)
	all := make([]float64, 2*n*n)
	for i := range n {
		for j := range n {
			if i != j {
				all[i*2*n+j] = 10
				if i < j {
					all[i*2*n+n+j] = float64(10*i + j)
				}
			}
		}
	}
	all[0*2*n+3] = 1 // a->d slow
	all[2*2*n+1] = 2 // c->b slow
	ls := links(all, names)
	if len(ls) != 12 {
		t.Fatalf("%d links, want 12", len(ls))
	}
	for _, k := range ls {
		if k.From == "d" && k.To == "b" && k.RTTus != 13 {
			t.Errorf("d->b: round trip %v, want b's 13", k.RTTus)
		}
	}
	got := slowPairs(all, names, netcheck.Config{}.WithDefaults())
	want := [][2]int{{0, 3}, {1, 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slow pairs %v, want %v", got, want)
	}
}

// A host whose links are nearly all slow is blamed, not retested: its
// pairs would take a round each and clear nothing; a lone slow link
// elsewhere still is.
func TestSlowPairsSkipsBlamedHost(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f"}
	n := len(names)
	all := make([]float64, 2*n*n)
	for i := range n {
		for j := range n {
			if i != j {
				all[i*2*n+j] = 10
			}
		}
	}
	for j := range n { // c is slow both ways
		if j != 2 {
			all[2*2*n+j], all[j*2*n+2] = 0.2, 0.2
		}
	}
	all[0*2*n+4] = 1 // and a->e alone
	got := slowPairs(all, names, netcheck.Config{}.WithDefaults())
	if want := [][2]int{{0, 4}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slow pairs %v, want %v (c's pairs left out)", got, want)
	}
}
