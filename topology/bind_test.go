package topology

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantBind is one rank's expected binding: gpu -1 for none, cpus ""
// for unbound, nic "" for none (else the RDMA device or netdev name).
// Package env's tests check the variables that follow from them.
type wantBind struct {
	gpu  int
	cpus string
	mems []int
	nic  string
}

// cudaGrant grants the GPUs ids as CUDA_VISIBLE_DEVICES lists them.
func cudaGrant(ids ...string) GPUGrant {
	return GPUGrant{Lists: []GPUList{{Vendor: VendorNVIDIA, Var: "CUDA_VISIBLE_DEVICES", Value: strings.Join(ids, ","), IDs: ids}}}
}

func dgxUUID(i int) string { return fmt.Sprintf("GPU-6b1f0c%02d-5a1c-4d2e-9b7f-00003e9a%04d", i, i) }

// dgxRank is rank -> GPU g on the DGX, with its cores and NIC mlx5_g.
func dgxRank(g int, cpus string) wantBind {
	return wantBind{gpu: g, cpus: cpus, mems: []int{g / 4}, nic: fmt.Sprintf("mlx5_%d", g)}
}

var dgx8 = []wantBind{
	dgxRank(0, "0-13,112-125"), dgxRank(1, "14-27,126-139"),
	dgxRank(2, "28-41,140-153"), dgxRank(3, "42-55,154-167"),
	dgxRank(4, "56-69,168-181"), dgxRank(5, "70-83,182-195"),
	dgxRank(6, "84-97,196-209"), dgxRank(7, "98-111,210-223"),
}

func pcieRank(g int, cpus string, numa int) wantBind {
	return wantBind{gpu: g, cpus: cpus, mems: []int{numa}, nic: "mlx5_0"}
}

// cpuRank is a GPU-less rank on cpu-2s, whose only NIC is eno1.
func cpuRank(cpus string, numa int) wantBind {
	return wantBind{gpu: -1, cpus: cpus, mems: []int{numa}, nic: "eno1"}
}

var unbound = wantBind{gpu: -1}

func repeat(w wantBind, n int) []wantBind {
	out := make([]wantBind, n)
	for i := range out {
		out[i] = w
	}
	return out
}

