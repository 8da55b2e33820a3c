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

// A launch's binding becomes typed options: topology's for the plan
// (the mode, the rule of the launch's launcher, the usable GPUs from the
// user's lists and the host's GPU slots, --gpu-bind single as a GPU of
// each rank's own) and env's for its variables.
func TestNewBindRequest(t *testing.T) {
	t.Parallel()
	cuda := env.ReadUserVars([]string{"CUDA_VISIBLE_DEVICES=3,1", "SLURM_CPUS_ON_NODE=8", "OMP_NUM_THREADS=2"})
	tests := []struct {
		name string
		bind control.Bind
		lch  env.Launcher
		user env.UserVars
		plan topology.BindOptions
		vars env.BindingOptions
	}{
		{name: "nothing asked", plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4}, vars: env.BindingOptions{GPUBind: env.GPUBindAll}},
		{name: "every option", bind: control.Bind{To: "Socket", MapBy: "numa", CPUsPerRank: 2, Oversubscribed: true, GPUBind: "single"},
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4, BindTo: topology.BindPackage, MapBy: "numa", CPUsPerRank: 2, Oversubscribed: true, OwnGPU: true},
			vars: env.BindingOptions{GPUBind: env.GPUBindSingle}},
		{name: "mpirun's rule and contract", lch: env.MPIRun,
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4, Default: topology.RuleOpenMPI}, vars: env.BindingOptions{GPUBind: env.GPUBindAll, Launcher: env.MPIRun}},
		{name: "mpiexec's rule", lch: env.MPIExec,
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4, Default: topology.RuleHydra}, vars: env.BindingOptions{GPUBind: env.GPUBindAll, Launcher: env.MPIExec}},
		{name: "torchrun: gorun's rule", lch: env.TorchRun,
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4}, vars: env.BindingOptions{GPUBind: env.GPUBindAll, Launcher: env.TorchRun}},
		{name: "the user's variables", user: cuda,
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4, Grant: topology.GPUGrant{Lists: cuda.GPUs}},
			vars: env.BindingOptions{GPUBind: env.GPUBindAll, User: cuda.Names, NodeCPUs: 8}},
		{name: "--include GPU slots narrow", bind: control.Bind{GPUs: []int{0, 2}}, user: cuda,
			plan: topology.BindOptions{LocalRanks: 2, JobRanks: 4, Grant: topology.GPUGrant{Lists: cuda.GPUs, Slots: []int{0, 2}}},
			vars: env.BindingOptions{GPUBind: env.GPUBindAll, Narrowed: true, User: cuda.Names, NodeCPUs: 8}},
	}
	for _, tt := range tests {
		req, err := newBindRequest(tt.bind, 2, 4, tt.lch, tt.user)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !reflect.DeepEqual(req.plan, tt.plan) || !reflect.DeepEqual(req.vars, tt.vars) {
			t.Errorf("%s:\n plan %+v\nwant %+v\n vars %+v\nwant %+v", tt.name, req.plan, tt.plan, req.vars, tt.vars)
		}
	}
	for _, b := range []control.Bind{{To: "hwthread"}, {GPUBind: "closest"}} {
		if _, err := newBindRequest(b, 1, 1, env.Gorun, env.UserVars{}); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
}

// The GPUs a job may use on a node follow the environment the agent
// passes on (the vendor's own variable, the last value winning) and the
// host's GPU slots, which gorun then names to the ranks.
func TestBindNodeGrant(t *testing.T) {
	t.Parallel()
	dgx := fixtureNode(t, "dgx-h100")
	tests := []struct {
		name    string
		slots   []int
		environ []string
		gpus    []int  // each rank's GPU
		vis     string // rank 0's CUDA_VISIBLE_DEVICES, "" unset
	}{
		{"every GPU", nil, nil, []int{0, 1}, ""},
		{"the user's list, in its order", nil, []string{"CUDA_VISIBLE_DEVICES=3,1"}, []int{3, 1}, ""},
		{"-x wins over the agent's", nil, []string{"CUDA_VISIBLE_DEVICES=3,1", "CUDA_VISIBLE_DEVICES=6,2"}, []int{6, 2}, ""},
		{"another vendor's list", nil, []string{"ROCR_VISIBLE_DEVICES=5"}, []int{0, 1}, ""},
		{"--include slots", []int{4, 0}, nil, []int{0, 4}, "0,4"},
		{"--include within the grant", []int{0, 2, 5}, []string{"CUDA_VISIBLE_DEVICES=5,1,2"}, []int{2, 5}, "2,5"},
	}
	for _, tt := range tests {
		nb, err := BindNode(dgx, "h", []int{0, 1}, 2, control.Bind{GPUs: tt.slots}, env.Gorun, tt.environ)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		for i, b := range nb.Plan {
			if b.GPU == nil || b.GPU.Index != tt.gpus[i] {
				t.Errorf("%s: rank %d: GPU %v, want %d", tt.name, i, b.GPU, tt.gpus[i])
			}
		}
		vis, _ := env.Lookup(nb.Hints[0].Vars, env.CUDAVisibleDevices)
		if vis != tt.vis {
			t.Errorf("%s: CUDA_VISIBLE_DEVICES=%q, want %q", tt.name, vis, tt.vis)
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
		hb, err := bindings(l, base)
		if err != nil {
			t.Fatal(err)
		}
		plan, hints := hb.Plan, hb.Hints
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
	if _, err := bindings(l, nil); err == nil || !strings.Contains(err.Error(), `gpu-bind "closest"`) {
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
		req, err := newBindRequest(tt.bind, 1, 1, env.Gorun, env.ReadUserVars(tt.env))
		if got := req.needsNVML(); err != nil || got != tt.want {
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
		hb, err := bindings(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range hb.Plan {
			if !b.CPUs.IsEmpty() || b.GPU != nil {
				t.Errorf("%q: rank %d bound: %+v", lch, i, b)
			}
		}
	}
	l.Personality = string(env.MPIRun)
	hb, err := bindings(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := hb.Plan
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
