package launcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// The agent's handlers, fed synthetic events with no process anywhere, as
// the head's are (head_generation_test.go): each case is a sequence of
// events after the launch of generation 0, and asserts the frames the
// loop sent the head, the signals the ranks got, and how the agent ends.
//
// The host: h0, ranks 0 and 1 (pids 100 and 101), started by fakeProcs.

// fakeProcs starts no process: it records the ranks it is asked to start
// and the signals they are sent (Procs, the agent's spawner and killer).
type fakeProcs struct {
	mu      sync.Mutex
	started []ProcRank
	signals []string // "rank SIGNAL", in order
}

var _ Procs = (*fakeProcs)(nil)

// fakePID is rank's pid under fakeProcs.
func fakePID(rank int) int { return 100 + rank }

func (f *fakeProcs) Start(r ProcRank) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, r)
	return fakePID(r.Rank), nil
}

func (f *fakeProcs) Signal(pid int, sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, fmt.Sprintf("%d %s", pid-100, sigName(sig)))
}

func (f *fakeProcs) takeSignals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.signals
	f.signals = nil
	return s
}

// testAgent is an agent whose loop the test runs: no goroutine reads the
// head's frames or writes the outbox's.
type testAgent struct {
	*agent
	t     *testing.T
	procs *fakeProcs
	logs  *lockedBuffer
	rec   *agentRecorder // what goroutines wrote to the head directly
}

// testHeard is when the head was last heard of, for the silence watch.
var testHeard = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestAgent(t *testing.T, o AgentOptions) *testAgent {
	t.Helper()
	ta := &testAgent{t: t, procs: &fakeProcs{}, logs: &lockedBuffer{}, rec: &agentRecorder{}}
	o.Procs, o.Log, o.Out, o.Host = ta.procs, ta.logs, ta.rec, "h0"
	ta.agent = newAgent(o)
	ta.beatTimeout = 5 * time.Second
	ta.heard.Store(testHeard.UnixNano())
	t.Cleanup(func() {
		close(ta.quit)
		ta.disarmKill()
		if ta.endT != nil {
			ta.endT.Stop()
		}
		ta.closeServers()
	})
	return ta
}

// testLaunch is generation gen's Launch for h0: ranks 0 and 1 of 2, run
// unbound (no look at the node), running gorun itself (a program that is
// there).
func testLaunch(gen int) control.Launch {
	return control.Launch{Generation: gen, Argv: []string{SelfProgram}, Dir: "/", Host: "h0",
		Ranks: []control.RankSpec{{Rank: 0}, {Rank: 1, LocalRank: 1}}, WorldSize: 2, LocalWorldSize: 2, NodeCount: 1,
		Bind: control.Bind{To: "none"}, PMI: control.PMI{KVSName: "kvs_test_0"}}
}

// feed hands the events to the handlers, one by one, and after each the
// reports of the ranks that ended (rankFinished), which goroutines post.
func (ta *testAgent) feed(events ...agentEvent) {
	ta.t.Helper()
	for _, e := range events {
		ta.handle(e)
		for ta.finishing > 0 {
			select {
			case e := <-ta.events:
				ta.handle(e)
			case <-time.After(10 * time.Second):
				ta.t.Fatal("an ended rank's report never came")
			}
		}
	}
}

// sent names the frames the loop sent since the last call.
func (ta *testAgent) sent() []string {
	ta.t.Helper()
	q, _ := ta.out.take()
	var out []string
	for _, f := range q {
		out = append(out, describeAgentFrame(ta.t, control.Frame{Type: f.t, Payload: f.payload}))
	}
	return out
}

