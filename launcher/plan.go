package launcher

import (
	"errors"
	"fmt"
	"github.com/gorun/gorun/internal/intranges"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/plural"
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
// on every host, "seq" one rank on each line of the hostfile
// ([Sequential]).
type MapBy struct {
	Policy  string // "slot", "node", "ppr" or "seq"
	PerNode int    // ranks per node (or per NUMA node, with Per "numa") for "ppr"
	// Per is what "ppr" counts ranks per: "node", "numa" or "package"
	// (ppr:N:numa, ppr:N:package: N ranks per NUMA node or package of
	// every host, which the plan learns from the agents:
	// PlanOptions.NUMA, PlanOptions.Packages).
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

// ParseMapBy parses a --map-by value: slot, node, seq (see [Sequential]),
// ppr:N:node, or numa and
// package (hosts filled slot by slot, and each host's ranks spread over its
// NUMA nodes or packages when bound). Open MPI's spellings whose meaning
// gorun shares are taken too: core is slot (gorun's slots are cores unless
// a host list says otherwise, and --bind-to core fills the cores in order),
// socket is package. Those it does not share (hwthread, ppr:N:socket) are
// refused with the gorun way.
func ParseMapBy(s string) (MapBy, error) {
	switch s {
	case "", "slot", "core":
		return MapBy{Policy: "slot"}, nil
	case "hwthread":
		return MapBy{}, fmt.Errorf("%w: --map-by %q: gorun places ranks on whole cores, never one hardware thread of a core: use --map-by slot (with --bind-to core)", ErrPlan, s)
	case "node":
		return MapBy{Policy: "node"}, nil
	case "seq":
		return MapBy{Policy: "seq"}, nil
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
		case "socket", "package":
			return MapBy{Policy: "ppr", PerNode: k, Per: "package", Within: "package"}, nil
		}
		return MapBy{}, fmt.Errorf("%w: --map-by %q: want ppr:N:node, ppr:N:numa or ppr:N:package", ErrPlan, s)
	}
	return MapBy{}, fmt.Errorf("%w: --map-by %q: want slot, node, seq, numa, package, ppr:N:node, ppr:N:numa or ppr:N:package", ErrPlan, s)
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
	// Packages is the number of packages (sockets) of each host, for
	// ppr:N:package, as NUMA is for ppr:N:numa.
	Packages []int
	// Rankfile places each rank on its host and cores (Open MPI's
	// rankfile, --rankfile): rank r on Rankfile[r]'s host, which must be
	// one of the hosts. It is the whole mapping: no --map-by or -N.
	Rankfile []hostfile.RankSlot
}

// NeedsNUMA reports whether the plan depends on what the agents report of
// their hosts: the NUMA counts (ppr:N:numa) or the package counts
// (ppr:N:package).
func (m MapBy) NeedsNUMA() bool { return m.Policy == "ppr" && (m.Per == "numa" || m.Per == "package") }

// Placement is where one rank runs.
type Placement struct {
	Rank      int
	Node      int // index into Plan.Nodes (the node rank)
	LocalRank int
	// Slot is the cores a rankfile binds the rank to (its slot=, as
	// written); "" = bound as --bind-to says.
	Slot string
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
	p, err := newPlanner(hosts, o)
	if err != nil {
		return nil, err
	}
	for _, step := range []func() error{p.count, p.checkTotal, p.place, p.overflow, p.checkHosts} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return p.plan(), nil
}

// planner makes a Plan step by step: the policy and -np checked, how many
// ranks each host gets, the host of each rank in rank order, and the
// nodes.
type planner struct {
	hosts  []hostfile.Host
	o      PlanOptions
	m      MapBy  // the policy, -N applied
	src    string // the hosts' source, for messages
	slots  int    // the hosts' slots
	np     int    // ranks; 0 until counted
	counts []int  // ranks per host
	order  []int  // the host index of each rank, in rank order
	// rankHost is the host index of each rank of a rankfile.
	rankHost []int
}

// countRankfile gives each rank the host its rankfile line names: -np,
// if given, must be the rankfile's rank count.
func (p *planner) countRankfile() error {
	rf := p.o.Rankfile
	if p.np == 0 {
		p.np = len(rf)
	}
	if p.np != len(rf) {
		return fmt.Errorf("%w: -np %d: the rankfile places %d ranks (give -np %d, or no -np)", ErrPlan, p.np, len(rf), len(rf))
	}
	index := make(map[string]int, len(p.hosts))
	for i, h := range p.hosts {
		index[h.Name] = i
	}
	p.rankHost = make([]int, len(rf))
	for r, rs := range rf {
		name, err := rs.Resolve(p.hosts)
		if err != nil {
			return fmt.Errorf("%w: --rankfile line %d: %w; the rankfile's hosts must be in %s", ErrPlan, rs.Line, err, p.src)
		}
		p.rankHost[r] = index[name]
		p.counts[index[name]]++
	}
	return nil
}

// newPlanner settles the policy and checks -np against gorun's bounds.
func newPlanner(hosts []hostfile.Host, o PlanOptions) (*planner, error) {
	m := o.MapBy
	if m.Policy == "" {
		m.Policy = "slot"
	}
	if m.Policy == "seq" && len(o.Rankfile) == 0 {
		return nil, fmt.Errorf("%w: --map-by seq places one rank on each line of a hostfile: give --hostfile FILE", ErrPlan)
	}
	if len(o.Rankfile) > 0 {
		if m.Policy == "seq" && o.NPerNode > 0 {
			return nil, fmt.Errorf("%w: --map-by seq places every rank by the hostfile's lines: drop -N", ErrPlan)
		}
		if m.Policy != "seq" && (m.Policy != "slot" || m.Within != "" || o.NPerNode > 0) {
			return nil, fmt.Errorf("%w: --rankfile places every rank: drop --map-by %s and -N", ErrPlan, m)
		}
		m = MapBy{Policy: "rankfile"}
	}
	if o.NPerNode > 0 {
		if m.Policy == "ppr" && m.PerNode != o.NPerNode {
			return nil, fmt.Errorf("%w: -N %d disagrees with --map-by %s", ErrPlan, o.NPerNode, m)
		}
		m = MapBy{Policy: "ppr", PerNode: o.NPerNode}
	}
	p := &planner{hosts: hosts, o: o, m: m, src: o.Source, slots: hostfile.Total(hosts), np: o.NP, counts: make([]int, len(hosts))}
	if p.np < 0 {
		return nil, fmt.Errorf("%w: -np %d is negative", ErrPlan, p.np)
	}
	if p.np > MaxRanks {
		return nil, fmt.Errorf("%w: -np %d is more than gorun runs (%d ranks at most)", ErrPlan, p.np, MaxRanks)
	}
	if m.PerNode > MaxRanks {
		return nil, fmt.Errorf("%w: %d ranks per node is more than gorun runs (%d ranks at most)", ErrPlan, m.PerNode, MaxRanks)
	}
	if p.src == "" {
		p.src = "the host list"
	}
	return p, nil
}

// count settles -np (0: every slot, or the count per node on every host)
// and, for ppr, each host's ranks.
func (p *planner) count() error {
	switch p.m.Policy {
	case "ppr":
		return p.countPPR()
	case "rankfile":
		return p.countRankfile()
	case "slot", "node":
		if p.np == 0 {
			p.np = p.slots
		}
		if p.np > p.slots && !p.o.Oversubscribe {
			h0 := p.hosts[0]
			return fmt.Errorf("%w: -np %d is more than the %d slots of %s (%s); lower -np to %d, give the hosts more slots (e.g. \"%s slots=%d\" in a hostfile, or -H %s:%d), or pass --oversubscribe",
				ErrPlan, p.np, p.slots, p.src, describeSlots(p.hosts), p.slots, h0.Name, h0.Slots+p.np-p.slots, h0.Name, h0.Slots+p.np-p.slots)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown mapping policy %q", ErrPlan, p.m.Policy)
}

// countPPR gives each host its count per node (times its NUMA nodes for
// ppr:N:numa), host by host until -np ranks are placed.
func (p *planner) countPPR() error {
	per := make([]int, len(p.hosts))
	max := 0
	for i := range p.hosts {
		per[i] = p.m.PerNode
		counts := p.o.NUMA
		if p.m.Per == "package" {
			counts = p.o.Packages
		}
		if p.m.NeedsNUMA() && i < len(counts) && counts[i] > 0 {
			per[i] *= counts[i]
		}
		max += per[i]
	}
	if p.np == 0 {
		p.np = max
	}
	if p.np > max {
		return fmt.Errorf("%w: -np %d is more than %s places on %d hosts (%d); lower -np or raise the count per node",
			ErrPlan, p.np, p.m, len(p.hosts), max)
	}
	left := p.np
	for i := range p.hosts {
		p.counts[i] = min(per[i], left)
		left -= p.counts[i]
	}
	return nil
}

// checkTotal refuses no ranks, and more than gorun runs.
func (p *planner) checkTotal() error {
	if p.np == 0 {
		return fmt.Errorf("%w: no ranks to run", ErrPlan)
	}
	if p.np > MaxRanks || p.np < 0 { // < 0: the slots' sum overflowed
		from := "one per slot of " + p.src
		if p.m.Policy == "ppr" {
			from = fmt.Sprintf("%s on %d hosts", p.m, len(p.hosts))
		}
		return fmt.Errorf("%w: %s is more ranks than gorun runs (%d at most); give -np", ErrPlan, from, MaxRanks)
	}
	return nil
}

// place gives ranks to hosts by the policy, within their slots.
func (p *planner) place() error {
	p.order = make([]int, 0, p.np)
	switch p.m.Policy {
	case "rankfile":
		p.order = p.rankHost
	case "ppr":
		for i, c := range p.counts {
			for range c {
				p.order = append(p.order, i)
			}
		}
	case "slot":
		for i, h := range p.hosts {
			for range min(h.Slots, p.np-len(p.order)) {
				p.order = append(p.order, i)
				p.counts[i]++
			}
		}
	case "node":
		for len(p.order) < p.np {
			if !p.roundRobin(func(i int, h hostfile.Host) bool { return p.counts[i] < h.Slots }) {
				break // the rest oversubscribe
			}
		}
	}
	return nil
}

// overflow gives oversubscribed ranks round-robin to hosts with room under
// max_slots.
func (p *planner) overflow() error {
	for len(p.order) < p.np {
		if !p.roundRobin(func(i int, h hostfile.Host) bool { return h.MaxSlots == 0 || p.counts[i] < h.MaxSlots }) {
			return fmt.Errorf("%w: -np %d does not fit under the max_slots of %s (%s)", ErrPlan, p.np, p.src, describeSlots(p.hosts))
		}
	}
	return nil
}

// roundRobin gives one rank to each host that has room, in host order,
// while ranks are left; it reports whether any host took one.
func (p *planner) roundRobin(room func(i int, h hostfile.Host) bool) bool {
	placed := false
	for i, h := range p.hosts {
		if len(p.order) < p.np && room(i, h) {
			p.order = append(p.order, i)
			p.counts[i]++
			placed = true
		}
	}
	return placed
}

// checkHosts refuses a host given more ranks than its slots (unless
// oversubscribing) or its max_slots.
func (p *planner) checkHosts() error {
	for i, h := range p.hosts {
		if p.counts[i] > h.Slots && !p.o.Oversubscribe {
			return fmt.Errorf("%w: %d ranks on %s is more than its %d slots; lower the count per node or pass --oversubscribe", ErrPlan, p.counts[i], h.Name, h.Slots)
		}
		if h.MaxSlots > 0 && p.counts[i] > h.MaxSlots {
			return fmt.Errorf("%w: %d ranks on %s is more than its max_slots=%d", ErrPlan, p.counts[i], h.Name, h.MaxSlots)
		}
	}
	return nil
}

// plan makes the Plan: the hosts with ranks become nodes, in host order,
// so that rank 0's host is node 0.
func (p *planner) plan() *Plan {
	pl := &Plan{MapBy: p.m, Slots: p.slots, Ranks: make([]Placement, p.np)}
	nodeOf := make([]int, len(p.hosts))
	for i := range nodeOf {
		nodeOf[i] = -1
	}
	for i, h := range p.hosts {
		if p.counts[i] > 0 {
			nodeOf[i] = len(pl.Nodes)
			pl.Nodes = append(pl.Nodes, Node{Host: h})
			if p.counts[i] > h.Slots {
				pl.Oversubscribed = true
			}
		}
	}
	for r, hi := range p.order {
		n := &pl.Nodes[nodeOf[hi]]
		pl.Ranks[r] = Placement{Rank: r, Node: nodeOf[hi], LocalRank: len(n.Ranks)}
		if r < len(p.o.Rankfile) {
			pl.Ranks[r].Slot = p.o.Rankfile[r].Slot.Text
		}
		n.Ranks = append(n.Ranks, r)
	}
	return pl
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
	fmt.Fprintf(w, "gorun: plan: %s on %s (%s), map-by %s", plural.Of(len(p.Ranks), "rank"), plural.Of(len(p.Nodes), "host"), plural.Of(p.Slots, "slot"), p.MapBy)
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
func Ranges(v []int) string { return intranges.Format(v) }

// packages counts this host's packages (sockets), for its agent's hello
// (ppr:N:package plans by it): the distinct physical_package_id of its
// online CPUs; at least 1.
func packages() int {
	m, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id")
	ids := map[string]bool{}
	for _, f := range m {
		if b, err := os.ReadFile(f); err == nil {
			ids[strings.TrimSpace(string(b))] = true
		}
	}
	return max(len(ids), 1)
}

// Sequential places the ranks as Open MPI's sequential mapper (--map-by
// seq, -mca rmaps seq) does: rank N on the host of the hostfile's N-th
// line (seq, from [hostfile.ParseSequence]), bound as --bind-to says; np
// ranks (0: one a line) take the first np lines. The result is a rankfile for
// PlanOptions.Rankfile; src names the hostfile in errors.
func Sequential(seq []hostfile.RankSlot, np int, src string) ([]hostfile.RankSlot, error) {
	if np == 0 {
		np = len(seq)
	}
	if np > len(seq) {
		return nil, fmt.Errorf("%w: -np %d is more than the %d lines of %s: --map-by seq places one rank on each line (lower -np, or list more lines)", ErrPlan, np, len(seq), src)
	}
	return seq[:np], nil
}
