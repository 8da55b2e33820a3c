package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher/control"
)

// Run end to end against in-memory agents: they speak the control
// protocol over pipes and start no process, so that what Run's context
// does can be seen at each stage.

// memStarter starts in-memory agents. A rank exits at once with its code
// in exits; the others run until their agent is told to kill them.
type memStarter struct {
	exits  map[int]int
	silent bool          // the agents never say hello
	slow   time.Duration // before each agent says hello
	hold   time.Duration // before the ranks in exits exit
	onKill func()        // called when an agent gets a Kill

	started atomic.Int32
	mu      sync.Mutex
	kills   []time.Duration // the grace of every Kill an agent got
	gens    map[int]int     // Launches by generation
}

func (s *memStarter) StartAgent(_ context.Context, host hostfile.Host) (AgentProcess, error) {
	s.started.Add(1)
	// OS pipes, which buffer: both sides send their hello first.
	hr, aw, err := os.Pipe() // agent to head
	if err != nil {
		return nil, err
	}
	ar, hw, err := os.Pipe() // head to agent
	if err != nil {
		return nil, err
	}
	p := &memAgent{hr: hr, hw: hw, ar: ar, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer aw.Close()
		if s.silent {
			io.Copy(io.Discard, ar)
			return
		}
		s.serve(host, control.NewReader(ar), control.NewWriter(aw))
	}()
	return p, nil
}

// serve is the agent's side of the protocol, ranks pretended.
func (s *memStarter) serve(host hostfile.Host, r *control.Reader, w *control.Writer) {
	w.WritePreamble("")
	time.Sleep(s.slow)
	if _, err := control.Handshake(w, r, control.Hello{Version: "test", Host: host.Name, PID: 1, NUMA: 2}); err != nil {
		return
	}
	var running []int
	gen := 0
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		switch f.Type {
		case control.TypeLaunch:
			var l control.Launch
			f.Decode(&l)
			gen = l.Generation
			s.mu.Lock()
			s.gens[gen]++
			s.mu.Unlock()
			running = s.launch(w, l)
		case control.TypeKill:
			var k control.Kill
			f.Decode(&k)
			s.mu.Lock()
			s.kills = append(s.kills, k.Grace)
			s.mu.Unlock()
			if s.onKill != nil {
				s.onKill()
			}
			for _, rank := range running {
				w.Send(control.TypeExited, control.Exited{Generation: gen, Rank: rank, PID: 1000 + rank, End: time.Now(), Code: -1, Signal: 15, Stopped: true})
			}
			if len(running) > 0 {
				running = nil
				w.Send(control.TypeDone, control.Done{Generation: gen})
			}
		case control.TypeShutdown:
			return
		}
	}
}

// launch starts a Launch's ranks and returns those that keep running.
func (s *memStarter) launch(w *control.Writer, l control.Launch) []int {
	st := control.Started{Generation: l.Generation}
	for _, rs := range l.Ranks {
		st.Ranks = append(st.Ranks, control.RankStart{Rank: rs.Rank, PID: 1000 + rs.Rank, Time: time.Now()})
	}
	w.Send(control.TypeStarted, st)
	time.Sleep(s.hold)
	var running []int
	for _, rs := range l.Ranks {
		if code, ok := s.exits[rs.Rank]; ok {
			w.Send(control.TypeExited, control.Exited{Generation: l.Generation, Rank: rs.Rank, PID: 1000 + rs.Rank, End: time.Now(), Code: code})
		} else {
			running = append(running, rs.Rank)
		}
	}
	if len(running) == 0 {
		w.Send(control.TypeDone, control.Done{Generation: l.Generation})
	}
	return running
}

func (s *memStarter) launches() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for g, n := range s.gens {
		out[g] = n
	}
	return out
}

type memAgent struct {
	hr, hw, ar *os.File // the head's ends, and the agent's reading end
	done       chan struct{}
}

func (p *memAgent) Read(b []byte) (int, error)  { return p.hr.Read(b) }
func (p *memAgent) Write(b []byte) (int, error) { return p.hw.Write(b) }
func (p *memAgent) Close() error                { return p.hw.Close() }
func (p *memAgent) Wait() error {
	<-p.done
	p.hr.Close()
	p.ar.Close()
	return nil
}
func (p *memAgent) Kill() error {
	p.hr.Close()
	p.ar.Close()
	return nil
}

func memOptions(t *testing.T, st *memStarter) Options {
	st.gens = map[int]int{}
	return Options{
		Argv: []string{"prog"}, Hosts: []hostfile.Host{{Name: "h0", Slots: 1}, {Name: "h1", Slots: 1}},
		Starter: st, PrintEnv: -1, StdinRank: -1, Grace: 100 * time.Millisecond,
		SummaryJSON: filepath.Join(t.TempDir(), "summary.json"),
		Stdin:       strings.NewReader(""), Stdout: new(lockedBuffer), Stderr: new(lockedBuffer),
	}
}

