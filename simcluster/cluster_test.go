package simcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
)

// The simulator at the size CI runs it: 256 hosts of 4 ranks, the head's
// real code and every agent's, the ranks simulated. Correctness, not
// timing: bench/scale.sh times it.
const (
	testHosts   = 256
	testPerHost = 4
)

// TestMain starts os/signal's goroutine, which the head's first
// signal.Notify starts and which stays for the life of the process, so
// that the leak checks do not count it.
func TestMain(m *testing.M) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	signal.Stop(ch)
	os.Exit(m.Run())
}

// openFiles counts this process's descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// noLeaks checks, once the job and every agent have ended, that the
// goroutines and descriptors are back to what they were.
func noLeaks(t *testing.T, goroutines, files int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFiles(t)
		if g <= goroutines && f <= files {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("after the job: %d goroutines (before: %d), %d descriptors (before: %d); goroutines:\n%.6000s", g, goroutines, f, files, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// record checks each rank's environment as it starts, and counts starts.
type record struct {
	mu     sync.Mutex
	starts map[int]int
	bad    []string
}

func (r *record) onStart(host string, p launcher.ProcRank) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts[p.Rank]++
	node := p.Rank / testPerHost // the plan fills each host's slots in turn
	want := map[string]string{
		"RANK": fmt.Sprint(p.Rank), "WORLD_SIZE": fmt.Sprint(testHosts * testPerHost),
		"LOCAL_RANK": fmt.Sprint(p.Rank % testPerHost), "LOCAL_WORLD_SIZE": fmt.Sprint(testPerHost),
		"NODE_RANK": fmt.Sprint(node), "GORUN_HOSTNAME": fmt.Sprintf("sim%04d", node+1), "PMI_RANK": fmt.Sprint(p.Rank),
	}
	if host != want["GORUN_HOSTNAME"] {
		r.bad = append(r.bad, fmt.Sprintf("rank %d started on %s, want %s", p.Rank, host, want["GORUN_HOSTNAME"]))
	}
	for name, v := range want {
		if got, ok := lookup(p.Env, name); !ok || got != v {
			r.bad = append(r.bad, fmt.Sprintf("rank %d: %s=%q, want %q", p.Rank, name, got, v))
		}
	}
}

func lookup(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// runJob runs a job of testHosts x testPerHost on a fresh cluster and
// returns gorun's code, its stderr and the cluster.
func runJob(t *testing.T, fanout int, sc Script, during func(*Cluster)) (int, string, *Cluster, *record) {
	t.Helper()
	rec := &record{starts: map[int]int{}}
	c := New(Config{Hosts: testHosts, Latency: 20 * time.Microsecond, Script: sc, OnStart: rec.onStart})
	var stderr bytes.Buffer
	o := c.Options(testPerHost, fanout, nil, &stderr)
	// One machine's cores run every host's agent (and, under -race,
	// slowly): gorun's 5 s would take a busy agent for a dead one.
	o.BeatTimeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if during != nil {
		go during(c)
	}
	code, err := launcher.Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if n := c.Wait(); n != testHosts {
		t.Errorf("%d agents ran, want %d", n, testHosts)
	}
	return code, stderr.String(), c, rec
}

// checkStarts says whether every rank started exactly once, with its
// environment right.
func checkStarts(t *testing.T, rec *record) {
	t.Helper()
	for r := range testHosts * testPerHost {
		if rec.starts[r] != 1 {
			t.Errorf("rank %d started %d times", r, rec.starts[r])
		}
	}
	if len(rec.bad) > 0 {
		t.Errorf("%d environment problems, the first: %s", len(rec.bad), strings.Join(rec.bad[:min(5, len(rec.bad))], "; "))
	}
}

// TestFenceAndFailure: every rank starts once with its environment; the
// fence completes with every put visible (ranks that 64 divides get all
// 1,024 keys, the others their neighbour's); rank 801 on host 200 fails
// and gorun names it, stops the rest and exits with its code. Flat, and
// with gorun's default tree (256 hosts is above TreeAbove).
func TestFenceAndFailure(t *testing.T) {
	for _, fanout := range []int{0, launcher.FanoutAuto, 4} {
		t.Run(fmt.Sprintf("fanout=%d", fanout), func(t *testing.T) {
			goroutines, files := runtime.NumGoroutine(), openFiles(t)
			const fail = 200*testPerHost + 1
			code, stderr, c, rec := runJob(t, fanout, Script{Fence: true, GetAllEvery: 64, FailRank: fail}, nil)
			checkStarts(t, rec)
			s := c.Stats()
			if len(s.Errors) > 0 {
				t.Errorf("ranks' errors: %s", strings.Join(s.Errors, "; "))
			}
			if s.FenceOut.IsZero() {
				t.Errorf("the fence never completed")
			}
			if code != 1 {
				t.Errorf("code %d, want 1 (the failed rank's)", code)
			}
			if want := fmt.Sprintf("rank %d on sim0201 (pid", fail); !strings.Contains(stderr, want) {
				t.Errorf("the summary does not name %q:\n%s", want, stderr)
			}
			if s.Stopped != testHosts*testPerHost-1 {
				t.Errorf("%d ranks stopped after the failure, want every other one", s.Stopped)
			}
			noLeaks(t, goroutines, files)
		})
	}
}

// TestLostInteriorAgent: an agent of the launch tree with agents below it
// crashes (its links cut, its ranks gone without a word): the job ends
// with gorun's own code, naming the host and the hosts below it.
func TestLostInteriorAgent(t *testing.T) {
	goroutines, files := runtime.NumGoroutine(), openFiles(t)
	crash := func(c *Cluster) {
		for c.Stats().Ranks < testHosts*testPerHost {
			time.Sleep(5 * time.Millisecond)
		}
		c.Crash("sim0002") // node 1: nodes 8-11 hang below it, 36-47 below those, ...
	}
	code, stderr, _, rec := runJob(t, 4, Script{Hold: true, FailRank: -1}, crash)
	checkStarts(t, rec)
	if code != launcher.ExitLaunch {
		t.Errorf("code %d, want %d", code, launcher.ExitLaunch)
	}
	for _, want := range []string{"lost the agent on sim0002: ", "below it in the launch tree went with it: sim0009, sim0010, sim0011, sim0012, sim0037,"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%.3000s", want, stderr)
		}
	}
	noLeaks(t, goroutines, files)
}

// TestRealSample: chosen hosts run a real `gorun agent` process whose
// ranks are real /bin/true processes, beside simulated hosts, in one job.
func TestRealSample(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "gorun")
	if out, err := exec.Command("go", "build", "-o", exe, "../cmd/gorun").CombinedOutput(); err != nil {
		t.Fatalf("build gorun: %v\n%s", err, out)
	}
	real := func(host int) bool { return host%3 == 2 }
	c := New(Config{Hosts: 8, Script: Script{FailRank: -1}, Real: real, RealExe: exe})
	var stderr bytes.Buffer
	o := c.Options(2, 0, nil, &stderr)
	o.SummaryJSON = filepath.Join(t.TempDir(), "summary.json")
	code, err := launcher.Run(context.Background(), o)
	if code != 0 || err != nil {
		t.Fatalf("code %d, err %v:\n%s", code, err, stderr.String())
	}
	if s := c.Stats(); s.Ranks != 6*2 {
		t.Errorf("%d simulated ranks ran, want 12 (6 simulated hosts)", s.Ranks)
	}
	var sum struct {
		Ranks []struct {
			Rank int    `json:"rank"`
			Host string `json:"host"`
			PID  int    `json:"pid"`
			Code int    `json:"code"`
		} `json:"ranks"`
	}
	b, err := os.ReadFile(o.SummaryJSON)
	if err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil {
		t.Fatal(err)
	}
	realRanks := 0
	for _, r := range sum.Ranks {
		if r.Code != 0 {
			t.Errorf("rank %d on %s: code %d", r.Rank, r.Host, r.Code)
		}
		if r.Host == "sim0003" || r.Host == "sim0006" {
			realRanks++
			if r.PID <= 16 { // a simulated rank's pid counts from 1 on its host
				t.Errorf("rank %d on %s has pid %d: not a real process", r.Rank, r.Host, r.PID)
			}
		}
	}
	if realRanks != 4 {
		t.Errorf("%d ranks on the real hosts, want 4; summary:\n%s", realRanks, b)
	}
}

// TestTreeHeartbeats: with heartbeats every 100 ms and links of 20 ms, an
// agent's first heartbeats to the agents it starts fall before the head's
// hello has crossed the tree to them: they must wait for it (a lower agent
// that read a heartbeat first failed its handshake, and the job hung).
func TestTreeHeartbeats(t *testing.T) {
	goroutines, files := runtime.NumGoroutine(), openFiles(t)
	c := New(Config{Hosts: 48, Latency: 20 * time.Millisecond, Script: Script{Fence: true, FailRank: -1}})
	var stderr bytes.Buffer
	o := c.Options(2, 3, nil, &stderr)
	o.BeatTimeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := launcher.Run(ctx, o)
	if code != 0 || err != nil {
		t.Fatalf("code %d, err %v:\n%s", code, err, stderr.String())
	}
	if s := c.Stats(); s.Ranks != 96 || len(s.Errors) > 0 {
		t.Fatalf("%d ranks ran, errors %v", s.Ranks, s.Errors)
	}
	c.Wait()
	noLeaks(t, goroutines, files)
}

// TestCrashWhileStarting: hosts that crash while the job starts (during
// their handshake, after it, before or as the ranks launch) end the job
// with gorun's own code, naming one of them, and nothing hangs: a loss
// that came while the head waited for another agent's answer was once
// dropped, and the job waited for that host forever.
func TestCrashWhileStarting(t *testing.T) {
	for d := time.Duration(0); d <= 30*time.Millisecond; d += 2 * time.Millisecond {
		t.Run(d.String(), func(t *testing.T) {
			crash := map[string]time.Duration{"sim0030": d, "sim0047": d / 2, "sim0009": d + time.Millisecond}
			c := New(Config{Hosts: 48, Latency: time.Millisecond, Script: Script{Hold: true, FailRank: -1}, Crash: crash})
			var stderr bytes.Buffer
			o := c.Options(2, 4, nil, &stderr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan struct{})
			go func() {
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					panic(fmt.Sprintf("the job with hosts crashing %v after their start did not end within 30 s", d))
				}
			}()
			code, err := launcher.Run(ctx, o)
			close(done)
			out := stderr.String()
			if err != nil {
				out += err.Error()
			}
			if code != launcher.ExitLaunch {
				t.Errorf("code %d, want %d:\n%s", code, launcher.ExitLaunch, out)
			}
			if !strings.Contains(out, "sim0030") && !strings.Contains(out, "sim0047") && !strings.Contains(out, "sim0009") {
				t.Errorf("no crashed host named:\n%s", out)
			}
			c.Wait()
		})
	}
}

