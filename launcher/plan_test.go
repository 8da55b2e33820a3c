package launcher

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/hostfile"
)

func hosts(spec ...any) []hostfile.Host {
	var out []hostfile.Host
	for i := 0; i < len(spec); i += 2 {
		out = append(out, hostfile.Host{Name: spec[i].(string), Slots: spec[i+1].(int)})
	}
	return out
}

func TestNewPlan(t *testing.T) {
	t.Parallel()
	capped := hosts("a", 2, "b", 2)
	capped[0].MaxSlots = 3
	tests := []struct {
		name      string
		hosts     []hostfile.Host
		o         PlanOptions
		nodes     [][]int // ranks per node, in node order
		hostNames []string
		over      bool
		wantErr   string
	}{
		{name: "all slots by default", hosts: hosts("a", 2, "b", 3), nodes: [][]int{{0, 1}, {2, 3, 4}}, hostNames: []string{"a", "b"}},
		{name: "slot fills in order", hosts: hosts("a", 2, "b", 2), o: PlanOptions{NP: 3}, nodes: [][]int{{0, 1}, {2}}, hostNames: []string{"a", "b"}},
		{name: "unused host is not a node", hosts: hosts("a", 4, "b", 2), o: PlanOptions{NP: 2}, nodes: [][]int{{0, 1}}, hostNames: []string{"a"}},
		{name: "node round robin", hosts: hosts("a", 2, "b", 2), o: PlanOptions{NP: 3, MapBy: MapBy{Policy: "node"}}, nodes: [][]int{{0, 2}, {1}}, hostNames: []string{"a", "b"}},
		{name: "node skips full hosts", hosts: hosts("a", 1, "b", 3), o: PlanOptions{MapBy: MapBy{Policy: "node"}}, nodes: [][]int{{0}, {1, 2, 3}}, hostNames: []string{"a", "b"}},
		{name: "ppr", hosts: hosts("a", 4, "b", 4, "c", 4), o: PlanOptions{MapBy: MapBy{Policy: "ppr", PerNode: 2}}, nodes: [][]int{{0, 1}, {2, 3}, {4, 5}}, hostNames: []string{"a", "b", "c"}},
		{name: "ppr per numa", hosts: hosts("a", 8, "b", 8), o: PlanOptions{MapBy: MapBy{Policy: "ppr", PerNode: 2, Per: "numa"}, NUMA: []int{2, 1}}, nodes: [][]int{{0, 1, 2, 3}, {4, 5}}, hostNames: []string{"a", "b"}},
		{name: "ppr per package", hosts: hosts("a", 8, "b", 8), o: PlanOptions{MapBy: MapBy{Policy: "ppr", PerNode: 1, Per: "package"}, NUMA: []int{4, 4}, Packages: []int{2, 1}}, nodes: [][]int{{0, 1}, {2}}, hostNames: []string{"a", "b"}},
		{name: "npernode with np", hosts: hosts("a", 4, "b", 4), o: PlanOptions{NP: 3, NPerNode: 2}, nodes: [][]int{{0, 1}, {2}}, hostNames: []string{"a", "b"}},
		{name: "oversubscribe round robin", hosts: hosts("a", 1, "b", 1), o: PlanOptions{NP: 5, Oversubscribe: true}, nodes: [][]int{{0, 2, 4}, {1, 3}}, hostNames: []string{"a", "b"}, over: true},
		{name: "max_slots caps oversubscription", hosts: capped, o: PlanOptions{NP: 6, Oversubscribe: true}, nodes: [][]int{{0, 1, 4}, {2, 3, 5}}, hostNames: []string{"a", "b"}, over: true},
		{name: "too many ranks", hosts: hosts("a", 2, "b", 2), o: PlanOptions{NP: 5, Source: "--hostfile h"}, wantErr: "-np 5 is more than the 4 slots of --hostfile h (a:2, b:2)"},
		{name: "too many for max_slots", hosts: func() []hostfile.Host { h := hosts("a", 1); h[0].MaxSlots = 2; return h }(), o: PlanOptions{NP: 3, Oversubscribe: true}, wantErr: "max_slots"},
		{name: "too many for ppr", hosts: hosts("a", 4), o: PlanOptions{NP: 3, NPerNode: 2}, wantErr: "-np 3 is more than ppr:2:node"},
		{name: "ppr beyond slots needs oversubscribe", hosts: hosts("a", 1), o: PlanOptions{NPerNode: 2}, wantErr: "2 ranks on a is more than its 1 slots"},
		{name: "conflicting -N and ppr", hosts: hosts("a", 4), o: PlanOptions{NPerNode: 2, MapBy: MapBy{Policy: "ppr", PerNode: 3}}, wantErr: "disagrees"},
		{name: "no hosts", wantErr: "no hosts"},
		{name: "np over the bound", hosts: hosts("a", 1), o: PlanOptions{NP: MaxRanks + 1, Oversubscribe: true},
			wantErr: "-np 16777217 is more than gorun runs (16777216 ranks at most)"},
		{name: "slots over the bound", hosts: hosts("a", MaxRanks, "b", 1), o: PlanOptions{Source: "--hostfile h"},
			wantErr: "one per slot of --hostfile h is more ranks than gorun runs (16777216 at most); give -np"},
		{name: "ppr over the bound", hosts: hosts("a", 1, "b", 1), o: PlanOptions{NPerNode: MaxRanks/2 + 1, Oversubscribe: true},
			wantErr: "ppr:8388609:node on 2 hosts is more ranks than gorun runs"},
		{name: "per node over the bound", hosts: hosts("a", 1), o: PlanOptions{NPerNode: MaxRanks + 1, Oversubscribe: true},
			wantErr: "16777217 ranks per node is more than gorun runs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPlan(tt.hosts, tt.o)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewPlan error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var nodes [][]int
			var names []string
			for _, n := range p.Nodes {
				nodes = append(nodes, n.Ranks)
				names = append(names, n.Host.Name)
			}
			if !reflect.DeepEqual(nodes, tt.nodes) || !reflect.DeepEqual(names, tt.hostNames) || p.Oversubscribed != tt.over {
				t.Fatalf("plan nodes %v on %v (over %v), want %v on %v (over %v)", nodes, names, p.Oversubscribed, tt.nodes, tt.hostNames, tt.over)
			}
			for r, pl := range p.Ranks {
				if pl.Rank != r || p.Nodes[pl.Node].Ranks[pl.LocalRank] != r {
					t.Fatalf("placement of rank %d = %+v disagrees with the nodes", r, pl)
				}
			}
		})
	}
}

