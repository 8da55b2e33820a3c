package topology

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// load discovers a fixture machine: sysfs from testdata/<name>, NVML from
// testdata/<name>/nvml.json when there is one.
func load(t *testing.T, name string) *Node {
	t.Helper()
	root := filepath.Join("testdata", name)
	var lib NVML
	if _, err := os.Stat(filepath.Join(root, "nvml.json")); err == nil {
		f, err := LoadFakeNVML(os.DirFS(root), "nvml.json")
		if err != nil {
			t.Fatal(err)
		}
		lib = f
	}
	n, err := Discover(os.DirFS(root), lib)
	if err != nil {
		t.Fatalf("Discover(%s): %v", name, err)
	}
	return n
}

type wantDev struct {
	name  string // GPU bus ID, or NIC "name/ibdev"
	numa  int
	cpus  string
	speed int
	up    bool
}

func TestFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		packages int
		cores    int // over all packages
		cpus     int
		numa     []string // CPUs per NUMA node
		memGiB   []int    // per NUMA node, rounded down
		gpus     []wantDev
		nics     []wantDev
		source   string
		vendor   string // of the GPUs; "" is NVIDIA
	}{
		{
			name: "dgx-h100", packages: 2, cores: 112, cpus: 224,
			numa:   []string{"0-55,112-167", "56-111,168-223"},
			memGiB: []int{1007, 1007},
			gpus: []wantDev{
				{name: "0000:1b:00.0", numa: 0, cpus: "0-55,112-167"}, {name: "0000:43:00.0", numa: 0, cpus: "0-55,112-167"},
				{name: "0000:52:00.0", numa: 0, cpus: "0-55,112-167"}, {name: "0000:61:00.0", numa: 0, cpus: "0-55,112-167"},
				{name: "0000:9d:00.0", numa: 1, cpus: "56-111,168-223"}, {name: "0000:c3:00.0", numa: 1, cpus: "56-111,168-223"},
				{name: "0000:d1:00.0", numa: 1, cpus: "56-111,168-223"}, {name: "0000:df:00.0", numa: 1, cpus: "56-111,168-223"},
			},
			nics: []wantDev{
				{name: "ibp24s0/mlx5_0", numa: 0, speed: 400000, up: true}, {name: "ibp64s0/mlx5_1", numa: 0, speed: 400000, up: true},
				{name: "ibp79s0/mlx5_2", numa: 0, speed: 400000, up: true}, {name: "ibp94s0/mlx5_3", numa: 0, speed: 400000, up: true},
				{name: "ibp154s0/mlx5_4", numa: 1, speed: 400000, up: true}, {name: "ibp192s0/mlx5_5", numa: 1, speed: 400000, up: true},
				{name: "ibp206s0/mlx5_6", numa: 1, speed: 400000, up: true}, {name: "ibp220s0/mlx5_7", numa: 1, speed: 400000, up: true},
			},
			source: "nvml",
		},
		{
			name: "pcie-4gpu", packages: 2, cores: 16, cpus: 32,
			numa:   []string{"0-7,16-23", "8-15,24-31"},
			memGiB: []int{251, 251},
			gpus: []wantDev{
				{name: "0000:01:00.0", numa: 1, cpus: "8-15,24-31"}, {name: "0000:02:00.0", numa: 1, cpus: "8-15,24-31"},
				{name: "0000:81:00.0", numa: 0, cpus: "0-7,16-23"}, {name: "0000:c1:00.0", numa: 0, cpus: "0-7,16-23"},
			},
			nics: []wantDev{
				{name: "ens1f0np0/mlx5_0", numa: 0, speed: 100000, up: true},
				{name: "ens1f1np1/mlx5_1", numa: 0, speed: 0, up: false},
			},
			source: "nvml",
		},
		{
			// AMD MI300X: processing accelerators, 4 per socket, each behind
			// a switch with its NIC; the BMC's VGA is no GPU.
			name: "mi300x", packages: 2, cores: 192, cpus: 384,
			numa:   []string{"0-95,192-287", "96-191,288-383"},
			memGiB: []int{755, 755},
			gpus: []wantDev{
				{name: "0000:05:00.0", numa: 0, cpus: "0-95,192-287"}, {name: "0000:2b:00.0", numa: 0, cpus: "0-95,192-287"},
				{name: "0000:5b:00.0", numa: 0, cpus: "0-95,192-287"}, {name: "0000:65:00.0", numa: 0, cpus: "0-95,192-287"},
				{name: "0000:7d:00.0", numa: 1, cpus: "96-191,288-383"}, {name: "0000:a5:00.0", numa: 1, cpus: "96-191,288-383"},
				{name: "0000:d5:00.0", numa: 1, cpus: "96-191,288-383"}, {name: "0000:e7:00.0", numa: 1, cpus: "96-191,288-383"},
			},
			nics: []wantDev{
				{name: "enp9s0np0/mlx5_0", numa: 0, speed: 400000, up: true}, {name: "enp35s0np0/mlx5_1", numa: 0, speed: 400000, up: true},
				{name: "enp83s0np0/mlx5_2", numa: 0, speed: 400000, up: true}, {name: "enp105s0np0/mlx5_3", numa: 0, speed: 400000, up: true},
				{name: "enp143s0np0/mlx5_4", numa: 1, speed: 400000, up: true}, {name: "enp156s0np0/mlx5_5", numa: 1, speed: 400000, up: true},
				{name: "ens99f0np0/", numa: 1, speed: 100000, up: true},
				{name: "enp205s0np0/mlx5_6", numa: 1, speed: 400000, up: true}, {name: "enp241s0np0/mlx5_7", numa: 1, speed: 400000, up: true},
			},
			source: "sysfs", vendor: VendorAMD,
		},
		{
			// An Aurora node: HBM in flat mode makes NUMA nodes 2 and 3,
			// memory without CPUs; 3 Max 1550 per socket, PCI domains 0
			// and 1; Slingshot NICs without RDMA devices.
			name: "intel-max", packages: 2, cores: 104, cpus: 208,
			numa:   []string{"0-51,104-155", "52-103,156-207", "", ""},
			memGiB: []int{503, 502, 64, 64},
			gpus: []wantDev{
				{name: "0000:18:00.0", numa: 0, cpus: "0-51,104-155"}, {name: "0000:42:00.0", numa: 0, cpus: "0-51,104-155"},
				{name: "0000:6c:00.0", numa: 0, cpus: "0-51,104-155"}, {name: "0001:18:00.0", numa: 1, cpus: "52-103,156-207"},
				{name: "0001:42:00.0", numa: 1, cpus: "52-103,156-207"}, {name: "0001:6c:00.0", numa: 1, cpus: "52-103,156-207"},
			},
			nics: []wantDev{
				{name: "hsn0/", numa: 0, speed: 200000, up: true}, {name: "hsn1/", numa: 0, speed: 200000, up: true},
				{name: "hsn2/", numa: 0, speed: 200000, up: true}, {name: "hsn3/", numa: 0, speed: 200000, up: true},
				{name: "hsn4/", numa: 1, speed: 200000, up: true}, {name: "hsn5/", numa: 1, speed: 200000, up: true},
				{name: "hsn6/", numa: 1, speed: 200000, up: true}, {name: "hsn7/", numa: 1, speed: 200000, up: true},
			},
			source: "sysfs", vendor: VendorIntel,
		},
		{
			name: "cpu-2s", packages: 2, cores: 8, cpus: 16,
			numa:   []string{"0-3,8-11", "4-7,12-15"},
			memGiB: []int{92, 93},
			nics:   []wantDev{{name: "eno1/", numa: 0, speed: 10000, up: true}},
			source: "sysfs",
		},
		{
			name: "this-vm", packages: 1, cores: 2, cpus: 2,
			numa:   []string{"0-1"},
			memGiB: []int{7},
			nics:   []wantDev{{name: "eth0/", numa: 0, speed: 0, up: true}},
			source: "sysfs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := load(t, tt.name)
			if len(n.Packages) != tt.packages || len(n.CPUs) != tt.cpus {
				t.Errorf("%d packages, %d CPUs; want %d, %d", len(n.Packages), len(n.CPUs), tt.packages, tt.cpus)
			}
			cores := 0
			for _, p := range n.Packages {
				cores += p.Cores
			}
			if cores != tt.cores {
				t.Errorf("%d cores, want %d", cores, tt.cores)
			}
			if len(n.NUMANodes) != len(tt.numa) {
				t.Fatalf("%d NUMA nodes, want %d", len(n.NUMANodes), len(tt.numa))
			}
			for i, m := range n.NUMANodes {
				if m.ID != i || m.CPUs.String() != tt.numa[i] || int(m.MemoryBytes>>30) != tt.memGiB[i] {
					t.Errorf("NUMA node %d: id %d CPUs %s memory %d GiB; want CPUs %s, %d GiB", i, m.ID, m.CPUs, m.MemoryBytes>>30, tt.numa[i], tt.memGiB[i])
				}
			}
			for _, c := range n.CPUs {
				if !n.CPUsOfNUMA(c.NUMA).Contains(c.ID) || !c.Siblings.Contains(c.ID) {
					t.Errorf("CPU %d: NUMA %d, siblings %s", c.ID, c.NUMA, c.Siblings)
				}
			}
			if n.GPUSource != tt.source {
				t.Errorf("GPU source %q, want %q", n.GPUSource, tt.source)
			}
			if len(n.GPUs) != len(tt.gpus) {
				t.Fatalf("%d GPUs, want %d", len(n.GPUs), len(tt.gpus))
			}
			for i, g := range n.GPUs {
				w := tt.gpus[i]
				vendor := tt.vendor
				if vendor == "" {
					vendor = VendorNVIDIA
				}
				if g.Index != i || g.Vendor != vendor || g.BusID != w.name || g.NUMA != w.numa || g.CPUs.String() != w.cpus {
					t.Errorf("GPU %d: %+v; want bus %s NUMA %d CPUs %s", i, g, w.name, w.numa, w.cpus)
				}
			}
			if len(n.NICs) != len(tt.nics) {
				t.Fatalf("NICs %+v, want %d", n.NICs, len(tt.nics))
			}
			for i, nic := range n.NICs {
				w := tt.nics[i]
				if got := nic.Name + "/" + nic.IBDevice; got != w.name || nic.NUMA != w.numa || nic.SpeedMbps != w.speed || nic.Up != w.up {
					t.Errorf("NIC %d: %+v; want %+v", i, nic, w)
				}
			}
			if got := CountGPUs(os.DirFS(filepath.Join("testdata", tt.name))); got != len(tt.gpus) {
				t.Errorf("CountGPUs = %d, want %d", got, len(tt.gpus))
			}
		})
	}
}

