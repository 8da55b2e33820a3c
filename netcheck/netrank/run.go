package netrank

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/netcheck"
)

// The tags of the check's messages.
const (
	tagName = iota + 1
	tagPing
	tagData
	tagAck
	tagLen
	tagNode
)

// nameBytes is the room for a host's name in the gathered names.
const nameBytes = 256

// Run measures every pair of c's ranks (all must call it with the same
// cfg), one rank per host named host; node is this host's own report
// (JSON; nil for none). Rank 0 writes the Info, the hosts' reports and
// then every link to out, as lines.
func Run(ctx context.Context, c *collectives.Communicator, cfg netcheck.Config, host string, node []byte, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	n, me := c.Size(), c.Rank()
	names, err := gatherNames(ctx, c, host)
	if err != nil {
		return fmt.Errorf("netcheck: gathering the hosts' names: %w", err)
	}
	rounds := netcheck.Rounds(n)
	nodes, err := gatherBytes(ctx, c, node)
	if err != nil {
		return fmt.Errorf("netcheck: gathering the hosts' reports: %w", err)
	}
	if me == 0 {
		line(out, netcheck.InfoPrefix, netcheck.Info{Hosts: names, Transport: c.Transports(), Rounds: len(rounds)})
		for _, b := range nodes {
			if len(b) > 0 && json.Valid(b) {
				fmt.Fprintf(out, "%s%s\n", netcheck.NodePrefix, b)
			}
		}
		if text := nodeText(nodes); text != "" {
			line(out, netcheck.NodeTextPrefix, text)
		}
	}
	// Row me: the rate from me to each rank, and the round trip to it.
	row := make([]float64, 2*n)
	all := make([]float64, 2*n*n)
	for pass := 0; len(rounds) > 0; pass++ {
		if err := measureRounds(ctx, c, cfg, rounds, row, names); err != nil {
			return err
		}
		if err := collectives.AllGather(ctx, c, row, all); err != nil {
			return fmt.Errorf("netcheck: gathering the links: %w", err)
		}
		if pass >= cfg.Retests {
			break
		}
		rounds = netcheck.Pack(slowPairs(all, names, cfg)) // every rank has all: the same pairs
	}
	if me == 0 {
		for _, k := range links(all, names) {
			line(out, netcheck.LinkPrefix, k)
		}
	}
	return nil
}

// measureRounds measures this rank's pair of each round, a barrier
// before each, into row: each rate the fastest measured so far, the
// round trip the last.
func measureRounds(ctx context.Context, c *collectives.Communicator, cfg netcheck.Config, rounds [][][2]int, row []float64, names []string) error {
	n, me := c.Size(), c.Rank()
	for r, round := range rounds {
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("netcheck: round %d: %w", r+1, err)
		}
		peer := netcheck.Partner(round, me)
		if peer < 0 {
			continue
		}
		gbps, rtt, err := measurePair(ctx, c, cfg, peer)
		if err != nil {
			return fmt.Errorf("netcheck: round %d, %s<->%s: %w", r+1, names[me], names[peer], err)
		}
		row[peer], row[n+peer] = max(row[peer], gbps), rtt
	}
	return nil
}

// links turns the gathered rows (each rank's rates to every rank, then
// its round trips) into links.
func links(all []float64, names []string) []netcheck.Link {
	n := len(names)
	var out []netcheck.Link
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			rtt := max(all[i*2*n+n+j], all[j*2*n+n+i]) // the lower rank of the pair timed it
			out = append(out, netcheck.Link{From: names[i], To: names[j], Gbps: all[i*2*n+j], RTTus: rtt})
		}
	}
	return out
}

// slowPairs returns the pairs, as ranks, of the links that the head's
// analysis would flag, less those of a host it blames: a host whose links
// are nearly all slow is no noise that a second look would clear, and
// retesting its links would take a round each.
func slowPairs(all []float64, names []string, cfg netcheck.Config) [][2]int {
	a := netcheck.Analyze(links(all, names), names, cfg.Expect, cfg.Fraction)
	rank := map[string]int{}
	for r, h := range names {
		rank[h] = r
	}
	seen := map[[2]int]bool{}
	var out [][2]int
	for _, s := range a.Slow {
		if slices.Contains(a.Suspects, s.From) || slices.Contains(a.Suspects, s.To) {
			continue
		}
		x, y := rank[s.From], rank[s.To]
		p := [2]int{min(x, y), max(x, y)}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

func line(out io.Writer, prefix string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(out, "%s%s\n", prefix, b)
}

// gatherNames returns every rank's host name, in rank order.
func gatherNames(ctx context.Context, c *collectives.Communicator, host string) ([]string, error) {
	mine := make([]uint8, nameBytes)
	copy(mine, host)
	all := make([]uint8, nameBytes*c.Size())
	if err := collectives.AllGather(ctx, c, mine, all); err != nil {
		return nil, err
	}
	names := make([]string, c.Size())
	for r := range names {
		names[r] = strings.TrimRight(string(all[r*nameBytes:(r+1)*nameBytes]), "\x00")
	}
	return names, nil
}

// gatherBytes gathers every rank's b on rank 0, in rank order; the other
// ranks get nil.
func gatherBytes(ctx context.Context, c *collectives.Communicator, b []byte) ([][]byte, error) {
	if c.Rank() != 0 {
		if err := collectives.Send(ctx, c, []int64{int64(len(b))}, 0, tagLen); err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, nil
		}
		return nil, collectives.Send(ctx, c, b, 0, tagNode)
	}
	out := [][]byte{b}
	for r := 1; r < c.Size(); r++ {
		size := []int64{0}
		if err := collectives.Recv(ctx, c, size, r, tagLen); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		buf := make([]byte, size[0])
		if size[0] > 0 {
			if err := collectives.Recv(ctx, c, buf, r, tagNode); err != nil {
				return nil, fmt.Errorf("rank %d: %w", r, err)
			}
		}
		out = append(out, buf)
	}
	return out, nil
}
