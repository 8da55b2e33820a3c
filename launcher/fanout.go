package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/sshclient"
)

// Launch trees (--launch-fanout K): the head connects to K hosts; each of
// their agents connects to up to K more, and so on, relaying the lower
// agents' control streams as TypeRelay frames. The head then holds K
// connections, not one per host, and every agent speaks the same
// protocol whether it is reached directly or through others.

// fanoutParent returns the node that starts node i in a K-ary launch
// tree over nodes 0..n-1 (nodes 0..K-1 hang off the head: -1).
func fanoutParent(i, k int) int {
	if k <= 0 || i < k {
		return -1
	}
	return i/k - 1
}

// spawnErr is the agent's answer when a lower agent could not start.
type spawnErr struct {
	Node int    `json:"node"`
	Err  string `json:"err"`
}

// kid is a lower agent this agent started for the head.
type kid struct {
	in    chan []byte // bytes from the head for its input; nil = EOF
	ready chan struct{}
	proc  AgentProcess // set before ready closes; nil if it failed
}

// spawn starts a lower agent and relays its stream, in both directions.
func (a *agent) spawn(sp control.Spawn, k *kid) {
	defer close(k.ready)
	d, err := a.sshDialer(sp.SSH)
	var p AgentProcess
	if err == nil {
		self, _ := os.Executable()
		st := &SSHStarter{Dialer: d, Exe: sp.Exe, Source: self, Stage: sp.SSH.Stage, Stderr: a.o.Log, Log: a.log.printf, ForwardAgent: true}
		p, err = st.StartAgent(context.Background(), hostfile.Host{Name: sp.Host, User: sp.User, Port: sp.Port})
	}
	if err != nil {
		a.w.Send(control.TypeSpawnErr, spawnErr{Node: sp.Node, Err: err.Error()})
		a.w.SendRelay(control.Relay{Node: sp.Node})
		return
	}
	k.proc = p
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := p.Read(buf)
			if n > 0 {
				a.w.SendRelay(control.Relay{Node: sp.Node, Data: buf[:n]})
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					a.w.Send(control.TypeSpawnErr, spawnErr{Node: sp.Node, Err: err.Error()})
				}
				a.w.SendRelay(control.Relay{Node: sp.Node})
				p.Wait()
				return
			}
		}
	}()
	go func() {
		for b := range k.in {
			if b == nil {
				p.Close()
				return
			}
			if _, err := p.Write(b); err != nil {
				return
			}
		}
	}()
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

// relayTo hands bytes from the head to a lower agent.
func (a *agent) relayTo(r control.Relay) {
	a.kidsMu.Lock()
	k := a.kids[r.Node]
	a.kidsMu.Unlock()
	if k == nil {
		return
	}
	if len(r.Data) == 0 {
		close(k.in)
		return
	}
	k.in <- append([]byte(nil), r.Data...)
}

// dropKids ends the connections to every lower agent: each sees EOF and
// stops its own ranks and its own lower agents.
func (a *agent) dropKids() {
	a.kidsMu.Lock()
	defer a.kidsMu.Unlock()
	for _, k := range a.kids {
		select {
		case <-k.ready:
			if k.proc != nil {
				k.proc.Kill()
			}
		default:
		}
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
