package launcher

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
)

func TestVisibleGPUs(t *testing.T) {
	t.Parallel()
	nv := func(i int, uuid, bus string) topology.GPU {
		return topology.GPU{Index: i, Vendor: topology.VendorNVIDIA, UUID: uuid, BusID: bus}
	}
	n := &topology.Node{GPUs: []topology.GPU{nv(0, "GPU-aaaa-1", "0000:01:00.0"), nv(1, "GPU-bbbb-2", "0000:02:00.0"), nv(2, "GPU-cccc-3", "0000:03:00.0")}}
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "2,0", want: []int{2, 0}}, // CUDA's order: device 0 is GPU 2
		{in: "GPU-bbbb-2", want: []int{1}},
		{in: "GPU-cccc", want: []int{2}}, // a UUID prefix, as CUDA accepts
		{in: "", want: []int{}},
		{in: "7", wantErr: true},
		{in: "MIG-0c2f", wantErr: true},
	}
	for _, tt := range tests {
		got, err := visibleGPUs(n, "CUDA_VISIBLE_DEVICES", tt.in)
		if (err != nil) != tt.wantErr || !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("visibleGPUs(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "CUDA_VISIBLE_DEVICES="+tt.in) {
			t.Errorf("visibleGPUs(%q): the error does not name the variable: %v", tt.in, err)
		}
	}
	// --include w0:0,2 on a host whose CUDA_VISIBLE_DEVICES grants 2 and 1.
	if got := intersect([]int{0, 2}, []int{2, 1}); !reflect.DeepEqual(got, []int{2}) {
		t.Errorf("intersect = %v", got)
	}
}

// The GPUs a job may use: every GPU unless the environment grants some
// (the vendor's own variable, the last value winning), and gorun narrows
// them only for --include/--exclude GPU slots.
func TestJobGPUs(t *testing.T) {
	t.Parallel()
	gpus := func(vendor string, k int) *topology.Node {
		n := &topology.Node{}
		for i := range k {
			n.GPUs = append(n.GPUs, topology.GPU{Index: i, Vendor: vendor, BusID: "0000:0" + string(rune('1'+i)) + ":00.0"})
		}
		return n
	}
	tests := []struct {
		name     string
		node     *topology.Node
		slots    []int
		env      []string
		want     []int
		narrowed bool
	}{
		{"every GPU", gpus(topology.VendorNVIDIA, 4), nil, nil, nil, false},
		{"the user's list, in its order", gpus(topology.VendorNVIDIA, 4), nil, []string{"CUDA_VISIBLE_DEVICES=3,1"}, []int{3, 1}, false},
		{"-x wins over the agent's", gpus(topology.VendorNVIDIA, 4), nil, []string{"CUDA_VISIBLE_DEVICES=3,1", "CUDA_VISIBLE_DEVICES=2"}, []int{2}, false},
		{"--include slots", gpus(topology.VendorNVIDIA, 4), []int{2, 0}, nil, []int{0, 2}, true},
		{"--include within the grant", gpus(topology.VendorNVIDIA, 4), []int{0, 2}, []string{"CUDA_VISIBLE_DEVICES=2,1"}, []int{2}, true},
		{"AMD reads ROCR_VISIBLE_DEVICES", gpus(topology.VendorAMD, 4), nil, []string{"CUDA_VISIBLE_DEVICES=0", "ROCR_VISIBLE_DEVICES=1,2"}, []int{1, 2}, false},
		{"Intel reads ZE_AFFINITY_MASK", gpus(topology.VendorIntel, 2), nil, []string{"ZE_AFFINITY_MASK=1"}, []int{1}, false},
		{"no GPUs", &topology.Node{}, nil, []string{"CUDA_VISIBLE_DEVICES=0,1"}, nil, false},
	}
	for _, tt := range tests {
		got, narrowed, err := jobGPUs(tt.node, tt.slots, tt.env)
		if err != nil || !reflect.DeepEqual(got, tt.want) || narrowed != tt.narrowed {
			t.Errorf("%s: jobGPUs = %v, %v, %v; want %v, %v", tt.name, got, narrowed, err, tt.want, tt.narrowed)
		}
	}
}