func TestPlanBindings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fixture string
		opts    BindOptions
		want    []wantBind
		why     []string // substrings of rank 0's Why
	}{
		{
			name: "dgx 8 ranks", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 8}, want: dgx8,
			why: []string{"gorun's default: one rank per GPU; GPU 0 (" + dgxUUID(0) + ") is on NUMA 0", "cores 0-13 of NUMA 0's 56 (4 ranks share it)", "NIC mlx5_0 shares its PCIe switch (PIX)"},
		},
		{
			name: "dgx 8 ranks, bind-to gpu explicit", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 8, BindTo: BindGPU, MapBy: "numa"}, want: dgx8,
		},
		{
			name: "dgx 4 ranks on GPUs 4-7", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 4, Grant: cudaGrant("4", "5", "6", "7")}, want: dgx8[4:],
			why: []string{"GPU 4 (" + dgxUUID(4) + ") is on NUMA 1", "cores 0-13 of NUMA 1's 56 (4 ranks share it)", "NIC mlx5_4"},
		},
		{
			// Visible GPUs keep the order given (CUDA_VISIBLE_DEVICES=6,1:
			// device 0 is GPU 6).
			name: "dgx 2 ranks on GPUs 6,1", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 2, Grant: cudaGrant("6", "1")},
			want: []wantBind{dgxRank(6, "56-111,168-223"), dgxRank(1, "0-55,112-167")},
			why:  []string{"cores 0-55 of NUMA 1's 56 (the only rank there)", "local rank 0 keeps GPU 6 although the GPUs are not numbered in NUMA order (in NUMA order it would be on NUMA 0)"},
		},
		{
			// 56 cores over 3 ranks: 19, 19, 18.
			name: "dgx 3 ranks uneven", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 3},
			want: []wantBind{dgxRank(0, "0-18,112-130"), dgxRank(1, "19-37,131-149"), dgxRank(2, "38-55,150-167")},
		},
		{
			name: "dgx cpus-per-rank 4", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 2, CPUsPerRank: 4, Grant: cudaGrant("0", "4")},
			want: []wantBind{dgxRank(0, "0-3,112-115"), dgxRank(4, "56-59,168-171")},
			why:  []string{"cores 0-3 of NUMA 0's 56 (the only rank there), capped at --cpus-per-rank 4"},
		},
		{
			name: "dgx oversubscribed default", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 16, Oversubscribed: true},
			want: repeat(unbound, 16), why: []string{"not bound: the node is oversubscribed (16 local ranks)"},
		},
		{
			name: "dgx bind-to numa assigns no GPU", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 2, BindTo: BindNUMA},
			want: []wantBind{
				{gpu: -1, cpus: "0-55,112-167", mems: []int{0}, nic: "mlx5_0"},
				{gpu: -1, cpus: "56-111,168-223", mems: []int{1}, nic: "mlx5_4"},
			},
		},
		{
			name: "dgx 16 ranks bind-to core", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 16, BindTo: BindCore, MapBy: "numa"},
			want: func() []wantBind {
				var w []wantBind
				for i := range 16 {
					c := i/2 + 56*(i%2)
					nic := fmt.Sprintf("mlx5_%d", (i/2)%4+4*(i%2)) // balanced over each node's 4 HCAs
					w = append(w, wantBind{gpu: -1, cpus: fmt.Sprintf("%d,%d", c, c+112), mems: []int{i % 2}, nic: nic})
				}
				return w
			}(),
		},
		{
			// GPUs 0 and 1 sit on NUMA 1: they get NUMA 1's cores.
			name: "pcie-4gpu 4 ranks", fixture: "pcie-4gpu", opts: BindOptions{LocalRanks: 4},
			want: []wantBind{pcieRank(0, "8-11,24-27", 1), pcieRank(1, "12-15,28-31", 1), pcieRank(2, "0-3,16-19", 0), pcieRank(3, "4-7,20-23", 0)},
			why: []string{"GPU 0 (GPU-2c9e4a00-77d0-41c3-8e55-000051b70000) is on NUMA 1", "cores 0-3 of NUMA 1's 8", "NIC mlx5_0 is across the CPU interconnect (SYS)",
				"local rank 0 keeps GPU 0 although the GPUs are not numbered in NUMA order (in NUMA order it would be on NUMA 0): local rank i always gets GPU i, the device LOCAL_RANK names"},
		},
		{
			name: "cpu-2s core", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindCore},
			want: []wantBind{cpuRank("0,8", 0), cpuRank("1,9", 0), cpuRank("2,10", 0), cpuRank("3,11", 0)},
			why:  []string{"bind to core: 1 core on NUMA 0, mapped by slot", "NIC eno1 is on NUMA 0"},
		},
		{
			name: "cpu-2s core map-by numa", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindCore, MapBy: "numa"},
			want: []wantBind{cpuRank("0,8", 0), cpuRank("4,12", 1), cpuRank("1,9", 0), cpuRank("5,13", 1)},
		},
		{
			name: "cpu-2s core cpus-per-rank 2", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindCore, CPUsPerRank: 2},
			want: []wantBind{cpuRank("0-1,8-9", 0), cpuRank("2-3,10-11", 0), cpuRank("4-5,12-13", 1), cpuRank("6-7,14-15", 1)},
			why:  []string{"bind to core: 2 cores on NUMA 0, mapped by slot"},
		},
		{
			name: "cpu-2s core oversubscribed wraps", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 5, BindTo: BindCore, CPUsPerRank: 2, Oversubscribed: true},
			want: []wantBind{cpuRank("0-1,8-9", 0), cpuRank("2-3,10-11", 0), cpuRank("4-5,12-13", 1), cpuRank("6-7,14-15", 1), cpuRank("0-1,8-9", 0)},
		},
		{
			name: "cpu-2s numa", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindNUMA},
			want: []wantBind{cpuRank("0-3,8-11", 0), cpuRank("4-7,12-15", 1), cpuRank("0-3,8-11", 0), cpuRank("4-7,12-15", 1)},
			why:  []string{"bind to numa: all CPUs of NUMA 0, mapped round-robin by NUMA node; 2 ranks share it"},
		},
		{
			name: "cpu-2s numa map-by slot", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindNUMA, MapBy: "slot"},
			want: repeat(cpuRank("0-3,8-11", 0), 4),
		},
		{
			name: "cpu-2s package", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindPackage},
			want: []wantBind{cpuRank("0-3,8-11", 0), cpuRank("4-7,12-15", 1), cpuRank("0-3,8-11", 0), cpuRank("4-7,12-15", 1)},
			why:  []string{"bind to package: all CPUs of package 0, mapped round-robin by package"},
		},
		{
			name: "cpu-2s none", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4, BindTo: BindNone},
			want: repeat(unbound, 4), why: []string{"not bound: --bind-to none"},
		},
		{
			name: "cpu-2s default", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 4},
			want: repeat(unbound, 4), why: []string{"not bound: no GPUs visible, and gorun's default binds ranks to GPUs only"},
		},
		{
			name: "this-vm default", fixture: "this-vm", opts: BindOptions{LocalRanks: 2},
			want: repeat(unbound, 2), why: []string{"not bound: no GPUs visible"},
		},
		{
			name: "this-vm core", fixture: "this-vm", opts: BindOptions{LocalRanks: 2, BindTo: BindCore},
			want: []wantBind{
				{gpu: -1, cpus: "0", mems: []int{0}, nic: "eth0"},
				{gpu: -1, cpus: "1", mems: []int{0}, nic: "eth0"},
			},
		},
	}
	nodes := map[string]*Node{}
	for _, f := range []string{"dgx-h100", "pcie-4gpu", "cpu-2s", "this-vm"} {
		nodes[f] = load(t, f)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := nodes[tt.fixture]
			plan, err := PlanBindings(n, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, n, plan, tt.want)
			for _, s := range tt.why {
				if !strings.Contains(plan[0].Why, s) {
					t.Errorf("rank 0's Why %q lacks %q", plan[0].Why, s)
				}
			}
		})
	}
}

