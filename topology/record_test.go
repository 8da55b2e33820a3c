package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nodeJSON is a node as JSON, for comparing two discoveries.
func nodeJSON(t *testing.T, n *Node) string {
	t.Helper()
	b, err := json.MarshalIndent(n, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A recorded machine reads back as the machine itself: a fixture with
// NVML answers, and this very machine.
func TestRecord(t *testing.T) {
	t.Parallel()
	t.Run("fixture with NVML", func(t *testing.T) {
		t.Parallel()
		root := filepath.Join("testdata", "pcie-4gpu")
		lib, err := LoadFakeNVML(os.DirFS(root), "nvml.json")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		files, err := Record(root, dir, lib)
		if err != nil {
			t.Fatal(err)
		}
		if files < 20 {
			t.Errorf("recorded %d files", files)
		}
		back, err := LoadFakeNVML(os.DirFS(dir), "nvml.json")
		if err != nil {
			t.Fatal(err)
		}
		if back.P2P != "CNS" && back.P2P != "OK" || len(back.GPUs) != 4 {
			t.Errorf("recorded NVML: %+v", back)
		}
		got, err := Discover(os.DirFS(dir), back)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := nodeJSON(t, got), nodeJSON(t, load(t, "pcie-4gpu")); g != w {
			t.Errorf("the recording reads back differently:\n%s\nwant\n%s", g, w)
		}
	})
	t.Run("this machine", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if _, err := Record("/", dir, &FakeNVML{InitError: "library not found"}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "nvml.json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("nvml.json recorded without NVML: %v", err)
		}
		want, err := Discover(os.DirFS("/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Discover(os.DirFS(dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := nodeJSON(t, got), nodeJSON(t, want); g != w {
			t.Errorf("the recording of / reads back differently:\n%s\nwant\n%s", g, w)
		}
	})
	if _, err := Record(t.TempDir(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no sysfs file") {
		t.Errorf("recording an empty tree: %v", err)
	}
}

// Without NVML, the node says why, and gorun topo prints it; NVML that
// numbers GPUs out of PCI bus order is a warning.
func TestNVMLStatus(t *testing.T) {
	t.Parallel()
	n, err := Discover(os.DirFS("testdata/pcie-4gpu"), &FakeNVML{InitError: "library not found"})
	if err != nil {
		t.Fatal(err)
	}
	if n.GPUSource != "sysfs" || n.NVMLStatus != ErrNVMLNotFound.Error() || n.GPUs[0].UUID != "" || n.GPUs[0].Vendor != VendorNVIDIA {
		t.Errorf("without the library: source %q, status %q, GPU %+v", n.GPUSource, n.NVMLStatus, n.GPUs[0])
	}
	var b bytes.Buffer
	if err := FormatMatrix(&b, n); err != nil {
		t.Fatal(err)
	}
	if want := "NVIDIA GPUs from sysfs, not NVML (NVML library (libnvidia-ml.so.1) not found): no UUIDs"; !strings.Contains(b.String(), want) {
		t.Errorf("gorun topo lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(b.String(), "P2P read status") {
		t.Errorf("P2P status printed without NVML:\n%s", b.String())
	}

	n, err = Discover(os.DirFS("testdata/pcie-4gpu"), &FakeNVML{InitError: "driver/library version mismatch"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n.NVMLStatus, "driver/library version mismatch") || len(n.Warnings) != 1 {
		t.Errorf("a failing NVML: status %q, warnings %v", n.NVMLStatus, n.Warnings)
	}

	// NVML order 0, 2, 1 by bus: a warning naming the pair.
	f, err := LoadFakeNVML(os.DirFS("testdata/pcie-4gpu"), "nvml.json")
	if err != nil {
		t.Fatal(err)
	}
	f.GPUs[1], f.GPUs[2] = f.GPUs[2], f.GPUs[1]
	f.P2PPairs = nil
	n, err = Discover(os.DirFS("testdata/pcie-4gpu"), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Warnings) != 1 || !strings.Contains(n.Warnings[0], "NVML numbers the GPUs out of PCI bus order (GPU 2 at 0000:02:00.0 comes after GPU 1 at 0000:81:00.0)") {
		t.Errorf("warnings %v", n.Warnings)
	}
}
