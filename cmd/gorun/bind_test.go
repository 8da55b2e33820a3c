package main

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/topology"
)

// Bindings as the ranks see them: /proc/self/status from inside each rank.
func TestBindingsFromInsideRanks(t *testing.T) {
	t.Parallel()
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	status := `echo "rank=$RANK $(grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status | tr '\t\n' '  ') omp=$OMP_NUM_THREADS"`
	tests := []struct {
		name string
		args []string
		want []string // one regexp per rank
	}{
		{"core", []string{"-np", "2", "-H", "localhost:2", "--bind-to", "core", "--report-bindings"},
			[]string{`rank=0 Cpus_allowed_list: 0 Mems_allowed_list: 0 +omp=1`, `rank=1 Cpus_allowed_list: 1 Mems_allowed_list: 0 +omp=1`}},
		{"numa", []string{"-np", "2", "-H", "localhost:2", "--bind-to", "numa"},
			[]string{`rank=0 Cpus_allowed_list: 0-1 .*omp=1`, `rank=1 Cpus_allowed_list: 0-1 .*omp=1`}},
		// No GPUs here: the default binds nothing, and two unbound ranks
		// sharing the host get OMP_NUM_THREADS=1, as torchrun's do.
		{"default without GPUs", []string{"-np", "2", "-H", "localhost:2"},
			[]string{`rank=0 Cpus_allowed_list: 0-1 .*omp=1$`, `rank=1 Cpus_allowed_list: 0-1 .*omp=1$`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 30*time.Second, nil, append(tt.args, "sh", "-c", status)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			for _, w := range tt.want {
				if !regexp.MustCompile(`(?m)^` + w).MatchString(r.stdout) {
					t.Errorf("no line matches %q:\n%s", w, r.stdout)
				}
			}
			if strings.Contains(strings.Join(tt.args, " "), "--report-bindings") {
				for _, w := range []string{"localhost rank 0: CPUs 0 NUMA 0", "localhost rank 1: CPUs 1 NUMA 0", "why: bind to core"} {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("--report-bindings lacks %q:\n%s", w, r.stderr)
					}
				}
			}
		})
	}
	// More GPUs asked than there are: a clear error, nothing runs.
	r := runGorun(t, 30*time.Second, nil, "-np", "1", "--bind-to", "gpu", "true")
	if r.code != 2 || !strings.Contains(r.stderr, "binding") || !strings.Contains(r.stderr, "GPU") {
		t.Errorf("--bind-to gpu without GPUs: exit %d\n%s", r.code, r.stderr)
	}
}

