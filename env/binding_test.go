package env

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gorun/gorun/topology"
)

// fixtures are the recorded machines of package topology's tests.
const fixtures = "../topology/testdata"

// loadFixture discovers a recorded machine: its sysfs, and NVML from its
// nvml.json when it has one (else NVML is absent, as in a static build).
// A name ending in " (sysfs)" leaves NVML out.
func loadFixture(t *testing.T, name string) *topology.Node {
	t.Helper()
	name, sysfsOnly := strings.CutSuffix(name, " (sysfs)")
	root := filepath.Join(fixtures, name)
	var lib topology.NVML = &topology.FakeNVML{InitError: "library not found"}
	if _, err := os.Stat(filepath.Join(root, "nvml.json")); err == nil && !sysfsOnly {
		f, err := topology.LoadFakeNVML(os.DirFS(root), "nvml.json")
		if err != nil {
			t.Fatal(err)
		}
		lib = f
	}
	n, err := topology.Discover(os.DirFS(root), lib)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// allFixtures lists every recorded machine (each directory with a whole
// sys/), and once more without NVML those that have NVML answers.
func allFixtures(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(fixtures, "*", "sys", "devices", "system", "cpu", "online"))
	if err != nil || len(dirs) < 6 {
		t.Fatalf("fixtures under %s: %v, %v", fixtures, dirs, err)
	}
	var out []string
	for _, d := range dirs {
		root := strings.TrimSuffix(d, "/sys/devices/system/cpu/online")
		out = append(out, filepath.Base(root))
		if _, err := os.Stat(filepath.Join(root, "nvml.json")); err == nil {
			out = append(out, filepath.Base(root)+" (sysfs)")
		}
	}
	return out
}

// vars turns NAME=value pairs into a map, failing on a name set twice.
func vars(t *testing.T, kvs []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if _, dup := m[k]; !ok || dup {
			t.Fatalf("bad or repeated variable %q in %q", kv, kvs)
		}
		m[k] = v
	}
	return m
}

// grant is what the ranks' environment environ grants of the node's GPUs.
func grant(environ ...string) topology.GPUGrant {
	return topology.GPUGrant{Lists: ReadUserVars(environ).GPUs}
}

// perRank are the variables that may differ between the ranks of a node.
var perRank = map[string]bool{UCXNetDevices: true, OMPNumThreads: true}

