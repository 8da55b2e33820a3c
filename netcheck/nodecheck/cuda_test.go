package nodecheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/cuda/cu"
)

var cudaBins struct {
	once        sync.Once
	plugin, lib string
	err         error
}

// fakeCUDA builds the CUDA plugin and the fake driver once per test
// binary, points the plugins the test starts at the fake, with gpus GPUs
// and slow (FAKECUDA_SLOW) copies, and returns the plugin's options.
func fakeCUDA(t *testing.T, gpus int, slow string) plugins.Options {
	t.Helper()
	testenv.SkipShort(t, "it builds the CUDA plugin and the fake CUDA driver")
	testenv.NeedTool(t, "cc", "gcc")
	cudaBins.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodecheck-cuda")
		if err != nil {
			cudaBins.err = err
			return
		}
		cudaBins.plugin = filepath.Join(dir, "gorun-plugin-cuda")
		cudaBins.lib = filepath.Join(dir, "libfakecuda.so")
		for _, c := range [][]string{
			{"go", "build", "-o", cudaBins.plugin, "github.com/gorun/gorun/plugins/cuda"},
			{"cc", "-shared", "-fPIC", "-O2", "-o", cudaBins.lib, "../../plugins/cuda/fakecuda/fakecuda.c", "-lm"},
		} {
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				cudaBins.err = fmt.Errorf("%v: %v\n%s", c, err, out)
				return
			}
		}
	})
	if cudaBins.err != nil {
		t.Fatal(cudaBins.err)
	}
	t.Setenv(cu.EnvDriver, cudaBins.lib)
	t.Setenv("FAKECUDA_DEVICES", fmt.Sprint(gpus))
	t.Setenv("FAKECUDA_SLOW", slow)
	return plugins.Options{Path: cudaBins.plugin, Log: os.Stderr}
}