// describeAgentFrame names a frame from an agent in a few words.
func describeAgentFrame(t *testing.T, f control.Frame) string {
	t.Helper()
	var err error
	s := f.Type.String()
	switch f.Type {
	case control.TypeStarted:
		var v control.Started
		err = f.Decode(&v)
		var ranks []int
		for _, r := range v.Ranks {
			ranks = append(ranks, r.Rank)
		}
		s = fmt.Sprintf("started %d %v", v.Generation, ranks)
	case control.TypeExited:
		var v control.Exited
		err = f.Decode(&v)
		s = fmt.Sprintf("exited %d code %d", v.Rank, v.Code)
		if v.Signal != 0 {
			s = fmt.Sprintf("exited %d %s", v.Rank, sigName(syscall.Signal(v.Signal)))
		}
		if v.Stopped {
			s += " stopped"
		}
	case control.TypeDone:
		var v control.Done
		err = f.Decode(&v)
		s = fmt.Sprintf("done %d", v.Generation)
	case control.TypeSignaled:
		var v control.Signal
		err = f.Decode(&v)
		s = "signaled " + sigName(syscall.Signal(v.Signal))
	case control.TypeStdinAck:
		var v control.StdinAck
		err = f.Decode(&v)
		s = fmt.Sprintf("stdin-ack %d %d", v.Rank, v.Bytes)
	case control.TypeFence:
		var v control.Fence
		err = f.Decode(&v)
		s = fmt.Sprintf("fence %d/%d nodes %v puts %v", v.Generation, v.Seq, v.Nodes, v.Puts)
	case control.TypeDyn:
		var v control.Dyn
		err = f.Decode(&v)
		s = fmt.Sprintf("dyn %d %s", v.ID, v.Kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Synthetic events.
func evExit(rank, code int) agentEvent { return rankEnded{pid: fakePID(rank), code: code} }

func evKilled(rank int, sig syscall.Signal) agentEvent {
	return rankEnded{pid: fakePID(rank), code: -1, sig: sig}
}

func TestAgentHandlers(t *testing.T) {
	t.Parallel()
	const started = "started 0 [0 1]"
	tests := []struct {
		name   string
		opts   AgentOptions
		launch func(*control.Launch) // changes generation 0's Launch
		events []agentEvent

		sent    []string // after the launch's
		signals []string // the ranks got, in order
		live    int      // ranks not yet reported
		ending  string   // RunAgent's error once the agent ends ("nil"); "": it goes on
		over    bool     // the loop is done
	}{
		{
			name: "launch",
			sent: []string{started}, live: 2,
		},
		{
			name:   "every rank succeeds",
			events: []agentEvent{evExit(0, 0), evExit(1, 0)},
			sent:   []string{started, "exited 0 code 0", "exited 1 code 0", "done 0"},
		},
		{
			name:   "a rank fails",
			events: []agentEvent{evExit(1, 3)},
			sent:   []string{started, "exited 1 code 3"}, live: 1,
		},
		{
			name:   "a signal kills a rank",
			events: []agentEvent{evKilled(0, syscall.SIGSEGV)},
			sent:   []string{started, "exited 0 SIGSEGV"}, live: 1,
		},
		{
			name:   "an orphan ends: nothing to report",
			events: []agentEvent{rankEnded{pid: 4242}},
			sent:   []string{started}, live: 2,
		},
		{
			name:   "the program is not there",
			launch: func(l *control.Launch) { l.Argv = []string{"/nonexistent/gorun-test-program"} },
			sent:   []string{"exited 0 code 127", "exited 1 code 127", "done 0"},
		},
		{
			name:    "stop from the head: SIGTERM, SIGKILL after the grace period",
			events:  []agentEvent{killAsked{2 * time.Second}, killDue{}, evKilled(0, syscall.SIGKILL), evKilled(1, syscall.SIGKILL)},
			signals: []string{"0 SIGTERM", "1 SIGTERM", "0 SIGKILL", "1 SIGKILL"},
			sent:    []string{started, "exited 0 SIGKILL stopped", "exited 1 SIGKILL stopped", "done 0"},
		},
		{
			name:    "stop from the head: the ranks end within the grace period",
			events:  []agentEvent{killAsked{2 * time.Second}, evKilled(0, syscall.SIGTERM), evExit(1, 0)},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started, "exited 0 SIGTERM stopped", "exited 1 code 0 stopped", "done 0"},
		},
		{
			name:    "kill at once",
			events:  []agentEvent{killAsked{0}},
			signals: []string{"0 SIGKILL", "1 SIGKILL"},
			sent:    []string{started}, live: 2,
		},
		{
			name:    "head EOF: the ranks are stopped, then the agent ends",
			events:  []agentEvent{headGone{io.EOF}, evKilled(0, syscall.SIGTERM), evKilled(1, syscall.SIGTERM)},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started, "exited 0 SIGTERM stopped", "exited 1 SIGTERM stopped", "done 0"},
			ending:  "EOF", over: true,
		},
		{
			name:    "head EOF: ranks that do not end are left to the orphans' sweep",
			events:  []agentEvent{headGone{io.EOF}, killDue{}, endDue{}},
			signals: []string{"0 SIGTERM", "1 SIGTERM", "0 SIGKILL", "1 SIGKILL"},
			sent:    []string{started}, live: 2,
			ending: "EOF", over: true,
		},
		{
			name:    "head EOF while ending changes nothing",
			opts:    AgentOptions{Leave: true},
			events:  []agentEvent{signalCaught{syscall.SIGTERM}, headGone{io.EOF}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started}, live: 2,
			ending: "nil",
		},
		{
			name:   "shutdown",
			events: []agentEvent{evExit(0, 0), evExit(1, 0), shutdownAsked{}},
			sent:   []string{started, "exited 0 code 0", "exited 1 code 0", "done 0"},
			ending: "nil", over: true,
		},
		{
			name:    "silence: the head went quiet for the heartbeats' timeout",
			events:  []agentEvent{silenceDue{testHeard.Add(5*time.Second + time.Millisecond)}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started}, live: 2,
			ending: "the head went silent",
		},
		{
			name:   "silence: not for long enough",
			events: []agentEvent{silenceDue{testHeard.Add(5 * time.Second)}},
			sent:   []string{started}, live: 2,
		},
		{
			name:    "a signal to forward",
			events:  []agentEvent{signalCaught{syscall.SIGUSR1}},
			signals: []string{"0 SIGUSR1", "1 SIGUSR1"},
			sent:    []string{started, "signaled SIGUSR1"}, live: 2,
		},
		{
			name:    "a signal from the head",
			events:  []agentEvent{signalAsked{syscall.SIGUSR2}},
			signals: []string{"0 SIGUSR2", "1 SIGUSR2"},
			sent:    []string{started}, live: 2,
		},
		{
			name:    "an interrupt stops every rank, the head hearing of it first",
			events:  []agentEvent{signalCaught{syscall.SIGINT}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started, "signaled SIGINT"}, live: 2,
			ending: "nil",
		},
		{
			name:    "a step's first interrupt goes to the head alone, its second stops the ranks",
			opts:    AgentOptions{Step: true},
			events:  []agentEvent{signalCaught{syscall.SIGINT}, signalCaught{syscall.SIGINT}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started, "signaled SIGINT", "signaled SIGINT"}, live: 2,
			ending: "nil",
		},
		{
			name:    "a node that leaves on a signal tells the head nothing",
			opts:    AgentOptions{Leave: true},
			events:  []agentEvent{signalCaught{syscall.SIGHUP}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started}, live: 2,
			ending: "nil",
		},
		{
			name:   "stdin for a rank that takes none is acknowledged",
			events: []agentEvent{stdinArrived{control.Stdin{Rank: 0, Data: []byte("hi\n")}}},
			sent:   []string{started, "stdin-ack 0 3"}, live: 2,
		},
		{
			name: "a restart: generation 1 after generation 0 was stopped",
			events: []agentEvent{killAsked{2 * time.Second}, evKilled(0, syscall.SIGTERM), evKilled(1, syscall.SIGTERM),
				launchAsked{testLaunch(1)}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started, "exited 0 SIGTERM stopped", "exited 1 SIGTERM stopped", "done 0", "started 1 [0 1]"},
			live:    2,
		},
		{
			name:    "an ending agent launches nothing",
			events:  []agentEvent{headGone{errors.New("bad frame")}, launchAsked{testLaunch(1)}},
			signals: []string{"0 SIGTERM", "1 SIGTERM"},
			sent:    []string{started}, live: 2,
			ending: "bad frame",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ta := newTestAgent(t, tt.opts)
			l := testLaunch(0)
			if tt.launch != nil {
				tt.launch(&l)
			}
			ta.feed(launchAsked{l})
			ta.feed(tt.events...)
			if got := ta.sent(); !slices.Equal(got, tt.sent) {
				t.Errorf("sent %q, want %q", got, tt.sent)
			}
			if got := ta.procs.takeSignals(); !slices.Equal(got, tt.signals) {
				t.Errorf("signals %q, want %q", got, tt.signals)
			}
			if ta.live != tt.live {
				t.Errorf("%d ranks left to report, want %d", ta.live, tt.live)
			}
			ending := ""
			if ta.ending != nil {
				ending = fmt.Sprint(ta.ending.err)
				if ta.ending.err == nil {
					ending = "nil"
				}
			}
			if ending != tt.ending {
				t.Errorf("ending %q, want %q", ending, tt.ending)
			}
			if ta.over() != tt.over {
				t.Errorf("over %v, want %v", ta.over(), tt.over)
			}
		})
	}
}

