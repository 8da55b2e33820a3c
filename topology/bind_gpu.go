package topology

// BindGPU: each rank's GPU, its block of the GPU's NUMA node's cores, and
// the NIC closest to the GPU.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// gpuDomain is the CPUs a GPU's ranks split: its NUMA node's, else its
// affinity, else every CPU.
type gpuDomain struct {
	label string // "NUMA 1"
	cpus  CPUSet
	mems  []int
	ranks []int // local ranks, in order
}

// planGPU binds the ranks of out to the usable GPUs usable (indexes into
// n.GPUs, in the runtime's order), as PlanBindings says for BindGPU.
func planGPU(n *Node, o BindOptions, usable []int, out []RankBinding) error {
	if len(usable) == 0 {
		return fmt.Errorf("plan bindings: bind to gpu: the node has no visible GPUs (%d in all)", len(n.GPUs))
	}
	if len(out) > len(usable) && !o.Oversubscribed {
		return fmt.Errorf("plan bindings: %d local ranks but %d visible GPUs: one rank per GPU; --bind-to core, numa, package or none runs more ranks than GPUs (without GPU assignment)",
			len(out), len(usable))
	}
	gpuOf, domains := gpuDomains(n, usable, out)
	cores := nodeCores(n)
	for _, d := range domains {
		if err := d.split(n, o, cores, gpuOf, out); err != nil {
			return err
		}
	}
	noteOrder(out)
	gpuNICs(n, gpuOf, out)
	return nil
}

// gpuDomains gives local rank i of out the i-th usable GPU (round robin
// when oversubscribed) as its device among them all, and returns each
// rank's GPU (an index into n.GPUs) and the GPUs' domains with their
// ranks, in the order of their first rank.
func gpuDomains(n *Node, usable []int, out []RankBinding) (gpuOf []int, order []*gpuDomain) {
	var all CPUSet
	for _, c := range n.CPUs {
		all.Add(c.ID)
	}
	vis := make([]*GPU, len(usable))
	for k, gi := range usable {
		vis[k] = &n.GPUs[gi]
	}
	domains := map[string]*gpuDomain{}
	gpuOf = make([]int, len(out))
	for i := range out {
		gi := usable[i%len(usable)]
		gpuOf[i] = gi
		out[i].Visible, out[i].Device = vis, i%len(usable)
		d := domainOf(n, &n.GPUs[gi], all)
		key := d.cpus.String()
		if domains[key] == nil {
			domains[key] = &d
			order = append(order, &d)
		}
		domains[key].ranks = append(domains[key].ranks, i)
	}
	return gpuOf, order
}

// domainOf is the domain of GPU g on n, whose CPUs are all.
func domainOf(n *Node, g *GPU, all CPUSet) gpuDomain {
	switch {
	case g.NUMA >= 0 && !n.CPUsOfNUMA(g.NUMA).IsEmpty():
		return gpuDomain{label: "NUMA " + strconv.Itoa(g.NUMA), cpus: n.CPUsOfNUMA(g.NUMA), mems: []int{g.NUMA}}
	case !g.CPUs.IsEmpty():
		d := gpuDomain{label: "GPU " + strconv.Itoa(g.Index) + "'s local CPUs", cpus: g.CPUs}
		if g.NUMA >= 0 {
			d.mems = []int{g.NUMA}
		}
		return d
	}
	return gpuDomain{label: "the node", cpus: all}
}

// units are the domain's whole cores, in the order of cores, as the units
// its ranks' blocks are made of; its CPUs one by one when it has fewer
// cores than ranks. unit names them: "cores" or "CPUs".
func (d *gpuDomain) units(cores []bindCore) (units []CPUSet, unit string) {
	for _, c := range cores {
		if in := c.cpus.Intersect(d.cpus); !in.IsEmpty() {
			units = append(units, in)
		}
	}
	if len(units) >= len(d.ranks) {
		return units, "cores"
	}
	units = units[:0]
	for _, c := range d.cpus.CPUs() {
		units = append(units, NewCPUSet(c))
	}
	return units, "CPUs"
}

