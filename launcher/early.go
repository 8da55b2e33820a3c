package launcher

import (
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// EarlyAgent is this machine's agent, started as gorun's first act, before
// the head reads its flags and configuration and makes its plan, so that
// the agent's own start (a Go program's: runtime, package initialisation,
// its hello) runs beside the head's instead of after it. It is the agent a
// LocalStarter would start, less the plan's name for the host, which the
// head's hello gives it (control.Hello's Name). The first local host of the
// plan takes it (LocalStarter.Early); Discard ends it when no host did.
//
// It changes nothing a rank sees: the agent starts from the same
// executable with the same environment, working directory and descriptors
// as a LocalStarter's, since the head changes none of them before it
// starts agents.
type EarlyAgent struct {
	mu    sync.Mutex
	agent *localAgent // nil once taken or discarded
}

// StartEarlyAgent starts the agent of this machine now; nil when it could
// not start (the job then starts its local agent as it always does).
func StartEarlyAgent() *EarlyAgent {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	a, err := startLocalAgent(exe, "", os.Stderr)
	if err != nil {
		return nil
	}
	return &EarlyAgent{agent: a}
}

// take hands the agent over, once; nil for a nil EarlyAgent and after the
// first take or Discard.
func (e *EarlyAgent) take() *localAgent {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.agent
	e.agent = nil
	return a
}

// Discard ends the agent if no host took it (a job of other hosts only, a
// dry run, a usage error) and reaps it. It has started no rank: it waits
// for the head's hello. Safe on a nil EarlyAgent and more than once.
func (e *EarlyAgent) Discard() {
	a := e.take()
	if a == nil {
		return
	}
	a.Kill()
	a.in.Close()
	a.Wait()
}

// startLocalAgent starts `gorun agent` from exe, on pipes; host "" leaves
// the host's name to the head's hello.
func startLocalAgent(exe, host string, stderr io.Writer) (*localAgent, error) {
	args := []string{"agent"}
	if host != "" {
		args = append(args, "--host", host)
	}
	cmd := exec.Command(exe, args...)
	// Its own process group keeps the terminal's Ctrl-C away from it (the
	// head forwards signals); SIGTERM when the head dies is a second
	// line behind EOF on stdin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &localAgent{cmd: cmd, in: in, out: out}, nil
}
