package collectives

// topology is how a communicator's ranks sit on hosts.
type topology struct {
	hostOf    []int   // comm rank -> host index (hosts numbered by first rank)
	hostRanks [][]int // host index -> comm ranks, ascending
	myHost    int
	myLocal   int
	maxPPN    int
	uniform   bool // every host has the same number of ranks
}

func newTopology(hosts []int, rank int) topology {
	t := topology{hostOf: make([]int, len(hosts))}
	index := map[int]int{}
	for r, h := range hosts {
		i, ok := index[h]
		if !ok {
			i = len(t.hostRanks)
			index[h] = i
			t.hostRanks = append(t.hostRanks, nil)
		}
		t.hostOf[r] = i
		t.hostRanks[i] = append(t.hostRanks[i], r)
	}
	t.myHost = t.hostOf[rank]
	for i, r := range t.hostRanks[t.myHost] {
		if r == rank {
			t.myLocal = i
		}
	}
	t.uniform = true
	for _, rs := range t.hostRanks {
		t.maxPPN = max(t.maxPPN, len(rs))
		if len(rs) != len(t.hostRanks[0]) {
			t.uniform = false
		}
	}
	return t
}

func (t topology) class() LinkClass {
	if len(t.hostRanks) > 1 {
		return InterHost
	}
	return IntraHost
}

// local is the group of this rank's host.
func (t topology) local() group {
	return group{ranks: t.hostRanks[t.myHost], me: t.myLocal}
}

// leaders is the group of one rank per host: the root on the root's host
// (when root >= 0), the lowest rank elsewhere. me is -1 on non-leaders.
func (t topology) leaders(root int, rank int) group {
	g := group{ranks: make([]int, len(t.hostRanks)), me: -1}
	for h, rs := range t.hostRanks {
		g.ranks[h] = rs[0]
		if root >= 0 && t.hostOf[root] == h {
			g.ranks[h] = root
		}
		if g.ranks[h] == rank {
			g.me = h
		}
	}
	return g
}

// cross is the group of the ranks with local index l on every host
// (hosts must be uniform).
func (t topology) cross(l int) group {
	g := group{ranks: make([]int, len(t.hostRanks)), me: t.myHost}
	for h, rs := range t.hostRanks {
		g.ranks[h] = rs[l]
	}
	return g
}

// Choose returns the algorithm this communicator runs for a collective
// and a message size (measured as [Thresholds] says), with the cost
// model's estimate. It is what the operations themselves use, so it can
// be asked before or after, for example by `gorun bench`.
func (c *Communicator) Choose(coll Collective, bytes int64) Choice {
	return c.choose(coll, bytes, true)
}

// choose is Choose, with the estimate only when asked: an operation needs
// only the algorithm, and the cost model's arithmetic was 2-3% of a small
// call's time.
func (c *Communicator) choose(coll Collective, bytes int64, estimate bool) Choice {
	t := c.topo
	ch := Choice{Collective: coll, Bytes: bytes, Ranks: c.size, Class: t.class()}
	if coll >= numCollectives {
		return ch
	}
	if c.thr.Hierarchical && coll.hierarchicalForm() && len(t.hostRanks) > 1 && t.maxPPN > 1 {
		ch.Algorithm = AlgoHierarchical
		ppn := len(t.hostRanks[t.myHost])
		hosts := len(t.hostRanks)
		ph := func(co Collective, l LinkClass, ranks int, b int64) Phase {
			return Phase{Collective: co, Class: l, Algorithm: c.thr.Select(co, l, ranks, b), Ranks: ranks, Bytes: b}
		}
		switch coll {
		case CollAllReduce:
			if t.uniform && c.thr.Select(CollAllReduce, InterHost, hosts, bytes) == AlgoRing {
				// Bandwidth-bound: every local rank works on its shard.
				shard := bytes / int64(ppn)
				ch.Phases = []Phase{
					ph(CollReduceScatter, IntraHost, ppn, bytes),
					ph(CollAllReduce, InterHost, hosts, shard),
					ph(CollAllGather, IntraHost, ppn, bytes),
				}
			} else {
				ch.Phases = []Phase{
					ph(CollReduce, IntraHost, ppn, bytes),
					ph(CollAllReduce, InterHost, hosts, bytes),
					ph(CollBroadcast, IntraHost, ppn, bytes),
				}
			}
		case CollBroadcast:
			ch.Phases = []Phase{ph(CollBroadcast, InterHost, hosts, bytes), ph(CollBroadcast, IntraHost, ppn, bytes)}
		case CollReduce:
			ch.Phases = []Phase{ph(CollReduce, IntraHost, ppn, bytes), ph(CollReduce, InterHost, hosts, bytes)}
		}
		if estimate {
			for _, p := range ch.Phases {
				ch.Estimate += c.model.Estimate(p.Collective, p.Algorithm, p.Class, p.Ranks, p.Bytes)
			}
		}
		return ch
	}
	ch.Algorithm = c.thr.Select(coll, ch.Class, c.size, bytes)
	if estimate {
		ch.Estimate = c.model.Estimate(coll, ch.Algorithm, ch.Class, c.size, bytes)
	}
	return ch
}