// The launch's state: the ranks the spawner started, with their
// environment, and a restart's generation replacing the last one's.
func TestAgentLaunchState(t *testing.T) {
	t.Parallel()
	ta := newTestAgent(t, AgentOptions{})
	ta.feed(launchAsked{testLaunch(0)})
	if len(ta.procs.started) != 2 || ta.pmi == nil || len(ta.byPID) != 2 || ta.gen != 0 {
		t.Fatalf("after the launch: %d started, PMI server %v, %d live, generation %d; want 2, a server, 2, 0",
			len(ta.procs.started), ta.pmi != nil, len(ta.byPID), ta.gen)
	}
	for _, r := range ta.procs.started {
		if !slices.Contains(r.Env, fmt.Sprintf("RANK=%d", r.Rank)) || r.PMI == nil {
			t.Errorf("rank %d: environment without RANK=%d, or no PMI connection", r.Rank, r.Rank)
		}
	}
	first := ta.pmi
	ta.feed(killAsked{time.Minute}, evKilled(0, syscall.SIGTERM), evKilled(1, syscall.SIGTERM))
	if ta.killC != nil {
		t.Error("the kill's timer still runs after the generation ended")
	}
	ta.feed(launchAsked{testLaunch(1)})
	if ta.gen != 1 || ta.stopped || ta.live != 2 || ta.pmi == first {
		t.Errorf("after the restart: generation %d, stopped %v, %d live, same PMI server %v; want 1, false, 2, false",
			ta.gen, ta.stopped, ta.live, ta.pmi == first)
	}
}

