package launcher

import (
	"errors"
	"slices"
	"testing"

	"github.com/gorun/gorun/hostfile"
)

func TestParseFanout(t *testing.T) {
	tests := []struct {
		in   string
		want int
		bad  bool
	}{
		{"auto", FanoutAuto, false},
		{"", FanoutAuto, false},
		{"0", 0, false},
		{"32", 32, false},
		{"-1", 0, true},
		{"many", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFanout(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("ParseFanout(%q) = %d, %v; want a usage error", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseFanout(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// The default picks a tree above TreeAbove hosts only, and never inside
// a Slurm allocation; a fanout given is kept.
func TestTreeFanout(t *testing.T) {
	tests := []struct {
		fanout, hosts int
		slurm         bool
		want          int
	}{
		{FanoutAuto, 4, false, 0},
		{FanoutAuto, TreeAbove, false, 0},
		{FanoutAuto, TreeAbove + 1, false, DefaultFanout},
		{FanoutAuto, 4096, true, 0},
		{0, 4096, false, 0},
		{8, 4, false, 8},
	}
	for _, tt := range tests {
		o := Options{Fanout: tt.fanout, Hosts: make([]hostfile.Host, tt.hosts)}
		if tt.slurm {
			o.Alloc = &Allocation{Kind: BackendSlurm}
		}
		if got := EffectiveFanout(o, len(o.Hosts)); got != tt.want {
			t.Errorf("fanout %d, %d hosts, slurm %v: %d, want %d", tt.fanout, tt.hosts, tt.slurm, got, tt.want)
		}
	}
}

// subtree lists a node's descendants in the tree fanoutParent draws.
func TestSubtree(t *testing.T) {
	const n, k = 40, 3
	for node := range n {
		var want []int
		for c := range n {
			for p := fanoutParent(c, k); p >= 0; p = fanoutParent(p, k) {
				if p == node {
					want = append(want, c)
					break
				}
			}
		}
		got := subtree(node, n, k)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("subtree(%d) = %v, want %v", node, got, want)
		}
	}
	if got := subtree(1, 16, 4); !slices.Equal(got, []int{8, 9, 10, 11}) {
		t.Errorf("subtree(1, 16, 4) = %v", got)
	}
	if subtree(0, 100, 0) != nil {
		t.Errorf("a flat launch has no subtrees")
	}
}
