package main

import (
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
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
