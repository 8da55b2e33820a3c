// This file holds Open MPI's rankfiles (--rankfile, mpirun's -rf): each
// rank on the host and the cores its line names.

package launcher

import (
	"fmt"
	"slices"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/topology"
)

// RankfileHosts returns the hosts a rankfile names, in the order of their
// first rank, each with a slot for every rank it gets: the job's hosts
// when nothing else names them, as Open MPI takes a rankfile's hosts for
// its allocation. A line that names a host by its place in the host list
// (+nK) needs one: it is an error here.
func RankfileHosts(rf []hostfile.RankSlot) ([]hostfile.Host, error) {
	var hosts []hostfile.Host
	index := map[string]int{}
	for _, rs := range rf {
		if rs.Relative >= 0 {
			return nil, fmt.Errorf("%w: --rankfile line %d: +n%d names a host of the host list: give one (-H or --hostfile)", ErrUsage, rs.Line, rs.Relative)
		}
		i, ok := index[rs.Host]
		if !ok {
			i = len(hosts)
			index[rs.Host] = i
			hosts = append(hosts, hostfile.Host{Name: rs.Host})
		}
		hosts[i].Slots++
	}
	return hosts, nil
}

// slotCPUs returns the CPUs of a rankfile slot on node n: every hardware
// thread of its cores. Packages are counted in the order of their ids,
// and cores in the order of their ids within a package (Open MPI's
// logical numbering); without a package, cores are counted over the
// whole node, package after package.
func slotCPUs(n *topology.Node, sl hostfile.Slot) (topology.CPUSet, error) {
	type core struct{ pkg, id int }
	var pkgs []int
	cores := map[int][]int{} // package id -> core ids, ascending
	threads := map[core][]int{}
	for _, c := range n.CPUs {
		k := core{c.Package, c.Core}
		if _, ok := threads[k]; !ok {
			cores[c.Package] = append(cores[c.Package], c.Core)
			if !slices.Contains(pkgs, c.Package) {
				pkgs = append(pkgs, c.Package)
			}
		}
		threads[k] = append(threads[k], c.ID)
	}
	slices.Sort(pkgs)
	var order []core // the node's cores in logical order
	for _, p := range pkgs {
		ids := cores[p]
		slices.Sort(ids)
		for _, id := range ids {
			order = append(order, core{p, id})
		}
	}
	pool := order
	if sl.Package >= 0 {
		if sl.Package >= len(pkgs) {
			return topology.CPUSet{}, fmt.Errorf("rankfile slot=%s: package %d: this host has %d", sl, sl.Package, len(pkgs))
		}
		pool = nil
		for _, c := range order {
			if c.pkg == pkgs[sl.Package] {
				pool = append(pool, c)
			}
		}
	}
	picked := pool
	if sl.Cores != nil {
		picked = nil
		for _, i := range sl.Cores {
			if i >= len(pool) {
				return topology.CPUSet{}, fmt.Errorf("rankfile slot=%s: core %d: there are %d cores there", sl, i, len(pool))
			}
			picked = append(picked, pool[i])
		}
	}
	var cpus []int
	for _, c := range picked {
		cpus = append(cpus, threads[c]...)
	}
	return topology.NewCPUSet(cpus...), nil
}

// applySlots binds the ranks whose rankfile line names their cores to
// those cores (and their memory to the cores' NUMA nodes), in place of
// --bind-to's binding; the others keep theirs.
func (p *launchPlan) applySlots() error {
	var node *topology.Node
	for i, s := range p.l.Ranks {
		if s.Slot == "" {
			continue
		}
		sl, err := hostfile.ParseSlot(s.Slot)
		if err != nil {
			return fmt.Errorf("rank %d: rankfile slot=%s: %w", s.Rank, s.Slot, err)
		}
		if node == nil {
			n, err := localNode(false)
			if err != nil {
				return fmt.Errorf("discover the node: %w", err)
			}
			node = n.Restrict(allowedCPUs())
		}
		cpus, err := slotCPUs(node, sl)
		if err != nil {
			return fmt.Errorf("rank %d: %w", s.Rank, err)
		}
		if cpus.IsEmpty() {
			return fmt.Errorf("rank %d: rankfile slot=%s: none of its CPUs may be used here", s.Rank, s.Slot)
		}
		if p.plan == nil {
			p.plan = make([]topology.RankBinding, len(p.l.Ranks))
			for j := range p.plan {
				p.plan[j] = topology.RankBinding{LocalRank: j, BindTo: topology.BindNone}
			}
		}
		numa := node.NUMAOfCPUs(cpus)
		p.plan[i] = topology.RankBinding{LocalRank: i, BindTo: topology.BindCore, CPUs: cpus, Mems: numa, NUMA: numa}
		if p.l.Bind.Report {
			p.report += fmt.Sprintf("rank %d on %s: CPUs %s, NUMA node %v: the rankfile's slot=%s\n", s.Rank, p.l.Host, cpus, numa, s.Slot)
		}
	}
	return nil
}
