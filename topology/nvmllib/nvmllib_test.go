package nvmllib

import (
	"errors"
	"testing"

	"github.com/gorun/gorun/topology"
)

// TestRealNVMLFallback exercises the real NVML path: on a machine
// without libnvidia-ml (or a build without cgo) Init fails with
// ErrNVMLNotFound and discovery falls back to sysfs without a word.
func TestRealNVMLFallback(t *testing.T) {
	t.Parallel()
	lib := New()
	err := lib.Init()
	if err == nil {
		// A machine with a GPU and its driver: NVML must agree with sysfs.
		defer lib.Shutdown()
		cnt, err := lib.DeviceCount()
		if err != nil {
			t.Fatal(err)
		}
		if want := topology.LocalGPUs(); cnt != want {
			t.Errorf("NVML counts %d GPUs, sysfs %d", cnt, want)
		}
		n, err := topology.DiscoverLocal(lib)
		if err != nil || n.GPUSource != "nvml" {
			t.Fatalf("DiscoverLocal = %+v, %v", n, err)
		}
		return
	}
	if !errors.Is(err, topology.ErrNVMLNotFound) {
		t.Fatalf("Init = %v, want ErrNVMLNotFound", err)
	}
	// Shutdown after a failed Init must not reach the library.
	if err := lib.Shutdown(); err != nil && !errors.Is(err, topology.ErrNVMLNotFound) {
		t.Errorf("Shutdown after failed Init = %v", err)
	}
	n, err := topology.DiscoverLocal(lib)
	if err != nil {
		t.Fatal(err)
	}
	if n.GPUSource != "sysfs" || len(n.Warnings) != 0 || len(n.GPUs) != topology.LocalGPUs() {
		t.Errorf("fallback: source %q, warnings %v, %d GPUs", n.GPUSource, n.Warnings, len(n.GPUs))
	}
}

// This build's own NVML: a static build says so.
func TestNVMLBuild(t *testing.T) {
	t.Parallel()
	if Available {
		return // the cgo build: TestRealNVMLFallback covers it
	}
	lib := New()
	err := lib.Init()
	if !errors.Is(err, topology.ErrNVMLNotFound) || !errors.Is(err, topology.ErrNoCgo) {
		t.Fatalf("a static build's Init = %v", err)
	}
	n, err := topology.DiscoverLocal(lib)
	if err != nil {
		t.Fatal(err)
	}
	if n.NVMLStatus != topology.ErrNoCgo.Error() {
		t.Errorf("NVMLStatus = %q", n.NVMLStatus)
	}
}
