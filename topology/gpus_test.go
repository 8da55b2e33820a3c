package topology

import (
	"os"
	"testing"
)

func TestCountGPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		root string
		want int
	}{
		// Two NVIDIA display/3D controllers, an NVIDIA audio function and a bridge.
		{"two gpus", "testdata/sysfs-2gpu", 2},
		{"no sysfs", "testdata/does-not-exist", 0},
		{"dgx", "testdata/dgx-h100", 8},
		// 8 MI300X (processing accelerators) and the BMC's VGA, not a GPU.
		{"mi300x", "testdata/mi300x", 8},
		{"intel max", "testdata/intel-max", 6},
		{"an ASPEED BMC only", "testdata/cpu-2s", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := CountGPUs(os.DirFS(tt.root)); got != tt.want {
				t.Fatalf("CountGPUs(%s) = %d, want %d", tt.root, got, tt.want)
			}
		})
	}
}

// Which PCI functions are GPUs gorun runs ranks on: data-center GPUs of
// NVIDIA, AMD and Intel, never the integrated or BMC graphics a job would
// otherwise count as one GPU, nor NPUs.
func TestGPUVendor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		what, vendor, class, want string
	}{
		{"H100 SXM (3D controller)", "0x10de", "0x030200", VendorNVIDIA},
		{"RTX workstation card (VGA)", "0x10de", "0x030000", VendorNVIDIA},
		{"NVIDIA HDMI audio", "0x10de", "0x040300", ""},
		{"NVIDIA NVSwitch bridge", "0x10de", "0x068000", ""},
		{"MI300X (processing accelerator)", "0x1002", "0x120000", VendorAMD},
		{"MI250X (display controller)", "0x1002", "0x038000", VendorAMD},
		{"Radeon APU graphics (VGA)", "0x1002", "0x030000", ""},
		{"AMD HD audio", "0x1002", "0x040300", ""},
		{"AMD XDNA NPU (CPU vendor ID)", "0x1022", "0x118000", ""},
		{"Data Center GPU Max 1550 (display controller)", "0x8086", "0x038000", VendorIntel},
		{"Intel integrated graphics (VGA)", "0x8086", "0x030000", ""},
		{"Intel NPU (processing accelerator)", "0x8086", "0x120000", ""},
		{"Intel root port", "0x8086", "0x060400", ""},
		{"Habana Gaudi", "0x1da3", "0x120000", ""},
		{"ASPEED BMC VGA", "0x1a03", "0x030000", ""},
		{"upper case, spaces", " 0x10DE\n", "0x0302A1\n", VendorNVIDIA},
		{"short class", "0x10de", "0x03", ""},
	}
	for _, tt := range tests {
		if got := gpuVendor(tt.vendor, tt.class); got != tt.want {
			t.Errorf("%s: gpuVendor(%q, %q) = %q, want %q", tt.what, tt.vendor, tt.class, got, tt.want)
		}
		// CountGPUs reads a function's vendor only where gpuClass passes
		// its class: it must pass every class a GPU has.
		if tt.want != "" && !gpuClass(tt.class) {
			t.Errorf("%s: gpuClass(%q) = false for a GPU", tt.what, tt.class)
		}
	}
}

// A node with GPUs of two vendors lists NVIDIA's first and binds ranks to
// one vendor's GPUs, each vendor numbering its own from 0.
func TestMixedVendors(t *testing.T) {
	t.Parallel()
	n := &Node{PCI: map[string]*PCIDevice{
		"0000:01:00.0": {BusID: "0000:01:00.0", Vendor: "0x1002", Class: "0x038000", NUMA: -1},
		"0000:02:00.0": {BusID: "0000:02:00.0", Vendor: "0x10de", Class: "0x030200", NUMA: -1},
		"0000:03:00.0": {BusID: "0000:03:00.0", Vendor: "0x1002", Class: "0x120000", NUMA: -1},
	}}
	gpus := sysfsGPUs(n)
	want := []struct {
		vendor string
		index  int
		bus    string
	}{{VendorNVIDIA, 0, "0000:02:00.0"}, {VendorAMD, 0, "0000:01:00.0"}, {VendorAMD, 1, "0000:03:00.0"}}
	if len(gpus) != len(want) {
		t.Fatalf("GPUs %+v", gpus)
	}
	for i, w := range want {
		if g := gpus[i]; g.Vendor != w.vendor || g.Index != w.index || g.BusID != w.bus {
			t.Errorf("GPU %d = %s %d at %s, want %s %d at %s", i, g.Vendor, g.Index, g.BusID, w.vendor, w.index, w.bus)
		}
	}
	n.GPUs = gpus
	if b := BindableGPUs(n); len(b) != 1 || b[0] != 0 {
		t.Errorf("BindableGPUs = %v, want the NVIDIA GPU alone", b)
	}
	if got := gpus[2].Name(); got != "AMD GPU 1" {
		t.Errorf("Name = %q", got)
	}
}
