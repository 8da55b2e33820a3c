package launcher

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/sshclient"
)

// Launch trees (--launch-fanout K): the head connects to K hosts; each of
// their agents connects to up to K more, and so on, relaying the lower
// agents' control streams as TypeRelay frames. The head then holds K
// connections, not one per host, and every agent speaks the same
// protocol whether it is reached directly or through others.

// FanoutAuto is Options.Fanout's default (--launch-fanout auto): a launch
// tree of DefaultFanout for a job on more than TreeAbove hosts reached
// over SSH, else none.
const FanoutAuto = -1

// TreeAbove and DefaultFanout choose --launch-fanout auto's tree. They
// come from the cluster simulator (bench/scale.sh, bench/README.md): at
// TreeAbove hosts and below the flat launch is as fast, since a tree adds
// a hop; above it the head's per-host costs (a connection, heartbeats, a
// fence message and answer per host) make flat the slower, and at 2,048
// hosts several times so.
const (
	TreeAbove     = 64
	DefaultFanout = 32
)

// ParseFanout parses --launch-fanout: auto (FanoutAuto), 0 (every agent
// from the head) or K >= 1.
func ParseFanout(s string) (int, error) {
	if s == "auto" || s == "" {
		return FanoutAuto, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 {
		return 0, fmt.Errorf("%w: --launch-fanout %q: want auto, 0 (no tree) or the tree's fanout K >= 1", ErrUsage, s)
	}
	return k, nil
}

// EffectiveFanout is the launch tree's fanout (0: none) that Run uses
// for o with agents on hosts hosts: Options.Fanout, or for FanoutAuto
// DefaultFanout above TreeAbove hosts. Inside an allocation whose own
// launcher starts the agents (srun, qrsh -inherit, blaunch, pbs_tmrsh,
// flux exec) it starts every one of them, and auto makes no tree: a
// tree's lower agents would be started over SSH, outside the batch
// system's accounting.
func EffectiveFanout(o Options, hosts int) int {
	if o.Fanout == FanoutAuto && o.Alloc != nil && o.Alloc.Launcher != LauncherSSH {
		return 0
	}
	return treeFanoutFor(o.Fanout, hosts)
}

// treeFanoutFor is EffectiveFanout for n hosts reached over SSH.
func treeFanoutFor(fanout, n int) int {
	if fanout == FanoutAuto {
		if n > TreeAbove {
			return DefaultFanout
		}
		return 0
	}
	return fanout
}

// subtree lists the nodes below node in the launch tree of fanout k,
// nearest first.
func subtree(node, n, k int) []int {
	if k <= 0 {
		return nil
	}
	var out []int
	for q := []int{node}; len(q) > 0; q = q[1:] {
		for c := (q[0] + 1) * k; c < (q[0]+2)*k && c < n; c++ {
			out = append(out, c)
			q = append(q, c)
		}
	}
	return out
}

// fanoutParent returns the node that starts node i in a K-ary launch
// tree over nodes 0..n-1 (nodes 0..K-1 hang off the head: -1).
func fanoutParent(i, k int) int {
	if k <= 0 || i < k {
		return -1
	}
	return i/k - 1
}

// below says whether node lies below node top in the job's launch tree.
func (h *head) below(node, top int) bool {
	for p := fanoutParent(node, h.o.Fanout); p >= 0; p = fanoutParent(p, h.o.Fanout) {
		if p == top {
			return true
		}
	}
	return false
}

// spawnErr is the agent's answer when a lower agent could not start, or
// its stream failed.
type spawnErr struct {
	Node int    `json:"node"`
	Err  string `json:"err"`
}

// kid is a lower agent this agent started for the head. The agent reads
// its frames (relaying them up, but for its heartbeats, which stop here,
// and its fences, which join this agent's: treeFence), and writes to it
// the head's frames for it and its own (heartbeats, fences' answers).
type kid struct {
	node int
	in   kidInput
	// proc is the lower agent, once started (kidStarted); nil before,
	// and if it failed to start. The loop's.
	proc  AgentProcess
	heard atomic.Int64 // unix nanoseconds of its last frame
	// lostWhy says why this agent dropped it (silence), if it did.
	lostWhy atomic.Value
}

// kidMsg is something for a lower agent's input: bytes of the head's
// frames (one frame may span several), a whole frame of this agent's, or
// the end of its input.
type kidMsg struct {
	raw   []byte
	frame []byte
	eof   bool
}

// kidInput queues what goes to a lower agent's input, which feedKid
// writes: the loop queues without waiting on the lower agent's link.
type kidInput struct {
	mu   sync.Mutex
	msgs []kidMsg
	eof  bool          // its end is queued: nothing more is
	wake chan struct{} // feedKid has messages to write
}

// send queues m; after the end, nothing.
func (in *kidInput) send(m kidMsg) {
	in.mu.Lock()
	if !in.eof {
		in.eof = m.eof
		in.msgs = append(in.msgs, m)
	}
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// take returns the messages queued so far.
func (in *kidInput) take() []kidMsg {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := in.msgs
	in.msgs = nil
	return m
}

// startKid registers the lower agent that sp asks for, and starts it in a
// goroutine (spawn). The first with heartbeats starts the beat of them
// all (kidBeatDue).
func (a *agent) startKid(sp control.Spawn) {
	if a.ending != nil {
		return
	}
	k := &kid{node: sp.Node, in: kidInput{wake: make(chan struct{}, 1)}}
	if a.kids == nil {
		a.kids = map[int]*kid{}
	}
	a.kids[sp.Node] = k
	if a.kidBeat == nil && sp.Beat > 0 && sp.BeatTimeout > 0 {
		a.kidBeat = time.NewTicker(sp.Beat)
		a.kidBeatC, a.kidTimeout = a.kidBeat.C, sp.BeatTimeout
	}
	go a.spawn(sp, k)
}

// spawn starts a lower agent, and hands it to the loop (kidStarted), or
// tells the head why it could not. One the loop does not keep (the agent
// is ending, or has ended before it took it) is killed.
func (a *agent) spawn(sp control.Spawn, k *kid) {
	var p AgentProcess
	var err error
	if a.o.Kids != nil {
		p, err = a.o.Kids.StartAgent(context.Background(), hostfile.Host{Name: sp.Host, User: sp.User, Port: sp.Port})
	} else if d, derr := a.sshDialer(sp.SSH); derr != nil {
		err = derr
	} else {
		self, _ := os.Executable()
		st := &SSHStarter{Dialer: d, Exe: sp.Exe, Source: self, Stage: sp.SSH.Stage, Stderr: a.o.Log, Log: a.log.printf, ForwardAgent: true}
		p, err = st.StartAgent(context.Background(), hostfile.Host{Name: sp.Host, User: sp.User, Port: sp.Port})
	}
	if err != nil {
		a.w.Send(control.TypeSpawnErr, spawnErr{Node: sp.Node, Err: err.Error()})
		a.w.SendRelay(control.Relay{Node: sp.Node})
		return
	}
	kept, keep := make(chan bool, 1), false
	if a.post(nil, kidStarted{k, p, kept}) == nil {
		select {
		case keep = <-kept:
		case <-a.quit:
		}
	}
	if !keep {
		p.Kill()
		p.Wait()
	}
}

// onKidStarted relays a lower agent's stream, in both directions. An
// ending agent does not keep it: it dropped its lower agents while this
// one was starting, and this one goes too.
func (a *agent) onKidStarted(e kidStarted) {
	k, p := e.k, e.proc
	e.kept <- a.ending == nil
	if a.ending != nil {
		return
	}
	k.proc = p
	k.heard.Store(time.Now().UnixNano())
	go a.readKid(k, p)
	go a.feedKid(k, p)
}

// readKid relays a lower agent's stream up, frame by frame (frames that
// came together go up together), but for its heartbeats and fences.
func (a *agent) readKid(k *kid, p AgentProcess) {
	r := control.NewReader(p)
	garbage, id, err := r.SkipPreamble()
	if err == nil {
		garbage = append(garbage, control.Preamble+" "+id+"\n"...)
	}
	if len(garbage) > 0 {
		a.w.SendRelay(control.Relay{Node: k.node, Data: garbage})
	}
	var batch []byte
	flush := func() {
		if len(batch) > 0 {
			a.w.SendRelay(control.Relay{Node: k.node, Data: batch})
			batch = batch[:0]
		}
	}
	for err == nil {
		var f control.Frame
		if f, err = r.Next(); err != nil {
			break
		}
		k.heard.Store(time.Now().UnixNano())
		switch f.Type {
		case control.TypeBeat:
		case control.TypeFence:
			var fe control.Fence
			if err = f.Decode(&fe); err != nil {
				break
			}
			if fe.Job != 0 {
				// A spawned job's fence: the host's own, straight up.
				batch = control.AppendFrame(batch, f.Type, f.Payload)
				break
			}
			if len(fe.Nodes) == 0 {
				fe.Nodes = []int{k.node}
			}
			flush()
			a.post(nil, kidFenced{fe})
		default:
			batch = control.AppendFrame(batch, f.Type, f.Payload)
		}
		if len(r.Buffered()) == 0 || len(batch) >= 256<<10 {
			flush()
		}
	}
	flush()
	if why, ok := k.lostWhy.Load().(string); ok {
		err = errors.New(why)
	}
	if !errors.Is(err, io.EOF) {
		a.w.Send(control.TypeSpawnErr, spawnErr{Node: k.node, Err: err.Error()})
	}
	a.w.SendRelay(control.Relay{Node: k.node})
	p.Wait()
}

// feedKid writes the kid's input (kidInput) until its end or the agent's.
func (a *agent) feedKid(k *kid, p AgentProcess) {
	w := kidWriter{p: p}
	for {
		select {
		case <-k.in.wake:
		case <-a.quit:
			return
		}
		for _, m := range k.in.take() {
			if m.eof {
				p.Close()
				return
			}
			w.write(m)
		}
	}
}

// kidWriter writes a lower agent's input: the head's bytes as they come,
// and this agent's own frames between two of the head's frames.
type kidWriter struct {
	p       AgentProcess
	pending int // bytes of the head's current frame still to write
	// This agent's frames wait for the head's first (its hello), which
	// the lower agent must read first.
	held      [][]byte
	heardHead bool
	broken    bool // a write failed: its reader reports the end
}

func (w *kidWriter) write(m kidMsg) {
	if m.frame != nil {
		if w.pending > 0 || !w.heardHead {
			w.held = append(w.held, m.frame)
			return
		}
		w.put(m.frame)
		return
	}
	for b := m.raw; len(b) > 0; {
		if w.pending == 0 {
			if len(b) < 4 {
				w.broken = true // not the head's frames: drop the rest
				return
			}
			w.pending = 4 + int(binary.BigEndian.Uint32(b))
		}
		n := min(w.pending, len(b))
		w.put(b[:n])
		w.pending, b = w.pending-n, b[n:]
		if w.pending == 0 {
			w.heardHead = true
			for _, f := range w.held {
				w.put(f)
			}
			w.held = nil
		}
	}
}

func (w *kidWriter) put(b []byte) {
	if !w.broken {
		if _, err := w.p.Write(b); err != nil {
			w.broken = true
		}
	}
}

// beatKids sends every lower agent a heartbeat, and drops those it heard
// nothing from for the heartbeats' timeout.
func (a *agent) beatKids(now time.Time) {
	beat := control.AppendFrame(nil, control.TypeBeat, nil)
	for _, k := range a.kids {
		if k.proc == nil {
			continue
		}
		if last := time.Unix(0, k.heard.Load()); now.Sub(last) > a.kidTimeout {
			if k.lostWhy.Load() == nil {
				k.lostWhy.Store(fmt.Sprintf("heard nothing from it for %v (host down, or its link cut)", now.Sub(last).Round(time.Millisecond)))
				k.proc.Kill()
			}
			continue
		}
		k.in.send(kidMsg{frame: beat})
	}
}

// sshDialer returns the agent's dialer for lower agents, made once.
func (a *agent) sshDialer(s control.SSH) (*sshclient.Dialer, error) {
	a.dialOnce.Do(func() {
		a.dialer, a.dialErr = sshclient.NewDialer(sshOptions(s, a.log.printf))
	})
	return a.dialer, a.dialErr
}

// sshOptions turns the head's SSH settings into dialer options.
func sshOptions(s control.SSH, log func(string, ...any)) sshclient.Options {
	return sshclient.Options{ConfigFile: s.ConfigFile, Port: s.Port, Identities: s.Identities, AcceptNew: s.AcceptNew,
		ConnectTimeout: s.ConnectTimeout, MaxHandshakes: s.MaxHandshakes, Log: log}
}

// relayTo hands bytes from the head to a lower agent (r.Data is the
// event's own).
func (a *agent) relayTo(r control.Relay) {
	k := a.kids[r.Node]
	if k == nil {
		return
	}
	if len(r.Data) == 0 {
		k.in.send(kidMsg{eof: true})
		return
	}
	k.in.send(kidMsg{raw: r.Data})
}

// toKids sends a frame of this agent's to every lower agent.
func (a *agent) toKids(frame []byte) {
	for _, k := range a.kids {
		k.in.send(kidMsg{frame: frame})
	}
}

// dropKids ends the connections to every lower agent: each sees EOF and
// stops its own ranks and its own lower agents. One still starting is
// killed once started (onKidStarted).
func (a *agent) dropKids() {
	for _, k := range a.kids {
		if k.proc != nil {
			k.proc.Kill()
		}
	}
	if a.kidBeat != nil {
		a.kidBeat.Stop()
		a.kidBeatC = nil
	}
}

// onFenceCalled numbers a fence of this host's ranks and sends it up, or
// into the subtree's round when this agent has lower agents; the answer
// goes to its waiter (fenceReplied). A spawned job's fences are each
// host's own, and go straight up.
func (a *agent) onFenceCalled(e fenceCalled) {
	job := [2]int{e.gen, e.job}
	a.fenceSeq[job]++
	key := fenceKey{e.gen, e.job, a.fenceSeq[job]}
	a.fenceWait[key] = e.reply
	fe := control.Fence{Generation: e.gen, Job: e.job, Seq: key[2], Puts: e.puts}
	if e.job == 0 && len(a.kids) > 0 {
		// The lower agents' fences join this one, and go up as one.
		fe.Nodes = []int{e.node}
		a.arrive(fe)
		return
	}
	if e.job != 0 {
		fe.Nodes = []int{e.node}
	}
	a.send(control.TypeFence, fe)
}

// onFenceReplied hands the head's answer to a fence to its waiter, and
// to the lower agents when it is the generation's.
func (a *agent) onFenceReplied(e fenceReplied) {
	if len(a.kids) > 0 && e.Job == 0 {
		a.toKids(control.AppendFrame(nil, control.TypeFenceRe, e.raw))
	}
	a.fenceWait.deliver(fenceKey{e.Generation, e.Job, e.Seq}, e.FenceReply)
}

// forgetFences forgets the fences of the generations before gen: their
// ranks have ended, and their answers would go nowhere.
func (a *agent) forgetFences(gen int) {
	for k := range a.fenceSeq {
		if k[0] < gen {
			delete(a.fenceSeq, k)
		}
	}
	for k := range a.fenceWait {
		if k[0] < gen {
			delete(a.fenceWait, k)
		}
	}
}

// treeFence gathers the fences of an agent's subtree: its own host's and
// each lower agent's (which stand for their own subtrees), and sends one
// Fence up for all of them once every one arrived. The answer comes down
// the same way (onFenceReplied).
//
// A round that is still missing some after the rendezvous timeout (the
// hosts' own barrier's, which the head's store exceeds by a tenth) goes
// up with what arrived, and what arrives later goes up as it comes: the
// store then names the hosts that never arrived, not every host of the
// subtree that one of them held back.
type treeFence struct {
	rounds  map[[2]int]*treeRound // by generation and fence number
	timeout time.Duration         // the rendezvous timeout of the current generation; 0: none
}

type treeRound struct {
	f       *control.Fence // what arrived, until it goes up
	count   int
	flushed bool // it went up incomplete: later arrivals go up alone
	timer   *time.Timer
}

// arrive adds one arrival (this host's, or a lower agent's subtree) to
// its round, and sends the round up once all are in.
func (a *agent) arrive(f control.Fence) {
	t := &a.tree
	key := [2]int{f.Generation, f.Seq}
	if t.rounds == nil {
		t.rounds = map[[2]int]*treeRound{}
	}
	r := t.rounds[key]
	if r == nil {
		r = &treeRound{f: &control.Fence{Generation: f.Generation, Seq: f.Seq, Puts: map[string]string{}}}
		t.rounds[key] = r
		if t.timeout > 0 {
			r.timer = time.AfterFunc(t.timeout, func() { a.post(nil, roundDue{key}) })
		}
	}
	if r.flushed {
		a.send(control.TypeFence, f)
		return
	}
	for k, v := range f.Puts {
		r.f.Puts[k] = v
	}
	r.f.Nodes = append(r.f.Nodes, f.Nodes...)
	r.count++
	if r.count == 1+len(a.kids) {
		delete(t.rounds, key)
		if r.timer != nil {
			r.timer.Stop()
		}
		a.send(control.TypeFence, r.f)
	}
}

// onRoundDue sends a round that timed out with what arrived of it.
func (a *agent) onRoundDue(key [2]int) {
	r := a.tree.rounds[key]
	if r == nil || r.flushed {
		return
	}
	r.flushed = true
	up := r.f
	r.f = nil
	if len(up.Nodes) > 0 {
		a.send(control.TypeFence, up)
	}
}

// relayedAgent is, at the head, an agent reached through another agent.
type relayedAgent struct {
	node   int
	parent *agentConn
	pr     *io.PipeReader
	pw     *io.PipeWriter
	done   chan struct{}
	once   sync.Once
}

func newRelayedAgent(node int, parent *agentConn) *relayedAgent {
	pr, pw := io.Pipe()
	return &relayedAgent{node: node, parent: parent, pr: pr, pw: pw, done: make(chan struct{})}
}

func (r *relayedAgent) Read(p []byte) (int, error) { return r.pr.Read(p) }
func (r *relayedAgent) Write(p []byte) (int, error) {
	if err := r.parent.w.SendRelay(control.Relay{Node: r.node, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}
func (r *relayedAgent) Close() error { return r.parent.w.SendRelay(control.Relay{Node: r.node}) }
func (r *relayedAgent) Remote() bool { return true }
func (r *relayedAgent) Wait() error  { <-r.done; return nil }
func (r *relayedAgent) Kill() error {
	r.Close()
	r.end(errors.New("killed"))
	return nil
}

// end closes the agent's stream (its parent relayed EOF, or was lost).
func (r *relayedAgent) end(err error) {
	r.once.Do(func() {
		r.pw.CloseWithError(err)
		close(r.done)
	})
}

// relayFrom routes a TypeRelay frame from an agent to the lower agent.
func (h *head) relayFrom(f control.Frame) error {
	rl, err := f.Relay()
	if err != nil {
		return err
	}
	h.relayMu.Lock()
	r := h.relayed[rl.Node]
	h.relayMu.Unlock()
	if r == nil {
		return nil
	}
	if len(rl.Data) == 0 {
		r.end(io.EOF)
		return nil
	}
	_, err = r.pw.Write(rl.Data)
	if err != nil {
		return nil // that agent's reader is gone; it reports its own end
	}
	return nil
}

// spawnFailed records why a lower agent did not start.
func (h *head) spawnFailed(f control.Frame) error {
	var e spawnErr
	if err := json.Unmarshal(f.Payload, &e); err != nil {
		return fmt.Errorf("%w: bad spawn error: %w", control.ErrProtocol, err)
	}
	h.relayMu.Lock()
	r := h.relayed[e.Node]
	h.relayMu.Unlock()
	if r != nil {
		r.end(errors.New(e.Err))
	}
	return nil
}

// loseSubtree ends the streams of every agent reached through node.
func (h *head) loseSubtree(node int, why error) {
	h.relayMu.Lock()
	defer h.relayMu.Unlock()
	for _, r := range h.relayed {
		if r.parent.node == node {
			r.end(fmt.Errorf("its parent in the launch tree, %s, was lost: %w", h.plan.Nodes[node].Host.Name, why))
		}
	}
}