// Fences go up through the loop: this host's alone, or with its lower
// agents' as one, and a round that times out goes up with what arrived.
// The head's answers reach the waiting server, and the lower agents.
func TestAgentFences(t *testing.T) {
	t.Parallel()
	ta := newTestAgent(t, AgentOptions{})
	replies := make(chan control.FenceReply, 4)
	call := func(seq int) agentEvent {
		return fenceCalled{gen: 0, node: 0, puts: map[string]string{fmt.Sprint("k", seq): "0"}, reply: replies}
	}
	fromKid := func(seq int) agentEvent {
		return kidFenced{control.Fence{Generation: 0, Seq: seq, Nodes: []int{1}, Puts: map[string]string{fmt.Sprint("k", seq): "1"}}}
	}
	answer := func(seq int) agentEvent {
		kvs := rendezvous.EncodePublished(map[string]string{"k": fmt.Sprint(seq)})
		r := control.FenceReply{Generation: 0, Seq: seq, KVs: kvs}
		return fenceReplied{r, control.EncodeFenceReply(r)}
	}
	lower := &kid{node: 1, in: kidInput{wake: make(chan struct{}, 1)}}
	steps := []struct {
		name    string
		kids    bool
		events  []agentEvent
		sent    []string
		replies []int // the fences answered, by number
		toKid   int   // frames queued for the lower agent
	}{
		{name: "alone", events: []agentEvent{call(1)}, sent: []string{"fence 0/1 nodes [] puts map[k1:0]"}},
		{name: "answered", events: []agentEvent{answer(1)}, replies: []int{1}},
		{name: "with a lower agent: waits for its subtree", kids: true, events: []agentEvent{call(2)}},
		{name: "its subtree arrives: one fence up", kids: true, events: []agentEvent{fromKid(2)},
			sent: []string{"fence 0/2 nodes [0 1] puts map[k2:1]"}},
		{name: "answered, and passed down", kids: true, events: []agentEvent{answer(2)}, replies: []int{2}, toKid: 1},
		{name: "a round that times out goes up incomplete", kids: true, events: []agentEvent{call(3), roundDue{[2]int{0, 3}}},
			sent: []string{"fence 0/3 nodes [0] puts map[k3:0]"}},
		{name: "and what comes later alone", kids: true, events: []agentEvent{fromKid(3)},
			sent: []string{"fence 0/3 nodes [1] puts map[k3:1]"}},
	}
	for _, st := range steps {
		if st.kids {
			ta.kids = map[int]*kid{1: lower}
		}
		ta.feed(st.events...)
		if got := ta.sent(); !slices.Equal(got, st.sent) {
			t.Errorf("%s: sent %q, want %q", st.name, got, st.sent)
		}
		var got []int
		for len(replies) > 0 {
			r := <-replies
			kvs, err := rendezvous.DecodePublished(r.KVs)
			if v, _ := kvs.Get("k"); err != nil || v != fmt.Sprint(r.Seq) {
				t.Errorf("%s: fence %d's answer: k=%q, %v", st.name, r.Seq, v, err)
			}
			got = append(got, r.Seq)
		}
		if !slices.Equal(got, st.replies) {
			t.Errorf("%s: answered %v, want %v", st.name, got, st.replies)
		}
		if n := len(lower.in.take()); n != st.toKid {
			t.Errorf("%s: %d frames for the lower agent, want %d", st.name, n, st.toKid)
		}
	}
}