// Ranks on a host where gorun sees no GPU (this machine, and CI's): with
// --gpu-bind single, GPUs a resource manager granted are shared one per
// rank, in the order CUDA_VISIBLE_DEVICES names them; by default nothing
// narrows them. SLURM_CPUS_ON_NODE is divided among the node's ranks.
func TestUnboundBindings(t *testing.T) {
	if topology.LocalGPUs() != 0 {
		t.Fatalf("this test wants a host without GPUs; it has %d", topology.LocalGPUs())
	}
	l := control.Launch{Ranks: make([]control.RankSpec, 3)}
	vars := func(base []string, gpuBind string, exports ...string) string {
		t.Helper()
		l.Bind.GPUBind, l.Exports = gpuBind, exports
		plan, hints, _, _, err := bindings(l, base)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan) != 3 || len(hints) != 3 {
			t.Fatalf("plan %v, hints %v", plan, hints)
		}
		var got []string
		for i, h := range hints {
			if !plan[i].CPUs.IsEmpty() || plan[i].GPU != nil {
				t.Errorf("rank %d is bound: %+v", i, plan[i])
			}
			got = append(got, strings.Join(h.Vars, " "))
		}
		return strings.Join(got, "|")
	}
	slurm := []string{"SLURM_JOB_GPUS=2,3", "CUDA_VISIBLE_DEVICES=2,3"}
	if got := vars(slurm, ""); got != "||" {
		t.Errorf("granted 2,3 to 3 ranks, default: %q", got)
	}
	if got := vars(slurm, "single"); got != "CUDA_VISIBLE_DEVICES=2|CUDA_VISIBLE_DEVICES=3|CUDA_VISIBLE_DEVICES=2" {
		t.Errorf("granted 2,3 to 3 ranks, single: %q", got)
	}
	if got := vars(slurm, "single", "CUDA_VISIBLE_DEVICES=5,6,7"); got != "CUDA_VISIBLE_DEVICES=5|CUDA_VISIBLE_DEVICES=6|CUDA_VISIBLE_DEVICES=7" {
		t.Errorf("-x CUDA_VISIBLE_DEVICES=5,6,7, single: %q", got)
	}
	if got := vars([]string{"SLURM_CPUS_ON_NODE=8"}, ""); got != "OMP_NUM_THREADS=2|OMP_NUM_THREADS=2|OMP_NUM_THREADS=2" {
		t.Errorf("8 CPUs for 3 ranks: %q", got)
	}
	if got := vars([]string{"SLURM_CPUS_ON_NODE=8", "OMP_NUM_THREADS=4"}, ""); got != "||" {
		t.Errorf("with the user's OMP_NUM_THREADS: %q", got)
	}
	l.Bind.GPUBind = "closest"
	if _, _, _, _, err := bindings(l, nil); err == nil || !strings.Contains(err.Error(), `gpu-bind "closest"`) {
		t.Errorf("--gpu-bind closest: %v", err)
	}
}

// A launch loads NVML only where its answers change the ranks' bindings
// or the report: NVML's Init can take seconds on a node without
// persistence mode.
func TestNeedsNVML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bind control.Bind
		env  []string
		want bool
	}{
		{control.Bind{}, nil, false},
		{control.Bind{}, []string{"CUDA_VISIBLE_DEVICES=0,1"}, false},
		{control.Bind{}, []string{"CUDA_VISIBLE_DEVICES=GPU-6b1f0c00,GPU-6b1f0c01"}, true},
		{control.Bind{}, []string{"CUDA_VISIBLE_DEVICES=MIG-aaaa"}, false},
		{control.Bind{Report: true}, nil, true},
		{control.Bind{GPUBind: "single"}, nil, true},
		{control.Bind{GPUBind: "all"}, []string{"NVIDIA_VISIBLE_DEVICES=GPU-1"}, false},
	}
	for _, tt := range tests {
		if got := needsNVML(control.Launch{Bind: tt.bind}, tt.env); got != tt.want {
			t.Errorf("needsNVML(%+v, %v) = %v, want %v", tt.bind, tt.env, got, tt.want)
		}
	}
}

