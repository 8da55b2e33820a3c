package launcher

// BenchmarkConnectBackAgents: the head's cost of accepting N agents'
// connect-backs through one srun step, on loopback (issue 17, point 7).
//
// The head is the real SlurmStarter (NewSlurmStarter with --iface lo, so
// that it listens on 127.0.0.1 only): start() makes the job's key and
// certificate, listens, and runs "srun" with SrunArgs and the key and the
// fingerprint in its environment; serveAgents accepts within its door's
// bounds (door.go); N goroutines call StartAgent, one per node, as
// head_agents.go does. The "srun" on PATH is a link to this test binary,
// which, marked by connectBackAgentsEnv, becomes all N agents in one
// process (connectBackAgents): it reads srun's arguments and environment
// as DialHead does, readies one goroutine per node of --nodelist, says so,
// and at the head's signal (SIGUSR1) lets them all run dialHead at once,
// as srun starting N tasks would.
//
// The agents run in that other process, so this process's CPU time
// (getrusage RUSAGE_SELF) between the signal and the last StartAgent
// returning is the head's alone: its accepts, TLS handshakes, proofs,
// hand-offs, and the Go runtime's share of them (scheduler, GC). A
// profile of this process (-cpuprofile) is likewise the head's alone.
//
// Any refusal, any agent that fails, or any agent not accepted within
// connectTimeout (StartAgent's own limit) fails the benchmark.

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/hostfile"
)

// connectBackAgentsEnv marks the test binary, started as "srun", as the
// agents' process.
const connectBackAgentsEnv = "GORUN_BENCH_CONNECTBACK_AGENTS"

func init() {
	if os.Getenv(connectBackAgentsEnv) == "1" && filepath.Base(os.Args[0]) == "srun" {
		os.Exit(connectBackAgents(os.Args[1:]))
	}
}

// connectBackAgents is the agents' process: args are srun's arguments
// (SrunArgs). It prints "cb-ready" once every agent waits, lets them dial
// at the first SIGUSR1, prints "cb-fail NODE: ERROR" for each that fails
// and "cb-done ok=K fail=F p50us=... maxus=..." when all ended, and keeps
// the connections open until the second SIGUSR1 (or SIGTERM).
func connectBackAgents(args []string) int {
	var nodes []string
	var addrs string
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--nodelist="); ok {
			nodes = strings.Split(v, ",")
		}
		if a == "--connect" && i+1 < len(args) {
			addrs = args[i+1]
		}
	}
	if len(nodes) == 0 || addrs == "" || strings.Contains(addrs, ",") {
		fmt.Printf("cb-fail srun: no --nodelist or no single --connect address in %q\n", args)
		return 1
	}
	// DialHead's reading of srun's environment, done once for all the
	// agents of this process (DialHead unsets the variables).
	keyHex, pin := os.Getenv(AgentKeyEnv), os.Getenv(HeadCertEnv)
	key, err := hex.DecodeString(keyHex)
	if err != nil || len(key) < 16 || len(pin) != 64 {
		fmt.Printf("cb-fail srun: no agent key or head fingerprint in the environment\n")
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	var (
		out  sync.Mutex
		wg   sync.WaitGroup
		gate = make(chan struct{})
		lat  = make([]time.Duration, len(nodes))
		fail = make([]bool, len(nodes))
		keep = make([]interface{ Close() error }, len(nodes))
	)
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			start := time.Now()
			c, err := dialHead(addrs, key, pin, node)
			lat[i] = time.Since(start)
			if err != nil {
				fail[i] = true
				out.Lock()
				fmt.Printf("cb-fail %s: %v\n", node, err)
				out.Unlock()
				return
			}
			keep[i] = c
		}()
	}
	out.Lock()
	fmt.Println("cb-ready")
	out.Unlock()
	if s := <-sig; s != syscall.SIGUSR1 {
		return 1
	}
	close(gate)
	wg.Wait()
	nfail := 0
	for _, f := range fail {
		if f {
			nfail++
		}
	}
	slices.Sort(lat)
	out.Lock()
	fmt.Printf("cb-done ok=%d fail=%d p50us=%d maxus=%d\n", len(nodes)-nfail, nfail,
		lat[len(lat)/2].Microseconds(), lat[len(lat)-1].Microseconds())
	out.Unlock()
	<-sig
	for _, c := range keep {
		if c != nil {
			c.Close()
		}
	}
	return 0
}

