package collectives_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

func TestSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		text string
	}{
		{"0", 0, "0B"},
		{"1536", 1536, "1536B"},
		{"8K", 8 << 10, "8KiB"},
		{"8kib", 8 << 10, "8KiB"},
		{" 512KiB", 512 << 10, "512KiB"},
		{"3MB", 3 << 20, "3MiB"},
		{"2GiB", 2 << 30, "2GiB"},
		{"1024MiB", 1 << 30, "1GiB"},
		{"256B", 256, "256B"},
	} {
		got, err := collectives.ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if s := collectives.FormatSize(tc.want); s != tc.text {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.want, s, tc.text)
		}
	}
	for _, bad := range []string{"", "K", "-1", "1.5K", "8 parsecs", "99999999999G"} {
		if _, err := collectives.ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q): no error", bad)
		}
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	d := collectives.DefaultThresholds()
	const intra, inter = collectives.IntraHost, collectives.InterHost
	for _, tc := range []struct {
		coll  collectives.Collective
		class collectives.LinkClass
		ranks int
		bytes int64
		want  collectives.Algorithm
	}{
		{collectives.CollAllReduce, inter, 8, 0, collectives.AlgoRecursiveDoubling},
		{collectives.CollAllReduce, inter, 8, 256 << 10, collectives.AlgoRecursiveDoubling},
		{collectives.CollAllReduce, inter, 8, 256<<10 + 1, collectives.AlgoRabenseifner},
		{collectives.CollAllReduce, inter, 2, 256<<10 + 1, collectives.AlgoRing},
		{collectives.CollAllReduce, intra, 3, 16 << 10, collectives.AlgoRecursiveDoubling},
		{collectives.CollAllReduce, intra, 3, 512 << 10, collectives.AlgoRabenseifner},
		{collectives.CollAllReduce, inter, 8, 64 << 20, collectives.AlgoRabenseifner},
		{collectives.CollBroadcast, inter, 4, 100 << 10, collectives.AlgoChain},
		{collectives.CollBroadcast, inter, 4, 1 << 20, collectives.AlgoBinomial},
		{collectives.CollBroadcast, intra, 4, 1 << 20, collectives.AlgoBinomial},
		{collectives.CollBroadcast, inter, 8, 1 << 20, collectives.AlgoScatterAllGather},
		{collectives.CollBroadcast, inter, 8, 100 << 10, collectives.AlgoBinaryTree},
		{collectives.CollReduce, intra, 5, 1 << 30, collectives.AlgoReduceScatterGather},
		{collectives.CollAllGather, inter, 8, 1024, collectives.AlgoRecursiveDoubling},
		{collectives.CollAllGather, inter, 6, 1024, collectives.AlgoBruck},
		{collectives.CollAllGather, inter, 8, 1 << 20, collectives.AlgoRecursiveDoubling},
		{collectives.CollAllGather, inter, 6, 1 << 20, collectives.AlgoRing},
		{collectives.CollReduceScatter, intra, 3, 64 << 20, collectives.AlgoRecursiveHalving},
		{collectives.CollReduceScatter, inter, 2, 2 << 20, collectives.AlgoRing},
		{collectives.CollReduceScatter, inter, 7, 1 << 10, collectives.AlgoRecursiveHalving},
		{collectives.CollAllToAll, inter, 16, 100, collectives.AlgoBruck},
		{collectives.CollAllToAll, inter, 8, 100, collectives.AlgoLinear},
		{collectives.CollAllToAll, inter, 16, 64 << 10, collectives.AlgoPairwise},
		{collectives.CollBarrier, intra, 5, 0, collectives.AlgoDissemination},
	} {
		if got := d.Select(tc.coll, tc.class, tc.ranks, tc.bytes); got != tc.want {
			t.Errorf("Select(%s, %s, %d ranks, %d bytes) = %s, want %s", tc.coll, tc.class, tc.ranks, tc.bytes, got, tc.want)
		}
	}
}

