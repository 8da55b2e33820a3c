package topology

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// list is a visibility list of vendor's GPUs, named var, as env reads it.
func list(vendor, name, value string) GPUList {
	l := GPUList{Vendor: vendor, Var: name, Value: value}
	for _, id := range strings.Split(value, ",") {
		if id = strings.TrimSpace(id); id != "" {
			l.IDs = append(l.IDs, id)
		}
	}
	return l
}

// gpus is a node of k GPUs of vendor, in PCI bus order.
func gpus(vendor string, k int) *Node {
	n := &Node{}
	for i := range k {
		n.GPUs = append(n.GPUs, GPU{Index: i, Vendor: vendor, BusID: "0000:0" + string(rune('1'+i)) + ":00.0"})
	}
	return n
}

// A list finds GPUs by index among the bound vendor's GPUs in PCI bus
// order, by UUID or a UUID's prefix, in the order it gives them; a GPU the
// node lacks, one named twice and MIG instances are errors that name the
// list.
func TestFindGPUs(t *testing.T) {
	t.Parallel()
	nv := func(i int, uuid, bus string) GPU {
		return GPU{Index: i, Vendor: VendorNVIDIA, UUID: uuid, BusID: bus}
	}
	n := &Node{GPUs: []GPU{nv(0, "GPU-aaaa-1", "0000:01:00.0"), nv(1, "GPU-bbbb-2", "0000:02:00.0"), nv(2, "GPU-cccc-3", "0000:03:00.0")}}
	tests := []struct {
		in      string
		want    []int
		wantErr string
	}{
		{in: "2,0", want: []int{2, 0}}, // CUDA's order: device 0 is GPU 2
		{in: "GPU-bbbb-2", want: []int{1}},
		{in: "GPU-cccc", want: []int{2}}, // a UUID prefix, as CUDA accepts
		{in: " 1 , ,0", want: []int{1, 0}},
		{in: "", want: []int{}},
		{in: "7", wantErr: `no GPU "7" on this host (3 GPUs)`},
		{in: "1,GPU-bbbb", wantErr: "GPU 1 listed twice"},
		{in: "MIG-0c2f", wantErr: "names MIG instances"},
	}
	for _, tt := range tests {
		l := list(VendorNVIDIA, "CUDA_VISIBLE_DEVICES", tt.in)
		got, err := findGPUs(n, l.Var, l.Value, l.IDs)
		if tt.wantErr == "" && (err != nil || !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("findGPUs(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "CUDA_VISIBLE_DEVICES="+tt.in)) {
			t.Errorf("findGPUs(%q): error %v, want one naming the list and saying %q", tt.in, err, tt.wantErr)
		}
	}
	if _, err := findGPUs(n, "x", "MIG-0c2f", []string{"MIG-0c2f"}); !errors.Is(err, errMIG) {
		t.Errorf("MIG instances: %v does not wrap errMIG", err)
	}
}

// The GPUs a grant gives: every GPU unless the list of the node's GPU
// vendor says otherwise, in its order; GPU slots (--include/--exclude)
// narrow them, in index order, within the list.
func TestGPUGrant(t *testing.T) {
	t.Parallel()
	cuda := func(v string) GPUList { return list(VendorNVIDIA, "CUDA_VISIBLE_DEVICES", v) }
	tests := []struct {
		name  string
		node  *Node
		grant GPUGrant
		want  []int
	}{
		{"every GPU", gpus(VendorNVIDIA, 4), GPUGrant{}, nil},
		{"the user's list, in its order", gpus(VendorNVIDIA, 4), GPUGrant{Lists: []GPUList{cuda("3,1")}}, []int{3, 1}},
		{"the last list of a vendor", gpus(VendorNVIDIA, 4), GPUGrant{Lists: []GPUList{cuda("3,1"), cuda("2")}}, []int{2}},
		{"an empty list: none", gpus(VendorNVIDIA, 4), GPUGrant{Lists: []GPUList{cuda("")}}, []int{}},
		{"--include slots", gpus(VendorNVIDIA, 4), GPUGrant{Slots: []int{2, 0}}, []int{0, 2}},
		{"--include within the grant", gpus(VendorNVIDIA, 4), GPUGrant{Lists: []GPUList{cuda("2,1")}, Slots: []int{0, 2}}, []int{2}},
		{"AMD reads its own list", gpus(VendorAMD, 4), GPUGrant{Lists: []GPUList{cuda("0"), list(VendorAMD, "ROCR_VISIBLE_DEVICES", "1,2")}}, []int{1, 2}},
		{"Intel reads its own list", gpus(VendorIntel, 2), GPUGrant{Lists: []GPUList{list(VendorIntel, "ZE_AFFINITY_MASK", "1")}}, []int{1}},
		{"another vendor's list alone: every GPU", gpus(VendorAMD, 2), GPUGrant{Lists: []GPUList{cuda("0")}}, nil},
		{"no GPUs", &Node{}, GPUGrant{Lists: []GPUList{cuda("0,1")}, Slots: []int{3}}, nil},
	}
	for _, tt := range tests {
		got, err := tt.grant.granted(tt.node)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: granted = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	if _, err := (GPUGrant{Slots: []int{5}}).granted(gpus(VendorNVIDIA, 4)); err == nil || !strings.Contains(err.Error(), `--include/--exclude=5: no GPU "5"`) {
		t.Errorf("a slot the node lacks: %v", err)
	}
}

// What the plan does with a grant it cannot place: MIG instances leave
// every rank without a GPU, saying why, and with the list to hand out (an
// error with --bind-to gpu or GPU slots); a node without GPUs hands out
// the NVIDIA list. --gpu-bind single (OwnGPU) wants GPUs elsewhere.
func TestPlanBindingsGrant(t *testing.T) {
	t.Parallel()
	dgx, cpu := load(t, "dgx-h100"), load(t, "cpu-2s")
	mig := cudaGrant("MIG-aaaa", "MIG-bbbb")
	mig.Lists[0].Value = "MIG-aaaa,MIG-bbbb"
	tests := []struct {
		name     string
		node     *Node
		opts     BindOptions
		why      string // in every rank's Why
		unplaced string // every rank's Unplaced, joined
		err      string
	}{
		{name: "MIG, default", node: dgx, opts: BindOptions{LocalRanks: 2, Grant: mig},
			why: "not bound: no GPU of its own, and gorun's default binds ranks to GPUs only; --bind-to core, numa or package binds; CUDA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb names MIG instances, which gorun does not place", unplaced: "MIG-aaaa,MIG-bbbb"},
		{name: "MIG, single", node: dgx, opts: BindOptions{LocalRanks: 2, Grant: mig, OwnGPU: true}, why: "names MIG instances", unplaced: "MIG-aaaa,MIG-bbbb"},
		{name: "MIG, bind-to core", node: dgx, opts: BindOptions{LocalRanks: 2, Grant: mig, BindTo: BindCore}, why: "bind to core: 1 core", unplaced: "MIG-aaaa,MIG-bbbb"},
		{name: "MIG, bind-to gpu", node: dgx, opts: BindOptions{LocalRanks: 1, Grant: mig, BindTo: BindGPU},
			err: "--bind-to gpu: CUDA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb names MIG instances, which gorun does not place on GPUs"},
		{name: "MIG, slots", node: dgx, opts: BindOptions{LocalRanks: 1, Grant: GPUGrant{Lists: mig.Lists, Slots: []int{0}}}, err: "names MIG instances"},
		{name: "no GPU in view", node: cpu, opts: BindOptions{LocalRanks: 2, Grant: cudaGrant("2", "3"), OwnGPU: true}, why: "no GPUs visible", unplaced: "2,3"},
		{name: "no GPU in view, no list", node: cpu, opts: BindOptions{LocalRanks: 2, OwnGPU: true}, why: "no GPUs visible"},
		{name: "GPUs, single, bound to them", node: dgx, opts: BindOptions{LocalRanks: 2, OwnGPU: true}, why: "one rank per GPU"},
		{name: "GPUs, single, not bound to them", node: dgx, opts: BindOptions{LocalRanks: 2, BindTo: BindNUMA, OwnGPU: true},
			err: "--gpu-bind single: the ranks are not bound to GPUs (bind to numa: all CPUs of NUMA 0, mapped round-robin by NUMA node; NIC mlx5_0 is on NUMA 0); use --bind-to gpu"},
		{name: "a GPU the node lacks", node: dgx, opts: BindOptions{LocalRanks: 1, Grant: cudaGrant("9"), BindTo: BindNone}, err: `CUDA_VISIBLE_DEVICES=9: no GPU "9" on this host (8 GPUs)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, err := PlanBindings(tt.node, tt.opts)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, b := range plan {
				var unplaced string
				if b.Unplaced != nil {
					unplaced = strings.Join(b.Unplaced.IDs, ",")
				}
				if !strings.Contains(b.Why, tt.why) || unplaced != tt.unplaced {
					t.Errorf("rank %d: Why %q, Unplaced %q; want %q in Why, Unplaced %q", i, b.Why, unplaced, tt.why, tt.unplaced)
				}
			}
		})
	}
}

// A launch that binds nothing whatever the node is plans without
// discovering it, counting its GPUs only; any other asks for the node.
func TestPlanWithoutNode(t *testing.T) {
	t.Parallel()
	dgx, cpu := os.DirFS(filepath.Join("testdata", "dgx-h100")), os.DirFS(filepath.Join("testdata", "cpu-2s"))
	tests := []struct {
		name     string
		node     string
		opts     BindOptions
		ok       bool
		unplaced string
		err      string
	}{
		{name: "none, no GPU", node: "cpu", opts: BindOptions{LocalRanks: 3, BindTo: BindNone, Grant: cudaGrant("2", "3")}, ok: true, unplaced: "2,3"},
		{name: "none, GPUs", node: "dgx", opts: BindOptions{LocalRanks: 3, BindTo: BindNone, Grant: cudaGrant("2", "3")}, ok: true},
		{name: "none, GPUs, single", node: "dgx", opts: BindOptions{LocalRanks: 3, BindTo: BindNone, OwnGPU: true}, ok: true,
			err: "--gpu-bind single: the ranks are not bound to GPUs (--bind-to none); use --bind-to gpu"},
		{name: "none, no GPU, single", node: "cpu", opts: BindOptions{LocalRanks: 1, BindTo: BindNone, OwnGPU: true}, ok: true},
		{name: "default, oversubscribed, single", node: "dgx", opts: BindOptions{LocalRanks: 16, Oversubscribed: true, OwnGPU: true}, ok: true,
			err: "(the node is oversubscribed)"},
		{name: "default, oversubscribed, Open MPI's", node: "cpu", opts: BindOptions{LocalRanks: 16, Oversubscribed: true, Default: RuleOpenMPI}, ok: true},
		{name: "default, GPUs", node: "dgx", opts: BindOptions{LocalRanks: 2}},
		{name: "default, no GPU, gorun's", node: "cpu", opts: BindOptions{LocalRanks: 2}, ok: true},
		{name: "default, no GPU, Hydra's", node: "cpu", opts: BindOptions{LocalRanks: 2, Default: RuleHydra}, ok: true},
		{name: "default, no GPU, Open MPI's", node: "cpu", opts: BindOptions{LocalRanks: 2, Default: RuleOpenMPI}},
		{name: "core", node: "cpu", opts: BindOptions{LocalRanks: 2, BindTo: BindCore}},
		{name: "a bad mode", node: "cpu", opts: BindOptions{LocalRanks: 2, BindTo: "thread"}, err: `bind-to "thread"`},
	}
	for _, tt := range tests {
		sysroot := cpu
		if tt.node == "dgx" {
			sysroot = dgx
		}
		plan, ok, err := PlanWithoutNode(sysroot, tt.opts)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || ok != tt.ok {
				t.Errorf("%s: ok %v, error %v; want ok %v, an error containing %q", tt.name, ok, err, tt.ok, tt.err)
			}
			continue
		}
		if err != nil || ok != tt.ok || ok && len(plan) != tt.opts.LocalRanks || !ok && plan != nil {
			t.Errorf("%s: %d ranks planned, ok %v, %v; want ok %v", tt.name, len(plan), ok, err, tt.ok)
			continue
		}
		for i, b := range plan {
			var unplaced string
			if b.Unplaced != nil {
				unplaced = strings.Join(b.Unplaced.IDs, ",")
			}
			if b.BindTo != BindNone || !b.CPUs.IsEmpty() || b.GPU != nil || b.LocalRank != i || unplaced != tt.unplaced {
				t.Errorf("%s: rank %d: %+v, want unbound with Unplaced %q", tt.name, i, b, tt.unplaced)
			}
		}
	}
}

// NVML, whose Init can take seconds, is wanted where the plan needs
// UUIDs: the NVIDIA list names GPUs by UUID, or each rank sees its own.
func TestNeedsUUIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts BindOptions
		want bool
	}{
		{BindOptions{}, false},
		{BindOptions{Grant: cudaGrant("0", "1")}, false},
		{BindOptions{Grant: cudaGrant("GPU-6b1f0c00", "GPU-6b1f0c01")}, true},
		{BindOptions{Grant: cudaGrant("MIG-aaaa")}, false},
		{BindOptions{Grant: GPUGrant{Lists: []GPUList{list(VendorAMD, "ROCR_VISIBLE_DEVICES", "GPU-1")}}}, false},
		{BindOptions{OwnGPU: true}, true},
	}
	for _, tt := range tests {
		if got := tt.opts.NeedsUUIDs(); got != tt.want {
			t.Errorf("NeedsUUIDs(%+v) = %v, want %v", tt.opts, got, tt.want)
		}
	}
}

// PlanWithoutNode takes the node's GPU count from BindOptions.GPUs, where
// set, instead of counting them in its sysroot: a count of 8 on a node
// without GPUs plans nothing (the node must be looked at), a count of 0 on
// the DGX plans the ranks unbound, and the count is asked for once.
func TestPlanWithoutNodeCountedGPUs(t *testing.T) {
	t.Parallel()
	dgx, cpu := os.DirFS(filepath.Join("testdata", "dgx-h100")), os.DirFS(filepath.Join("testdata", "cpu-2s"))
	for _, tt := range []struct {
		name    string
		sysroot fs.FS
		gpus    int
		ok      bool
	}{
		{"eight counted, no GPU in sysfs", cpu, 8, false},
		{"none counted, a DGX in sysfs", dgx, 0, true},
	} {
		calls := 0
		count := func() int { calls++; return tt.gpus }
		plan, ok, err := PlanWithoutNode(tt.sysroot, BindOptions{LocalRanks: 2, GPUs: count})
		if err != nil || ok != tt.ok || ok && len(plan) != 2 {
			t.Errorf("%s: %d ranks planned, ok %v, %v; want ok %v", tt.name, len(plan), ok, err, tt.ok)
		}
		if calls != 1 {
			t.Errorf("%s: GPUs called %d times, want once", tt.name, calls)
		}
	}
}
