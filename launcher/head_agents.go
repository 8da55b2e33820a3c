package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
)

// The head's connections to its agents: starting them, the handshake,
// heartbeats, reading their frames into events, and shutting them down.

// agentConn is the head's connection to one agent.
type agentConn struct {
	node   int
	proc   AgentProcess
	w      *control.Writer
	r      *control.Reader
	hello  control.Hello
	maxRSS int64
	gone   bool
	acks   chan int
	remote bool         // heartbeats are on
	heard  atomic.Int64 // unix nanoseconds of its last frame
	ended  atomic.Bool  // its reader has returned
	// lostWhy says why the head dropped the agent (silence), if it did.
	lostWhy atomic.Value
	upAt    time.Time // when its hello arrived
}

// startAgents starts one agent per node in parallel and shakes hands.
// With a launch tree (--launch-fanout K) only K agents are started by the
// head; each agent starts the agents below it when its own is up. Each
// agent's reader runs from its handshake on, since lower agents' streams
// pass through it. Cancelling ctx kills the agents whose handshake is not
// done, which ends it with an error.
func (h *head) startAgents(ctx context.Context) error {
	n := len(h.plan.Nodes)
	h.agents = make([]*agentConn, n)
	h.relayed = map[int]*relayedAgent{}
	errs := make([]error, n)
	ready := make([]chan struct{}, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i, nd := range h.plan.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ready[i])
			parent := fanoutParent(i, h.o.Fanout)
			if parent < 0 || IsLocal(nd.Host.Name) {
				h.agents[i], errs[i] = h.startDirect(ctx, i, nd.Host)
				return
			}
			<-ready[parent]
			if h.agents[parent] == nil || errs[parent] != nil {
				errs[i] = fmt.Errorf("%s: not started: its parent in the launch tree, %s, did not start", nd.Host.Name, h.plan.Nodes[parent].Host.Name)
				return
			}
			h.agents[i], errs[i] = h.startRelayed(ctx, i, nd.Host, parent)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			errs[i] = &nodeError{node: i, err: err}
		}
	}
	return errors.Join(errs...)
}

// nodeError is one node's part of startAgents' error, which already names
// its host: gorun check files it under that host, without the name.
type nodeError struct {
	node int
	err  error
}

func (e *nodeError) Error() string { return e.err.Error() }
func (e *nodeError) Unwrap() error { return e.err }

// startDirect starts node's agent through the starter.
func (h *head) startDirect(ctx context.Context, node int, host hostfile.Host) (*agentConn, error) {
	p, err := h.o.Starter.StartAgent(ctx, host)
	if err != nil {
		if !strings.HasPrefix(err.Error(), host.Name+":") {
			err = fmt.Errorf("%s: start the agent: %w", host.Name, err)
		}
		return nil, err
	}
	h.connected(time.Since(h.start))
	// Cancelling ctx during the handshake kills the agent, which ends it.
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	defer stop()
	return h.connect(node, host, p)
}

// startRelayed asks the agent of parent, a node above node in the launch
// tree, to start node's agent, whose stream it then relays.
func (h *head) startRelayed(ctx context.Context, node int, host hostfile.Host, parent int) (*agentConn, error) {
	pa := h.agents[parent]
	r := newRelayedAgent(node, pa)
	h.relayMu.Lock()
	h.relayed[node] = r
	// A parent whose channel ended may have ended the agents below it
	// before this one was registered: it ends here then. (Its reader
	// marks it ended before it ends them: lose.)
	if pa.ended.Load() {
		r.end(fmt.Errorf("its parent in the launch tree, %s, was lost", h.plan.Nodes[parent].Host.Name))
	}
	h.relayMu.Unlock()
	exe, _ := os.Executable()
	timeout := h.beatTimeout()
	if err := pa.w.Send(control.TypeSpawn, control.Spawn{Node: node, Host: host.Name, User: host.User,
		Port: host.Port, Exe: exe, SSH: h.o.SSH, Beat: timeout / 5, BeatTimeout: timeout}); err != nil {
		return nil, fmt.Errorf("%s: start the agent through %s: %w", host.Name, h.plan.Nodes[parent].Host.Name, err)
	}
	stop := context.AfterFunc(ctx, func() { r.Kill() })
	a, err := h.connect(node, host, r)
	stop()
	h.connected(time.Since(h.start))
	return a, err
}

// connected records that an agent's process runs; the phase ends with
// the last.
func (h *head) connected(d time.Duration) {
	h.relayMu.Lock()
	defer h.relayMu.Unlock()
	h.phases.Connected = max(h.phases.Connected, d)
}

