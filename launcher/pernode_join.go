package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// joinWaitNote is how long a node waits for its first round before it
// says that it waits, and why.
const joinWaitNote = 5 * time.Second

// nodeJoin is a node of a per-node launch: it joins the endpoint, starts
// its agent for each round, and ends with the job's status.
type nodeJoin struct {
	p         *PerNode
	argv      []string
	version   string
	stdout    io.Writer // where this node's ranks' output is printed (its agent prints it); nil = os.Stdout
	stderr    io.Writer
	addr      string // where it dials; "" = p.Endpoint
	agentHost string // the host its agent dials (the endpoint's)
	self      string // the endpoint's own node: the nonce it gave
}

// run joins the endpoint and follows it to the job's end.
func (n *nodeJoin) run(ctx context.Context) (int, error) {
	addr := n.addr
	if addr == "" {
		addr = n.p.Endpoint
	}
	host, _ := os.Hostname()
	hello := joinHello{ID: n.p.ID, NProc: n.p.NProc, Min: n.p.MinNodes, Max: n.p.MaxNodes, Host: host, Argv: n.argv, Version: n.version, Self: n.self}
	l, err := n.dial(ctx, addr, hello)
	if errors.Is(err, ErrRdzvRefused) {
		return ExitUsage, err
	}
	if err != nil {
		return ExitLaunch, err
	}
	defer l.c.Close()
	msgs, readErr := readNodeMsgs(l)
	stop := make(chan struct{})
	defer close(stop)
	go l.beat(joinMsg{Beat: true}, stop)

	var sigs chan os.Signal
	if n.self == "" {
		// The endpoint's node leaves signals to its head.
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(sigs)
	}
	j := &joined{n: n, l: l, addr: addr}
	for {
		select {
		case m := <-msgs:
			if code, done, err := j.message(m); done {
				return code, err
			}
		case err := <-readErr:
			return j.endpointLost(err)
		case <-j.waitNote:
			fmt.Fprintf(n.stderr, "gorun: joined the per-node launch at %s %v ago: %s\n", addr, joinWaitNote, j.waitWhy)
		case s := <-sigs:
			j.got = s
			if j.agent == nil {
				return signalCode(s), nil
			}
			// The agent stops this node's ranks: in an elastic job it
			// leaves, and the others go on; else the job ends.
			j.agent.Process.Signal(s)
		case <-ctx.Done():
			j.stopAgent()
			return exitCancelled, ctx.Err()
		}
	}
}

// readNodeMsgs reads the endpoint's messages on a goroutine of its own
// until the connection fails or falls silent, which it then tells once;
// heartbeats are not passed on.
func readNodeMsgs(l *lineConn) (<-chan nodeMsg, <-chan error) {
	msgs := make(chan nodeMsg, 4)
	readErr := make(chan error, 1)
	go func() {
		for {
			var m nodeMsg
			if err := l.recv(&m, rdzvSilence); err != nil {
				readErr <- err
				return
			}
			if !m.Beat {
				msgs <- m
			}
		}
	}()
	return msgs, readErr
}

// joined is a node that joined the endpoint, as run follows it: its
// agent of the round, and the signal it got.
type joined struct {
	n         *nodeJoin
	l         *lineConn
	addr      string
	agent     *exec.Cmd     // this round's agent; nil between rounds
	agentDone chan struct{} // closed when agent exited
	got       os.Signal     // the signal the node got, which its exit code tells
	// A node that waits long says why, once.
	waitNote <-chan time.Time
	waitWhy  string
}

// waitAgent waits for the round's agent to exit, for at most limit before
// it kills it.
func (j *joined) waitAgent(limit time.Duration) {
	if j.agent == nil {
		return
	}
	select {
	case <-j.agentDone:
	case <-time.After(limit):
		j.agent.Process.Signal(syscall.SIGKILL)
		<-j.agentDone
	}
	j.agent = nil
}