func TestThresholdsText(t *testing.T) {
	t.Parallel()
	d := collectives.DefaultThresholds()
	text := d.String()
	for _, want := range []string{
		"allreduce@inter=recursive-doubling<=256KiB,ring&n<=2,rabenseifner\n",
		"alltoall@intra=bruck<=256B&n>=9,linear<=4KiB,pairwise\n",
		"allgather@inter=recursive-doubling&pow2,bruck<=256KiB,ring\n",
		"reduce@inter=binomial<=16KiB,chain<=512KiB,reducescatter-gather\n",
		"hierarchical=on\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	// The printed table reads back as itself.
	var u collectives.Thresholds
	if err := u.Set(text); err != nil {
		t.Fatal(err)
	}
	if u.String() != text {
		t.Errorf("round trip:\n%s\nwant\n%s", u.String(), text)
	}

	// Entries override their collective and class only.
	if err := d.Set("allreduce@intra=ring; bcast=binomial<=1K&n<=4,chain ;hierarchical=off"); err != nil {
		t.Fatal(err)
	}
	if got := d.Select(collectives.CollAllReduce, collectives.IntraHost, 8, 1); got != collectives.AlgoRing {
		t.Errorf("intra allreduce: %s", got)
	}
	if got := d.Select(collectives.CollAllReduce, collectives.InterHost, 8, 1); got != collectives.AlgoRecursiveDoubling {
		t.Errorf("inter allreduce: %s", got)
	}
	if got := d.Select(collectives.CollBroadcast, collectives.InterHost, 8, 1); got != collectives.AlgoChain {
		t.Errorf("broadcast over 8: %s", got)
	}
	if d.Hierarchical {
		t.Error("hierarchical still on")
	}

	for _, bad := range []string{
		"allreduce",
		"allreduce=bruck",
		"gossip=ring",
		"allreduce@lan=ring",
		"allreduce=ring<=lots",
		"alltoall=bruck&n>=x",
		"alltoall=bruck&odd",
		"hierarchical=maybe",
	} {
		before := d.String()
		err := d.Set(bad)
		if !errors.Is(err, collectives.ErrInvalid) {
			t.Errorf("Set(%q) = %v, want ErrInvalid", bad, err)
		}
		if d.String() != before {
			t.Errorf("Set(%q) changed the table", bad)
		}
	}
	if err := d.SetTiers(collectives.CollBarrier, collectives.IntraHost, []collectives.Tier{{Algorithm: collectives.AlgoRing}}); !errors.Is(err, collectives.ErrInvalid) {
		t.Errorf("SetTiers with a foreign algorithm: %v", err)
	}
}

func TestThresholdsFromEnv(t *testing.T) {
	t.Setenv(collectives.EnvThresholds, "allreduce=ring;broadcast@intra=chain")
	c, err := collectives.New(collectivestest.NewFabric(4, nil).Endpoint(0), 0, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Choose(collectives.CollAllReduce, 8).Algorithm; got != collectives.AlgoRing {
		t.Errorf("allreduce: %s", got)
	}
	if got := c.Choose(collectives.CollBroadcast, 8).Algorithm; got != collectives.AlgoChain {
		t.Errorf("broadcast: %s", got)
	}
	// Explicit thresholds win over the environment.
	c2, err := collectives.New(collectivestest.NewFabric(4, nil).Endpoint(0), 0, 4, &collectives.Options{Thresholds: collectives.DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := c2.Choose(collectives.CollAllReduce, 8).Algorithm; got != collectives.AlgoRecursiveDoubling {
		t.Errorf("allreduce with explicit thresholds: %s", got)
	}
	t.Setenv(collectives.EnvThresholds, "allreduce=nonsense")
	if _, err := collectives.New(collectivestest.NewFabric(2, nil).Endpoint(0), 0, 2, nil); !errors.Is(err, collectives.ErrInvalid) || !strings.Contains(err.Error(), collectives.EnvThresholds) {
		t.Errorf("bad environment: %v", err)
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	newComm := func(hosts []int, thr *collectives.Thresholds) *collectives.Communicator {
		f := collectivestest.NewFabric(len(hosts), &collectivestest.Options{Hosts: hosts})
		c, err := collectives.New(f.Endpoint(0), 0, len(hosts), &collectives.Options{Thresholds: thr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	oneHost := newComm([]int{0, 0, 0, 0, 0, 0, 0, 0}, nil)
	twoHosts := newComm([]int{0, 0, 0, 0, 1, 1, 1, 1}, nil)
	uneven := newComm([]int{0, 0, 0, 1, 1}, nil)
	onePerHost := newComm([]int{0, 1, 2, 3}, nil)
	flat := collectives.DefaultThresholds()
	flat.Hierarchical = false
	noHier := newComm([]int{0, 0, 0, 0, 1, 1, 1, 1}, flat)

	if got := oneHost.Choose(collectives.CollAllReduce, 1<<20); got.Algorithm != collectives.AlgoRabenseifner || got.Class != collectives.IntraHost || len(got.Phases) != 0 {
		t.Errorf("one host: %v", got)
	}
	if oneHost.Hosts() != 1 || twoHosts.Hosts() != 2 {
		t.Errorf("hosts: %d, %d", oneHost.Hosts(), twoHosts.Hosts())
	}
	phases := func(ch collectives.Choice) string {
		var s []string
		for _, p := range ch.Phases {
			s = append(s, p.Class.String()+" "+p.Collective.String()+" "+p.Algorithm.String())
		}
		return strings.Join(s, "; ")
	}
	for _, tc := range []struct {
		name   string
		c      *collectives.Communicator
		coll   collectives.Collective
		bytes  int64
		algo   collectives.Algorithm
		phases string
	}{
		{"small allreduce", twoHosts, collectives.CollAllReduce, 1 << 10, collectives.AlgoHierarchical,
			"intra reduce binomial; inter allreduce recursive-doubling; intra broadcast binomial"},
		{"large allreduce", twoHosts, collectives.CollAllReduce, 64 << 20, collectives.AlgoHierarchical,
			"intra reducescatter recursive-halving; inter allreduce ring; intra allgather ring"},
		{"large allreduce, uneven hosts", uneven, collectives.CollAllReduce, 64 << 20, collectives.AlgoHierarchical,
			"intra reduce reducescatter-gather; inter allreduce ring; intra broadcast binomial"},
		{"broadcast", twoHosts, collectives.CollBroadcast, 1 << 10, collectives.AlgoHierarchical,
			"inter broadcast chain; intra broadcast binomial"},
		{"reduce", twoHosts, collectives.CollReduce, 100 << 10, collectives.AlgoHierarchical,
			"intra reduce chain; inter reduce chain"},
		{"allgather is flat", twoHosts, collectives.CollAllGather, 1 << 10, collectives.AlgoRecursiveDoubling, ""},
		{"one rank per host", onePerHost, collectives.CollAllReduce, 1 << 10, collectives.AlgoRecursiveDoubling, ""},
		{"hierarchical off", noHier, collectives.CollAllReduce, 1 << 30, collectives.AlgoRabenseifner, ""},
	} {
		ch := tc.c.Choose(tc.coll, tc.bytes)
		if ch.Algorithm != tc.algo || phases(ch) != tc.phases {
			t.Errorf("%s: got %v", tc.name, ch)
		}
		if ch.Estimate <= 0 {
			t.Errorf("%s: estimate %v", tc.name, ch.Estimate)
		}
		if s := ch.String(); !strings.Contains(s, tc.coll.String()) || !strings.Contains(s, tc.algo.String()) {
			t.Errorf("%s: String() = %q", tc.name, s)
		}
	}
	if ch := twoHosts.Choose(collectives.CollAllReduce, 1<<20); ch.Class != collectives.InterHost {
		t.Errorf("class: %v", ch)
	}
}

func TestCostModel(t *testing.T) {
	t.Parallel()
	m := collectives.DefaultCostModel()
	// Estimates grow with the size and the rank count.
	for coll := range collectives.CollBarrier + 1 {
		for _, a := range coll.Algorithms() {
			prev := time.Duration(0)
			for _, b := range []int64{0, 1 << 10, 1 << 20, 1 << 30} {
				e := m.Estimate(coll, a, collectives.InterHost, 8, b)
				if e <= 0 || e < prev {
					t.Errorf("%s %s: %d bytes: %v after %v", coll, a, b, e, prev)
				}
				prev = e
			}
			if m.Estimate(coll, a, collectives.InterHost, 16, 1<<20) < m.Estimate(coll, a, collectives.InterHost, 2, 1<<20) {
				t.Errorf("%s %s: 16 ranks cheaper than 2", coll, a)
			}
		}
	}
	if e := m.Estimate(collectives.CollAllReduce, collectives.AlgoBruck, collectives.InterHost, 8, 1); e != 0 {
		t.Errorf("foreign algorithm: %v", e)
	}
	// The derived table: latency-bound algorithms for small messages,
	// bandwidth-bound ones for large, and a crossover in between.
	tab := m.Thresholds(8)
	for _, class := range []collectives.LinkClass{collectives.IntraHost, collectives.InterHost} {
		if a := tab.Select(collectives.CollAllReduce, class, 8, 64); a != collectives.AlgoRecursiveDoubling {
			t.Errorf("%s: small allreduce: %s", class, a)
		}
		if a := tab.Select(collectives.CollAllReduce, class, 8, 1<<30); a != collectives.AlgoRing {
			t.Errorf("%s: large allreduce: %s", class, a)
		}
		if a := tab.Select(collectives.CollBroadcast, class, 8, 64); a != collectives.AlgoBinomial {
			t.Errorf("%s: small broadcast: %s", class, a)
		}
	}
	tiers := tab.Tiers(collectives.CollAllReduce, collectives.InterHost)
	if len(tiers) < 2 || tiers[len(tiers)-1].MaxBytes != collectives.Unlimited {
		t.Errorf("allreduce tiers: %v", tiers)
	}
	// A slower network moves the crossover up.
	slow := m
	slow.InterHost.Latency *= 10
	if a, b := firstCrossover(m.Thresholds(8)), firstCrossover(slow.Thresholds(8)); b <= a {
		t.Errorf("crossover %d with 10x the latency, %d without", b, a)
	}
	// The table prints and parses like any other.
	var u collectives.Thresholds
	if err := u.Set(tab.String()); err != nil || u.String() != tab.String() {
		t.Errorf("derived table round trip: %v\n%s", err, tab)
	}
}

func firstCrossover(t *collectives.Thresholds) int64 {
	return t.Tiers(collectives.CollAllReduce, collectives.InterHost)[0].MaxBytes
}
