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
	var agent *exec.Cmd
	var agentDone chan struct{}
	var got os.Signal
	waitAgent := func(limit time.Duration) {
		if agent == nil {
			return
		}
		select {
		case <-agentDone:
		case <-time.After(limit):
			agent.Process.Signal(syscall.SIGKILL)
			<-agentDone
		}
		agent = nil
	}
	// A node that waits long says why, once.
	var waitNote <-chan time.Time
	waitWhy := ""
	for {
		select {
		case m := <-msgs:
			switch {
			case m.End != nil:
				waitAgent(15 * time.Second)
				if got != nil {
					return signalCode(got), nil
				}
				if m.Error != "" && n.self == "" {
					fmt.Fprintf(n.stderr, "gorun: %s\n", m.Error)
				}
				return *m.End, nil
			case m.Error != "":
				waitAgent(15 * time.Second)
				return ExitUsage, fmt.Errorf("%w: %s", ErrUsage, m.Error)
			case m.Wait != "":
				if waitWhy == "" && n.self == "" {
					waitNote = time.After(joinWaitNote)
				}
				waitWhy = m.Wait
			case m.Start != nil:
				waitNote = nil
				waitAgent(15 * time.Second)
				agent, agentDone, err = n.startAgent(m.Start)
				if err != nil {
					return ExitLaunch, err
				}
			case m.Restart:
				waitAgent(30 * time.Second)
				if got != nil {
					return signalCode(got), nil
				}
				l.send(joinMsg{Ready: true})
			}
		case err := <-readErr:
			if agent != nil {
				agent.Process.Signal(syscall.SIGTERM)
				waitAgent(15 * time.Second)
			}
			if got != nil {
				return signalCode(got), nil
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("it closed the connection")
			}
			return ExitLaunch, fmt.Errorf("the per-node launch's endpoint %s went away: %w", addr, err)
		case <-waitNote:
			fmt.Fprintf(n.stderr, "gorun: joined the per-node launch at %s %v ago: %s\n", addr, joinWaitNote, waitWhy)
		case s := <-sigs:
			got = s
			if agent == nil {
				return signalCode(s), nil
			}
			// The agent stops this node's ranks: in an elastic job it
			// leaves, and the others go on; else the job ends.
			agent.Process.Signal(s)
		case <-ctx.Done():
			if agent != nil {
				agent.Process.Signal(syscall.SIGTERM)
				waitAgent(15 * time.Second)
			}
			return exitCancelled, ctx.Err()
		}
	}
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