// fixtureNode discovers one of package topology's fixture machines from
// its sysfs alone, as an agent without NVML does.
func fixtureNode(t *testing.T, name string) *topology.Node {
	t.Helper()
	n, err := topology.Discover(os.DirFS(filepath.Join("..", "topology", "testdata", name)), nil)
	if err != nil {
		t.Fatalf("discover %s: %v", name, err)
	}
	return n
}

// With no --bind-to, each personality binds as its launcher does on a
// node without GPUs (gorun mpirun as Open MPI 4.1's mpirun, counting the
// job's ranks; gorun mpiexec as Hydra, not at all; plain gorun and gorun
// torchrun not at all), keeps gorun's one rank per GPU on a GPU node, and
// --report-bindings names the rule; --bind-to none opts out under each.
func TestBindNodeDefaultPerLauncher(t *testing.T) {
	t.Parallel()
	cpu, dgx := fixtureNode(t, "cpu-2s"), fixtureNode(t, "dgx-h100")
	const numa0, numa1 = "0-3,8-11", "4-7,12-15"
	tests := []struct {
		name  string
		node  *topology.Node
		lch   env.Launcher
		local int // ranks on the node
		job   int // ranks in the job
		bind  control.Bind
		cpus  []string // each rank's CPUs, "" unbound
		gpus  bool
		rule  string // in every rank's "why" line of the report
	}{
		{"gorun, no GPU, np 2", cpu, env.Gorun, 2, 2, control.Bind{}, []string{"", ""}, false, "why: not bound: no GPUs visible, and gorun's default binds ranks to GPUs only"},
		{"torchrun, no GPU, np 2", cpu, env.TorchRun, 2, 2, control.Bind{}, []string{"", ""}, false, "gorun's default binds ranks to GPUs only"},
		{"mpiexec, no GPU, np 2", cpu, env.MPIExec, 2, 2, control.Bind{}, []string{"", ""}, false, "why: not bound: no GPUs visible, and Hydra's default binds nothing without -bind-to"},
		{"mpiexec, no GPU, np 3", cpu, env.MPIExec, 3, 3, control.Bind{}, []string{"", "", ""}, false, "Hydra's default"},
		{"mpirun, no GPU, np 1", cpu, env.MPIRun, 1, 1, control.Bind{}, []string{"0,8"}, false,
			"why: Open MPI 4.1's default for a job of 1 rank (core for 2 or fewer, NUMA above); bind to core"},
		{"mpirun, no GPU, np 2", cpu, env.MPIRun, 2, 2, control.Bind{}, []string{"0,8", "1,9"}, false,
			"why: Open MPI 4.1's default for a job of 2 ranks (core for 2 or fewer, NUMA above); bind to core: 1 core on NUMA 0"},
		{"mpirun, no GPU, np 3", cpu, env.MPIRun, 3, 3, control.Bind{}, []string{numa0, numa1, numa0}, false,
			"why: Open MPI 4.1's default for a job of 3 ranks (core for 2 or fewer, NUMA above); bind to numa"},
		{"mpirun, no GPU, 2 of a job of 4", cpu, env.MPIRun, 2, 4, control.Bind{}, []string{numa0, numa1}, false, "for a job of 4 ranks"},
		{"mpirun, no GPU, 1 of a job of 2", cpu, env.MPIRun, 1, 2, control.Bind{}, []string{"0,8"}, false, "for a job of 2 ranks"},
		{"mpirun, no GPU, oversubscribed", cpu, env.MPIRun, 3, 3, control.Bind{Oversubscribed: true}, []string{"", "", ""}, false,
			"why: not bound: the node is oversubscribed (3 local ranks), and Open MPI 4.1's default binds nothing then"},
		{"mpirun, --bind-to none", cpu, env.MPIRun, 2, 2, control.Bind{To: "none"}, []string{"", ""}, false, "why: not bound: --bind-to none"},
		{"mpirun, --bind-to core, np 3", cpu, env.MPIRun, 3, 3, control.Bind{To: "core"}, []string{"0,8", "1,9", "2,10"}, false, "why: bind to core: 1 core"},
		{"gorun, GPUs", dgx, env.Gorun, 2, 2, control.Bind{}, []string{"0-27,112-139", "28-55,140-167"}, true, "why: gorun's default: one rank per GPU; GPU "},
		{"mpirun, GPUs", dgx, env.MPIRun, 2, 2, control.Bind{}, []string{"0-27,112-139", "28-55,140-167"}, true,
			"gorun's default on a node with GPUs, kept under gorun mpirun (Open MPI 4.1's default applies without GPUs): one rank per GPU"},
		{"mpiexec, GPUs", dgx, env.MPIExec, 2, 2, control.Bind{}, []string{"0-27,112-139", "28-55,140-167"}, true,
			"kept under gorun mpiexec (Hydra's default applies without GPUs): one rank per GPU"},
		{"mpirun, GPUs, oversubscribed", dgx, env.MPIRun, 2, 2, control.Bind{Oversubscribed: true}, []string{"", ""}, false, "the node is oversubscribed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ranks := make([]int, tt.local)
			for i := range ranks {
				ranks[i] = i
			}
			b := tt.bind
			b.Report = true
			nb, err := BindNode(tt.node, "h", ranks, tt.job, b, tt.lch, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range nb.Plan {
				if p.CPUs.String() != tt.cpus[i] || (p.GPU != nil) != tt.gpus {
					t.Errorf("rank %d: CPUs %q GPU %v, want CPUs %q GPU %v", i, p.CPUs, p.GPU != nil, tt.cpus[i], tt.gpus)
				}
			}
			if n := strings.Count(nb.Report, tt.rule); n != tt.local {
				t.Errorf("the report names %q %d times, want once per rank:\n%s", tt.rule, n, nb.Report)
			}
			// Under mpirun and mpiexec no rank gets OMP_NUM_THREADS,
			// bound or not.
			for i, h := range nb.Hints {
				for _, kv := range h.Vars {
					if strings.HasPrefix(kv, env.OMPNumThreads+"=") && !tt.lch.SetsThreads() {
						t.Errorf("rank %d got %s under %q", i, kv, tt.lch)
					}
				}
			}
		})
	}
}