func checkPlan(t *testing.T, n *Node, plan []RankBinding, want []wantBind) {
	t.Helper()
	if len(plan) != len(want) {
		t.Fatalf("%d bindings, want %d", len(plan), len(want))
	}
	for i, b := range plan {
		w := want[i]
		gpu := -1
		if b.GPU != nil {
			gpu = b.GPU.Index
			if b.GPU != &n.GPUs[gpu] {
				t.Errorf("rank %d: GPU does not point into the node", i)
			}
		}
		nic := ""
		if b.NIC != nil {
			nic = nicName(b.NIC)
		}
		if b.LocalRank != i || gpu != w.gpu || b.CPUs.String() != w.cpus || fmt.Sprint(b.Mems) != fmt.Sprint(w.mems) ||
			nic != w.nic {
			t.Errorf("rank %d: got GPU %d CPUs %q mems %v NIC %q\n\t\twant GPU %d CPUs %q mems %v NIC %q",
				i, gpu, b.CPUs, b.Mems, nic, w.gpu, w.cpus, w.mems, w.nic)
		}
		if b.GPU != nil && (b.Device < 0 || b.Device >= len(b.Visible) || b.Visible[b.Device] != b.GPU) {
			t.Errorf("rank %d: GPU %d is not device %d of the visible %v", i, gpu, b.Device, b.Visible)
		}
		if b.GPU == nil && b.Visible != nil {
			t.Errorf("rank %d: no GPU, yet visible GPUs %v", i, b.Visible)
		}
		if got := fmt.Sprint(b.NUMA); got != fmt.Sprint(n.NUMAOfCPUs(b.CPUs)) {
			t.Errorf("rank %d: NUMA %s for CPUs %s", i, got, b.CPUs)
		}
		if b.Why == "" || strings.Contains(b.Why, "\n") {
			t.Errorf("rank %d: Why %q is not one line", i, b.Why)
		}
		if (b.BindTo == BindNone) != b.CPUs.IsEmpty() {
			t.Errorf("rank %d: BindTo %q with CPUs %q", i, b.BindTo, b.CPUs)
		}
		// Whole cores: a bound rank holds every hardware thread of its cores.
		for _, c := range b.CPUs.CPUs() {
			for _, cpu := range n.CPUs {
				if cpu.ID == c && cpu.Siblings.Intersect(b.CPUs).Len() != cpu.Siblings.Len() {
					t.Errorf("rank %d: CPUs %s split core %s", i, b.CPUs, cpu.Siblings)
				}
			}
		}
	}
}

