package topology

// BindCore, BindNUMA, BindPackage: ranks mapped to slots of whole cores,
// bound to the slot's cores or to the NUMA nodes or packages around it,
// and each given an up NIC near its CPUs.

import (
	"fmt"
	"sort"
	"strconv"
)

// cpuGroup is a group the ranks are dealt over (the node, a NUMA node or
// a package), with its cores in order and the next one free.
type cpuGroup struct {
	label string
	cores []bindCore
	next  int
}

// planCPU binds the ranks of out as mode (BindCore, BindNUMA,
// BindPackage) asks, as PlanBindings says.
func planCPU(n *Node, o BindOptions, mode BindTo, out []RankBinding) error {
	cores := nodeCores(n)
	if len(cores) == 0 {
		return fmt.Errorf("plan bindings: bind to %s: the node lists no CPUs", mode)
	}
	per := max(o.CPUsPerRank, 1)
	mapBy := o.MapBy
	if mapBy == "" {
		mapBy = map[BindTo]string{BindCore: MapBySlot, BindNUMA: MapByNUMA, BindPackage: MapByPackage}[mode]
	}
	groups := cpuGroups(cores, mapBy)
	how := map[string]string{MapBySlot: "mapped by slot", MapByNUMA: "mapped round-robin by NUMA node", MapByPackage: "mapped round-robin by package"}[mapBy]
	for i := range out {
		g := groups[i%len(groups)]
		wrapped := g.next+per > len(g.cores)
		if wrapped && mode == BindCore && (!o.Oversubscribed || per > len(g.cores)) {
			return fmt.Errorf("plan bindings: bind to core: %d local ranks of %s each do not fit: %s has %d cores for %d of them (map-by %s)",
				len(out), plural(per, "core"), g.label, len(g.cores), countMapped(len(out), len(groups), i%len(groups)), mapBy)
		}
		slot := make([]bindCore, per)
		for k := range slot {
			slot[k] = g.cores[(g.next+k)%len(g.cores)]
		}
		g.next += per
		b := &out[i]
		b.BindTo = mode
		b.CPUs, b.Why = bindSlot(n, mode, slot, how)
		if wrapped {
			b.Why += fmt.Sprintf(" (%s is full: wrapped around, oversubscribed)", g.label)
		}
		b.Mems = n.NUMAOfCPUs(b.CPUs)
	}
	cpuNICs(n, out)
	return nil
}

// cpuGroups are the groups that ranks mapped by mapBy are dealt over, in
// order of their NUMA node (of their package for MapByPackage), each with
// its cores in the order of cores.
func cpuGroups(cores []bindCore, mapBy string) []*cpuGroup {
	var groups []*cpuGroup
	idx := map[int]*cpuGroup{}
	add := func(id int, label string, c bindCore) {
		g := idx[id]
		if g == nil {
			g = &cpuGroup{label: label}
			idx[id] = g
			groups = append(groups, g)
		}
		g.cores = append(g.cores, c)
	}
	for _, c := range cores {
		switch mapBy {
		case MapBySlot:
			add(0, "the node", c)
		case MapByNUMA:
			add(c.numa, "NUMA "+strconv.Itoa(c.numa), c)
		case MapByPackage:
			add(c.pkg, "package "+strconv.Itoa(c.pkg), c)
		}
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i].cores[0], groups[j].cores[0]
		if mapBy == MapByPackage {
			return a.pkg < b.pkg
		}
		return a.numa < b.numa
	})
	return groups
}

// bindSlot returns the CPUs that mode binds a rank mapped to slot to (its
// cores, or every CPU of their NUMA nodes or packages), and why; how says
// how the rank was mapped.
func bindSlot(n *Node, mode BindTo, slot []bindCore, how string) (CPUSet, string) {
	var cpus CPUSet
	switch mode {
	case BindCore:
		cpus = unionCores(slot)
		return cpus, fmt.Sprintf("bind to core: %s on %s, %s", plural(len(slot), "core"), joinLabels("NUMA", n.NUMAOfCPUs(cpus)), how)
	case BindNUMA:
		var ids []int
		for _, c := range slot {
			ids = appendUniq(ids, c.numa)
		}
		for _, id := range ids {
			cpus = cpus.Union(n.CPUsOfNUMA(id))
		}
		return cpus, fmt.Sprintf("bind to numa: all CPUs of %s, %s", joinLabels("NUMA", ids), how)
	case BindPackage:
		var ids []int
		for _, c := range slot {
			ids = appendUniq(ids, c.pkg)
		}
		for _, id := range ids {
			for _, p := range n.Packages {
				if p.ID == id {
					cpus = cpus.Union(p.CPUs)
				}
			}
		}
		return cpus, fmt.Sprintf("bind to package: all CPUs of %s, %s", joinLabels("package", ids), how)
	}
	return cpus, ""
}

// cpuNICs says which ranks of out share their CPUs, and gives each an up
// NIC on one of its NUMA nodes, else any up NIC.
func cpuNICs(n *Node, out []RankBinding) {
	users := map[string]int{}
	for i := range out {
		users[out[i].CPUs.String()]++
	}
	used := map[int]int{}
	for i := range out {
		b := &out[i]
		if k := users[b.CPUs.String()]; k > 1 {
			b.Why += fmt.Sprintf("; %d ranks share it", k)
		}
		numas := b.Mems
		j, cls := pickNIC(n, used, func(j int) LinkKind {
			for _, m := range numas {
				if n.NICs[j].NUMA == m {
					return LinkNODE
				}
			}
			return LinkSYS
		})
		if j < 0 {
			b.Why += "; no NIC is up"
			continue
		}
		b.NIC = &n.NICs[j]
		if cls == LinkNODE {
			b.Why += fmt.Sprintf("; NIC %s is on NUMA %d", nicName(b.NIC), b.NIC.NUMA)
		} else {
			b.Why += fmt.Sprintf("; NIC %s is across the CPU interconnect: none up on the rank's NUMA node", nicName(b.NIC))
		}
	}
}

// countMapped is how many of ranks ranks dealt round-robin over groups
// groups land in group g.
func countMapped(ranks, groups, g int) int {
	c := ranks / groups
	if g < ranks%groups {
		c++
	}
	return c
}

func appendUniq(s []int, v int) []int {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
