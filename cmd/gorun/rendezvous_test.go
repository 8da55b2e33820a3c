package main

import (
	"encoding/json"
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

// A Go rank that floods the rendezvous store is held to its budget: each
// put over it fails with the budget named (and the agent says so once per
// rank), the rank goes on, the fence completes, and the agent stays small
// (512 puts of 1 MiB grew it to 679 MB before there were budgets).
func TestRendezvousBudgets(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "kvflood")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/kvflood")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/kvflood: %v\n%s", err, out)
	}
	const mib = 1 << 20
	t.Run("fence over a frame", func(t *testing.T) {
		// Two hosts' puts, each within a control frame, together over
		// one: the fence fails at once, saying why (it used to leave the
		// hosts waiting for the head's answer until the fence timed out).
		t.Parallel()
		r := runGorun(t, 60*time.Second, nil, "-H", "localhost:1,127.0.0.1:1", "--kv-rank-budget", "100,10MiB",
			"--rendezvous-timeout", "40s", bin, "9", fmt.Sprint(mib))
		if r.code == 0 || r.elapsed > 20*time.Second {
			t.Fatalf("exit %d after %v, want a failure at once\n%s%s", r.code, r.elapsed, r.stdout, r.stderr)
		}
		for _, w := range []string{"9 of 9 puts taken", "the fence's key-values cannot reach", "frame of", "is over the 16777216 limit"} {
			if !strings.Contains(r.stdout+r.stderr, w) {
				t.Errorf("output lacks %q:\n%s%s", w, r.stdout, r.stderr)
			}
		}
	})
	tests := []struct {
		name   string
		args   []string // gorun's flags
		flood  []string // kvflood's COUNT SIZE
		want   []string // in stdout
		stderr []string
	}{
		{
			name:  "default rank budget",
			flood: []string{"300", fmt.Sprint(mib)},
			want: []string{
				`rank 0: put 1 refused: rendezvous: server: rendezvous: put of key "r0.1" by rank 0 refused: rank 0 would hold 2097160 bytes, over its budget of 4096 keys and 2 MiB (--kv-rank-budget KEYS,BYTES raises it)`,
				"rank 1: 1 of 300 puts taken", "rank 0: fence done, 2 ranks' first keys seen", "rank 1: fence done, 2 ranks' first keys seen",
			},
			stderr: []string{`gorun agent localhost: rendezvous: put of key "r1.1" by rank 1 refused`},
		},
		{
			name:  "raised rank budget",
			args:  []string{"--kv-rank-budget", "10,3MiB"},
			flood: []string{"300", fmt.Sprint(mib)},
			want:  []string{"rank 0: 2 of 300 puts taken", "over its budget of 10 keys and 3 MiB (--kv-rank-budget", "rank 1: fence done, 2 ranks' first keys seen"},
		},
		{
			name:  "rank keys",
			args:  []string{"--kv-rank-budget", "5,1G"},
			flood: []string{"8", "10"},
			want:  []string{"rank 1: put 5 refused", "rank 1 would hold 6 keys, over its budget of 5 keys and 1 GiB", "rank 0: 5 of 8 puts taken"},
		},
		{
			name:  "job budget",
			args:  []string{"--kv-job-budget", "1000,1MiB"},
			flood: []string{"2", "400000"},
			// Which rank's put is refused depends on which comes first.
			want: []string{"the job would hold", "over the job's budget of 1000 keys and 1 MiB (--kv-job-budget KEYS,BYTES raises it)",
				"rank 0: fence done", "rank 1: fence done"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			summary := filepath.Join(t.TempDir(), "summary.json")
			args := append(append([]string{"-np", "2", "--summary-json", summary}, tt.args...), bin)
			r := runGorun(t, 60*time.Second, nil, append(args, tt.flood...)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			for _, w := range tt.stderr {
				if strings.Count(r.stderr, w) != 1 {
					t.Errorf("stderr has %q %d times, want once:\n%s", w, strings.Count(r.stderr, w), r.stderr)
				}
			}
			b, err := os.ReadFile(summary)
			if err != nil {
				t.Fatal(err)
			}
			var s struct {
				Agents []struct {
					MaxRSS int64 `json:"max_rss_kb"`
				} `json:"agents"`
			}
			if err := json.Unmarshal(b, &s); err != nil || len(s.Agents) != 1 {
				t.Fatalf("summary: %v\n%s", err, b)
			}
			if rss := s.Agents[0].MaxRSS; rss > 200<<10 {
				t.Errorf("the agent grew to %d MiB", rss>>10)
			}
		})
	}
}
