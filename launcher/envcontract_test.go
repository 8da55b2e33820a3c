package launcher

import (
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
)

// Each agent's Launch carries Horovod's cross rank and size of its ranks,
// which need the whole plan: 3 ranks on 2 hosts (2, then 1) leave local
// rank 1 alone in its cross communicator.
func TestLaunchCrossRanks(t *testing.T) {
	t.Parallel()
	plan, err := NewPlan([]hostfile.Host{{Name: "h0", Slots: 2}, {Name: "h1", Slots: 1}, {Name: "h2", Slots: 2}}, PlanOptions{NP: 5})
	if err != nil {
		t.Fatal(err)
	}
	h := &head{plan: plan, o: Options{StdinRank: -1}}
	want := [][]control.RankSpec{
		{{Rank: 0, LocalRank: 0, CrossRank: 0, CrossSize: 3}, {Rank: 1, LocalRank: 1, CrossRank: 0, CrossSize: 2}},
		{{Rank: 2, LocalRank: 0, CrossRank: 1, CrossSize: 3}},
		{{Rank: 3, LocalRank: 0, CrossRank: 2, CrossSize: 3}, {Rank: 4, LocalRank: 1, CrossRank: 1, CrossSize: 2}},
	}
	for node, n := range plan.Nodes {
		l := h.launchFor(0, node, n, "127.0.0.1", 1)
		if len(l.Ranks) != len(want[node]) {
			t.Fatalf("node %d: ranks %+v, want %+v", node, l.Ranks, want[node])
		}
		for i, s := range l.Ranks {
			if s != want[node][i] {
				t.Errorf("node %d: rank spec %+v, want %+v", node, s, want[node][i])
			}
		}
	}
}

// The agent gives OMP_NUM_THREADS=1 to unbound ranks that share its host,
// and counts them for the head's note.
func TestAgentDefaultThreads(t *testing.T) {
	t.Parallel()
	two := []control.RankSpec{{Rank: 0}, {Rank: 1, LocalRank: 1}}
	tests := []struct {
		name    string
		l       control.Launch
		base    []string
		hints   []string
		want    string
		counted bool
	}{
		{"shared host", control.Launch{Ranks: two, LocalWorldSize: 2}, nil, nil, "1", true},
		{"one rank", control.Launch{Ranks: two[:1], LocalWorldSize: 1}, nil, nil, "", false},
		{"-x", control.Launch{Ranks: two, LocalWorldSize: 2, Exports: []string{"OMP_NUM_THREADS=2"}}, nil, nil, "2", false},
		{"agent's environment", control.Launch{Ranks: two, LocalWorldSize: 2}, []string{"OMP_NUM_THREADS=5"}, nil, "5", false},
		{"bound", control.Launch{Ranks: two, LocalWorldSize: 2}, nil, []string{"OMP_NUM_THREADS=4"}, "4", false},
	}
	for _, tt := range tests {
		p := &launchPlan{l: tt.l, base: tt.base}
		if tt.hints != nil {
			for range tt.l.Ranks {
				p.hints = append(p.hints, env.RankHints{Vars: tt.hints})
			}
		}
		var got string
		for _, kv := range p.environ(0) {
			if v, ok := strings.CutPrefix(kv, "OMP_NUM_THREADS="); ok {
				got = v
			}
		}
		if got != tt.want || p.defaultThreads(0) != tt.counted {
			t.Errorf("%s: OMP_NUM_THREADS=%q, counted %v; want %q, %v", tt.name, got, p.defaultThreads(0), tt.want, tt.counted)
		}
	}
}

// The head says once, when the first generation's ranks have all started,
// how many ranks got OMP_NUM_THREADS=1.
func TestDefaultThreadsNote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		counts []int // by node of the test head's two
		want   string
	}{
		{"every host", []int{2, 2}, "gorun: note: OMP_NUM_THREADS=1 for the 2 unbound ranks per host, gorun's default where ranks share a host (-x OMP_NUM_THREADS=N to choose)\n"},
		{"one host", []int{2, 0}, "gorun: note: OMP_NUM_THREADS=1 for the 2 unbound ranks per host, gorun's default where ranks share a host (-x OMP_NUM_THREADS=N to choose)\n"},
		{"uneven", []int{2, 1}, "gorun: note: OMP_NUM_THREADS=1 for the 3 unbound ranks that share a host, gorun's default where ranks share a host (-x OMP_NUM_THREADS=N to choose)\n"},
		{"none", []int{0, 0}, ""},
		{"torchrun", []int{2, 2}, "gorun: note: OMP_NUM_THREADS=1 for the 2 unbound ranks per host, as torchrun sets it (-x OMP_NUM_THREADS=N to choose)\n"},
	}
	for _, tt := range tests {
		o := Options{}
		if tt.name == "torchrun" {
			o.Personality = env.TorchRun
		}
		g := newTestGen(t, o)
		for node, n := range tt.counts {
			e := evStarted(node, 2*node, 2*node+1).(ranksStarted)
			e.DefaultThreads = n
			g.feed(e)
			if node == 0 && g.notes.Len() != 0 {
				t.Errorf("%s: a note before every rank started: %q", tt.name, g.notes)
			}
		}
		if got := g.notes.String(); got != tt.want {
			t.Errorf("%s: notes %q, want %q", tt.name, got, tt.want)
		}
	}
}