// cbWatch reads what the head writes on its stderr (srun's output, the
// agents' lines, the head's refusals), one line per Write (lineFilter).
type cbWatch struct {
	mu     sync.Mutex
	ready  chan struct{}
	failed chan struct{}
	done   string
	bad    []string
}

func newCBWatch() *cbWatch {
	return &cbWatch{ready: make(chan struct{}), failed: make(chan struct{})}
}

func (w *cbWatch) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case line == "cb-ready":
		close(w.ready)
	case strings.HasPrefix(line, "cb-done "):
		w.done = line
	case strings.HasPrefix(line, "cb-fail ") || strings.HasPrefix(line, "gorun: refused"):
		if len(w.bad) == 0 {
			close(w.failed)
		}
		if len(w.bad) < 5 {
			w.bad = append(w.bad, line)
		}
	}
	return len(p), nil
}

func (w *cbWatch) problems() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.bad, "\n")
}

func cpuTime(r *syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// connectBackRun is one job's connect-back of n agents; it returns the
// wall time from the agents' start to the last StartAgent returning, the
// head's user and system CPU over that time, and the agents' process's
// CPU (all of its life).
type connectBackRun struct {
	wall, user, sys, agents time.Duration
	done                    string
}

func runConnectBack(b *testing.B, n int) connectBackRun {
	hosts := []hostfile.Host{{Name: "localhost", Slots: 1}}
	for i := range n {
		hosts = append(hosts, hostfile.Host{Name: fmt.Sprintf("node%05d", i), Slots: 1})
	}
	plan, err := NewPlan(hosts, PlanOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w := newCBWatch()
	s := NewSlurmStarter("/unused/gorun", plan, "lo", w)
	if len(s.nodes) != n {
		b.Fatalf("the starter has %d nodes, want %d", len(s.nodes), n)
	}
	if err := s.start(); err != nil {
		b.Fatal(err)
	}
	if ip := HostOf(s.door.ln.Addr()); ip != "127.0.0.1" {
		b.Fatalf("the head listens on %s, want 127.0.0.1", ip)
	}
	defer func() {
		s.srun.Process.Signal(syscall.SIGTERM)
		<-s.dead
	}()
	select {
	case <-w.ready:
	case <-w.failed:
		b.Fatalf("the agents' process: %s", w.problems())
	case <-s.dead:
		b.Fatalf("the agents' process ended before it was ready (%s): %s", s.why, w.problems())
	case <-time.After(30 * time.Second):
		b.Fatal("the agents' process was not ready within 30s")
	}

	// One StartAgent per node, as head_agents.go's startDirect, waiting.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	agents := make([]AgentProcess, n)
	for i, node := range s.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := s.StartAgent(ctx, hostfile.Host{Name: node})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			agents[i] = p
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	runtimeSettle()

	var r0, r1 syscall.Rusage
	b.StartTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	start := time.Now()
	if err := s.srun.Process.Signal(syscall.SIGUSR1); err != nil {
		b.Fatal(err)
	}
	select {
	case <-all:
	case <-w.failed:
	}
	wall := time.Since(start)
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	b.StopTimer()
	cancel() // a StartAgent still waiting (an agent failed) returns now
	<-all
	for _, a := range agents {
		if a != nil {
			a.Kill()
		}
	}
	// Wait for the agents' summary (every dial ended), then let the
	// process go.
	for deadline := time.Now().Add(agentHandshakeTimeout + 5*time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		d := w.done
		w.mu.Unlock()
		if d != "" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("n=%d: the agents' process did not sum up: %s", n, w.problems())
		}
	}
	if p := w.problems(); p != "" || len(errs) > 0 {
		var ok, fail int
		fmt.Sscanf(w.done, "cb-done ok=%d fail=%d", &ok, &fail)
		b.Fatalf("n=%d: FAILED %d of %d agents (the head refused %d connections) in %v:\n%s\n%v",
			n, fail, n, s.door.refused.count(), wall.Round(time.Millisecond), p, errsHead(errs, 3))
	}
	s.srun.Process.Signal(syscall.SIGUSR1)
	<-s.dead
	run := connectBackRun{wall: wall,
		user: time.Duration(r1.Utime.Nano() - r0.Utime.Nano()),
		sys:  time.Duration(r1.Stime.Nano() - r0.Stime.Nano()),
		done: w.done}
	if ru, ok := s.srun.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.agents = cpuTime(ru)
	}
	if !strings.HasPrefix(w.done, fmt.Sprintf("cb-done ok=%d fail=0 ", n)) {
		b.Fatalf("the agents said %q", w.done)
	}
	return run
}