// The GPU defaults on every recorded machine, with one rank per GPU:
// local rank i gets GPU i in PCI bus order, as device i with every GPU
// visible, with cores and memory of GPU i's NUMA node; no variable hides a
// GPU, none names NCCL, and apart from UCX's NIC and OpenMP's threads all
// ranks of the node get the very same variables. With --gpu-bind single,
// each rank's visibility variable names its own GPU and nothing else.
func TestGPUDefaultsOnEveryFixture(t *testing.T) {
	t.Parallel()
	withGPUs := 0
	for _, name := range allFixtures(t) {
		t.Run(name, func(t *testing.T) {
			n := loadFixture(t, name)
			gpus := topology.BindableGPUs(n)
			if len(gpus) == 0 {
				plan, err := topology.PlanBindings(n, topology.BindOptions{LocalRanks: 2})
				if err != nil {
					t.Fatal(err)
				}
				hints, node := Bindings(plan, BindingOptions{})
				for i := range plan {
					if plan[i].GPU != nil || !plan[i].CPUs.IsEmpty() || len(hints[i].Vars) != 0 {
						t.Errorf("rank %d bound without GPUs: %+v %v", i, plan[i], hints[i].Vars)
					}
				}
				if node != "" {
					t.Errorf("node note without GPUs: %q", node)
				}
				return
			}
			withGPUs++
			vendor := n.GPUs[gpus[0]].Vendor
			for k := 1; k < len(gpus); k++ {
				if n.GPUs[gpus[k-1]].BusID >= n.GPUs[gpus[k]].BusID {
					t.Fatalf("bindable GPUs out of PCI bus order: %v", gpus)
				}
			}
			plan, err := topology.PlanBindings(n, topology.BindOptions{LocalRanks: len(gpus)})
			if err != nil {
				t.Fatal(err)
			}
			hints, node := Bindings(plan, BindingOptions{})
			var first map[string]string
			for i := range plan {
				b := &plan[i]
				if b.GPU != &n.GPUs[gpus[i]] || b.Device != i || len(b.Visible) != len(gpus) {
					t.Fatalf("local rank %d: GPU %v device %d of %d, want GPU %d as device %d", i, b.GPU, b.Device, len(b.Visible), n.GPUs[gpus[i]].Index, i)
				}
				if near := n.CPUsOfNUMA(b.GPU.NUMA); !near.IsEmpty() && (b.CPUs.IsEmpty() || !b.CPUs.Intersect(near).Equal(b.CPUs)) {
					t.Errorf("local rank %d: CPUs %s are not all on GPU %d's NUMA node %d (%s)", i, b.CPUs, b.GPU.Index, b.GPU.NUMA, near)
				}
				if b.GPU.NUMA >= 0 && !slices.Equal(b.Mems, []int{b.GPU.NUMA}) {
					t.Errorf("local rank %d: memory on %v, want GPU's NUMA node %d", i, b.Mems, b.GPU.NUMA)
				}
				v := vars(t, hints[i].Vars)
				for k := range v {
					if strings.HasPrefix(k, "NCCL_") {
						t.Errorf("local rank %d gets %s=%s: no NCCL variable may differ between the ranks of a node", i, k, v[k])
					}
				}
				for _, hide := range []string{CUDAVisibleDevices, ROCRVisibleDevices, ZEAffinityMask, "HIP_VISIBLE_DEVICES"} {
					if _, ok := v[hide]; ok {
						t.Errorf("local rank %d gets %s=%s: every GPU must stay visible by default", i, hide, v[hide])
					}
				}
				shared := map[string]string{}
				for k, val := range v {
					if !perRank[k] {
						shared[k] = val
					}
				}
				if first == nil {
					first = shared
				} else if fmt.Sprint(shared) != fmt.Sprint(first) {
					t.Errorf("local rank %d gets %v, local rank 0 %v: ranks of a node must agree", i, shared, first)
				}
				switch vendor {
				case topology.VendorNVIDIA:
					if v[CUDADeviceOrder] != "PCI_BUS_ID" {
						t.Errorf("local rank %d: CUDA_DEVICE_ORDER=%q, want PCI_BUS_ID", i, v[CUDADeviceOrder])
					}
				case topology.VendorIntel:
					if v[ZEFlatDeviceHierarchy] != "COMPOSITE" {
						t.Errorf("local rank %d: ZE_FLAT_DEVICE_HIERARCHY=%q, want COMPOSITE", i, v[ZEFlatDeviceHierarchy])
					}
				}
				if !strings.Contains(hints[i].Note, fmt.Sprintf("its GPU as device %d", i)) {
					t.Errorf("local rank %d: note %q", i, hints[i].Note)
				}
			}
			if !strings.Contains(node, fmt.Sprintf("every rank sees the same %d GPUs and local rank i uses device i", len(gpus))) {
				t.Errorf("node note %q", node)
			}
			if vendor == topology.VendorNVIDIA && !strings.Contains(node, "no NCCL variable set") {
				t.Errorf("node note %q does not say why no NCCL variable is set", node)
			}

			// Isolation, asked for: each rank sees its own GPU only.
			hints, node = Bindings(plan, BindingOptions{GPUBind: GPUBindSingle})
			seen := map[string]bool{}
			for i := range plan {
				v := vars(t, hints[i].Vars)
				id, ok := v[VisibilityVar(vendor)]
				if !ok || strings.Contains(id, ",") || seen[id] {
					t.Errorf("--gpu-bind single: local rank %d: %s=%q", i, VisibilityVar(vendor), id)
				}
				seen[id] = true
				want := plan[i].GPU.UUID
				if want == "" {
					want = fmt.Sprint(plan[i].GPU.Index)
				}
				if id != want {
					t.Errorf("--gpu-bind single: local rank %d sees %q, want its GPU %q", i, id, want)
				}
			}
			if !strings.Contains(node, "scripts must use device 0, not LOCAL_RANK") {
				t.Errorf("--gpu-bind single: node note %q", node)
			}
		})
	}
	if withGPUs < 6 {
		t.Errorf("%d fixtures with GPUs, want the DGX and PCIe ones (with and without NVML), the MI300X and the Intel Max", withGPUs)
	}
}