// A rank's request to the head (a spawn, a name) is numbered on the loop,
// and the head's answer goes to it.
func TestAgentDynCall(t *testing.T) {
	t.Parallel()
	ta := newTestAgent(t, AgentOptions{})
	reply, other := make(chan control.DynReply, 1), make(chan control.DynReply, 1)
	ta.feed(dynCalled{control.Dyn{Kind: control.DynLookup}, reply}, dynCalled{control.Dyn{Kind: control.DynPublish}, other})
	if got, want := ta.sent(), []string{"dyn 1 " + control.DynLookup, "dyn 2 " + control.DynPublish}; !slices.Equal(got, want) {
		t.Fatalf("sent %q, want %q", got, want)
	}
	ta.feed(dynReplied{control.DynReply{ID: 1, Nspace: "answer"}}, dynReplied{control.DynReply{ID: 9}})
	if r := <-reply; r.Nspace != "answer" {
		t.Errorf("reply %+v, want request 1's answer", r)
	}
	if len(ta.dynWait) != 1 {
		t.Errorf("%d requests wait, want 1 (the unanswered one)", len(ta.dynWait))
	}
}

// A probe reads a view of the ranks taken on the loop, and answers from a
// goroutine of its own. The rank's pid is above the kernel's pid_max: no
// process has it, and the status reads it as exited.
func TestAgentProbe(t *testing.T) {
	t.Parallel()
	rec := &agentRecorder{}
	a := newAgent(AgentOptions{Out: rec, Host: "h0"})
	defer close(a.quit)
	pid := 1<<22 + 1
	a.byPID[pid] = &rankProc{rank: 3, pid: pid, start: time.Now()}
	a.handle(probeAsked{control.Probe{ID: 7, Kind: control.ProbeStatus}})
	var rep control.ProbeReply
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		rec.mu.Lock()
		f, err := control.NewReader(bytes.NewReader(bytes.Clone(rec.buf.Bytes()))).Next()
		rec.mu.Unlock()
		if err == nil {
			if f.Type != control.TypeProbeRe || f.Decode(&rep) != nil {
				t.Fatalf("the agent answered a %s frame: %s", f.Type, f.Payload)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer to the probe")
		}
	}
	var status []control.RankStatus
	if err := json.Unmarshal(rep.Data, &status); err != nil || rep.ID != 7 || rep.Err != "" {
		t.Fatalf("reply %+v, %v; want probe 7's status", rep, err)
	}
	if len(status) != 1 || status[0].Rank != 3 || status[0].PID != pid || status[0].State != "exited" {
		t.Errorf("status %+v, want rank 3, pid %d, exited", status, pid)
	}
}