// split binds d's ranks to their GPUs (gpuOf) and memory, and gives each
// a contiguous block of d's units, the earlier ranks one more where they
// do not divide evenly; o.CPUsPerRank caps a block, and o.Oversubscribed
// lets more ranks than CPUs share them all.
func (d *gpuDomain) split(n *Node, o BindOptions, cores []bindCore, gpuOf []int, out []RankBinding) error {
	units, unit := d.units(cores)
	total, k := len(units), len(d.ranks)
	for j, i := range d.ranks {
		g := &n.GPUs[gpuOf[i]]
		b := &out[i]
		b.BindTo, b.GPU, b.Mems = BindGPU, g, d.mems
		why := fmt.Sprintf("%s%s is on %s", g.Name(), gpuName(g), d.label)
		if g.MIG {
			why += " (MIG mode on)"
		}
		if total < k {
			if !o.Oversubscribed {
				return fmt.Errorf("plan bindings: %d ranks share the GPUs on %s, which has %d CPUs: fewer CPUs than ranks", k, d.label, total)
			}
			b.CPUs = d.cpus
			b.Why = why + fmt.Sprintf("; all %d CPUs of %s, shared by %d ranks (oversubscribed)", total, d.label, k)
			continue
		}
		start, size := total/k*j+min(j, total%k), total/k
		if j < total%k {
			size++
		}
		if o.CPUsPerRank > 0 {
			if o.CPUsPerRank > size {
				return fmt.Errorf("plan bindings: --cpus-per-rank %d: %s has %d %s for %d ranks (%d for local rank %d)",
					o.CPUsPerRank, d.label, total, unit, k, size, i)
			}
			size = o.CPUsPerRank
		}
		b.CPUs = CPUSet{}
		for _, u := range units[start : start+size] {
			b.CPUs = b.CPUs.Union(u)
		}
		b.Why = why + d.blockWhy(unit, start, size, total, o.CPUsPerRank)
	}
	return nil
}

// blockWhy describes a rank's block of size units from start, of the
// domain's total, capped at cpusPerRank (0: not capped).
func (d *gpuDomain) blockWhy(unit string, start, size, total, cpusPerRank int) string {
	var why string
	if size == 1 {
		why = fmt.Sprintf("; %s %d of %s's %d", strings.TrimSuffix(unit, "s"), start, d.label, total)
	} else {
		why = fmt.Sprintf("; %s %d-%d of %s's %d", unit, start, start+size-1, d.label, total)
	}
	if k := len(d.ranks); k > 1 {
		why += fmt.Sprintf(" (%d ranks share it)", k)
	} else {
		why += " (the only rank there)"
	}
	if cpusPerRank > 0 {
		why += fmt.Sprintf(", capped at --cpus-per-rank %d", cpusPerRank)
	}
	return why
}

// gpuNICs gives each rank of out the up NIC closest to its GPU (gpuOf).
func gpuNICs(n *Node, gpuOf []int, out []RankBinding) {
	used := map[int]int{}
	for i := range out {
		j, cls := pickNIC(n, used, func(j int) LinkKind { return n.Link(GPURef(gpuOf[i]), NICRef(j)).Kind })
		if j < 0 {
			out[i].Why += "; no NIC is up"
			continue
		}
		out[i].NIC = &n.NICs[j]
		out[i].Why += fmt.Sprintf("; NIC %s %s", nicName(&n.NICs[j]), gpuNICPhrase(cls))
	}
}

// noteOrder says, on each rank concerned, where pairing local rank i with
// GPU i puts ranks on other NUMA nodes than pairing them in NUMA order
// would (GPUs 0 and 1 on NUMA node 1, GPUs 2 and 3 on node 0): gorun
// keeps GPU i for local rank i, since scripts take their device from
// LOCAL_RANK.
func noteOrder(out []RankBinding) {
	byNUMA := make([]*GPU, len(out))
	for i := range out {
		byNUMA[i] = out[i].GPU
	}
	sort.SliceStable(byNUMA, func(a, b int) bool { return byNUMA[a].NUMA < byNUMA[b].NUMA })
	for i := range out {
		if g := out[i].GPU; g.NUMA != byNUMA[i].NUMA {
			out[i].Why += fmt.Sprintf("; local rank %d keeps %s although the GPUs are not numbered in NUMA order (in NUMA order it would be on NUMA %d): "+
				"local rank i always gets GPU i, the device LOCAL_RANK names", i, g.Name(), byNUMA[i].NUMA)
		}
	}
}

func gpuName(g *GPU) string {
	if g.UUID == "" {
		return ""
	}
	return " (" + g.UUID + ")"
}

func gpuNICPhrase(k LinkKind) string {
	switch k {
	case LinkPIX:
		return "shares its PCIe switch (PIX)"
	case LinkPXB:
		return "is behind its PCIe switches (PXB)"
	case LinkPHB:
		return "shares its PCIe root complex (PHB)"
	case LinkNODE:
		return "is on its NUMA node (NODE)"
	default:
		return "is across the CPU interconnect (SYS): no closer NIC is up"
	}
}
