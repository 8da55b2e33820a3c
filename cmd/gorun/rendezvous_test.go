package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildRendezvousExample builds examples/rendezvous, a Go rank that uses
// gorun's KV store through GORUN_AGENT_SOCKET.
func buildRendezvousExample(t *testing.T, dir string) string {
	return buildExample(t, dir, "rendezvous")
}

// buildExample builds the Go program examples/NAME (static) into dir.
func buildExample(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name+"-example")
	cmd := exec.Command("go", "build", "-o", bin, "../../examples/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

// Go ranks put, fence and get through their agent's socket, in a private
// directory, with the job's secret; a rank that drops its connection ends
// the job, named.
func TestRendezvousKV(t *testing.T) {
	t.Parallel()
	bin := buildRendezvousExample(t, t.TempDir())
	r := runGorun(t, 60*time.Second, nil, "-np", "4", bin)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 4 {
		if w := fmt.Sprintf("rank %d of 4 saw 4 ranks on 1 hosts\n", rank); !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	// The socket's directory is the user's alone, and the secret is needed.
	r = runGorun(t, 60*time.Second, nil, "-np", "1", "sh", "-c",
		`stat -c %a "$(dirname "$GORUN_AGENT_SOCKET")"; echo "${#GORUN_JOB_SECRET}"; GORUN_JOB_SECRET=wrong-secret-of-some-length "$0"`, bin)
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 2 || lines[0] != "700" || lines[1] != "48" {
		t.Errorf("socket directory mode and secret length: %q", r.stdout)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "authentication failed") {
		t.Errorf("a wrong secret: exit %d\n%s", r.code, r.stderr)
	}

	mark := newMark(t)
	r = runGorun(t, 60*time.Second, nil, "-np", "4", "-x", "GORUN_TEST_MARK="+mark, bin, "leave")
	if r.code != 1 || !strings.Contains(r.stderr, "rank 1 on localhost closed its rendezvous connection") {
		t.Errorf("leave: exit %d\n%s", r.code, r.stderr)
	}
	assertNoSurvivors(t, mark, time.Second)
}

// Across two SSH hosts, one fence message per host reaches the head and
// every rank sees every other's key.
func TestSSHRendezvousKV(t *testing.T) {
	c := sharedCluster(t)
	bin := buildRendezvousExample(t, binDir)
	r := runBin(t, gorunBin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:2,h2:2", bin)
	if r.code != 0 || strings.Count(r.stdout, "of 4 saw 4 ranks on 2 hosts\n") != 4 {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