// Three fake GPUs, the copies between GPUs 0 and 1 ten times slower than
// memcpy, and so the host copies of GPU 2. Without a topology that shows
// them the pairs are of one unknown class, and the median rule alone
// flags exactly the slow ones.
func TestFakeGPUs(t *testing.T) {
	po := fakeCUDA(t, 3, "0-1,2")
	o := Options{Host: "f1", Root: filepath.Join("testdata", "no-rdma"), Plugin: po, Bytes: 8 << 20, Iters: 5}
	want := []string{
		"cuda0 -> cuda1 (link unknown): ",
		"cuda1 -> cuda0 (link unknown): ",
		"cuda2: host to GPU ",
	}
	var r Report
	for try := 1; ; try++ {
		r = Measure(context.Background(), o)
		if len(r.Pairs) != 6 || len(r.HostCopies) != 3 || r.GPUs != 3 {
			t.Fatalf("%d GPUs, %d pairs, %d host copies, note %q", r.GPUs, len(r.Pairs), len(r.HostCopies), r.Note)
		}
		checkSlow(t, r)
		if sameFlags(r.Flags, want) || try == 2 {
			break
		}
		// A loaded machine can slow a healthy copy for every one of its
		// runs; once is chance, twice is a finding.
		t.Logf("try %d: flags\n%s", try, strings.Join(r.Flags, "\n"))
	}
	if !sameFlags(r.Flags, want) {
		t.Errorf("flags:\n%s\nwant ones starting\n%s", strings.Join(r.Flags, "\n"), strings.Join(want, "\n"))
	}
	if r.Note != "f1: no RDMA NICs" {
		t.Errorf("note %q", r.Note)
	}
	var out bytes.Buffer
	Format(&out, []Report{r})
	for _, re := range []string{`^f1: 3 GPUs, 0 RDMA ports\n`, `\n  GPU to GPU copies`, `\n +cuda0 +cuda1 +cuda2\n +cuda0 +- +\d+\.\d +\d+\.\d\n`,
		`\n  host copies, GB/s:\n`, `\n +cuda2 +\d+\.\d +\d+\.\d\n`, `\n  FLAG cuda1 -> cuda0`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("text does not match %s:\n%s", re, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

// checkSlow checks what the fake's slowdown does to the measurements:
// the slow pairs and the slow host copies at under a third of the
// slowest healthy one.
func checkSlow(t *testing.T, r Report) {
	t.Helper()
	slowest, fastSlow := 0.0, 0.0
	for _, p := range r.Pairs {
		if p.Error != "" {
			t.Fatalf("pair %+v", p)
		}
		if p.From+p.To == "cuda0cuda1" || p.From+p.To == "cuda1cuda0" {
			fastSlow = max(fastSlow, p.GBps)
		} else if slowest == 0 || p.GBps < slowest {
			slowest = p.GBps
		}
	}
	if !(fastSlow > 0 && fastSlow < slowest/3) {
		t.Errorf("slow pairs up to %.2f GB/s, healthy from %.2f: %+v", fastSlow, slowest, r.Pairs)
	}
	h := r.HostCopies
	if !(h[2].ToGPUGBps < min(h[0].ToGPUGBps, h[1].ToGPUGBps)/3 && h[2].FromGPUGBps < min(h[0].FromGPUGBps, h[1].FromGPUGBps)/3) {
		t.Errorf("host copies %+v", h)
	}
}

// sameFlags reports whether each flag starts with its want.
func sameFlags(flags, want []string) bool {
	if len(flags) != len(want) {
		return false
	}
	for i := range flags {
		if !strings.HasPrefix(flags[i], want[i]) {
			return false
		}
	}
	return true
}

// With a topology that shows the fake's GPUs (by PCI address) they take
// its names and link classes, and each pair the floor of its class; the
// slow PIX pair, alone in its class, is below its floor.
func TestFakeGPUsTopology(t *testing.T) {
	po := fakeCUDA(t, 3, "0-1")
	r := Measure(context.Background(), Options{Host: "f2", Root: filepath.Join("testdata", "gpus"), Plugin: po, Bytes: 8 << 20, Iters: 3})
	var got []string
	for _, p := range r.Pairs {
		got = append(got, fmt.Sprintf("%s>%s %s %.0f", p.From, p.To, p.Link, p.FloorGBps))
	}
	want := "GPU 0>GPU 1 PIX 5,GPU 0>GPU 2 PHB 3,GPU 1>GPU 0 PIX 5,GPU 1>GPU 2 PHB 3,GPU 2>GPU 0 PHB 3,GPU 2>GPU 1 PHB 3"
	if strings.Join(got, ",") != want {
		t.Errorf("pairs %s\nwant  %s", strings.Join(got, ","), want)
	}
	for _, p := range []string{"GPU 0 -> GPU 1 (PIX): ", "GPU 1 -> GPU 0 (PIX): "} {
		found := false
		for _, f := range r.Flags {
			found = found || strings.HasPrefix(f, p) && strings.Contains(f, "below the 5 GB/s floor of PIX links")
		}
		if !found {
			t.Errorf("no flag %q in\n%s", p, strings.Join(r.Flags, "\n"))
		}
	}
	if !strings.Contains(r.Note, "GPU link classes from PCIe alone, without NVLinks (NVML: not asked)") {
		t.Errorf("note %q", r.Note)
	}
}

// A budget spent before the copies: nothing measured, nothing flagged,
// and the note says how far it got.
func TestFakeGPUsBudget(t *testing.T) {
	po := fakeCUDA(t, 2, "")
	r := Measure(context.Background(), Options{Host: "f3", Root: filepath.Join("testdata", "no-rdma"), Plugin: po, Budget: time.Nanosecond})
	if len(r.Flags) != 0 || len(r.Pairs) != 0 || r.GPUs != 2 ||
		r.Note != "f3: the GPUs' time (1ns) ran out after 0 of 2 GPU pairs and 0 of 2 host copies, no RDMA NICs: nothing measured inside" {
		t.Errorf("flags %q, note %q", r.Flags, r.Note)
	}
}
