package launcher

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// The head's generation handlers, fed synthetic events with no process
// anywhere (as torch elastic tests its agent): each case is a sequence of
// events, and asserts the state it leaves, the frames the head sent to
// each agent, the exit code and the first failure the summary names.
//
// The job: hosts h0 (ranks 0, 1) and h1 (ranks 2, 3), generation 0,
// --grace 2s, --timeout 1m.

// agentRecorder is an agent as the head's writer sees it: it keeps the frames
// and counts kills.
type agentRecorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	killed int
}

var _ AgentProcess = (*agentRecorder)(nil)

func (r *agentRecorder) Read([]byte) (int, error) { return 0, io.EOF }
func (r *agentRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}
func (r *agentRecorder) Close() error { return nil }
func (r *agentRecorder) Wait() error  { return nil }
func (r *agentRecorder) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed++
	return nil
}

// sent names the frames sent so far, one word or two each.
func (r *agentRecorder) sent(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	rd := control.NewReader(bytes.NewReader(bytes.Clone(r.buf.Bytes())))
	r.mu.Unlock()
	var out []string
	for {
		f, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the head sent a bad frame: %v", err)
		}
		out = append(out, describeFrame(t, f))
	}
}

func describeFrame(t *testing.T, f control.Frame) string {
	var err error
	s := f.Type.String()
	switch f.Type {
	case control.TypeLaunch:
		var l control.Launch
		err = f.Decode(&l)
		s = fmt.Sprintf("launch %d", l.Generation)
	case control.TypeKill:
		var k control.Kill
		err = f.Decode(&k)
		s = fmt.Sprintf("kill %v", k.Grace)
	case control.TypeSignal:
		var sg control.Signal
		err = f.Decode(&sg)
		s = "signal " + sigName(syscall.Signal(sg.Signal))
	case control.TypeFenceRe:
		var r control.FenceReply
		var kvs *rendezvous.Published
		if r, err = f.FenceReply(); err == nil && r.Err == "" {
			kvs, err = rendezvous.DecodePublished(r.KVs)
		}
		s = fmt.Sprintf("fence-reply %d %v", r.Seq, maps.Collect(kvs.All()))
		if r.Err != "" {
			s = fmt.Sprintf("fence-reply %d failed", r.Seq)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clockAdvance is a test's own event: the clock moves on.
type clockAdvance struct {
	fromHead
	d time.Duration
}

// testGen is a head with recorders for agents, its rank records and its
// store made, and generation 0 launched.
type testGen struct {
	*genState
	rec   []*agentRecorder
	notes *bytes.Buffer
	clock time.Time
}

func newTestGen(t *testing.T, o Options) *testGen {
	t.Helper()
	plan, err := NewPlan([]hostfile.Host{{Name: "h0", Slots: 2}, {Name: "h1", Slots: 2}}, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := new(bytes.Buffer)
	o.Stderr, o.StdinRank = notes, -1
	o.Grace, o.Timeout = cmp.Or(o.Grace, 2*time.Second), time.Minute
	h := &head{o: o, plan: plan, jobID: "test", events: make(chan event, 16), done: make(chan struct{}), start: time.Now()}
	t.Cleanup(func() { close(h.done) })
	tg := &testGen{notes: notes, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range plan.Nodes {
		r := new(agentRecorder)
		tg.rec = append(tg.rec, r)
		h.agents = append(h.agents, &agentConn{node: i, proc: r, w: control.NewWriter(r)})
	}
	if err := h.newStore(); err != nil {
		t.Fatal(err)
	}
	h.newRecords()
	tg.genState = h.newGen(context.Background(), 0, nil, nil)
	tg.now = func() time.Time { return tg.clock }
	if err := tg.launch(); err != nil {
		t.Fatal(err)
	}
	return tg
}

// feed hands the events to the handlers, one by one.
func (g *testGen) feed(events ...event) {
	for _, e := range events {
		if a, ok := e.(clockAdvance); ok {
			g.clock = g.clock.Add(a.d)
			continue
		}
		g.handle(e)
	}
}

// Synthetic events.
func evStarted(node int, ranks ...int) event {
	e := ranksStarted{fromAgent: fromAgent{node}}
	for _, r := range ranks {
		e.Ranks = append(e.Ranks, control.RankStart{Rank: r, PID: 100 + r})
	}
	return e
}

func evExited(node, rank, code int) event {
	return rankExited{fromAgent{node}, control.Exited{Rank: rank, PID: 100 + rank, Code: code}}
}

func evSignalled(node, rank int, sig syscall.Signal, stopped bool) event {
	return rankExited{fromAgent{node}, control.Exited{Rank: rank, PID: 100 + rank, Code: -1, Signal: int(sig), Stopped: stopped}}
}

func evDone(node int) event { return agentDone{fromAgent{node}, control.Done{}} }

func evAborted(node int, a control.Abort) event { return rankAborted{fromAgent{node}, a} }

func evLost(node int, why string) event { return agentLost{fromAgent{node}, errors.New(why)} }

func TestGenerationHandlers(t *testing.T) {
	t.Parallel()
	const launched = "launch 0"
	stopped := []string{launched, "kill 2s"}
	tests := []struct {
		name   string
		events []event

		reason   reason
		code     int
		message  string // the summary's; for a failure, it names the first
		first    int    // the first failure's rank; -1: none
		sent     [2][]string
		pending  int
		stopping bool
		notes    []string
		kills    [2]int
		check    func(t *testing.T, g *testGen)
	}{
		{
			name:   "every rank exits 0",
			events: []event{evStarted(0, 0, 1), evStarted(1, 2, 3), evExited(0, 0, 0), evExited(0, 1, 0), evExited(1, 2, 0), evExited(1, 3, 0), evDone(0), evDone(1)},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent: [2][]string{{launched}, {launched}},
			check: func(t *testing.T, g *testGen) {
				if g.started != 4 || g.h.phases.RanksStarted == 0 || g.h.rec[3].PID != 103 {
					t.Errorf("started %d ranks (RanksStarted %v, rank 3's pid %d), want 4, >0, 103", g.started, g.h.phases.RanksStarted, g.h.rec[3].PID)
				}
			},
		},
		{
			name: "the first failure stops the job and names itself",
			events: []event{evExited(1, 2, 3), evSignalled(0, 0, syscall.SIGTERM, true), evExited(1, 3, 4),
				evSignalled(0, 1, syscall.SIGKILL, true), evDone(0), evDone(1)},
			reason: reasonFailed, code: 3, first: 2, message: "rank 2 on h1 (pid 102) exited with code 3",
			sent: [2][]string{stopped, stopped}, stopping: true,
		},
		{
			name:   "a rank killed by a signal gorun did not send",
			events: []event{evSignalled(0, 1, syscall.SIGKILL, false)},
			reason: reasonFailed, code: 128 + 9, first: 1, message: "rank 1 on h0 (pid 101) was killed by SIGKILL (signal 9)",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "a rank that gorun stopped is no failure",
			events: []event{evSignalled(0, 1, syscall.SIGTERM, true), evDone(0)},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent: [2][]string{{launched}, {launched}}, pending: 1,
		},
		{
			name: "another generation's exit and done are ignored",
			events: []event{rankExited{fromAgent{1}, control.Exited{Generation: 1, Rank: 2, Code: 3}},
				agentDone{fromAgent{1}, control.Done{Generation: 1}}},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent: [2][]string{{launched}, {launched}}, pending: 2,
		},
		{
			name:   "MPI_Abort",
			events: []event{evAborted(0, control.Abort{Rank: 1, Code: 7, Msg: "bad input"})},
			reason: reasonFailed, code: 7, first: 1, message: "rank 1 on h0 called MPI_Abort(7): bad input",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "a rank that left before MPI_Finalize",
			events: []event{evAborted(1, control.Abort{Rank: 3, Early: true})},
			reason: reasonFailed, code: 1, first: 3, message: "rank 3 on h1 left before MPI_Finalize (its PMI connection closed)",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "a fence that timed out names the ranks that never arrived",
			events: []event{evAborted(1, control.Abort{Rank: 2, Missing: []int{2, 3}, Timeout: time.Second})},
			reason: reasonFailed, code: ExitTimeout, first: 2,
			message: "rank 2 on h1 never reached a rendezvous fence within 1s (--rendezvous-timeout); ranks that never arrived: 2 (on h1), 3 (on h1)",
			sent:    [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name: "a failure reaped earlier on the same host, reported later, is the first",
			events: []event{
				rankExited{fromAgent{0}, control.Exited{Rank: 0, PID: 100, Code: 15, End: time.Unix(100, 2e6)}},
				rankExited{fromAgent{0}, control.Exited{Rank: 1, PID: 101, Code: -1, Signal: int(syscall.SIGSEGV), End: time.Unix(100, 1e6)}},
				rankExited{fromAgent{1}, control.Exited{Rank: 2, PID: 102, Code: 9, End: time.Unix(100, 0)}}},
			reason: reasonFailed, code: 128 + 11, first: 1, message: "rank 1 on h0 (pid 101) was killed by SIGSEGV (signal 11)",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name: "a fence's timeout read after the agent reaped the rank it released stays the first",
			events: []event{clockAdvance{d: time.Second},
				evAborted(1, control.Abort{Rank: 3, Missing: []int{3}, Timeout: time.Second}),
				rankExited{fromAgent{1}, control.Exited{Rank: 2, PID: 102, Code: 15, End: time.Unix(0, 0)}}},
			reason: reasonFailed, code: ExitTimeout, first: 3,
			message: "rank 3 on h1 never reached a rendezvous fence within 1s (--rendezvous-timeout); ranks that never arrived: 3 (on h1)",
			sent:    [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name: "a fence's timeout just after a rank's failure names the culprit; a second does not",
			events: []event{evExited(1, 2, 15), clockAdvance{d: 100 * time.Millisecond},
				evAborted(1, control.Abort{Rank: 3, Missing: []int{3}, Timeout: time.Second}),
				evAborted(0, control.Abort{Rank: 0, Missing: []int{0, 1}, Timeout: time.Second})},
			reason: reasonFailed, code: ExitTimeout, first: 3,
			message: "rank 3 on h1 never reached a rendezvous fence within 1s (--rendezvous-timeout); ranks that never arrived: 3 (on h1)",
			sent:    [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name: "a fence's timeout long after a rank's failure keeps the failure",
			events: []event{evExited(1, 2, 15), clockAdvance{d: 2 * time.Second},
				evAborted(1, control.Abort{Rank: 3, Missing: []int{3}, Timeout: time.Second})},
			reason: reasonFailed, code: 15, first: 2, message: "rank 2 on h1 (pid 102) exited with code 15",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "an abort after a failure keeps the first",
			events: []event{evExited(1, 2, 3), evAborted(0, control.Abort{Rank: 1, Code: 7})},
			reason: reasonFailed, code: 3, first: 2, message: "rank 2 on h1 (pid 102) exited with code 3",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "a lost agent fails the job and ends its ranks",
			events: []event{evLost(1, "connection reset"), evLost(1, "again"), evDone(0)},
			reason: reasonAgentLost, code: ExitLaunch, first: -1, message: "lost the agent on h1: connection reset",
			sent: [2][]string{stopped, {launched}}, stopping: true,
			check: func(t *testing.T, g *testGen) {
				if !g.h.agents[1].gone || g.h.rec[2].Err != "its host's agent was lost" || g.h.rec[1].Err != "" {
					t.Errorf("h1 gone %v, rank 2's error %q, rank 1's %q", g.h.agents[1].gone, g.h.rec[2].Err, g.h.rec[1].Err)
				}
			},
		},
		{
			name:   "a signal just after an agent's loss is its cause",
			events: []event{evLost(1, "EOF"), clockAdvance{d: 500 * time.Millisecond}, signalReceived{sig: syscall.SIGTERM}},
			reason: reasonSignal, code: 128 + 15, first: -1, message: "gorun got SIGTERM and forwarded it to every rank",
			sent: [2][]string{append(stopped, "signal SIGTERM"), {launched}}, pending: 1, stopping: true,
			notes: []string{"gorun: got SIGTERM: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "a signal long after an agent's loss keeps the loss",
			events: []event{evLost(1, "EOF"), clockAdvance{d: 3 * time.Second}, signalReceived{sig: syscall.SIGTERM}},
			reason: reasonAgentLost, code: ExitLaunch, first: -1, message: "lost the agent on h1: EOF",
			sent: [2][]string{append(stopped, "signal SIGTERM"), {launched}}, pending: 1, stopping: true,
			notes: []string{"gorun: got SIGTERM: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "a signal just after a rank's death by SIGKILL is its cause",
			events: []event{evSignalled(0, 1, syscall.SIGKILL, false), clockAdvance{d: 500 * time.Millisecond}, signalReceived{sig: syscall.SIGTERM}},
			reason: reasonSignal, code: 128 + 15, first: -1, message: "gorun got SIGTERM and forwarded it to every rank",
			sent: [2][]string{append(stopped, "signal SIGTERM"), append(stopped, "signal SIGTERM")}, pending: 2, stopping: true,
			notes: []string{"gorun: got SIGTERM: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "an interrupt just after a rank's death by SIGKILL keeps the death",
			events: []event{evSignalled(0, 1, syscall.SIGKILL, false), clockAdvance{d: 500 * time.Millisecond}, signalReceived{sig: syscall.SIGINT}},
			reason: reasonFailed, code: 128 + 9, first: 1, message: "rank 1 on h0 (pid 101) was killed by SIGKILL (signal 9)",
			sent: [2][]string{append(stopped, "signal SIGINT"), append(stopped, "signal SIGINT")}, pending: 2, stopping: true,
			notes: []string{"gorun: got SIGINT: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "a signal just after a rank's exit keeps the exit",
			events: []event{evExited(0, 1, 3), clockAdvance{d: 500 * time.Millisecond}, signalReceived{sig: syscall.SIGTERM}},
			reason: reasonFailed, code: 3, first: 1, message: "rank 1 on h0 (pid 101) exited with code 3",
			sent: [2][]string{append(stopped, "signal SIGTERM"), append(stopped, "signal SIGTERM")}, pending: 2, stopping: true,
			notes: []string{"gorun: got SIGTERM: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "an agent lost after a failure",
			events: []event{evExited(1, 2, 3), evLost(0, "EOF")},
			reason: reasonFailed, code: 3, first: 2, message: "rank 2 on h1 (pid 102) exited with code 3",
			sent: [2][]string{stopped, stopped}, pending: 1, stopping: true,
		},
		{
			name:   "a signal is forwarded to every rank",
			events: []event{signalReceived{sig: syscall.SIGINT}, evDone(0), evDone(1)},
			reason: reasonSignal, code: 128 + 2, first: -1, message: "gorun got SIGINT and forwarded it to every rank",
			sent:  [2][]string{{launched, "signal SIGINT"}, {launched, "signal SIGINT"}},
			notes: []string{"gorun: got SIGINT: forwarded to every rank (send it again to kill them)"},
		},
		{
			name:   "a second interrupt kills every rank",
			events: []event{signalReceived{sig: syscall.SIGINT}, signalReceived{sig: syscall.SIGINT}},
			reason: reasonSignal, code: 128 + 2, first: -1, message: "gorun got SIGINT and forwarded it to every rank",
			sent:    [2][]string{{launched, "signal SIGINT", "kill 0s"}, {launched, "signal SIGINT", "kill 0s"}},
			pending: 2, stopping: true,
			notes: []string{"gorun: got SIGINT again: killing every rank"},
		},
		{
			name:   "SIGUSR1 is only forwarded",
			events: []event{signalReceived{sig: syscall.SIGUSR1}, signalReceived{sig: syscall.SIGUSR1}},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent:    [2][]string{{launched, "signal SIGUSR1", "signal SIGUSR1"}, {launched, "signal SIGUSR1", "signal SIGUSR1"}},
			pending: 2,
		},
		{
			name:   "a step's signal, which gorun gets too, is forwarded once",
			events: []event{agentSignaled{fromAgent{1}, syscall.SIGTERM}, signalReceived{sig: syscall.SIGTERM}, agentSignaled{fromAgent{0}, syscall.SIGTERM}},
			reason: reasonSignal, code: 128 + 15, first: -1, message: "gorun got SIGTERM and forwarded it to every rank",
			sent:    [2][]string{{launched, "signal SIGTERM"}, {launched, "signal SIGTERM"}},
			pending: 2,
			notes:   []string{"gorun: h1 got SIGTERM from outside: forwarded to every rank"},
		},
		{
			name:   "a step's signal a second later is forwarded again",
			events: []event{agentSignaled{fromAgent{1}, syscall.SIGTERM}, clockAdvance{d: 1100 * time.Millisecond}, agentSignaled{fromAgent{0}, syscall.SIGTERM}},
			reason: reasonSignal, code: 128 + 15, first: -1, message: "gorun got SIGTERM and forwarded it to every rank",
			sent:    [2][]string{{launched, "signal SIGTERM", "signal SIGTERM"}, {launched, "signal SIGTERM", "signal SIGTERM"}},
			pending: 2,
		},
		{
			name:   "--timeout",
			events: []event{timedOut{}},
			reason: reasonTimeout, code: ExitTimeout, first: -1, message: "--timeout 1m0s expired; 0 rank(s) were stopped",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
			notes: []string{"gorun: --timeout 1m0s expired: stopping the job"},
		},
		{
			name:   "--timeout after a failure stops again and keeps the failure",
			events: []event{evExited(1, 2, 3), timedOut{}},
			reason: reasonFailed, code: 3, first: 2, message: "rank 2 on h1 (pid 102) exited with code 3",
			sent:    [2][]string{{launched, "kill 2s", "kill 2s"}, {launched, "kill 2s", "kill 2s"}},
			pending: 2, stopping: true,
		},
		{
			name:   "agents that do not confirm within the grace period are killed",
			events: []event{evExited(1, 2, 3), evLost(0, "EOF"), graceExpired{}},
			reason: reasonFailed, code: 3, first: 2, message: "rank 2 on h1 (pid 102) exited with code 3",
			sent:    [2][]string{stopped, stopped},
			pending: 1, stopping: true, kills: [2]int{0, 1},
			notes: []string{"gorun: agent on h1 did not confirm its ranks ended; killing it"},
		},
		{
			name:   "a rank's output file failing",
			events: []event{outputLost{fromAgent{0}, "rank 1's stdout is lost: no space left on device (--output-filename)"}, evSignalled(1, 2, syscall.SIGTERM, true)},
			reason: reasonOutputLost, code: ExitLaunch, first: -1, message: "rank 1's stdout is lost: no space left on device (--output-filename)",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "Run's context cancelled",
			events: []event{cancelled{err: context.Canceled}, evSignalled(1, 2, syscall.SIGTERM, true)},
			reason: reasonCancelled, code: 128 + 15, first: -1, message: "it was cancelled; 1 rank(s) were stopped",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
			notes: []string{"gorun: cancelled (context canceled): stopping the job"},
			check: func(t *testing.T, g *testGen) {
				if g.done != nil {
					t.Error("the loop still waits on the cancelled context")
				}
			},
		},
		{
			name:   "Run's context cancelled after a failure",
			events: []event{evExited(0, 0, 1), cancelled{err: context.Canceled}},
			reason: reasonFailed, code: 1, first: 0, message: "rank 0 on h0 (pid 100) exited with code 1",
			sent: [2][]string{stopped, stopped}, pending: 2, stopping: true,
		},
		{
			name:   "an agent's error is said",
			events: []event{agentError{fromAgent{1}, "cannot read the topology"}},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent: [2][]string{{launched}, {launched}}, pending: 2,
			notes: []string{"gorun: agent on h1: cannot read the topology"},
		},
		{
			name:   "replies nobody asked for are ignored",
			events: []event{routeReply{fromAgent: fromAgent{0}}, envReply{fromAgent: fromAgent{0}}, checkReply{fromAgent: fromAgent{1}}},
			reason: reasonSuccess, code: ExitOK, first: -1,
			sent: [2][]string{{launched}, {launched}}, pending: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newTestGen(t, Options{})
			g.feed(tt.events...)
			if g.res.reason != tt.reason {
				t.Errorf("reason %d, want %d", g.res.reason, tt.reason)
			}
			s, _ := g.h.summary(g.res)
			if s.ExitCode != tt.code {
				t.Errorf("exit code %d, want %d", s.ExitCode, tt.code)
			}
			if s.Message != tt.message {
				t.Errorf("message %q\nwant %q", s.Message, tt.message)
			}
			switch {
			case tt.first < 0 && s.FirstFailure != nil:
				t.Errorf("first failure rank %d, want none", s.FirstFailure.Rank)
			case tt.first >= 0 && (s.FirstFailure == nil || s.FirstFailure.Rank != tt.first):
				t.Errorf("first failure %+v, want rank %d", s.FirstFailure, tt.first)
			}
			for i, r := range g.rec {
				if got := r.sent(t); !slices.Equal(got, tt.sent[i]) {
					t.Errorf("h%d was sent %q, want %q", i, got, tt.sent[i])
				}
				if r.killed != tt.kills[i] {
					t.Errorf("h%d's agent was killed %d times, want %d", i, r.killed, tt.kills[i])
				}
			}
			if g.pending != tt.pending || g.stopping != tt.stopping {
				t.Errorf("pending %d, stopping %v; want %d, %v", g.pending, g.stopping, tt.pending, tt.stopping)
			}
			for _, n := range tt.notes {
				if !strings.Contains(g.notes.String(), n) {
					t.Errorf("gorun said:\n%s\nwant it to say %q", g.notes, n)
				}
			}
			if tt.check != nil {
				tt.check(t, g)
			}
		})
	}
}

// A host lost below another in the launch tree was taken along by it: the
// job names the one above, whichever loss the head heard first; without a
// tree the first is named.
func TestLostAgentNamesTheTop(t *testing.T) {
	t.Parallel()
	tree := "lost the agent on h0: connection reset; the 1 host below it in the launch tree went with it: h1"
	for _, tt := range []struct {
		name   string
		fanout int
		events []event
		want   string
	}{
		{"the lower host's loss first", 1, []event{evLost(1, "its control channel closed"), evLost(0, "connection reset")}, tree},
		{"the upper host's loss first", 1, []event{evLost(0, "connection reset"), evLost(1, "its control channel closed")}, tree},
		{"no tree", 0, []event{evLost(1, "its control channel closed"), evLost(0, "connection reset")}, "lost the agent on h1: its control channel closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newTestGen(t, Options{Fanout: tt.fanout})
			g.feed(tt.events...)
			s, _ := g.h.summary(g.res)
			if g.res.reason != reasonAgentLost || s.Message != tt.want || s.ExitCode != ExitLaunch {
				t.Errorf("reason %d, exit %d, message %q\nwant %d, %d, %q", g.res.reason, s.ExitCode, s.Message, reasonAgentLost, ExitLaunch, tt.want)
			}
		})
	}
}

// Fences: the head answers every host when all have arrived, with what
// all put; a fence some host never reaches fails the job naming its ranks.
func TestGenerationFence(t *testing.T) {
	t.Parallel()
	t.Run("completes", func(t *testing.T) {
		t.Parallel()
		g := newTestGen(t, Options{})
		g.feed(fenceReached{fromAgent{0}, control.Fence{Seq: 1, Puts: map[string]string{"a": "1"}}},
			fenceReached{fromAgent{1}, control.Fence{Seq: 1, Puts: map[string]string{"b": "2"}}})
		for i, r := range g.rec {
			want := []string{"launch 0", "fence-reply 1 map[a:1 b:2]"}
			if got := waitSent(t, r, len(want)); !slices.Equal(got, want) {
				t.Errorf("h%d was sent %q, want %q", i, got, want)
			}
		}
	})
	t.Run("times out", func(t *testing.T) {
		t.Parallel()
		g := newTestGen(t, Options{RendezvousTimeout: 20 * time.Millisecond})
		g.feed(fenceReached{fromAgent{0}, control.Fence{Seq: 1}})
		want := []string{"launch 0", "fence-reply 1 failed"}
		if got := waitSent(t, g.rec[0], len(want)); !slices.Equal(got, want) {
			t.Errorf("h0 was sent %q, want %q", got, want)
		}
		select {
		case e := <-g.h.events:
			g.feed(e)
		case <-time.After(10 * time.Second):
			t.Fatal("no abort after the store's fence timed out")
		}
		s, _ := g.h.summary(g.res)
		if s.ExitCode != ExitTimeout || !strings.HasSuffix(s.Message, "ranks that never arrived: 2 (on h1), 3 (on h1)") {
			t.Errorf("exit code %d, message %q", s.ExitCode, s.Message)
		}
	})
}

// waitSent waits for n frames to an agent (fences are answered off the
// loop).
func waitSent(t *testing.T, r *agentRecorder, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.sent(t)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The job restarts after a rank's failure only, while restarts are left
// and Run's context is not done.
func TestRestart(t *testing.T) {
	t.Parallel()
	cancelledCtx, cancel := context.WithCancel(context.Background())
	cancel()
	failed := result{reason: reasonFailed, first: &RankRecord{Rank: 2, Host: "h1", PID: 102, Code: 3}}
	tests := []struct {
		name        string
		ctx         context.Context
		gen, max    int
		res         result
		want        bool
		wantRestart int // the ranks' Restarts afterwards
	}{
		{"a failure with restarts left", context.Background(), 0, 2, failed, true, 1},
		{"the second restart", context.Background(), 1, 2, failed, true, 2},
		{"no restart left", context.Background(), 2, 2, failed, false, 0},
		{"a timeout", context.Background(), 0, 2, result{reason: reasonTimeout}, false, 0},
		{"an agent lost", context.Background(), 0, 2, result{reason: reasonAgentLost}, false, 0},
		{"Run's context cancelled", cancelledCtx, 0, 2, failed, false, 0},
		// Migrant review P8: a program that could not be executed would
		// not be on a restart either.
		{"no such file", context.Background(), 0, 2, notStarted(ExitNotFound, "./nonexist: no such file"), false, 0},
		{"not an executable", context.Background(), 0, 2, notStarted(ExitNotExec, "./train.py: not an executable file"), false, 0},
		{"a bad interpreter", context.Background(), 0, 2, notStarted(ExitNotFound, "./x.sh: bad interpreter: /bin/nosh: no such file"), false, 0},
		{"a failed fork may pass", context.Background(), 0, 2, notStarted(1, "cannot start ./prog: resource temporarily unavailable"), true, 1},
		{"exit 127 of a program that ran", context.Background(), 0, 2, result{reason: reasonFailed, first: &RankRecord{Rank: 2, Host: "h1", PID: 102, Code: 127}}, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newTestGen(t, Options{MaxRestarts: tt.max})
			if got := g.h.restart(tt.ctx, tt.gen, tt.res); got != tt.want {
				t.Errorf("restart = %v, want %v", got, tt.want)
			}
			if g.h.rec[0].Restarts != tt.wantRestart {
				t.Errorf("Restarts = %d, want %d", g.h.rec[0].Restarts, tt.wantRestart)
			}
			note := "restarting the job"
			if tt.res.first != nil {
				note = fmt.Sprintf("gorun: rank 2 on h1 %s; restarting the job (restart %d of %d)", tt.res.first.describe(), tt.gen+1, tt.max)
			}
			if said := strings.Contains(g.notes.String(), note); said != tt.want {
				t.Errorf("gorun said %q, want %q said: %v", g.notes, note, tt.want)
			}
			noRestart := "gorun: no restart (--max-restarts 2): rank 2's program could not be executed on h1, and would not be again"
			if said := strings.Contains(g.notes.String(), noRestart); said != (tt.res.first != nil && tt.res.first.startFailure() && tt.ctx.Err() == nil) {
				t.Errorf("gorun said %q; want %q only for a program that could not be executed", g.notes, noRestart)
			}
		})
	}
}

// notStarted is the result of a generation whose rank 2 on h1 could not
// start, with code and why.
func notStarted(code int, why string) result {
	return result{reason: reasonFailed, first: &RankRecord{Rank: 2, Host: "h1", Code: code, Err: why}}
}

// A rank that could not start in a later generation has no pid, though it
// had one in the generation before: it counts as a start failure, and
// says "could not start".
func TestRankRecordLaterStartFailure(t *testing.T) {
	t.Parallel()
	var r RankRecord
	r.update(&control.Exited{Generation: 0, Rank: 0, PID: 41, Code: 3})
	r.update(&control.Exited{Generation: 1, Rank: 0, Code: ExitNotFound, Err: "./prog: no such file"})
	if !r.startFailure() || r.describe() != "could not start: ./prog: no such file" {
		t.Errorf("after a start failure in generation 1: pid %d, startFailure %v, %q", r.PID, r.startFailure(), r.describe())
	}
	r.update(&control.Exited{Generation: 1, Rank: 0, PID: 42, Code: ExitNotFound})
	if r.startFailure() || r.PID != 42 {
		t.Errorf("a rank that ran and exited 127: pid %d, startFailure %v", r.PID, r.startFailure())
	}
}

// An agent's frames become their events; the frames that are not events
// are refused here (read handles them before).
func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ     control.Type
		payload any
		want    event
	}{
		{control.TypeStarted, control.Started{Generation: 1, Ranks: []control.RankStart{{Rank: 2, PID: 9}}},
			ranksStarted{fromAgent{1}, control.Started{Generation: 1, Ranks: []control.RankStart{{Rank: 2, PID: 9}}}}},
		{control.TypeExited, control.Exited{Rank: 3, Code: 4}, rankExited{fromAgent{1}, control.Exited{Rank: 3, Code: 4}}},
		{control.TypeDone, control.Done{Generation: 2, MaxRSS: 10}, agentDone{fromAgent{1}, control.Done{Generation: 2, MaxRSS: 10}}},
		{control.TypeAbort, control.Abort{Rank: 2, Code: 5}, rankAborted{fromAgent{1}, control.Abort{Rank: 2, Code: 5}}},
		{control.TypeSignaled, control.Signal{Signal: 15}, agentSignaled{fromAgent{1}, syscall.SIGTERM}},
		{control.TypeError, control.Error{Msg: "no"}, agentError{fromAgent{1}, "no"}},
		{control.TypeRouteRe, control.RouteReply{Addr: "10.0.0.1"}, routeReply{fromAgent{1}, control.RouteReply{Addr: "10.0.0.1"}}},
		{control.TypeEnv, control.Env{Rank: 1, Env: []string{"A=1"}}, envReply{fromAgent{1}, control.Env{Rank: 1, Env: []string{"A=1"}}}},
		{control.TypeCheckRe, control.CheckReply{Port: 7}, checkReply{fromAgent{1}, control.CheckReply{Port: 7}}},
		{control.TypeFence, control.Fence{Seq: 2}, fenceReached{fromAgent{1}, control.Fence{Seq: 2}}},
		{control.TypeLaunch, control.Launch{}, nil},
		{control.TypeExited, "not an object", nil},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			var b bytes.Buffer
			if err := control.NewWriter(&b).Send(tt.typ, tt.payload); err != nil {
				t.Fatal(err)
			}
			f, err := control.NewReader(&b).Next()
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeEvent(1, f)
			if tt.want == nil {
				if !errors.Is(err, control.ErrProtocol) {
					t.Fatalf("decodeEvent = %v, %v; want a protocol error", got, err)
				}
				return
			}
			if err != nil || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.want) {
				t.Fatalf("decodeEvent = %#v, %v\nwant %#v", got, err, tt.want)
			}
			if got.origin() != 1 {
				t.Fatalf("origin %d, want 1", got.origin())
			}
		})
	}
}

// A program that a host's PATH lacks and gorun's has gets the way: its
// full path, or -x PATH (migrants #46: horovodrun's line under plain
// gorun, whose remote ranks have their ssh login's PATH).
func TestNotFoundHint(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "mytool")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	got := notFoundHint("mytool: command not found in PATH (/usr/bin:/bin)")
	if want := "; gorun's PATH has it (" + prog + "): give its full path, or pass gorun's PATH to the ranks with -x PATH"; got != want {
		t.Errorf("hint = %q, want %q", got, want)
	}
	for _, e := range []string{
		"nosuchtool-9f3: command not found in PATH (/usr/bin)", // nowhere
		"./mytool: no such file",                               // not a PATH search
		"mytool: not an executable file",
	} {
		if got := notFoundHint(e); got != "" {
			t.Errorf("hint for %q = %q, want none", e, got)
		}
	}
}