func TestLinks(t *testing.T) {
	t.Parallel()
	G, N := GPURef, NICRef
	tests := []struct {
		fixture string
		a, b    DeviceRef
		want    string
	}{
		{"dgx-h100", G(0), G(0), "X"},
		{"dgx-h100", G(0), G(7), "NV18"},
		{"dgx-h100", G(3), G(4), "NV18"},
		{"dgx-h100", G(0), N(0), "PIX"},
		{"dgx-h100", N(5), G(5), "PIX"},
		{"dgx-h100", G(0), N(1), "NODE"},
		{"dgx-h100", G(0), N(4), "SYS"},
		{"dgx-h100", N(0), N(3), "NODE"},
		{"dgx-h100", N(3), N(4), "SYS"},
		{"dgx-h100", G(8), G(0), "SYS"}, // no such GPU
		{"pcie-4gpu", G(0), G(1), "PHB"},
		{"pcie-4gpu", G(2), G(3), "NODE"},
		{"pcie-4gpu", G(0), G(2), "SYS"},
		{"pcie-4gpu", G(1), G(3), "SYS"},
		{"pcie-4gpu", N(0), N(1), "PIX"},
		{"pcie-4gpu", G(2), N(0), "PHB"},
		{"pcie-4gpu", G(3), N(1), "NODE"},
		{"pcie-4gpu", N(0), G(0), "SYS"},
		{"cpu-2s", N(0), N(0), "X"},
	}
	nodes := map[string]*Node{}
	for _, f := range []string{"dgx-h100", "pcie-4gpu", "cpu-2s"} {
		nodes[f] = load(t, f)
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v-%v", tt.fixture, tt.a, tt.b), func(t *testing.T) {
			t.Parallel()
			n := nodes[tt.fixture]
			if got := n.Link(tt.a, tt.b).String(); got != tt.want {
				t.Errorf("Link(%v, %v) = %s, want %s", tt.a, tt.b, got, tt.want)
			}
			if got := n.Link(tt.b, tt.a).String(); got != tt.want {
				t.Errorf("Link(%v, %v) = %s, want %s (symmetry)", tt.b, tt.a, got, tt.want)
			}
		})
	}
	// The whole DGX matrix: NV18 between GPUs; GPU i and NIC i PIX, NODE
	// within a socket, SYS across.
	n := nodes["dgx-h100"]
	for i := range 8 {
		for j := range 8 {
			want := "SYS"
			switch {
			case i == j:
				want = "PIX"
			case i/4 == j/4:
				want = "NODE"
			}
			if got := n.Link(G(i), N(j)).String(); got != want {
				t.Errorf("dgx-h100: Link(GPU%d, NIC%d) = %s, want %s", i, j, got, want)
			}
			if i != j {
				if got := n.Link(G(i), G(j)).String(); got != "NV18" {
					t.Errorf("dgx-h100: Link(GPU%d, GPU%d) = %s, want NV18", i, j, got)
				}
			}
		}
	}
	if g := n.GPUs[0]; g.UUID == "" || g.MemoryBytes != 85520809984 || g.P2P[1] != "OK" || g.MIG || !n.GPUs[7].MIG {
		t.Errorf("dgx-h100: NVML fields not carried: %+v", g)
	}
	if p := nodes["pcie-4gpu"].GPUs[0].P2P; p[1] != "OK" || p[2] != "CNS" {
		t.Errorf("pcie-4gpu: P2P of GPU0 = %v", p)
	}
}

func TestFormatMatrixGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"dgx-h100", "pcie-4gpu", "mi300x", "intel-max", "cpu-2s", "this-vm"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := FormatMatrix(&buf, load(t, name)); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
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
				t.Errorf("FormatMatrix(%s) differs from %s:\n%s", name, golden, buf.String())
			}
		})
	}
}

func TestNodeJSON(t *testing.T) {
	t.Parallel()
	n := load(t, "dgx-h100")
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"cpus":"0-55,112-167"`, `"bus_id":"0000:1b:00.0"`, `"nvlinks":{"1":18`, `"ib_device":"mlx5_0"`, `"gpu_source":"nvml"`} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("JSON lacks %s", s)
		}
	}
	var back Node
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(&back)
	if !bytes.Equal(b, b2) {
		t.Errorf("JSON round trip differs")
	}
	m, err := json.Marshal(Matrix(n))
	if err != nil || !bytes.Contains(m, []byte(`"devices":["GPU0"`)) || !bytes.Contains(m, []byte(`["X","NV18"`)) {
		t.Errorf("Matrix JSON = %.200s, %v", m, err)
	}
}

func TestFailedInitCallsNothingElse(t *testing.T) {
	t.Parallel()
	for _, initErr := range []string{"library not found", "driver not loaded"} {
		f := &FakeNVML{InitError: initErr, GPUs: []GPUInfo{{BusID: "0000:01:00.0"}}}
		n, err := Discover(os.DirFS("testdata/pcie-4gpu"), f)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(f.Calls(), ","); got != "Init" {
			t.Errorf("%s: calls %s, want Init only", initErr, got)
		}
		if n.GPUSource != "sysfs" || len(n.GPUs) != 4 {
			t.Errorf("%s: source %s, %d GPUs", initErr, n.GPUSource, len(n.GPUs))
		}
		if quiet := len(n.Warnings) == 0; quiet != (initErr == "library not found") {
			t.Errorf("%s: warnings %v", initErr, n.Warnings)
		}
	}
}

// TestRecordedPaths reads a machine from a file system without symbolic
// links, where each device records its real path in RecordedPathFile.
func TestRecordedPaths(t *testing.T) {
	t.Parallel()
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }
	fsys := noLinks{fstest.MapFS{
		"sys/devices/system/cpu/online":                             f("0"),
		"sys/devices/system/cpu/cpu0/topology/core_id":              f("0"),
		"sys/devices/system/cpu/cpu0/topology/physical_package_id":  f("0"),
		"sys/devices/system/cpu/cpu0/topology/thread_siblings_list": f("0"),
		"sys/bus/pci/devices/0000:00:01.0/class":                    f("0x060400"),
		"sys/bus/pci/devices/0000:00:01.0/vendor":                   f("0x8086"),
		"sys/bus/pci/devices/0000:00:01.0/" + RecordedPathFile:      f("/sys/devices/pci0000:00/0000:00:01.0"),
		"sys/bus/pci/devices/0000:01:00.0/class":                    f("0x030200"),
		"sys/bus/pci/devices/0000:01:00.0/vendor":                   f("0x10de"),
		"sys/bus/pci/devices/0000:01:00.0/numa_node":                f("-1"),
		"sys/bus/pci/devices/0000:01:00.0/" + RecordedPathFile:      f("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
		"sys/bus/pci/devices/0000:02:00.0/class":                    f("0x020000"),
		"sys/bus/pci/devices/0000:02:00.0/vendor":                   f("0x8086"),
		"sys/bus/pci/devices/0000:02:00.0/" + RecordedPathFile:      f("/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0"),
		"sys/class/net/eth0/operstate":                              f("up"),
		"sys/class/net/eth0/" + RecordedPathFile:                    f("/sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0/net/eth0"),
		"sys/class/net/lo/" + RecordedPathFile:                      f("/sys/devices/virtual/net/lo"),
	}}
	n, err := ReadSysfs(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if d := n.PCI["0000:01:00.0"]; d.Parent != "0000:00:01.0" || d.HostBridge != "pci0000:00" {
		t.Errorf("GPU's PCI device = %+v", d)
	}
	if len(n.GPUs) != 1 || n.GPUs[0].NUMA != 0 || len(n.NICs) != 1 || n.NICs[0].Name != "eth0" {
		t.Fatalf("GPUs %+v NICs %+v", n.GPUs, n.NICs)
	}
	if got := n.Link(GPURef(0), NICRef(0)).String(); got != "PHB" {
		t.Errorf("Link = %s, want PHB", got)
	}
}

// noLinks hides MapFS's ReadLink, as a zip or embed file system would.
type noLinks struct{ fs fstest.MapFS }

func (n noLinks) Open(name string) (fs.File, error) { return n.fs.Open(name) }

func TestSysfsErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"no sysfs", fstest.MapFS{}, "sys/devices/system/cpu/online"},
		{"bad online", fstest.MapFS{"sys/devices/system/cpu/online": {Data: []byte("0-x")}}, "sys/devices/system/cpu/online"},
		{"no core_id", fstest.MapFS{"sys/devices/system/cpu/online": {Data: []byte("0")}}, "sys/devices/system/cpu/cpu0/topology/core_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadSysfs(tt.fsys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReadSysfs error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestNormalizeBusID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"00000000:1B:00.0": "0000:1b:00.0", "0000:1b:00.0": "0000:1b:00.0",
		"00010000:01:00.0": "10000:01:00.0", "0:01:00.0": "0000:01:00.0", "garbage": "garbage",
	} {
		if got := NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}
