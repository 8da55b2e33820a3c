package launcher

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gorun/gorun/hostfile"
)

// ErrPlan is wrapped by every error about a plan that cannot be met.
var ErrPlan = errors.New("plan")

// MaxRanks bounds a job's ranks: twice the largest flat MPI jobs run
// (Fugaku's 7.6 million cores), and below what the head's memory holds
// (a plan and a record per rank, a few hundred bytes each). A larger
// -np is a typo, and would fail in an out-of-memory crash.
const MaxRanks = 1 << 24

// MapBy is a mapping policy: "slot" fills each host's slots in host order,
// "node" deals ranks round-robin over the hosts, "ppr" places PerNode ranks
// on every host.
type MapBy struct {
	Policy  string // "slot", "node" or "ppr"
	PerNode int    // ranks per node (or per NUMA node, with Per "numa") for "ppr"
	// Per is what "ppr" counts ranks per: "node" or "numa" (ppr:N:numa:
	// N ranks per NUMA node of every host, which the plan learns from
	// the agents: PlanOptions.NUMA).
	Per string
	// Within spreads a node's ranks over its NUMA nodes ("numa") or
	// packages ("package") when they are bound; "" keeps slot order.
	// Hosts are filled slot by slot.
	Within string
}

func (m MapBy) String() string {
	if m.Policy == "ppr" {
		per := m.Per
		if per == "" {
			per = "node"
		}
		return fmt.Sprintf("ppr:%d:%s", m.PerNode, per)
	}
	if m.Within != "" {
		return m.Within
	}
	return m.Policy
}

// ParseMapBy parses a --map-by value: slot, node, ppr:N:node, or numa and
// package (hosts filled slot by slot, and each host's ranks spread over its
// NUMA nodes or packages when bound).
func ParseMapBy(s string) (MapBy, error) {
	switch s {
	case "", "slot":
		return MapBy{Policy: "slot"}, nil
	case "node":
		return MapBy{Policy: "node"}, nil
	case "numa", "package", "socket":
		w := s
		if w == "socket" {
			w = "package"
		}
		return MapBy{Policy: "slot", Within: w}, nil
	}
	if rest, ok := strings.CutPrefix(s, "ppr:"); ok {
		n, obj, _ := strings.Cut(rest, ":")
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return MapBy{}, fmt.Errorf("%w: --map-by %q: %q is not a positive count", ErrPlan, s, n)
		}
		switch obj {
		case "node":
			return MapBy{Policy: "ppr", PerNode: k}, nil
		case "numa":
			return MapBy{Policy: "ppr", PerNode: k, Per: "numa", Within: "numa"}, nil
		}
		return MapBy{}, fmt.Errorf("%w: --map-by %q: want ppr:N:node or ppr:N:numa", ErrPlan, s)
	}
	return MapBy{}, fmt.Errorf("%w: --map-by %q: want slot, node, numa, package, ppr:N:node or ppr:N:numa", ErrPlan, s)
}

// PlanOptions says how to map ranks.
type PlanOptions struct {
	NP            int    // ranks; 0 = every slot (or PerNode x hosts)
	MapBy         MapBy  // the policy; zero value = slot
	NPerNode      int    // -N: shorthand for ppr:N:node
	Oversubscribe bool   // allow more ranks than slots (max_slots still caps)
	Source        string // where the hosts came from, for messages ("--hostfile hosts", "-H")
	// NUMA is the number of NUMA nodes of each host, for ppr:N:numa; nil
	// until the agents have said (the plan then counts one per host).
	NUMA []int
}

// NeedsNUMA reports whether the plan depends on the hosts' NUMA counts.
func (m MapBy) NeedsNUMA() bool { return m.Policy == "ppr" && m.Per == "numa" }

// Placement is where one rank runs.
type Placement struct {
	Rank      int
	Node      int // index into Plan.Nodes (the node rank)
	LocalRank int
}

// Node is a host that runs ranks, in node-rank order.
type Node struct {
	Host  hostfile.Host
	Ranks []int // global ranks on this host, ascending; Ranks[i] has local rank i
}

// Plan is the mapping of every rank to a host. It is pure data: printing it
// is --display-map, and nothing starts before it exists.
type Plan struct {
	MapBy          MapBy
	Ranks          []Placement // indexed by rank
	Nodes          []Node
	Slots          int  // slots offered by all hosts
	Oversubscribed bool // more ranks than slots on some host
}

