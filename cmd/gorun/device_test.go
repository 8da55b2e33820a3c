package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// buildCuda builds the CUDA plugin and the fake driver (plugins/cuda/fakecuda)
// into a directory of their own, and returns it with the environment that
// points the plugin at the fake (2 GPUs).
func buildCuda(t *testing.T) (string, []string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	lib := filepath.Join(dir, "libfakecuda.so")
	for _, c := range [][]string{
		{"go", "build", "-o", filepath.Join(dir, "gorun-plugin-cuda"), "../../plugins/cuda"},
		{"cc", "-shared", "-fPIC", "-O2", "-o", lib, "../../plugins/cuda/fakecuda/fakecuda.c", "-lm"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	os.Chmod(dir, 0o755)
	return dir, []string{"GORUN_CUDA_DRIVER=" + lib, "FAKECUDA_DEVICES=2"}
}

// gorun bench --device cuda runs allreduce on the ranks' GPUs (fake ones)
// and checks the results; what the device path cannot run is a usage
// error. gorun plugins test runs the device memory contract (and fails a
// plugin whose allocations fail); gorun plugins list shows its GPUs.
func TestBenchDevice(t *testing.T) {
	t.Parallel()
	dir, environ := buildCuda(t)
	r := runGorunIn(t, "", environ, 120*time.Second, nil, "bench", "allreduce", "--device", "cuda", "--plugin-dir", dir,
		"-np", "2", "-b", "4K", "-e", "1M", "-f", "16", "-d", "bfloat16", "-o", "max", "-x", "GORUN_CUDA_DRIVER", "-x", "FAKECUDA_DEVICES")
	rows := regexp.MustCompile(`(?m)^ +(4096|65536|1048576) +\d+ +bfloat16 +max .* 0  device$`).FindAllString(r.stdout, -1)
	if r.code != 0 || len(rows) != 3 || !strings.Contains(r.stdout, "# Device buffers       : cuda") {
		t.Errorf("bench --device cuda: exit %d, %d rows\n%s%s", r.code, len(rows), r.stdout, r.stderr)
	}
	for _, coll := range []string{"reducescatter", "allgather", "broadcast"} {
		r = runGorunIn(t, "", environ, 120*time.Second, nil, "bench", coll, "--device", "cuda", "--plugin-dir", dir,
			"-np", "2", "-b", "64K", "-e", "64K", "-r", "1", "-x", "GORUN_CUDA_DRIVER", "-x", "FAKECUDA_DEVICES")
		if r.code != 0 || !regexp.MustCompile(`(?m)^ +65536 .* 0  device$`).MatchString(r.stdout) {
			t.Errorf("bench %s --device cuda: exit %d\n%s%s", coll, r.code, r.stdout, r.stderr)
		}
	}
	r = runGorunIn(t, "", environ, 30*time.Second, nil, "bench", "alltoall", "--device", "cuda", "--plugin-dir", dir, "-np", "2")
	if r.code != 2 || !strings.Contains(r.stderr, "allreduce, reducescatter, allgather, broadcast only") {
		t.Errorf("bench alltoall --device cuda: exit %d\n%s", r.code, r.stderr)
	}
	r = runGorunIn(t, "", environ, 60*time.Second, nil, "plugins", "test", "--plugin-dir", dir, "cuda")
	if r.code != 0 || !strings.Contains(r.stdout, "device memory contract: passed") {
		t.Errorf("plugins test cuda: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runGorunIn(t, "", append(environ, "FAKECUDA_FAIL_ALLOC=3"), 60*time.Second, nil, "plugins", "test", "--plugin-dir", dir, "cuda")
	if r.code != 1 || !strings.Contains(r.stderr, "failed the device memory contract") {
		t.Errorf("plugins test cuda with a failing allocation: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runGorunIn(t, "", environ, 60*time.Second, nil, "plugins", "list", "--plugin-dir", dir)
	if r.code != 0 || !regexp.MustCompile(`cuda +0\.1\.0 +device +\S+ +cuda0 \(gorun fake GPU\) \[1 GiB, selected\], cuda1 \(gorun fake GPU\) \[1 GiB\]`).MatchString(r.stdout) {
		t.Errorf("plugins list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A rank killed in the middle of an AllReduceDevice: the others' fails,
// naming it; gorun's summary names it, and no rank or plugin process
// survives (the plugins inherit the mark).
func TestDevicePeerKilled(t *testing.T) {
	t.Parallel()
	dir, environ := buildCuda(t)
	bin := buildCollectivesExample(t, t.TempDir())
	mark := newMark(t)
	r := runGorunIn(t, "", environ, 90*time.Second, nil, "-np", "3", "--grace-period", "30s", "--device", "cuda", "--plugin-dir", dir,
		"-x", "GORUN_CUDA_DRIVER", "-x", "FAKECUDA_DEVICES", "-x", "GORUN_TEST_MARK="+mark, bin, "device-die", "1")
	if r.code == 0 {
		t.Fatalf("exit 0 with rank 1 killed\n%s", r.stderr)
	}
	for _, rank := range []int{0, 2} {
		if w := fmt.Sprintf("rank %d: error names rank 1: ", rank); !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if !strings.Contains(r.stderr, "failed: rank 1 on ") {
		t.Error("the summary does not name rank 1 first")
	}
	if r.elapsed > 20*time.Second {
		t.Errorf("the survivors took %v to see the failure", r.elapsed)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("stderr:\n%s", r.stderr)
	}
	assertNoSurvivors(t, mark, 2*time.Second)
}
