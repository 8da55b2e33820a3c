package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// scripts/gpu-check.sh, the GPU checks run on a lent GPU machine, builds
// and runs here too, where there is no GPU: it must not rot between the
// sessions that have one. Without GPUs it checks what it can (gorun topo,
// the bindings this machine makes, topology's NVML tests, the recording
// read back, the CUDA plugin's step on the fake driver) and must pass,
// leaving its log and the recorded fixture.
func TestGPUCheckScript(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "it builds gorun and runs scripts/gpu-check.sh")
	for _, tool := range []string{"go", "python3", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("scripts/gpu-check.sh needs %s: %v", tool, err)
		}
	}
	bin, out := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The CUDA plugin's step runs on the fake driver here.
	fake := filepath.Join(t.TempDir(), "libfakecuda.so")
	if b, err := exec.Command("cc", "-shared", "-fPIC", "-O2", "-o", fake, "../../plugins/cuda/fakecuda/fakecuda.c", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("building the fake CUDA driver: %v\n%s", err, b)
	}
	run := func(arg string) string {
		cmd := exec.CommandContext(ctx, "../../scripts/gpu-check.sh", arg)
		cmd.Env = append(os.Environ(), "GPU_CHECK_BIN="+bin, "OUT="+out, "GPU_CHECK_CUDA_DRIVER="+fake, "GPU_CHECK_BENCH_MAX=4M")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gpu-check.sh %s: %v\n%s", arg, err, b)
		}
		return string(b)
	}
	run("build")
	log := run("run")
	for _, w := range []string{"==== 1. nvidia-smi topo -m beside gorun topo", "PASS: topology tests", "PASS: the recording reads back as gorun topo",
		"gorun -np 2 true:", "PASS: package cu on the real driver", "PASS: the plugin's tests on the real driver", "PASS: gorun plugins test cuda",
		"PASS: gorun bench allreduce --device cuda -np 2", "cuMemcpyDtoD: BenchmarkCopy", "through the plugin: BenchmarkCopy", "every check passed"} {
		if !strings.Contains(log, w) {
			t.Errorf("gpu-check.sh run lacks %q:\n%s", w, log)
		}
	}
	if saved, err := os.ReadFile(filepath.Join(out, "gpu-check.log")); err != nil || !strings.Contains(string(saved), "every check passed") {
		t.Errorf("$OUT/gpu-check.log: %v", err)
	}
	// The recorded fixture: this machine's sysfs files, readable back.
	f, err := os.Open(filepath.Join(out, "fixture.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(z)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		found = found || strings.HasSuffix(h.Name, "/sys/devices/system/cpu/online")
	}
	if !found {
		t.Error("fixture.tar.gz lacks sys/devices/system/cpu/online")
	}
}
