package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gorun/gorun/slurmtest"
)

// cli runs the command in this process and returns its status and output.
func cli(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	rc := run(args, &stdout, &stderr)
	return rc, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"bogus"}, {"--state", t.TempDir(), "up", "x"}, {"--state", t.TempDir(), "up", "--gpus", "-1"}, {"--state", t.TempDir(), "down", "extra"}} {
		if rc, _, stderr := cli(args...); rc != 2 || stderr == "" {
			t.Errorf("slurmtest %q: status %d, stderr %q; want 2 and a message", args, rc, stderr)
		}
	}
	state := filepath.Join(t.TempDir(), "none")
	if rc, stdout, _ := cli("--state", state, "down"); rc != 0 || !strings.Contains(stdout, "nothing to do") {
		t.Errorf("down without a cluster: %d, %q", rc, stdout)
	}
	if rc, _, stderr := cli("--state", state, "status"); rc != 1 || !strings.Contains(stderr, "no cluster in") {
		t.Errorf("status without a cluster: %d, %q", rc, stderr)
	}
}

// TestUpStatusEnvDown drives a cluster through the command, as a script
// would: up, status, env (used by a real sbatch client), down from the
// state directory alone.
func TestUpStatusEnvDown(t *testing.T) {
	slurmtest.Need(t)
	// Not under t.TempDir(), which is 0700: munged wants every directory
	// above its socket searchable by all.
	state, err := os.MkdirTemp("", "gorun-slurmtest-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened, stop it.
		if c, err := slurmtest.Load(state); err == nil {
			_ = c.Down()
		}
		os.RemoveAll(state)
	})
	rc, stdout, stderr := cli("--state", state, "up", "--cpus", "2", "--gpus", "0", "3")
	if rc != 0 {
		t.Fatalf("up: %d: %s%s", rc, stdout, stderr)
	}
	t.Log(strings.TrimSpace(stdout))
	if !strings.Contains(stdout, "up 3 nodes node[01-03] (2 CPUs, 0 GPUs each)") {
		t.Errorf("up printed %q", stdout)
	}

	rc, stdout, stderr = cli("--state", state, "status")
	if rc != 0 || strings.Count(stdout, " running\n") != 5 || strings.Count(stdout, " idle 2 (null)\n") != 3 {
		t.Errorf("status: %d: %s%s", rc, stdout, stderr)
	}

	rc, stdout, stderr = cli("--state", state, "env")
	if rc != 0 {
		t.Fatalf("env: %d: %s", rc, stderr)
	}
	// The exports are all a shell needs to use the cluster.
	sh := exec.Command("/bin/sh", "-c", stdout+`srun -N3 -n3 hostname | sort | tr '\n' ' '; echo "$SLURMTEST_NODELIST"`)
	sh.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := sh.CombinedOutput()
	if err != nil || string(out) != "node01 node02 node03 node[01-03]\n" {
		t.Errorf("srun with the env exports: %q, %v; exports:\n%s", out, err, stdout)
	}

	c, err := slurmtest.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	pids := c.Processes()
	if len(pids) < 6 {
		t.Errorf("cluster processes: %v", pids)
	}
	rc, stdout, stderr = cli("--state", state, "down")
	if rc != 0 {
		t.Fatalf("down: %d: %s%s", rc, stdout, stderr)
	}
	t.Log(strings.TrimSpace(stdout))
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if i := bytes.LastIndexByte(b, ')'); err == nil && i > 0 && !bytes.HasPrefix(b[i:], []byte(") Z")) {
			t.Errorf("process %d outlived down: %s", pid, b)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state directory after down: %v", err)
	}
}