// The default binding of each launcher's rule (BindOptions.Default), as
// gorun, gorun mpirun and gorun mpiexec ask for it when no --bind-to is
// given: GPUs keep gorun's one rank per GPU under every rule; without
// them Open MPI 4.1 binds a job of 2 ranks or fewer to cores and a larger
// one to NUMA nodes (its ranks dealt round-robin), nothing when the node
// is oversubscribed or has fewer cores than ranks; Hydra and gorun bind
// nothing.
func TestPlanBindingsDefaultRules(t *testing.T) {
	t.Parallel()
	const numa0, numa1 = "0-3,8-11", "4-7,12-15" // cpu-2s's NUMA nodes
	dgxNUMA0, dgxNUMA1 := "0-55,112-167", "56-111,168-223"
	tests := []struct {
		name    string
		fixture string
		opts    BindOptions
		cpus    []string // each rank's CPUs ("" unbound)
		gpus    bool     // every rank has a GPU
		why     string   // a substring of every rank's Why
	}{
		{name: "gorun, no GPU", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 2},
			cpus: []string{"", ""}, why: "not bound: no GPUs visible, and gorun's default binds ranks to GPUs only"},
		{name: "hydra, no GPU", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 2, Default: RuleHydra},
			cpus: []string{"", ""}, why: "not bound: no GPUs visible, and Hydra's default binds nothing without -bind-to"},
		{name: "openmpi, np 1: core", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 1, Default: RuleOpenMPI},
			cpus: []string{"0,8"}, why: "Open MPI 4.1's default for a job of 1 rank (core for 2 or fewer, NUMA above); bind to core: 1 core on NUMA 0"},
		{name: "openmpi, np 2: core", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 2, Default: RuleOpenMPI},
			cpus: []string{"0,8", "1,9"}, why: "Open MPI 4.1's default for a job of 2 ranks (core for 2 or fewer, NUMA above); bind to core"},
		{name: "openmpi, np 3: NUMA round-robin", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 3, Default: RuleOpenMPI},
			cpus: []string{numa0, numa1, numa0}, why: "Open MPI 4.1's default for a job of 3 ranks (core for 2 or fewer, NUMA above); bind to numa"},
		{name: "openmpi, np 4 on two nodes: the job's count", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 2, JobRanks: 4, Default: RuleOpenMPI},
			cpus: []string{numa0, numa1}, why: "for a job of 4 ranks"},
		{name: "openmpi, np 2 on two nodes: core", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 1, JobRanks: 2, Default: RuleOpenMPI},
			cpus: []string{"0,8"}, why: "for a job of 2 ranks"},
		{name: "openmpi, cpus-per-rank 2: core", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 3, CPUsPerRank: 2, Default: RuleOpenMPI},
			cpus: []string{"0-1,8-9", "2-3,10-11", "4-5,12-13"}, why: "Open MPI 4.1's default with --cpus-per-rank 2 (bind to core); bind to core: 2 cores"},
		{name: "openmpi, map-by package", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 2, MapBy: MapByPackage, Default: RuleOpenMPI},
			cpus: []string{numa0, numa1}, why: "with --map-by package (bind to what ranks are mapped to); bind to package"},
		{name: "openmpi, oversubscribed", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 20, Oversubscribed: true, Default: RuleOpenMPI},
			cpus: make([]string, 20), why: "not bound: the node is oversubscribed (20 local ranks), and Open MPI 4.1's default binds nothing then"},
		{name: "openmpi, more ranks than cores", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 9, Default: RuleOpenMPI},
			cpus: make([]string, 9), why: "would put 9 ranks of 1 core on the node's 8 cores, and Open MPI binds nothing then"},
		{name: "openmpi, cores for fewer ranks than cpus-per-rank asks", fixture: "cpu-2s", opts: BindOptions{LocalRanks: 5, CPUsPerRank: 2, Default: RuleOpenMPI},
			cpus: make([]string, 5), why: "5 ranks of 2 cores on the node's 8 cores"},
		// This VM: 2 cores on one NUMA node, as measured with mpirun 4.1.4
		// (np 3 with 4 slots: bound to the NUMA node, then unbound).
		{name: "this-vm, openmpi np 2", fixture: "this-vm", opts: BindOptions{LocalRanks: 2, Default: RuleOpenMPI},
			cpus: []string{"0", "1"}, why: "bind to core"},
		{name: "this-vm, openmpi np 3", fixture: "this-vm", opts: BindOptions{LocalRanks: 3, Default: RuleOpenMPI},
			cpus: []string{"", "", ""}, why: "would put 3 ranks of 1 core on the node's 2 cores"},
		// GPUs: one rank per GPU under every rule, while there are enough.
		{name: "dgx, openmpi", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 8, Default: RuleOpenMPI},
			cpus: []string{"0-13,112-125", "14-27,126-139", "28-41,140-153", "42-55,154-167", "56-69,168-181", "70-83,182-195", "84-97,196-209", "98-111,210-223"},
			gpus: true, why: "gorun's default on a node with GPUs, kept under gorun mpirun (Open MPI 4.1's default applies without GPUs): one rank per GPU; GPU "},
		{name: "dgx, hydra", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 2, Default: RuleHydra},
			cpus: []string{"0-27,112-139", "28-55,140-167"},
			gpus: true, why: "kept under gorun mpiexec (Hydra's default applies without GPUs): one rank per GPU"},
		{name: "dgx, openmpi, more ranks than GPUs", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 9, Default: RuleOpenMPI},
			cpus: []string{dgxNUMA0, dgxNUMA1, dgxNUMA0, dgxNUMA1, dgxNUMA0, dgxNUMA1, dgxNUMA0, dgxNUMA1, dgxNUMA0},
			why:  "9 local ranks for 8 visible GPUs, so Open MPI 4.1's default for a job of 9 ranks (core for 2 or fewer, NUMA above); bind to numa"},
		{name: "dgx, hydra, more ranks than GPUs", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 9, Default: RuleHydra},
			cpus: make([]string, 9), why: "not bound: 9 local ranks for 8 visible GPUs, and Hydra's default binds nothing"},
		{name: "dgx, openmpi, oversubscribed", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 16, Oversubscribed: true, Default: RuleOpenMPI},
			cpus: make([]string, 16), why: "the node is oversubscribed (16 local ranks), and Open MPI 4.1's default binds nothing"},
		{name: "dgx, openmpi, no GPU visible", fixture: "dgx-h100", opts: BindOptions{LocalRanks: 2, Grant: cudaGrant(), Default: RuleOpenMPI},
			cpus: []string{"0,112", "1,113"}, why: "Open MPI 4.1's default for a job of 2 ranks"},
	}
	nodes := map[string]*Node{}
	for _, f := range []string{"dgx-h100", "cpu-2s", "this-vm"} {
		nodes[f] = load(t, f)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, err := PlanBindings(nodes[tt.fixture], tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan) != len(tt.cpus) {
				t.Fatalf("%d bindings, want %d", len(plan), len(tt.cpus))
			}
			for i, b := range plan {
				if b.CPUs.String() != tt.cpus[i] || (b.GPU != nil) != tt.gpus {
					t.Errorf("rank %d: CPUs %q GPU %v, want CPUs %q GPU %v", i, b.CPUs, b.GPU != nil, tt.cpus[i], tt.gpus)
				}
				if !strings.Contains(b.Why, tt.why) {
					t.Errorf("rank %d's Why %q lacks %q", i, b.Why, tt.why)
				}
			}
		})
	}
}

func TestPlanBindingsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture string
		opts    BindOptions
		want    []string
	}{
		{"dgx-h100", BindOptions{LocalRanks: 16}, []string{"16 local ranks", "8 visible GPUs"}},
		{"dgx-h100", BindOptions{LocalRanks: 5, Grant: cudaGrant("0", "1", "2", "3")}, []string{"5 local ranks", "4 visible GPUs"}},
		{"dgx-h100", BindOptions{LocalRanks: 16, BindTo: BindGPU}, []string{"16 local ranks", "8 visible GPUs"}},
		{"dgx-h100", BindOptions{LocalRanks: 8, CPUsPerRank: 15}, []string{"--cpus-per-rank 15", "NUMA 0 has 56 cores for 4 ranks (14 for local rank 0)"}},
		{"dgx-h100", BindOptions{LocalRanks: 1, Grant: cudaGrant("8")}, []string{`CUDA_VISIBLE_DEVICES=8: no GPU "8"`, "8 GPUs"}},
		{"dgx-h100", BindOptions{LocalRanks: 2, Grant: cudaGrant("1", "1")}, []string{"GPU 1 listed twice"}},
		{"dgx-h100", BindOptions{LocalRanks: 1, BindTo: BindGPU, Grant: cudaGrant()}, []string{"no visible GPUs"}},
		{"cpu-2s", BindOptions{LocalRanks: 1, BindTo: BindGPU}, []string{"no visible GPUs"}},
		{"cpu-2s", BindOptions{LocalRanks: 5, BindTo: BindCore, CPUsPerRank: 2}, []string{"5 local ranks of 2 cores", "the node has 8 cores"}},
		{"cpu-2s", BindOptions{LocalRanks: 3, BindTo: BindCore, MapBy: "numa", CPUsPerRank: 3}, []string{"NUMA 0 has 4 cores for 2 of them"}},
		{"cpu-2s", BindOptions{LocalRanks: 1, BindTo: BindCore, CPUsPerRank: 9, Oversubscribed: true}, []string{"the node has 8 cores"}},
		{"cpu-2s", BindOptions{LocalRanks: 1, BindTo: "hwthread"}, []string{`bind-to "hwthread"`}},
		{"cpu-2s", BindOptions{LocalRanks: 1, BindTo: BindCore, MapBy: "node"}, []string{`map-by "node"`}},
		{"cpu-2s", BindOptions{LocalRanks: 0}, []string{"0 local ranks"}},
		{"cpu-2s", BindOptions{LocalRanks: 1, CPUsPerRank: -1}, []string{"--cpus-per-rank -1"}},
	}
	nodes := map[string]*Node{"dgx-h100": load(t, "dgx-h100"), "cpu-2s": load(t, "cpu-2s")}
	for _, tt := range tests {
		_, err := PlanBindings(nodes[tt.fixture], tt.opts)
		for _, s := range tt.want {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("%s %+v: error %v, want one containing %q", tt.fixture, tt.opts, err, s)
			}
		}
	}
	if _, err := PlanBindings(nil, BindOptions{LocalRanks: 1}); err == nil {
		t.Error("PlanBindings(nil) succeeded")
	}
}

