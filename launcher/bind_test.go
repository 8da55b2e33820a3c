package launcher

import (
	"reflect"
	"strings"
	"testing"

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