// stopAgent stops the round's agent, if any: SIGTERM, then SIGKILL.
func (j *joined) stopAgent() {
	if j.agent != nil {
		j.agent.Process.Signal(syscall.SIGTERM)
		j.waitAgent(15 * time.Second)
	}
}

// message follows one message of the endpoint's: the job's end, a
// refusal, why the job waits, a round to start or a restart to get ready
// for. done says that the node's part ends, with code and err.
func (j *joined) message(m nodeMsg) (code int, done bool, err error) {
	n := j.n
	switch {
	case m.End != nil:
		j.waitAgent(15 * time.Second)
		if j.got != nil {
			return signalCode(j.got), true, nil
		}
		if m.Error != "" && n.self == "" {
			fmt.Fprintf(n.stderr, "gorun: %s\n", m.Error)
		}
		return *m.End, true, nil
	case m.Error != "":
		j.waitAgent(15 * time.Second)
		return ExitUsage, true, fmt.Errorf("%w: %s", ErrUsage, m.Error)
	case m.Wait != "":
		if j.waitWhy == "" && n.self == "" {
			j.waitNote = time.After(joinWaitNote)
		}
		j.waitWhy = m.Wait
	case m.Start != nil:
		j.waitNote = nil
		j.waitAgent(15 * time.Second)
		if j.agent, j.agentDone, err = n.startAgent(m.Start); err != nil {
			return ExitLaunch, true, err
		}
	case m.Restart:
		j.waitAgent(30 * time.Second)
		if j.got != nil {
			return signalCode(j.got), true, nil
		}
		j.l.send(joinMsg{Ready: true})
	}
	return 0, false, nil
}

// endpointLost ends the node's part when the endpoint's connection failed
// (err) or fell silent.
func (j *joined) endpointLost(err error) (int, error) {
	j.stopAgent()
	if j.got != nil {
		return signalCode(j.got), nil
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("it closed the connection")
	}
	return ExitLaunch, fmt.Errorf("the per-node launch's endpoint %s went away: %w", j.addr, err)
}

// dial joins the endpoint, retrying until --rdzv-timeout while nothing
// answers there (its node may start later than this one).
func (n *nodeJoin) dial(ctx context.Context, addr string, hello joinHello) (*lineConn, error) {
	start := time.Now()
	deadline := start.Add(n.p.Timeout)
	pause := 50 * time.Millisecond
	said := false
	for {
		l, err := dialEndpoint(addr, n.p.Token, hello)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrRdzvRefused) {
			return nil, fmt.Errorf("per-node launch at %s: %w", addr, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("per-node launch: the endpoint %s did not answer within --rdzv-timeout %v: %w", addr, n.p.Timeout, err)
		}
		if !said && time.Since(start) > joinWaitNote {
			said = true
			fmt.Fprintf(n.stderr, "gorun: the per-node launch's endpoint %s: %v; trying again until --rdzv-timeout (%v)\n", addr, err, n.p.Timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// signalCode is the status of a node that got s: 128+N.
func signalCode(s os.Signal) int { return exitSignalStart + int(s.(syscall.Signal)) }

// startAgent starts this node's agent for a round: `gorun agent
// --connect`, which comes in to the head through its door.
func (n *nodeJoin) startAgent(st *nodeStart) (*exec.Cmd, chan struct{}, error) {
	args := []string{"agent", "--connect", net.JoinHostPort(n.agentHost, strconv.Itoa(st.Port)), "--host", st.Name}
	if st.Leave {
		args = append(args, "--leave-on-signal")
	}
	cmd := exec.Command(n.p.Exe, args...)
	// The token stays with this gorun: the agent and the ranks need none.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, TokenEnv+"=") }), st.Env...)
	// It prints this node's ranks' output (control.Launch.Print).
	cmd.Stdout, cmd.Stderr = n.stdout, n.stderr
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	// Its own group keeps a terminal's Ctrl-C to this gorun; SIGTERM if
	// this gorun dies (the agent then stops its ranks and goes).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start this node's agent: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return cmd, done, nil
}