// The head's frames become their events; payloads that the reader
// reuses are the event's own.
func TestDecodeHeadFrame(t *testing.T) {
	t.Parallel()
	frame := func(send func(w *control.Writer) error) control.Frame {
		var b bytes.Buffer
		if err := send(control.NewWriter(&b)); err != nil {
			t.Fatal(err)
		}
		f, err := control.NewReader(&b).Next()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	tests := []struct {
		name string
		f    control.Frame
		want agentEvent
		err  string
	}{
		{"beat", frame(func(w *control.Writer) error { return w.Send(control.TypeBeat, nil) }), nil, ""},
		{"kill", frame(func(w *control.Writer) error { return w.Send(control.TypeKill, control.Kill{Grace: time.Second}) }), killAsked{time.Second}, ""},
		{"signal", frame(func(w *control.Writer) error { return w.Send(control.TypeSignal, control.Signal{Signal: 10}) }), signalAsked{syscall.SIGUSR1}, ""},
		{"probe", frame(func(w *control.Writer) error { return w.Send(control.TypeProbe, control.Probe{ID: 3, Kind: "stacks"}) }),
			probeAsked{control.Probe{ID: 3, Kind: "stacks"}}, ""},
		{"shutdown", frame(func(w *control.Writer) error { return w.Send(control.TypeShutdown, nil) }), shutdownAsked{}, ""},
		{"stdin", frame(func(w *control.Writer) error { return w.SendStdin(control.Stdin{Rank: 0, Data: []byte("x")}) }),
			stdinArrived{control.Stdin{Rank: 0, Data: []byte("x")}}, ""},
		{"relay", frame(func(w *control.Writer) error { return w.SendRelay(control.Relay{Node: 2, Data: []byte("y")}) }),
			relayArrived{control.Relay{Node: 2, Data: []byte("y")}}, ""},
		{"bad payload", control.Frame{Type: control.TypeKill, Payload: []byte("{")}, nil, "bad kill message"},
		{"not for an agent", control.Frame{Type: control.TypeStarted, Payload: []byte("{}")}, nil, "unexpected started frame"},
	}
	for _, tt := range tests {
		payload := bytes.Clone(tt.f.Payload)
		got, err := decodeHeadFrame(tt.f)
		if tt.err != "" {
			if err == nil || !errors.Is(err, control.ErrProtocol) || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want a protocol error saying %q", tt.name, err, tt.err)
			}
			continue
		}
		clear(tt.f.Payload) // the reader reuses it
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %#v, %v; want %#v (payload %q)", tt.name, got, err, tt.want, payload)
		}
	}
}

// Stdin for a rank goes to its queue (feed writes it to the rank); its
// end, or the rank's, closes the queue; a chunk for a rank without one is
// acknowledged and dropped.
func TestAgentStdin(t *testing.T) {
	t.Parallel()
	ta := newTestAgent(t, AgentOptions{})
	ta.feed(launchAsked{testLaunch(0)})
	q0, q1 := make(chan []byte, stdinWindow+1), make(chan []byte, stdinWindow+1)
	ta.stdin[0], ta.stdin[1] = q0, q1
	ta.feed(stdinArrived{control.Stdin{Rank: 0, Data: []byte("a")}}, stdinArrived{control.Stdin{Rank: 0}},
		stdinArrived{control.Stdin{Rank: 0, Data: []byte("late")}}, evExit(1, 0))
	var got []string
	for b := range q0 {
		got = append(got, string(b))
	}
	if !slices.Equal(got, []string{"a"}) {
		t.Errorf("rank 0's stdin %q, want [a] and its end", got)
	}
	if _, open := <-q1; open {
		t.Error("rank 1 ended with its stdin open")
	}
	if got, want := ta.sent(), []string{"started 0 [0 1]", "stdin-ack 0 4", "exited 1 code 0"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}

// The outbox writes the loop's frames in order, and an agent that ends
// waits for them, but not forever on a head that reads nothing.
func TestOutbox(t *testing.T) {
	t.Parallel()
	var b lockedBuffer
	o := newOutbox(control.NewWriter(&b))
	go o.run()
	o.send(control.TypeStarted, control.Started{Generation: 4})
	o.send(control.TypeBeat, nil)
	o.send(control.TypeDone, control.Done{Generation: 4})
	o.close(10 * time.Second)
	o.send(control.TypeBeat, nil) // after the close: dropped
	var got []string
	for r := control.NewReader(strings.NewReader(b.String())); ; {
		f, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, describeAgentFrame(t, f))
	}
	if want := []string{"started 4 []", "beat", "done 4"}; !slices.Equal(got, want) {
		t.Errorf("wrote %q, want %q", got, want)
	}

	pr, pw := io.Pipe() // nobody reads
	defer pr.Close()
	stuck := newOutbox(control.NewWriter(pw))
	go stuck.run()
	stuck.send(control.TypeBeat, nil)
	start := time.Now()
	stuck.close(50 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("close waited %v on a head that reads nothing", d)
	}
}
