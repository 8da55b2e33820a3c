package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/gorun/gorun/hostfile"
)

// Starter starts the agent for one host. The head holds one AgentProcess
// per host and speaks the control protocol over it.
type Starter interface {
	StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error)
}

// Remote is implemented by an AgentProcess that reaches its agent over a
// network: the head then exchanges heartbeats with it, since a cut link
// can leave the connection silent rather than closed.
type Remote interface {
	Remote() bool
}

// AgentProcess is a running agent as the head sees it.
type AgentProcess interface {
	io.Reader      // the agent's control output (its stdout)
	io.WriteCloser // the agent's control input (its stdin); Close means EOF
	// Wait waits for the agent to end.
	Wait() error
	// Kill ends the agent at once.
	Kill() error
}

// LocalStarter starts agents on this machine as `gorun agent` child
// processes, talking over pipes.
type LocalStarter struct {
	// Exe is the gorun binary; "" means this process's own executable.
	Exe string
	// Stderr receives the agents' diagnostics.
	Stderr io.Writer
	// Early, if set, is this machine's agent already started: the first
	// host takes it instead of starting one (see EarlyAgent).
	Early *EarlyAgent
}

var _ Starter = (*LocalStarter)(nil)

// StartAgent starts a local agent.
func (s *LocalStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	if a := s.Early.take(); a != nil {
		return a, nil
	}
	exe := s.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find gorun's own binary: %w", err)
		}
	}
	a, err := startLocalAgent(exe, host.Name, s.Stderr)
	if err != nil {
		return nil, fmt.Errorf("start agent for %s: %w", host.Name, err)
	}
	return a, nil
}

type localAgent struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader
}

func (a *localAgent) Read(p []byte) (int, error)  { return a.out.Read(p) }
func (a *localAgent) Write(p []byte) (int, error) { return a.in.Write(p) }
func (a *localAgent) Close() error                { return a.in.Close() }
func (a *localAgent) Wait() error                 { return a.cmd.Wait() }
func (a *localAgent) Kill() error                 { return a.cmd.Process.Kill() }
