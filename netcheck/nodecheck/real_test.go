package nodecheck

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/topology/nvmllib"
)

// TestRealGPUs measures this machine's GPUs through a CUDA plugin built
// already, with NVML for the link classes, and prints the report:
// scripts/gpu-check.sh runs it on a GPU machine (NODECHECK_REAL=1,
// GORUN_CUDA_TEST_PLUGIN the plugin; NODECHECK_OUT a directory for
// report.json and report.txt). On the fake driver ($GORUN_CUDA_DRIVER)
// it measures the fake GPUs. Flags are findings about the machine, shown
// and not failed on; a GPU not measured, or a copy that failed, fails.
func TestRealGPUs(t *testing.T) {
	if os.Getenv("NODECHECK_REAL") != "1" {
		t.Skip("NODECHECK_REAL=1 runs it on a GPU machine (scripts/gpu-check.sh)")
	}
	bin := os.Getenv("GORUN_CUDA_TEST_PLUGIN")
	if bin == "" {
		t.Fatal("NODECHECK_REAL=1 needs GORUN_CUDA_TEST_PLUGIN, the CUDA plugin's path")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	r := Measure(ctx, Options{Plugin: plugins.Options{Path: bin, Log: os.Stderr}, NVML: nvmllib.New(), Budget: 10 * time.Second})
	took := time.Since(start)
	var text strings.Builder
	Format(&text, []Report{r})
	t.Logf("in %v:\n%s", took.Round(time.Millisecond), text.String())
	if dir := os.Getenv("NODECHECK_OUT"); dir != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644)
		os.WriteFile(filepath.Join(dir, "report.txt"), []byte(text.String()), 0o644)
	}
	if r.GPUs == 0 || len(r.HostCopies) != r.GPUs || len(r.Pairs) != r.GPUs*(r.GPUs-1) {
		t.Fatalf("%d GPUs, %d host copies, %d pairs measured: %s", r.GPUs, len(r.HostCopies), len(r.Pairs), r.Note)
	}
	for _, p := range r.Pairs {
		if p.Error != "" || p.GBps <= 0 {
			t.Errorf("pair %+v", p)
		}
	}
	for _, h := range r.HostCopies {
		if h.Error != "" || h.ToGPUGBps <= 0 || h.FromGPUGBps <= 0 {
			t.Errorf("host copies %+v", h)
		}
	}
}