// handNode is a small machine built by hand: 4 CPUs without SMT on NUMA
// 0, GPUs without UUIDs (no NVML) and no PCIe paths, so every device on
// NUMA 0 links NODE.
func handNode(gpus []GPU, nics []NIC) *Node {
	n := &Node{NUMANodes: []NUMANode{{ID: 0, CPUs: NewCPUSet(0, 1, 2, 3)}}, GPUs: gpus, NICs: nics,
		Packages: []Package{{ID: 0, CPUs: NewCPUSet(0, 1, 2, 3), Cores: 4}}, GPUSource: "sysfs"}
	for c := range 4 {
		n.CPUs = append(n.CPUs, CPU{ID: c, Core: c, Siblings: NewCPUSet(c)})
	}
	return n
}

func TestPlanBindingsHandBuilt(t *testing.T) {
	t.Parallel()
	g := func(i, numa int) GPU {
		return GPU{Index: i, Vendor: VendorNVIDIA, BusID: fmt.Sprintf("0000:%02x:00.0", i+1), NUMA: numa}
	}
	nics := []NIC{
		{Name: "eth0", BusID: "0000:10:00.0", NUMA: 0, SpeedMbps: 100000, Up: true},
		{Name: "ib0", IBDevice: "mlx5_0", BusID: "0000:11:00.0", NUMA: 0, SpeedMbps: 200000},
		{Name: "ib1", IBDevice: "mlx5_1", BusID: "0000:12:00.0", NUMA: 0, SpeedMbps: 200000, Up: true},
		{Name: "ib2", IBDevice: "mlx5_2", BusID: "0000:13:00.0", NUMA: 0, SpeedMbps: 200000, Up: true},
	}
	t.Run("IB over Ethernet, up only, balanced", func(t *testing.T) {
		n := handNode([]GPU{g(0, 0), g(1, 0)}, nics)
		plan, err := PlanBindings(n, BindOptions{LocalRanks: 2})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, n, plan, []wantBind{
			{gpu: 0, cpus: "0-1", mems: []int{0}, nic: "mlx5_1"},
			{gpu: 1, cpus: "2-3", mems: []int{0}, nic: "mlx5_2"},
		})
	})
	t.Run("Ethernet only", func(t *testing.T) {
		n := handNode([]GPU{g(0, 0)}, nics[:1])
		plan, err := PlanBindings(n, BindOptions{LocalRanks: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, n, plan, []wantBind{{gpu: 0, cpus: "0-3", mems: []int{0}, nic: "eth0"}})
	})
	t.Run("no NIC up, GPU NUMA unknown", func(t *testing.T) {
		gpu := g(0, -1)
		gpu.CPUs = NewCPUSet(2, 3)
		n := handNode([]GPU{gpu}, nics[1:2])
		plan, err := PlanBindings(n, BindOptions{LocalRanks: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, n, plan, []wantBind{{gpu: 0, cpus: "2-3"}})
		if w := plan[0].Why; !strings.Contains(w, "GPU 0 is on GPU 0's local CPUs") || !strings.Contains(w, "no NIC is up") {
			t.Errorf("Why = %q", w)
		}
	})
	t.Run("more ranks than CPUs", func(t *testing.T) {
		n := handNode([]GPU{g(0, 0)}, nil)
		if _, err := PlanBindings(n, BindOptions{LocalRanks: 5, BindTo: BindGPU}); err == nil || !strings.Contains(err.Error(), "5 local ranks but 1 visible GPUs") {
			t.Errorf("error %v", err)
		}
		// Oversubscribed: 3 ranks share the GPU and split 4 cores 2, 1, 1;
		// 5 ranks share all 4 CPUs.
		plan, err := PlanBindings(n, BindOptions{LocalRanks: 3, BindTo: BindGPU, Oversubscribed: true})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, n, plan, []wantBind{
			{gpu: 0, cpus: "0-1", mems: []int{0}},
			{gpu: 0, cpus: "2", mems: []int{0}},
			{gpu: 0, cpus: "3", mems: []int{0}},
		})
		plan, err = PlanBindings(n, BindOptions{LocalRanks: 5, BindTo: BindGPU, Oversubscribed: true})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, n, plan, repeat(wantBind{gpu: 0, cpus: "0-3", mems: []int{0}}, 5))
		if !strings.Contains(plan[0].Why, "shared by 5 ranks (oversubscribed)") {
			t.Errorf("Why = %q", plan[0].Why)
		}
		if _, err := PlanBindings(handNode([]GPU{g(0, 0), g(1, 0), g(2, 0), g(3, 0), g(4, 0)}, nil), BindOptions{LocalRanks: 5}); err == nil ||
			!strings.Contains(err.Error(), "5 ranks share the GPUs on NUMA 0, which has 4 CPUs") {
			t.Errorf("error %v", err)
		}
	})
}

