package launcher

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
)

// rankfile parses a rankfile for the tests.
func rankfile(t *testing.T, text string) []hostfile.RankSlot {
	t.Helper()
	rf, err := hostfile.ParseRankfile(strings.NewReader(text), "rf")
	if err != nil {
		t.Fatal(err)
	}
	return rf
}

// A rankfile places each rank on its line's host, in rank order, with its
// slot; its hosts are the job's when nothing else names them.
func TestPlanRankfile(t *testing.T) {
	rf := rankfile(t, "rank 0=b slot=0\nrank 1=a slot=1:0\nrank 2=b slot=1\n")
	hosts, err := RankfileHosts(rf)
	if err != nil || len(hosts) != 2 || hosts[0].Name != "b" || hosts[0].Slots != 2 || hosts[1].Name != "a" || hosts[1].Slots != 1 {
		t.Fatalf("RankfileHosts = %+v, %v", hosts, err)
	}
	p, err := NewPlan([]hostfile.Host{{Name: "a", Slots: 4}, {Name: "b", Slots: 4}}, PlanOptions{Rankfile: rf})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Nodes) != 2 || p.Nodes[0].Host.Name != "a" || Ranges(p.Nodes[0].Ranks) != "1" || Ranges(p.Nodes[1].Ranks) != "0,2" {
		t.Errorf("nodes %+v", p.Nodes)
	}
	if p.Ranks[1].Slot != "1:0" || p.Ranks[2].Slot != "1" || p.Ranks[2].LocalRank != 1 || p.MapBy.Policy != "rankfile" {
		t.Errorf("ranks %+v, map-by %v", p.Ranks, p.MapBy)
	}
	for _, tt := range []struct {
		o    PlanOptions
		want string
	}{
		{PlanOptions{Rankfile: rf, NP: 2}, "-np 2: the rankfile places 3 ranks"},
		{PlanOptions{Rankfile: rf, NPerNode: 1}, "--rankfile places every rank: drop --map-by"},
		{PlanOptions{Rankfile: rankfile(t, "rank 0=aa slot=0\n")}, "--rankfile line 1: rank 0: host aa is not among the hosts; the rankfile's hosts must be in the host list"},
		{PlanOptions{Rankfile: rankfile(t, "rank 0=a slot=0\nrank 1=a slot=1\n")}, "2 ranks on a is more than its 1 slots"},
	} {
		_, err := NewPlan([]hostfile.Host{{Name: "a", Slots: 1}, {Name: "b", Slots: 1}}, tt.o)
		if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPlan(%+v): %v, want %q", tt.o, err, tt.want)
		}
	}
	if _, err := RankfileHosts(rankfile(t, "rank 0=+n1 slot=0\n")); !errors.Is(err, ErrUsage) {
		t.Errorf("RankfileHosts with +n1: %v", err)
	}
}

// twoSockets is a node of 2 packages of 2 cores of 2 hardware threads:
// package 0's cores hold CPUs 0,4 and 1,5; package 1's 2,6 and 3,7.
func twoSockets() *topology.Node {
	n := &topology.Node{}
	for id := range 8 {
		core, pkg := id%4, (id%4)/2
		n.CPUs = append(n.CPUs, topology.CPU{ID: id, Core: core % 2, Package: pkg, NUMA: pkg})
	}
	return n
}

// A slot names cores by Open MPI's logical numbers: within a package, or
// over the node; each core brings all its hardware threads.
func TestSlotCPUs(t *testing.T) {
	n := twoSockets()
	for text, want := range map[string]string{"0": "0,4", "1:0": "2,6", "1:*": "2-3,6-7", "3": "3,7", "0-1": "0-1,4-5", "*": "0-7"} {
		sl, err := hostfile.ParseSlot(text)
		if err != nil {
			t.Fatal(err)
		}
		got, err := slotCPUs(n, sl)
		if err != nil || got.String() != want {
			t.Errorf("slotCPUs(%s) = %s, %v; want %s", text, got, err, want)
		}
	}
	for text, want := range map[string]string{"2:0": "package 2: this host has 2", "4": "core 4: there are 4 cores there", "1:2": "core 2: there are 2 cores there"} {
		sl, _ := hostfile.ParseSlot(text)
		if _, err := slotCPUs(n, sl); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("slotCPUs(%s): %v, want %q", text, err, want)
		}
	}
}

// The agent binds a rank whose Launch carries a slot to its cores, and
// leaves the others as their binding says.
func TestApplySlots(t *testing.T) {
	p := &launchPlan{l: control.Launch{Host: "h", Ranks: []control.RankSpec{{Rank: 0}, {Rank: 1, Slot: "0"}}, Bind: control.Bind{Report: true}}}
	if err := p.applySlots(); err != nil {
		t.Skipf("this host: %v", err)
	}
	if len(p.plan) != 2 || p.plan[0].BindTo != topology.BindNone || p.plan[1].BindTo != topology.BindCore || p.plan[1].CPUs.IsEmpty() {
		t.Errorf("plan %+v", p.plan)
	}
	if !strings.Contains(p.report, "rank 1 on h: CPUs ") || !strings.Contains(p.report, "the rankfile's slot=0") {
		t.Errorf("report %q", p.report)
	}
	p = &launchPlan{l: control.Launch{Ranks: []control.RankSpec{{Rank: 0, Slot: "99:0"}}}}
	if err := p.applySlots(); err == nil || !strings.Contains(err.Error(), "rank 0: rankfile slot=99:0: package 99") {
		t.Errorf("applySlots on a package this host lacks: %v", err)
	}
}

// --map-by seq (Open MPI's rmaps seq): a rank on each hostfile line in
// order, a host listed twice taking two ranks, -np taking the first lines;
// more ranks than lines, or seq without a hostfile, are refused.
func TestSequential(t *testing.T) {
	const hf = "h1 slots=2\nh2\nh1\n"
	hosts, err := hostfile.Parse(strings.NewReader(hf), "hf")
	if err != nil {
		t.Fatal(err)
	}
	seq, err := hostfile.ParseSequence(strings.NewReader(hf), "hf")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		np   int
		want string // host of each rank
		err  string
	}{
		{0, "h1 h2 h1", ""},
		{2, "h1 h2", ""},
		{4, "", "-np 4 is more than the 3 lines of --hostfile hf: --map-by seq places one rank on each line"},
	} {
		rf, err := Sequential(seq, tt.np, "--hostfile hf")
		if err == nil {
			var p *Plan
			p, err = NewPlan(hosts, PlanOptions{NP: tt.np, MapBy: MapBy{Policy: "seq"}, Rankfile: rf, Source: "--hostfile hf"})
			if err == nil {
				var got []string
				for _, r := range p.Ranks {
					got = append(got, p.Nodes[r.Node].Host.Name)
				}
				if g := strings.Join(got, " "); g != tt.want {
					t.Errorf("-np %d: ranks on %s, want %s", tt.np, g, tt.want)
				}
				continue
			}
		}
		if tt.err == "" || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrPlan) {
			t.Errorf("-np %d: err = %v, want a plan error containing %q", tt.np, err, tt.err)
		}
	}
	if _, err := NewPlan(hosts, PlanOptions{MapBy: MapBy{Policy: "seq"}}); err == nil || !strings.Contains(err.Error(), "give --hostfile FILE") {
		t.Errorf("seq without its lines: err = %v, want one asking for --hostfile", err)
	}
}