// runtimeSettle lets the StartAgent goroutines park before the clock starts.
func runtimeSettle() { time.Sleep(20 * time.Millisecond) }

func errsHead(errs []error, k int) []error {
	if len(errs) > k {
		return errs[:k]
	}
	return errs
}

// BenchmarkConnectBackAgents measures the head's side of N agents
// connecting back at once (see the top of this file). Metrics, averaged
// over the iterations (each a fresh job: key, certificate, listener,
// srun): ms/all, the wall time until all N were accepted; head-cpu-us/agent
// (head-usr-us/agent, head-sys-us/agent), the head process's CPU time over
// that window divided by N; agent-p50-ms and agent-max-ms, one agent's
// time from its start to its proof sent; agents-cpu-us/agent, the agents'
// process's whole CPU time (its start included) divided by N.
// CONNECTBACK_NS (e.g. "16 64") picks other N than the default.
func BenchmarkConnectBackAgents(b *testing.B) {
	ns := []int{16, 64, 256, 1024, 2048, 4096}
	if v := os.Getenv("CONNECTBACK_NS"); v != "" {
		ns = nil
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("CONNECTBACK_NS: %q", f)
			}
			ns = append(ns, n)
		}
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.Symlink(exe, filepath.Join(dir, "srun")); err != nil {
		b.Fatal(err)
	}
	b.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	b.Setenv(connectBackAgentsEnv, "1")
	for _, n := range ns {
		b.Run("agents="+strconv.Itoa(n), func(b *testing.B) {
			// Each side holds n connections, and a few descriptors more.
			if uint64(n)+64 > lim.Cur {
				b.Skipf("ulimit -n is %d, too low for %d agents", lim.Cur, n)
			}
			b.StopTimer()
			var wall, user, sys, agents time.Duration
			var p50, maxl time.Duration
			for range b.N {
				r := runConnectBack(b, n)
				wall += r.wall
				user += r.user
				sys += r.sys
				agents += r.agents
				var ok, fail, p, m int64
				fmt.Sscanf(r.done, "cb-done ok=%d fail=%d p50us=%d maxus=%d", &ok, &fail, &p, &m)
				p50 += time.Duration(p) * time.Microsecond
				maxl = max(maxl, time.Duration(m)*time.Microsecond)
			}
			it := float64(b.N)
			per := it * float64(n)
			b.ReportMetric(float64(wall.Microseconds())/1e3/it, "ms/all")
			b.ReportMetric(float64((user+sys).Nanoseconds())/1e3/per, "head-cpu-us/agent")
			b.ReportMetric(float64(user.Nanoseconds())/1e3/per, "head-usr-us/agent")
			b.ReportMetric(float64(sys.Nanoseconds())/1e3/per, "head-sys-us/agent")
			b.ReportMetric(float64(p50.Microseconds())/1e3/it, "agent-p50-ms")
			b.ReportMetric(float64(maxl.Microseconds())/1e3, "agent-max-ms")
			b.ReportMetric(float64(agents.Nanoseconds())/1e3/per, "agents-cpu-us/agent")
		})
	}
}
