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
		// No GPUs here: the default binds nothing.
		{"default without GPUs", []string{"-np", "2", "-H", "localhost:2"},
			[]string{`rank=0 Cpus_allowed_list: 0-1 .*omp=$`, `rank=1 Cpus_allowed_list: 0-1 .*omp=$`}},
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