// GPU visibility as ranks see it, on a host whose GPUs gorun cannot see
// (this one, and CI's): an inherited CUDA_VISIBLE_DEVICES (here from -x,
// as from an allocation) stays whole by default, and --gpu-bind single
// gives each rank one of its GPUs; a wrong --gpu-bind is a usage error
// before anything starts.
func TestGPUBindFromInsideRanks(t *testing.T) {
	t.Parallel()
	show := `echo "rank=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES"`
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"rank=0 cvd=2,3", "rank=1 cvd=2,3", "rank=2 cvd=2,3"}},
		{[]string{"--gpu-bind", "all"}, []string{"rank=0 cvd=2,3", "rank=2 cvd=2,3"}},
		{[]string{"--gpu-bind", "single"}, []string{"rank=0 cvd=2", "rank=1 cvd=3", "rank=2 cvd=2"}},
	} {
		args := append([]string{"-np", "3", "-H", "localhost:3", "-x", "CUDA_VISIBLE_DEVICES=2,3"}, tt.args...)
		r := runGorun(t, 30*time.Second, nil, append(args, "sh", "-c", show)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s", tt.args, r.code, r.stderr)
		}
		for _, w := range tt.want {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(r.stdout) {
				t.Errorf("%v: no line %q:\n%s", tt.args, w, r.stdout)
			}
		}
	}
	r := runGorun(t, 30*time.Second, nil, "--gpu-bind", "closest", "true")
	if r.code != 2 || !strings.Contains(r.stderr, `gpu-bind "closest"`) {
		t.Errorf("--gpu-bind closest: exit %d\n%s", r.code, r.stderr)
	}
	// The environment file and config key too: GORUN_GPU_BIND.
	r = runGorunIn(t, "", []string{"GORUN_GPU_BIND=single"}, 30*time.Second, nil, "--print-env", "1", "-np", "2", "-H", "localhost:2", "-x", "CUDA_VISIBLE_DEVICES=4,5", "true")
	if r.code != 0 || !strings.Contains(r.stdout, "CUDA_VISIBLE_DEVICES=5\n") {
		t.Errorf("GORUN_GPU_BIND=single --print-env 1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// allowedCPUs is the CPU list this test may run on, as /proc/self/status
// says, which gorun and its agent inherit.
func allowedCPUs(t *testing.T) topology.CPUSet {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return cpusAllowed(t, string(b))[0]
}

// cpusAllowed returns the CPU list of each Cpus_allowed_list line of out.
func cpusAllowed(t *testing.T, out string) []topology.CPUSet {
	t.Helper()
	var sets []topology.CPUSet
	for _, m := range regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`).FindAllStringSubmatch(out, -1) {
		s, err := topology.ParseCPUList(m[1])
		if err != nil {
			t.Fatalf("Cpus_allowed_list %q: %v", m[1], err)
		}
		sets = append(sets, s)
	}
	return sets
}

// coreOf is the core of CPU cpu, as the kernel lists its hardware
// threads, within allowed.
func coreOf(t *testing.T, cpu int, allowed topology.CPUSet) topology.CPUSet {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu))
	if err != nil {
		return topology.NewCPUSet(cpu)
	}
	s, err := topology.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("cpu%d's thread_siblings_list %q: %v", cpu, b, err)
	}
	return s.Intersect(allowed)
}

// Each personality binds as its launcher does when no binding is asked
// for, on a host without GPUs (this one and CI's): gorun mpirun as Open
// MPI 4.1's mpirun (a job of 2 ranks: a core each), gorun mpiexec as
// Hydra (not at all: every CPU gorun has), plain gorun not at all;
// --bind-to none opts out; --report-bindings names the rule. Seen from
// inside the ranks.
func TestPersonalityDefaultBinding(t *testing.T) {
	t.Parallel()
	if n := topology.LocalGPUs(); n != 0 {
		t.Skipf("wants a host without GPUs; this one has %d", n)
	}
	allowed := allowedCPUs(t)
	cores := map[string]bool{}
	for _, c := range allowed.CPUs() {
		cores[coreOf(t, c, allowed).String()] = true
	}
	if len(cores) < 2 {
		t.Skipf("binds 2 ranks to a core each; this test may use %d core(s) (CPUs %s)", len(cores), allowed)
	}
	status := `grep Cpus_allowed_list /proc/self/status`
	tests := []struct {
		name  string
		args  []string
		bound bool   // each rank on a core of its own, else every allowed CPU
		rule  string // what --report-bindings says, once per rank
	}{
		{"mpirun", []string{"mpirun", "-np", "2", "--report-bindings"}, true,
			"why: Open MPI 4.1's default for a job of 2 ranks (core for 2 or fewer, NUMA above); bind to core: 1 core"},
		{"mpirun --bind-to none", []string{"mpirun", "-np", "2", "--bind-to", "none", "--report-bindings"}, false, "why: not bound: --bind-to none"},
		{"mpiexec", []string{"mpiexec", "-n", "2", "--report-bindings"}, false,
			"why: not bound: no GPUs visible, and Hydra's default binds nothing without -bind-to"},
		{"gorun", []string{"-np", "2", "--report-bindings"}, false,
			"why: not bound: no GPUs visible, and gorun's default binds ranks to GPUs only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 30*time.Second, nil, append(tt.args, "sh", "-c", status)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			got := cpusAllowed(t, r.stdout)
			if len(got) != 2 {
				t.Fatalf("%d ranks printed their CPUs, want 2:\n%s", len(got), r.stdout)
			}
			for i, s := range got {
				switch {
				case tt.bound && (s.IsEmpty() || !s.Equal(coreOf(t, s.CPUs()[0], allowed))):
					t.Errorf("a rank runs on CPUs %s, not one core (of %s)", s, allowed)
				case !tt.bound && !s.Equal(allowed):
					t.Errorf("a rank runs on CPUs %s, not every CPU gorun has (%s)", s, allowed)
				case tt.bound && i == 1 && !s.Intersect(got[0]).IsEmpty():
					t.Errorf("the ranks share CPUs: %s and %s", got[0], s)
				}
			}
			if n := strings.Count(r.stderr, tt.rule); n != 2 {
				t.Errorf("--report-bindings says %q %d times, want once per rank:\n%s", tt.rule, n, r.stderr)
			}
		})
	}
}