// TestFenceTimeoutNamesTheHost: one host's ranks never reach the fence.
// Its parent in the tree sends the rest of its subtree's fence up at the
// rendezvous timeout, so that the head's store, a tenth later, names that
// host's ranks alone, not every host the parent stands for.
func TestFenceTimeoutNamesTheHost(t *testing.T) {
	c := New(Config{Hosts: 64, Latency: 100 * time.Microsecond, Script: Script{Fence: true, Hold: true, FailRank: -1, NoFence: "sim0040"}})
	var stderr bytes.Buffer
	o := c.Options(2, 4, nil, &stderr)
	o.RendezvousTimeout = time.Second
	o.BeatTimeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := launcher.Run(ctx, o)
	if err != nil || code == 0 {
		t.Fatalf("code %d, err %v:\n%s", code, err, stderr.String())
	}
	out := stderr.String()
	if !strings.Contains(out, "78 (on sim0040), 79 (on sim0040)") {
		t.Errorf("the summary does not name sim0040's ranks 78 and 79 as never arriving:\n%s", out)
	}
	// sim0040 is node 39, below node 8 (sim0009) and node 1 (sim0002).
	for _, other := range []string{"(on sim0002)", "(on sim0009)", "(on sim0037)", "(on sim0041)"} {
		if strings.Contains(out, other) {
			t.Errorf("the summary blames %s, whose ranks arrived:\n%s", other, out)
		}
	}
	c.Wait()
}
