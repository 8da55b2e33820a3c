package env

import (
	"slices"
	"strings"
	"testing"
)

// The variables of other launchers' contracts, each with its definition.
func TestVarsContracts(t *testing.T) {
	t.Parallel()
	// Rank 5 of 8: the second of 4 ranks on node 1 of 2.
	r := Rank{JobID: "j1", Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, NodeCount: 2,
		CrossRank: 1, CrossSize: 2, MaxRestarts: 3}
	want := map[string]string{
		// torchrun's
		"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "8", "ROLE_NAME": "default",
		"TORCHELASTIC_RUN_ID": "j1", "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RESTART_COUNT": "0",
		"TORCHELASTIC_USE_AGENT_STORE": "False",
		// Open MPI's
		"OMPI_UNIVERSE_SIZE": "8",
		// MVAPICH's
		"MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_SIZE": "8", "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "4",
		// Horovod's
		"HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4",
		"HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2",
	}
	look := lookupIn(Vars(r))
	for k, v := range want {
		if g, ok := look(k); !ok || g != v {
			t.Errorf("%s = %q (set %v), want %q", k, g, ok, v)
		}
	}
	// Each can be overridden with -x.
	var exports []string
	for k := range want {
		exports = append(exports, k+"=x")
	}
	look = lookupIn(Build(nil, r, exports))
	for k := range want {
		if g, _ := look(k); g != "x" {
			t.Errorf("-x %s=x: got %q", k, g)
		}
	}
}

// Horovod's cross rank and size follow horovodrun's get_host_assignments,
// uneven placements included.
func TestCrossRanks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		sizes     []int
		wantRank  [][]int
		wantSizes []int
	}{
		{"one node", []int{4}, [][]int{{0, 0, 0, 0}}, []int{1, 1, 1, 1}},
		{"even", []int{2, 2, 2}, [][]int{{0, 0}, {1, 1}, {2, 2}}, []int{3, 3}},
		{"3 ranks on 2 nodes", []int{2, 1}, [][]int{{0, 0}, {1}}, []int{2, 1}},
		{"short node first", []int{1, 2}, [][]int{{0}, {1, 0}}, []int{2, 1}},
		{"ragged", []int{3, 1, 2, 3}, [][]int{{0, 0, 0}, {1}, {2, 1}, {3, 2, 1}}, []int{4, 3, 2}},
		{"no nodes", nil, [][]int{}, nil},
	}
	for _, tt := range tests {
		rank, size := CrossRanks(tt.sizes)
		if len(rank) != len(tt.wantRank) || !slices.EqualFunc(rank, tt.wantRank, slices.Equal) || !slices.Equal(size, tt.wantSizes) {
			t.Errorf("%s: CrossRanks(%v) = %v, %v; want %v, %v", tt.name, tt.sizes, rank, size, tt.wantRank, tt.wantSizes)
		}
	}
	// In Vars: the rank with local rank 1 of 3 ranks on 2 nodes (2, 1) is
	// alone in its cross communicator.
	look := lookupIn(Vars(Rank{Rank: 1, WorldSize: 3, LocalRank: 1, LocalWorldSize: 2, NodeCount: 2, CrossRank: 0, CrossSize: 1}))
	if r, _ := look("HOROVOD_CROSS_RANK"); r != "0" {
		t.Errorf("HOROVOD_CROSS_RANK=%s, want 0", r)
	}
	if s, _ := look("HOROVOD_CROSS_SIZE"); s != "1" {
		t.Errorf("HOROVOD_CROSS_SIZE=%s, want 1", s)
	}
	// Not computed: the node's rank and count stand for them.
	look = lookupIn(Vars(Rank{LocalWorldSize: 2, NodeRank: 2, NodeCount: 3}))
	if r, _ := look("HOROVOD_CROSS_RANK"); r != "2" {
		t.Errorf("without CrossSize: HOROVOD_CROSS_RANK=%s, want the node rank 2", r)
	}
	if s, _ := look("HOROVOD_CROSS_SIZE"); s != "3" {
		t.Errorf("without CrossSize: HOROVOD_CROSS_SIZE=%s, want the node count 3", s)
	}
}

// OMP_NUM_THREADS=1 goes to unbound ranks that share a host, unless
// someone set it; bound ranks keep their binding's.
func TestDefaultThreads(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		launcher Launcher
		base     []string
		local    int
		binding  []string
		exports  []string
		want     string // "" = unset
		defaults bool
	}{
		{"unbound, shared host", Gorun, []string{"PATH=/bin"}, 4, nil, nil, "1", true},
		{"one rank on the host", Gorun, nil, 1, nil, nil, "", false},
		{"the agent's environment", Gorun, []string{"OMP_NUM_THREADS=8"}, 4, nil, nil, "8", false},
		{"-x", Gorun, nil, 4, nil, []string{"OMP_NUM_THREADS=2"}, "2", false},
		{"-x over the agent's", Gorun, []string{"OMP_NUM_THREADS=8"}, 4, nil, []string{"OMP_NUM_THREADS=2"}, "2", false},
		{"bound", Gorun, nil, 4, []string{"OMP_NUM_THREADS=6"}, nil, "6", false},
		{"bound, one rank", Gorun, nil, 1, []string{"OMP_NUM_THREADS=24"}, nil, "24", false},
		{"bound, -x wins", Gorun, nil, 4, []string{"OMP_NUM_THREADS=6"}, []string{"OMP_NUM_THREADS=3"}, "3", false},
		{"set empty by the user", Gorun, []string{"OMP_NUM_THREADS="}, 2, nil, nil, "", false},
		// Open MPI's mpirun and Hydra leave it unset; torchrun sets it.
		{"mpirun", MPIRun, []string{"PATH=/bin"}, 4, nil, nil, "", false},
		{"mpiexec", MPIExec, []string{"PATH=/bin"}, 4, nil, nil, "", false},
		{"mpirun, -x", MPIRun, nil, 4, nil, []string{"OMP_NUM_THREADS=2"}, "2", false},
		{"torchrun", TorchRun, []string{"PATH=/bin"}, 4, nil, nil, "1", true},
	}
	for _, tt := range tests {
		r := Rank{Launcher: tt.launcher, WorldSize: 8, LocalWorldSize: tt.local, Binding: tt.binding}
		if got := DefaultThreads(tt.base, r, tt.exports); got != tt.defaults {
			t.Errorf("%s: DefaultThreads = %v, want %v", tt.name, got, tt.defaults)
		}
		got, ok := Lookup(Build(tt.base, r, tt.exports), OMPNumThreads)
		if got != tt.want || ok != (tt.want != "" || strings.Contains(strings.Join(tt.base, " "), "OMP_NUM_THREADS=")) {
			t.Errorf("%s: OMP_NUM_THREADS=%q (set %v), want %q", tt.name, got, ok, tt.want)
		}
		if slices.Contains(Vars(r), OMPNumThreads+"=1") {
			t.Errorf("%s: Vars sets OMP_NUM_THREADS: Build alone decides", tt.name)
		}
	}
}