// connect shakes hands with a started agent and starts its reader.
func (h *head) connect(node int, host hostfile.Host, p AgentProcess) (*agentConn, error) {
	a := &agentConn{node: node, proc: p, w: control.NewWriter(p), r: control.NewReader(p), acks: make(chan int, stdinWindow+1)}
	if r, ok := p.(Remote); ok && r.Remote() {
		a.remote = true
	}
	a.heard.Store(time.Now().UnixNano())
	garbage, _, err := a.r.SkipPreamble()
	if len(garbage) > 0 {
		h.notef("gorun: %s printed this before its agent started (shell start-up files?): %q\n", host.Name, clip(garbage, 200))
	}
	if err != nil {
		p.Kill()
		return a, fmt.Errorf("agent on %s did not start: %w", host.Name, err)
	}
	mine := control.Hello{Version: h.o.Version, Name: host.Name}
	if a.remote {
		mine.BeatTimeout = h.beatTimeout()
		mine.Beat = mine.BeatTimeout / 5
	}
	a.hello, err = control.Handshake(a.w, a.r, mine)
	if err != nil {
		p.Kill()
		return a, fmt.Errorf("agent on %s: %w", host.Name, err)
	}
	a.upAt = time.Now()
	h.readers.Add(1)
	go h.read(a)
	if _, relayed := p.(*relayedAgent); a.remote && !relayed {
		// An agent of a launch tree exchanges heartbeats with the agent
		// that started it, which drops it when it falls silent.
		go h.beat(a)
	}
	return a, nil
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func (h *head) beatTimeout() time.Duration {
	if h.o.BeatTimeout > 0 {
		return h.o.BeatTimeout
	}
	return 5 * time.Second
}

// beat exchanges heartbeats with a remote agent from its handshake on,
// and declares it lost when it goes silent, until the head is done.
func (h *head) beat(a *agentConn) {
	timeout := h.beatTimeout()
	t := time.NewTicker(timeout / 5)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case now := <-t.C:
			if a.ended.Load() {
				return
			}
			a.w.Send(control.TypeBeat, nil)
			if last := time.Unix(0, a.heard.Load()); now.Sub(last) > timeout {
				// Kill ends the connection: read() reports the loss.
				a.lostWhy.Store(fmt.Sprintf("heard nothing from it for %v (host down, or its link cut)", now.Sub(last).Round(time.Millisecond)))
				a.proc.Kill()
				return
			}
		}
	}
}

// read turns an agent's frames into events until its channel ends;
// output goes to the mux here, in order, before the rank's exit is
// reported.
func (h *head) read(a *agentConn) {
	defer h.readers.Done()
	defer a.ended.Store(true)
	for {
		f, err := a.r.Next()
		a.heard.Store(time.Now().UnixNano())
		if err != nil {
			h.lose(a, a.readErr(err))
			return
		}
		if ok, err := h.inBand(a, f); ok {
			if err != nil {
				h.lose(a, err)
				return
			}
			continue
		}
		e, err := decodeEvent(a.node, f)
		if err != nil {
			h.lose(a, err)
			return
		}
		if x, ok := e.(rankExited); ok {
			h.mux.CloseRank(x.Rank)
		}
		h.events <- e
	}
}

// readErr says why the agent's channel ended: the head's reason when it
// dropped a silent agent, or the channel's own.
func (a *agentConn) readErr(err error) error {
	if why, ok := a.lostWhy.Load().(string); ok {
		return errors.New(why)
	}
	if err == io.EOF {
		return errors.New("its control channel closed")
	}
	return err
}

// lose reports the end of an agent's channel, and of the agents below it
// in the launch tree.
func (h *head) lose(a *agentConn, err error) {
	// Ended before its subtree is: an agent below it registered later
	// sees it (startRelayed).
	a.ended.Store(true)
	// Its own loss first: the job's summary names it, and the hosts it
	// was the launch tree's way to, rather than one of those.
	h.events <- agentLost{fromAgent{a.node}, err}
	h.loseSubtree(a.node, err)
}

// lostBeforeLaunch is the error of an agent lost while the head waited
// for another's answer, before any rank started: the job cannot run.
func (h *head) lostBeforeLaunch(e agentLost) error {
	return fmt.Errorf("lost the agent on %s before the ranks started: %v%s", h.plan.Nodes[e.node].Host.Name, e.err, h.subtreeNote(e.node))
}

// inBand handles the frames that are not events: a rank's output, stdin
// acks, heartbeats, and a launch tree's relays and spawn errors. It
// reports whether f was one of them, and an error that ends the agent's
// channel.
func (h *head) inBand(a *agentConn, f control.Frame) (bool, error) {
	switch f.Type {
	case control.TypeOutput:
		if h.firstOutput.Load() == 0 {
			h.firstOutput.CompareAndSwap(0, int64(time.Since(h.start)))
		}
		h.output(a, f)
	case control.TypeStdinAck:
		select {
		case a.acks <- 1:
		default:
		}
	case control.TypeBeat:
	case control.TypeRelay:
		return true, h.relayFrom(f)
	case control.TypeSpawnErr:
		return true, h.spawnFailed(f)
	case control.TypeProbeRe:
		return true, h.probes.deliver(a.node, f)
	default:
		return false, nil
	}
	return true, nil
}

// broadcast sends to every agent still connected.
func (h *head) broadcast(t control.Type, v any) { h.broadcastTo(false, t, v) }

// broadcastUnstepped sends to the agents that are not tasks of a resource
// manager's step (srun), which signals those itself.
func (h *head) broadcastUnstepped(t control.Type, v any) { h.broadcastTo(true, t, v) }

func (h *head) broadcastTo(unsteppedOnly bool, t control.Type, v any) {
	for _, a := range h.agents {
		if _, stepped := a.proc.(*tcpAgent); !a.gone && !(unsteppedOnly && stepped) {
			a.w.Send(t, v)
		}
	}
}

// stopAgents tells every agent to shut down and waits for it, bounded:
// an agent that has not closed its stream within 5 s is killed.
func (h *head) stopAgents() {
	for _, a := range h.agents {
		if a != nil {
			a.w.Send(control.TypeShutdown, nil)
			a.proc.Close()
		}
	}
	done := make(chan struct{})
	go func() { h.readers.Wait(); close(done) }()
	deadline := time.After(5 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-h.events:
		case <-deadline:
			for i, a := range h.agents {
				if a != nil && !a.ended.Load() {
					h.notef("gorun: the agent on %s did not exit; dropping it\n", h.plan.Nodes[i].Host.Name)
					a.proc.Kill()
				}
			}
		}
	}
	for _, a := range h.agents {
		if a != nil {
			a.proc.Wait()
		}
	}
}