func TestParseBindTo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]BindTo{"": BindDefault, "none": BindNone, "Core": BindCore, "numa": BindNUMA, "socket": BindPackage, "package": BindPackage, "gpu": BindGPU} {
		if got, err := ParseBindTo(in); err != nil || got != want {
			t.Errorf("ParseBindTo(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseBindTo("l3cache"); err == nil {
		t.Error("ParseBindTo(l3cache) succeeded")
	}
	// Open MPI's hwthread: refused, naming the gorun way.
	if _, err := ParseBindTo("hwthread"); err == nil || !strings.Contains(err.Error(), "use --bind-to core") {
		t.Errorf("ParseBindTo(hwthread) error = %v, want one naming --bind-to core", err)
	}
}

func TestFormatBindingsGolden(t *testing.T) {
	t.Parallel()
	n := load(t, "dgx-h100")
	plan, err := PlanBindings(n, BindOptions{LocalRanks: 8})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := FormatBindings(&buf, "dgx01", plan); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "bind", "dgx-h100-8.golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./topology -run Golden -update)", err)
	}
	if buf.String() != string(want) {
		t.Errorf("FormatBindings differs from %s:\n%s", golden, buf.String())
	}
	// Unbound ranks and a memory policy other than the CPUs' nodes.
	buf.Reset()
	FormatBindings(&buf, "h", []RankBinding{{LocalRank: 0, BindTo: BindNone, Why: "not bound: --bind-to none"},
		{LocalRank: 1, BindTo: BindCore, CPUs: NewCPUSet(0), NUMA: []int{0}, Mems: []int{0, 1}, Why: "w"}})
	if got, want := buf.String(), "h rank 0: not bound\n  why: not bound: --bind-to none\nh rank 1: CPUs 0 NUMA 0 mem NUMAs 0,1\n  why: w\n"; got != want {
		t.Errorf("FormatBindings = %q, want %q", got, want)
	}
}