// The variables of particular plans: OpenMP's threads, the user's own
// variables, the list gorun narrows to, each vendor's names.
func TestBindings(t *testing.T) {
	t.Parallel()
	dgx, pcie, mi300x, max := loadFixture(t, "dgx-h100"), loadFixture(t, "pcie-4gpu"), loadFixture(t, "mi300x"), loadFixture(t, "intel-max")
	uuid := func(n *topology.Node, i int) string { return n.GPUs[i].UUID }
	tests := []struct {
		name string
		node *topology.Node
		bind topology.BindOptions
		opts BindingOptions
		want []string // per rank, its variables joined by spaces
		note string   // in rank 0's note
	}{
		{
			name: "dgx 3 ranks: uneven cores", node: dgx, bind: topology.BindOptions{LocalRanks: 3},
			want: []string{
				"CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=38",
				"CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_1:1 OMP_NUM_THREADS=38",
				"CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_2:1 OMP_NUM_THREADS=36",
			},
			note: "sees the 8 GPUs visible on the node, its GPU as device 0",
		},
		{
			name: "dgx the user's NCCL_IB_HCA, CUDA_DEVICE_ORDER and OMP_NUM_THREADS", node: dgx, bind: topology.BindOptions{LocalRanks: 2},
			opts: BindingOptions{User: map[string]bool{"NCCL_IB_HCA": true, CUDADeviceOrder: true, OMPNumThreads: true}},
			want: []string{"UCX_NET_DEVICES=mlx5_0:1", "UCX_NET_DEVICES=mlx5_1:1"},
			note: "the user's CUDA_DEVICE_ORDER, OMP_NUM_THREADS kept",
		},
		{
			// The user's CUDA_VISIBLE_DEVICES=6,1: rank 0 is next to GPU 6,
			// its device 0; nothing rewrites the user's list.
			name: "dgx the user's list", node: dgx, bind: topology.BindOptions{LocalRanks: 2, Grant: grant("CUDA_VISIBLE_DEVICES=6,1")},
			opts: BindingOptions{User: map[string]bool{CUDAVisibleDevices: true}},
			want: []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_6:1 OMP_NUM_THREADS=112", "CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_1:1 OMP_NUM_THREADS=112"},
			note: "sees the 2 GPUs visible on the node, its GPU as device 0",
		},
		{
			name: "dgx --include 0,4: the same narrowed list on every rank", node: dgx, bind: topology.BindOptions{LocalRanks: 2, Grant: grant("CUDA_VISIBLE_DEVICES=0,4")},
			opts: BindingOptions{Narrowed: true},
			want: []string{
				"CUDA_VISIBLE_DEVICES=" + uuid(dgx, 0) + "," + uuid(dgx, 4) + " CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=112",
				"CUDA_VISIBLE_DEVICES=" + uuid(dgx, 0) + "," + uuid(dgx, 4) + " CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_4:1 OMP_NUM_THREADS=112",
			},
			note: "sees the 2 GPUs of --include/--exclude, its GPU as device 0",
		},
		{
			name: "dgx single narrows the user's list too", node: dgx, bind: topology.BindOptions{LocalRanks: 1, Grant: grant("CUDA_VISIBLE_DEVICES=3")},
			opts: BindingOptions{GPUBind: GPUBindSingle, User: map[string]bool{CUDAVisibleDevices: true}},
			want: []string{"CUDA_VISIBLE_DEVICES=" + uuid(dgx, 3) + " CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_3:1 OMP_NUM_THREADS=112"},
		},
		{
			name: "pcie bind-to numa: no GPU, no GPU variable", node: pcie, bind: topology.BindOptions{LocalRanks: 2, BindTo: topology.BindNUMA},
			want: []string{"UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=16", "UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=16"},
		},
		{
			name: "sysfs only, single: the index", node: loadFixture(t, "pcie-4gpu (sysfs)"), bind: topology.BindOptions{LocalRanks: 2, Grant: grant("CUDA_VISIBLE_DEVICES=2,3")},
			opts: BindingOptions{GPUBind: GPUBindSingle},
			want: []string{"CUDA_VISIBLE_DEVICES=2 CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=8",
				"CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=PCI_BUS_ID UCX_NET_DEVICES=mlx5_0:1 OMP_NUM_THREADS=8"},
		},
		{
			name: "mi300x single: ROCR_VISIBLE_DEVICES, not HIP_VISIBLE_DEVICES", node: mi300x, bind: topology.BindOptions{LocalRanks: 2, Grant: grant("ROCR_VISIBLE_DEVICES=4,5")},
			opts: BindingOptions{GPUBind: GPUBindSingle},
			want: []string{"ROCR_VISIBLE_DEVICES=4 UCX_NET_DEVICES=mlx5_4:1 OMP_NUM_THREADS=96", "ROCR_VISIBLE_DEVICES=5 UCX_NET_DEVICES=mlx5_5:1 OMP_NUM_THREADS=96"},
		},
		{
			name: "intel-max --include: ZE_AFFINITY_MASK of cards", node: max, bind: topology.BindOptions{LocalRanks: 2, Grant: grant("ZE_AFFINITY_MASK=0,3")},
			opts: BindingOptions{Narrowed: true},
			want: []string{"ZE_AFFINITY_MASK=0,3 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE UCX_NET_DEVICES=hsn0 OMP_NUM_THREADS=104",
				"ZE_AFFINITY_MASK=0,3 ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE UCX_NET_DEVICES=hsn4 OMP_NUM_THREADS=104"},
		},
	}
	for _, tt := range tests {
		plan, err := topology.PlanBindings(tt.node, tt.bind)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		hints, _ := Bindings(plan, tt.opts)
		var got []string
		for _, h := range hints {
			got = append(got, strings.Join(h.Vars, " "))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
		if !strings.Contains(hints[0].Note, tt.note) {
			t.Errorf("%s: rank 0's note %q lacks %q", tt.name, hints[0].Note, tt.note)
		}
	}
}

// Ranks without a GPU of their own: the GPUs of an inherited
// CUDA_VISIBLE_DEVICES that gorun cannot see go one per rank with
// --gpu-bind single, and never by default; the node's CPUs are shared.
func TestBindingsUnbound(t *testing.T) {
	t.Parallel()
	unplaced := &ReadUserVars([]string{"CUDA_VISIBLE_DEVICES=2,3"}).GPUs[0]
	join := func(o BindingOptions, unplaced *topology.GPUList) string {
		plan := make([]topology.RankBinding, 3)
		for i := range plan {
			plan[i] = topology.RankBinding{LocalRank: i, BindTo: topology.BindNone, Unplaced: unplaced}
		}
		hints, node := Bindings(plan, o)
		if node != "" {
			t.Errorf("node note %q for ranks without GPUs", node)
		}
		var s []string
		for _, h := range hints {
			s = append(s, strings.Join(h.Vars, " "))
		}
		return strings.Join(s, "|")
	}
	if got := join(BindingOptions{}, unplaced); got != "||" {
		t.Errorf("default: %q", got)
	}
	if got := join(BindingOptions{GPUBind: GPUBindSingle}, unplaced); got != "CUDA_VISIBLE_DEVICES=2|CUDA_VISIBLE_DEVICES=3|CUDA_VISIBLE_DEVICES=2" {
		t.Errorf("single: %q", got)
	}
	if got := join(BindingOptions{NodeCPUs: 8}, nil); got != "OMP_NUM_THREADS=2|OMP_NUM_THREADS=2|OMP_NUM_THREADS=2" {
		t.Errorf("8 CPUs: %q", got)
	}
	if got := join(BindingOptions{NodeCPUs: 8, User: map[string]bool{OMPNumThreads: true}}, nil); got != "||" {
		t.Errorf("8 CPUs, the user's OMP_NUM_THREADS: %q", got)
	}
	for _, l := range []Launcher{MPIRun, MPIExec} {
		if got := join(BindingOptions{NodeCPUs: 8, Launcher: l}, nil); got != "||" {
			t.Errorf("8 CPUs under %s, which sets no threads: %q", l, got)
		}
	}
}

func TestParseGPUBind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]GPUBind{"": GPUBindAll, "all": GPUBindAll, "ALL": GPUBindAll, " single ": GPUBindSingle} {
		if got, err := ParseGPUBind(in); err != nil || got != want {
			t.Errorf("ParseGPUBind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"closest", "none", "single:2"} {
		if _, err := ParseGPUBind(in); err == nil || !strings.Contains(err.Error(), "want all") {
			t.Errorf("ParseGPUBind(%q): %v", in, err)
		}
	}
}

// A visibility variable that gorun narrowed from the user's own list wins
// over -x; the binding's other variables lose to it, as to any -x.
func TestBuildVisibilityLast(t *testing.T) {
	t.Parallel()
	r := Rank{Binding: []string{"CUDA_VISIBLE_DEVICES=GPU-1", "OMP_NUM_THREADS=4", "ROCR_VISIBLE_DEVICES=1"}}
	got := vars(t, Build([]string{"CUDA_VISIBLE_DEVICES=0,1"}, r, []string{"CUDA_VISIBLE_DEVICES=0,1", "OMP_NUM_THREADS=2"}))
	if got[CUDAVisibleDevices] != "GPU-1" || got[ROCRVisibleDevices] != "1" || got[OMPNumThreads] != "2" {
		t.Errorf("Build: %v", got)
	}
}

// The user's variables, read once from the ranks' environment (the
// agent's, then -x: the last value of a name wins): every name set, the
// node's CPUs from Slurm, and each vendor's GPU visibility list, parsed.
func TestReadUserVars(t *testing.T) {
	t.Parallel()
	type list struct{ vendor, name, value, ids string }
	tests := []struct {
		name     string
		environ  []string
		nodeCPUs int
		gpus     []list
	}{
		{name: "nothing set"},
		{name: "the user's names", environ: []string{"FOO=x", "OMP_NUM_THREADS=4", "EMPTY=", "FOO=y"}},
		{name: "Slurm's CPUs", environ: []string{"SLURM_CPUS_ON_NODE=8"}, nodeCPUs: 8},
		{name: "Slurm's CPUs, not a number", environ: []string{"SLURM_CPUS_ON_NODE=8(x2)"}},
		{name: "CUDA's list, -x winning", environ: []string{"CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES= 2, ,3"},
			gpus: []list{{topology.VendorNVIDIA, CUDAVisibleDevices, " 2, ,3", "2|3"}}},
		{name: "an empty list grants none", environ: []string{"CUDA_VISIBLE_DEVICES="}, gpus: []list{{topology.VendorNVIDIA, CUDAVisibleDevices, "", ""}}},
		{name: "UUIDs and MIG instances as written", environ: []string{"CUDA_VISIBLE_DEVICES=GPU-6b1f,MIG-aaaa"},
			gpus: []list{{topology.VendorNVIDIA, CUDAVisibleDevices, "GPU-6b1f,MIG-aaaa", "GPU-6b1f|MIG-aaaa"}}},
		{name: "every vendor's, in one order", environ: []string{"ZE_AFFINITY_MASK=1", "ROCR_VISIBLE_DEVICES=1,2", "CUDA_VISIBLE_DEVICES=0"},
			gpus: []list{{topology.VendorNVIDIA, CUDAVisibleDevices, "0", "0"}, {topology.VendorAMD, ROCRVisibleDevices, "1,2", "1|2"}, {topology.VendorIntel, ZEAffinityMask, "1", "1"}}},
		{name: "HIP's and NVIDIA's container list are not read", environ: []string{"HIP_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES=GPU-1"}},
	}
	for _, tt := range tests {
		u := ReadUserVars(tt.environ)
		want := map[string]bool{}
		for _, kv := range tt.environ {
			name, _, _ := strings.Cut(kv, "=")
			want[name] = true
		}
		if !maps.Equal(u.Names, want) || u.NodeCPUs != tt.nodeCPUs {
			t.Errorf("%s: names %v, node CPUs %d; want %v, %d CPUs", tt.name, u.Names, u.NodeCPUs, want, tt.nodeCPUs)
		}
		var got []list
		for _, l := range u.GPUs {
			got = append(got, list{l.Vendor, l.Var, l.Value, strings.Join(l.IDs, "|")})
		}
		if !slices.Equal(got, tt.gpus) {
			t.Errorf("%s: GPU lists %q, want %q", tt.name, got, tt.gpus)
		}
	}
	if v, ok := Lookup([]string{"A=1", "B=2", "A="}, "A"); !ok || v != "" {
		t.Errorf("Lookup A = %q, %v", v, ok)
	}
	if _, ok := Lookup([]string{"A=1"}, "B"); ok {
		t.Error("Lookup found B")
	}
}