// NewPlan maps ranks to hosts, or says why it cannot.
func NewPlan(hosts []hostfile.Host, o PlanOptions) (*Plan, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: no hosts", ErrPlan)
	}
	m := o.MapBy
	if m.Policy == "" {
		m.Policy = "slot"
	}
	if o.NPerNode > 0 {
		if m.Policy == "ppr" && m.PerNode != o.NPerNode {
			return nil, fmt.Errorf("%w: -N %d disagrees with --map-by %s", ErrPlan, o.NPerNode, m)
		}
		m = MapBy{Policy: "ppr", PerNode: o.NPerNode}
	}
	slots := hostfile.Total(hosts)
	np := o.NP
	if np < 0 {
		return nil, fmt.Errorf("%w: -np %d is negative", ErrPlan, np)
	}
	if np > MaxRanks {
		return nil, fmt.Errorf("%w: -np %d is more than gorun runs (%d ranks at most)", ErrPlan, np, MaxRanks)
	}
	if m.PerNode > MaxRanks {
		return nil, fmt.Errorf("%w: %d ranks per node is more than gorun runs (%d ranks at most)", ErrPlan, m.PerNode, MaxRanks)
	}
	src := o.Source
	if src == "" {
		src = "the host list"
	}
	counts := make([]int, len(hosts))
	switch m.Policy {
	case "ppr":
		per := make([]int, len(hosts))
		max := 0
		for i := range hosts {
			per[i] = m.PerNode
			if m.NeedsNUMA() && i < len(o.NUMA) && o.NUMA[i] > 0 {
				per[i] *= o.NUMA[i]
			}
			max += per[i]
		}
		if np == 0 {
			np = max
		}
		if np > max {
			return nil, fmt.Errorf("%w: -np %d is more than %s places on %d hosts (%d); lower -np or raise the count per node",
				ErrPlan, np, m, len(hosts), max)
		}
		left := np
		for i := range hosts {
			counts[i] = min(per[i], left)
			left -= counts[i]
		}
	case "slot", "node":
		if np == 0 {
			np = slots
		}
		if np > slots && !o.Oversubscribe {
			return nil, fmt.Errorf("%w: -np %d is more than the %d slots of %s (%s); lower -np to %d, give the hosts more slots (e.g. \"%s slots=%d\" in a hostfile, or -H %s:%d), or pass --oversubscribe",
				ErrPlan, np, slots, src, describeSlots(hosts), slots, hosts[0].Name, hosts[0].Slots+np-slots, hosts[0].Name, hosts[0].Slots+np-slots)
		}
	default:
		return nil, fmt.Errorf("%w: unknown mapping policy %q", ErrPlan, m.Policy)
	}
	if np == 0 {
		return nil, fmt.Errorf("%w: no ranks to run", ErrPlan)
	}
	if np > MaxRanks || np < 0 { // < 0: the slots' sum overflowed
		from := "one per slot of " + src
		if m.Policy == "ppr" {
			from = fmt.Sprintf("%s on %d hosts", m, len(hosts))
		}
		return nil, fmt.Errorf("%w: %s is more ranks than gorun runs (%d at most); give -np", ErrPlan, from, MaxRanks)
	}
	order := make([]int, 0, np) // host index of each rank, in rank order
	switch m.Policy {
	case "ppr":
		for i, c := range counts {
			for range c {
				order = append(order, i)
			}
		}
	case "slot":
		for i, h := range hosts {
			for range min(h.Slots, np-len(order)) {
				order = append(order, i)
				counts[i]++
			}
		}
	case "node":
		for len(order) < np {
			placed := false
			for i, h := range hosts {
				if len(order) < np && counts[i] < h.Slots {
					order = append(order, i)
					counts[i]++
					placed = true
				}
			}
			if !placed {
				break
			}
		}
	}
	// Oversubscribed ranks go round-robin to hosts with room under max_slots.
	for len(order) < np {
		placed := false
		for i, h := range hosts {
			if len(order) < np && (h.MaxSlots == 0 || counts[i] < h.MaxSlots) {
				order = append(order, i)
				counts[i]++
				placed = true
			}
		}
		if !placed {
			return nil, fmt.Errorf("%w: -np %d does not fit under the max_slots of %s (%s)", ErrPlan, np, src, describeSlots(hosts))
		}
	}
	for i, h := range hosts {
		if counts[i] > h.Slots && !o.Oversubscribe {
			return nil, fmt.Errorf("%w: %d ranks on %s is more than its %d slots; lower the count per node or pass --oversubscribe", ErrPlan, counts[i], h.Name, h.Slots)
		}
		if h.MaxSlots > 0 && counts[i] > h.MaxSlots {
			return nil, fmt.Errorf("%w: %d ranks on %s is more than its max_slots=%d", ErrPlan, counts[i], h.Name, h.MaxSlots)
		}
	}
	p := &Plan{MapBy: m, Slots: slots, Ranks: make([]Placement, np)}
	nodeOf := make([]int, len(hosts))
	for i := range nodeOf {
		nodeOf[i] = -1
	}
	// Node ranks follow host order, so that rank 0's host is node 0.
	for i, h := range hosts {
		if counts[i] > 0 {
			nodeOf[i] = len(p.Nodes)
			p.Nodes = append(p.Nodes, Node{Host: h})
			if counts[i] > h.Slots {
				p.Oversubscribed = true
			}
		}
	}
	for r, hi := range order {
		n := &p.Nodes[nodeOf[hi]]
		p.Ranks[r] = Placement{Rank: r, Node: nodeOf[hi], LocalRank: len(n.Ranks)}
		n.Ranks = append(n.Ranks, r)
	}
	return p, nil
}

func describeSlots(hosts []hostfile.Host) string {
	var b strings.Builder
	for i, h := range hosts {
		if i == 4 && len(hosts) > 5 {
			fmt.Fprintf(&b, ", ... %d more", len(hosts)-4)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s:%d", h.Name, h.Slots)
	}
	return b.String()
}

// Format prints the plan for --display-map.
func (p *Plan) Format(w io.Writer) error {
	fmt.Fprintf(w, "gorun: plan: %s on %s (%s), map-by %s", plural(len(p.Ranks), "rank"), plural(len(p.Nodes), "host"), plural(p.Slots, "slot"), p.MapBy)
	if p.Oversubscribed {
		fmt.Fprint(w, ", oversubscribed")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\thost\tslots\tranks")
	for i, n := range p.Nodes {
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", i, n.Host.Name, n.Host.Slots, Ranges(n.Ranks))
	}
	return tw.Flush()
}

// Ranges formats ascending ints compactly: 0-3,8,10-11.
func Ranges(v []int) string {
	var b strings.Builder
	for i := 0; i < len(v); {
		j := i
		for j+1 < len(v) && v[j+1] == v[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(v[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(v[j]))
		}
		i = j + 1
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