func TestParseMapBy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]MapBy{"": {Policy: "slot"}, "slot": {Policy: "slot"}, "node": {Policy: "node"}, "ppr:4:node": {Policy: "ppr", PerNode: 4},
		"numa": {Policy: "slot", Within: "numa"}, "socket": {Policy: "slot", Within: "package"}, "ppr:2:numa": {Policy: "ppr", PerNode: 2, Per: "numa", Within: "numa"},
		"ppr:2:package": {Policy: "ppr", PerNode: 2, Per: "package", Within: "package"},
		"ppr:2:socket":  {Policy: "ppr", PerNode: 2, Per: "package", Within: "package"}, // Open MPI's --npersocket 2
		"core":          {Policy: "slot"}} {                                             // Open MPI's core: the cores are the slots
		if got, err := ParseMapBy(in); err != nil || got != want {
			t.Errorf("ParseMapBy(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"ppr:0:node", "ppr:x:node", "ppr:2:core", "hwthread", "diagonal"} {
		if _, err := ParseMapBy(in); !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseMapBy(%q) error = %v", in, err)
		}
	}
	// Open MPI's spellings that gorun does not share name the gorun way.
	for in, way := range map[string]string{"hwthread": "use --map-by slot", "ppr:2:core": "want ppr:N:node, ppr:N:numa or ppr:N:package"} {
		if _, err := ParseMapBy(in); err == nil || !strings.Contains(err.Error(), way) {
			t.Errorf("ParseMapBy(%q) error = %v, want one naming %q", in, err, way)
		}
	}
}

func TestRanges(t *testing.T) {
	t.Parallel()
	if got := Ranges([]int{0, 1, 2, 3, 8, 10, 11}); got != "0-3,8,10-11" {
		t.Fatalf("Ranges = %q", got)
	}
}