func readSummary(t *testing.T, path string) Summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A job that its agents take longer to start than publishDelay, with a
// plan made again from their NUMA counts (ppr:N:numa), is published
// once the plan is final, with its rank count: it was published with the
// first plan's, while prepare made the plan again (go test -race saw
// that in TestMapByPPRNuma on a loaded machine).
func TestPublishAfterReplan(t *testing.T) {
	t.Parallel()
	exits := map[int]int{}
	for r := range 8 {
		exits[r] = 0
	}
	st := &memStarter{exits: exits, slow: 2 * publishDelay, hold: time.Second}
	o := memOptions(t, st)
	m, err := ParseMapBy("ppr:2:numa")
	if err != nil {
		t.Fatal(err)
	}
	o.Plan.MapBy, o.JobsDir = m, t.TempDir()
	o.Hosts = []hostfile.Host{{Name: "h0", Slots: 4}, {Name: "h1", Slots: 4}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() { code, err := Run(ctx, o); done <- result{code, err} }()
	var published []jobs.Info
	for len(published) == 0 {
		select {
		case r := <-done:
			t.Fatalf("Run = %d, %v before the job was published\n%s", r.code, r.err, o.Stderr)
		case <-time.After(5 * time.Millisecond):
		}
		published, _ = jobs.List(o.JobsDir)
	}
	if published[0].Ranks != 8 {
		t.Errorf("published with %d ranks, want 8 (2 per NUMA node, 2 NUMA nodes, 2 hosts)", published[0].Ranks)
	}
	if r := <-done; r.code != 0 || r.err != nil {
		t.Fatalf("Run = %d, %v\n%s", r.code, r.err, o.Stderr)
	}
}

// The in-memory agents run jobs as real ones do.
func TestRunInMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		exits  map[int]int
		code   int
		reason string
	}{
		{"success", map[int]int{0: 0, 1: 0}, 0, "success"},
		{"a rank fails", map[int]int{1: 3}, 3, "rank-failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &memStarter{exits: tt.exits}
			o := memOptions(t, st)
			// A hang fails the test (the job is cancelled) instead of
			// running into go test's timeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code, err := Run(ctx, o)
			if code != tt.code || err != nil {
				t.Fatalf("Run = %d, %v; want %d, nil\n%s", code, err, tt.code, o.Stderr)
			}
			if s := readSummary(t, o.SummaryJSON); s.Reason != tt.reason {
				t.Errorf("summary reason %q, want %q", s.Reason, tt.reason)
			}
		})
	}
}

// Cancelling Run's context stops the job at every stage, as its doc says.
func TestRunCancelled(t *testing.T) {
	t.Parallel()
	t.Run("while the ranks run", func(t *testing.T) {
		t.Parallel()
		st := &memStarter{}
		o := memOptions(t, st)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			deadline := time.Now().Add(time.Minute)
			for (len(st.launches()) == 0 || st.launches()[0] < 2) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		code, err := Run(ctx, o)
		if code != 128+15 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %d, %v; want 143 and context.Canceled\n%s", code, err, o.Stderr)
		}
		s := readSummary(t, o.SummaryJSON)
		if s.Reason != "cancelled" || s.ExitCode != 143 || !s.Ranks[0].Stopped || !s.Ranks[1].Stopped {
			t.Errorf("summary: reason %q, code %d, ranks %+v", s.Reason, s.ExitCode, s.Ranks)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(st.kills) != 2 || st.kills[0] != o.Grace {
			t.Errorf("agents got Kill with grace %v, want %v for each of 2", st.kills, o.Grace)
		}
	})
	t.Run("when a restart is due", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st := &memStarter{exits: map[int]int{0: 3}, onKill: cancel}
		o := memOptions(t, st)
		o.MaxRestarts = 3
		code, err := Run(ctx, o)
		if code != 3 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %d, %v; want 3 (the failure's) and context.Canceled\n%s", code, err, o.Stderr)
		}
		if got := st.launches(); len(got) != 1 {
			t.Errorf("launches by generation %v, want generation 0 only", got)
		}
		if s := readSummary(t, o.SummaryJSON); s.Reason != "rank-failed" || s.FirstFailure == nil || s.FirstFailure.Rank != 0 {
			t.Errorf("summary: reason %q, first failure %+v", s.Reason, s.FirstFailure)
		}
	})
	t.Run("before the agents say hello", func(t *testing.T) {
		t.Parallel()
		st := &memStarter{silent: true}
		o := memOptions(t, st)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		code, err := Run(ctx, o)
		if code != 128+15 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Run = %d, %v; want 143 and context.DeadlineExceeded\n%s", code, err, o.Stderr)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("Run took %v to notice", d)
		}
		if _, err := os.Stat(o.SummaryJSON); !os.IsNotExist(err) {
			t.Errorf("a summary was written for a job that never started: %v", err)
		}
	})
	t.Run("before Run", func(t *testing.T) {
		t.Parallel()
		st := &memStarter{}
		o := memOptions(t, st)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code, err := Run(ctx, o)
		if code != 128+15 || !errors.Is(err, context.Canceled) || st.started.Load() != 0 {
			t.Fatalf("Run = %d, %v, %d agents started; want 143, context.Canceled, none", code, err, st.started.Load())
		}
	})
}