// On this host (no GPU), an agent's launch under gorun mpiexec starts its
// ranks unbound without looking at the node, and under gorun mpirun binds
// them as Open MPI does: two ranks of a job of 2 each on a core of its
// own, or nothing where the host has fewer cores than ranks.
func TestBindingsPerLauncher(t *testing.T) {
	if topology.LocalGPUs() != 0 {
		t.Skipf("this test wants a host without GPUs; it has %d", topology.LocalGPUs())
	}
	t.Parallel()
	l := control.Launch{Ranks: []control.RankSpec{{Rank: 0}, {Rank: 1, LocalRank: 1}}, WorldSize: 2, LocalWorldSize: 2}
	for _, lch := range []env.Launcher{env.Gorun, env.TorchRun, env.MPIExec} {
		l.Personality = string(lch)
		plan, _, _, _, err := bindings(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range plan {
			if !b.CPUs.IsEmpty() || b.GPU != nil {
				t.Errorf("%q: rank %d bound: %+v", lch, i, b)
			}
		}
	}
	l.Personality = string(env.MPIRun)
	plan, _, _, _, err := bindings(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	switch {
	case strings.Contains(plan[0].Why, "would put 2 ranks of 1 core on the node's 1 core"):
		t.Logf("one core here: %s", plan[0].Why)
	case plan[0].CPUs.IsEmpty() || plan[1].CPUs.IsEmpty() || !plan[0].CPUs.Intersect(plan[1].CPUs).IsEmpty():
		t.Errorf("under mpirun, 2 ranks want a core each: %q and %q (%s)", plan[0].CPUs, plan[1].CPUs, plan[0].Why)
	}
	if !strings.Contains(plan[0].Why, "Open MPI 4.1's default for a job of 2 ranks") {
		t.Errorf("Why %q names no rule", plan[0].Why)
	}
}