// A node restricted to the CPUs a job may use (a Slurm cpuset) plans
// bindings inside them only, NUMA nodes and core counts shrinking with it.
func TestRestrict(t *testing.T) {
	t.Parallel()
	n := load(t, "cpu-2s")
	full := NewCPUSet()
	for _, c := range n.CPUs {
		full = full.Union(NewCPUSet(c.ID))
	}
	// Half of NUMA node 1's CPUs: a job's share of the second socket.
	var half []int
	for i, c := range n.NUMANodes[1].CPUs.CPUs() {
		if i%2 == 0 {
			half = append(half, c)
		}
	}
	allowed := NewCPUSet(half...)
	r := n.Restrict(allowed)
	if len(r.CPUs) != allowed.Len() || !r.NUMANodes[0].CPUs.IsEmpty() || !r.NUMANodes[1].CPUs.Equal(allowed) {
		t.Fatalf("restricted to %v: %d CPUs, NUMA 0 %v, NUMA 1 %v", allowed, len(r.CPUs), r.NUMANodes[0].CPUs, r.NUMANodes[1].CPUs)
	}
	if len(n.CPUs) != full.Len() {
		t.Error("Restrict changed the node it was given")
	}
	plan, err := PlanBindings(r, BindOptions{LocalRanks: 2, BindTo: BindCore})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range plan {
		if b.CPUs.IsEmpty() || !b.CPUs.Intersect(allowed).Equal(b.CPUs) {
			t.Errorf("rank %d bound to %v, outside %v", b.LocalRank, b.CPUs, allowed)
		}
	}
	if n.Restrict(NewCPUSet()) != n || n.Restrict(full) != n || n.Restrict(NewCPUSet(4000)) != n {
		t.Error("an empty, full or foreign set did not return the node itself")
	}
}

// Ranks pair with GPUs in PCI bus order, as CUDA numbers them with
// CUDA_DEVICE_ORDER=PCI_BUS_ID, even where NVML numbers them otherwise.
func TestBindableGPUsBusOrder(t *testing.T) {
	t.Parallel()
	f, err := LoadFakeNVML(os.DirFS("testdata/pcie-4gpu"), "nvml.json")
	if err != nil {
		t.Fatal(err)
	}
	f.GPUs[1], f.GPUs[2] = f.GPUs[2], f.GPUs[1] // NVML's order: buses 01, 81, 02, c1
	f.P2PPairs = nil
	n, err := Discover(os.DirFS("testdata/pcie-4gpu"), f)
	if err != nil {
		t.Fatal(err)
	}
	var buses []string
	for _, i := range BindableGPUs(n) {
		buses = append(buses, n.GPUs[i].BusID)
	}
	if got := strings.Join(buses, " "); got != "0000:01:00.0 0000:02:00.0 0000:81:00.0 0000:c1:00.0" {
		t.Errorf("BindableGPUs in bus order: %s", got)
	}
	plan, err := PlanBindings(n, BindOptions{LocalRanks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if plan[1].GPU.BusID != "0000:02:00.0" || plan[1].Device != 1 {
		t.Errorf("local rank 1 got %s as device %d", plan[1].GPU.BusID, plan[1].Device)
	}
}
