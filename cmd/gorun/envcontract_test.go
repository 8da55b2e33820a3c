package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// printedEnv runs gorun --print-env with args and returns the environment
// it printed.
func printedEnv(t *testing.T, args ...string) map[string]string {
	t.Helper()
	r := runGorun(t, 30*time.Second, nil, append([]string{"--print-env"}, args...)...)
	if r.code != 0 {
		t.Fatalf("gorun --print-env %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	return env
}

// --print-env shows the other launchers' variables, Horovod's cross rank
// and size computed from the whole plan: 3 ranks on 2 hosts (2, then 1).
func TestPrintEnvContracts(t *testing.T) {
	t.Parallel()
	hosts := []string{"-np", "3", "-H", "localhost:2,127.0.0.1:1", "--bind-to", "none", "true"}
	tests := []struct {
		rank string
		want map[string]string
	}{
		{"1", map[string]string{
			"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "3",
			"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_MAX_RESTARTS": "0",
			"OMPI_UNIVERSE_SIZE":  "3",
			"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "3", "MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "2",
			"HOROVOD_RANK": "1", "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
			// Only localhost has a local rank 1.
			"HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
		}},
		{"2", map[string]string{
			"GROUP_RANK": "1", "ROLE_RANK": "2", "MV2_COMM_WORLD_LOCAL_RANK": "0", "MV2_COMM_WORLD_LOCAL_SIZE": "1",
			"HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1", "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2",
		}},
	}
	for _, tt := range tests {
		env := printedEnv(t, append([]string{tt.rank}, hosts...)...)
		for k, v := range tt.want {
			if env[k] != v {
				t.Errorf("rank %s: %s=%q, want %q", tt.rank, k, env[k], v)
			}
		}
		if id := env["TORCHELASTIC_RUN_ID"]; id == "" || id != env["GORUN_JOB_ID"] {
			t.Errorf("rank %s: TORCHELASTIC_RUN_ID=%q, want the job id %q", tt.rank, id, env["GORUN_JOB_ID"])
		}
	}
	// OMP_NUM_THREADS=1 where unbound ranks share a host, not for a rank
	// alone on its host; -x overrides.
	if _, ok := os.LookupEnv("OMP_NUM_THREADS"); !ok {
		if v, ok := printedEnv(t, append([]string{"1"}, hosts...)...)["OMP_NUM_THREADS"]; v != "1" {
			t.Errorf("rank 1 shares localhost: OMP_NUM_THREADS=%q (set %v), want 1", v, ok)
		}
		if v, ok := printedEnv(t, append([]string{"2"}, hosts...)...)["OMP_NUM_THREADS"]; ok {
			t.Errorf("rank 2 is alone on 127.0.0.1: OMP_NUM_THREADS=%q, want it unset", v)
		}
	}
	if v := printedEnv(t, append([]string{"1", "-x", "OMP_NUM_THREADS=3", "-x", "HOROVOD_CROSS_SIZE=9"}, hosts...)...); v["OMP_NUM_THREADS"] != "3" || v["HOROVOD_CROSS_SIZE"] != "9" {
		t.Errorf("-x: OMP_NUM_THREADS=%q HOROVOD_CROSS_SIZE=%q, want 3 and 9", v["OMP_NUM_THREADS"], v["HOROVOD_CROSS_SIZE"])
	}
}

// gorun says once that unbound ranks sharing a host got OMP_NUM_THREADS=1,
// and not when the user chose, nor for a rank alone on its host.
func TestEnvThreadsNote(t *testing.T) {
	t.Parallel()
	if _, ok := os.LookupEnv("OMP_NUM_THREADS"); ok {
		t.Skip("OMP_NUM_THREADS is set in the test's environment: gorun keeps it, and says nothing")
	}
	const note = "gorun: note: OMP_NUM_THREADS=1 for the 4 unbound ranks per host, gorun's default where ranks share a host (-x OMP_NUM_THREADS=N to choose)\n"
	const torchNote = "gorun: note: OMP_NUM_THREADS=1 for the 4 unbound ranks per host, as torchrun sets it (-x OMP_NUM_THREADS=N to choose)\n"
	prog := []string{"sh", "-c", `echo "${OMP_NUM_THREADS-unset}"`}
	tests := []struct {
		name  string
		args  []string
		out   string // each rank's line
		notes int
		note  string
	}{
		{"-np 4", []string{"-np", "4", "--bind-to", "none"}, "1", 1, note},
		{"-x", []string{"-np", "4", "--bind-to", "none", "-x", "OMP_NUM_THREADS=2"}, "2", 0, ""},
		{"-np 1", []string{"-np", "1", "--bind-to", "none"}, "unset", 0, ""},
		// Open MPI's mpirun and Hydra leave it unset, bound or not.
		{"mpirun", []string{"mpirun", "--allow-run-as-root", "-np", "4"}, "unset", 0, ""},
		{"mpirun unbound", []string{"mpirun", "-np", "4", "--bind-to", "none"}, "unset", 0, ""},
		{"mpiexec", []string{"mpiexec", "-n", "4"}, "unset", 0, ""},
		{"mpiexec -bind-to core", []string{"mpiexec", "-n", "2", "-bind-to", "core"}, "unset", 0, ""},
		{"torchrun", []string{"torchrun", "--nproc-per-node", "4", "--no-python"}, "1", 1, torchNote},
	}
	for _, tt := range tests {
		r := runGorun(t, 30*time.Second, nil, append(tt.args, prog...)...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", tt.name, r.code, r.stderr)
		}
		for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
			if l != tt.out {
				t.Errorf("%s: a rank printed OMP_NUM_THREADS=%q, want %q", tt.name, l, tt.out)
			}
		}
		if n := strings.Count(r.stderr, "gorun: note: OMP_NUM_THREADS="); n != tt.notes || tt.notes == 1 && !strings.Contains(r.stderr, tt.note) {
			t.Errorf("%s: %d notes about OMP_NUM_THREADS, want %d:\n%s", tt.name, n, tt.notes, r.stderr)
		}
	}
}
