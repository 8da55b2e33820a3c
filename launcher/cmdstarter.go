package launcher

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gorun/gorun/hostfile"
)

// CommandStarter starts the agents of other hosts through a batch
// system's own launcher, as Hydra's bootstrap servers do: qrsh -inherit
// HOST (Grid Engine's tight integration), blaunch HOST (LSF), pbs_tmrsh
// HOST (PBS's TM interface) or flux exec -r RANK (Flux), followed by
// `gorun agent --host HOST`. The batch system then runs, accounts for and
// cleans up the agent and its ranks as its job's. Each of these forwards
// its standard input and output, which carry the control channel, as ssh
// does. gorun is run at its own path on the other hosts (a batch system's
// hosts share their file systems): nothing is copied.
type CommandStarter struct {
	// Prefix is the command line before gorun's, for a host.
	Prefix func(host hostfile.Host) ([]string, error)
	// Exe is gorun's path, the same on every host.
	Exe string
	// Name names the launcher in messages (qrsh, blaunch, ...).
	Name string
	// Stderr receives the launcher's and the agents' diagnostics.
	Stderr io.Writer
}

var _ Starter = (*CommandStarter)(nil)

// NewCommandStarter returns the starter of a's launcher (qrsh, blaunch,
// pbs_tmrsh or flux), starting gorun at exe; nil for srun and ssh, which
// have starters of their own.
func NewCommandStarter(a *Allocation, exe string, stderr io.Writer) *CommandStarter {
	s := &CommandStarter{Exe: exe, Name: a.Launcher, Stderr: stderr}
	path := a.LauncherPath
	switch a.Launcher {
	case LauncherQrsh:
		s.Prefix = func(h hostfile.Host) ([]string, error) { return []string{path, "-inherit", h.Name}, nil }
	case LauncherBlaunch, LauncherPBSTmrsh:
		s.Prefix = func(h hostfile.Host) ([]string, error) { return []string{path, h.Name}, nil }
	case LauncherFlux:
		s.Prefix = func(h hostfile.Host) ([]string, error) {
			r := a.Rank(h.Name)
			if r < 0 {
				return nil, fmt.Errorf("%w: host %s is not in %s", ErrUsage, h.Name, a.Name())
			}
			return []string{path, "exec", "--rank=" + strconv.Itoa(r)}, nil
		}
	default:
		return nil
	}
	return s
}

// StartAgent starts host's agent through the launcher.
func (s *CommandStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	argv, err := s.Prefix(host)
	if err != nil {
		return nil, err
	}
	argv = append(argv, s.Exe, "agent", "--host", host.Name)
	cmd := exec.Command(argv[0], argv[1:]...)
	// Its own process group, as a local agent's: the head forwards the
	// terminal's signals itself. The launcher's client dies with the head.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	a := &commandAgent{cmd: cmd, name: s.Name, host: host.Name, errDone: make(chan struct{})}
	a.errTail.w = s.Stderr
	// The launcher's stderr is a pipe of our own, read to its end by a
	// goroutine that Read waits for at the control channel's EOF: exec's
	// copier for a plain io.Writer may not have copied the last line, the
	// one that says why the launcher ended, by then.
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s: start the agent with %s: %w", host.Name, s.Name, err)
	}
	cmd.Stderr = errW
	in, err := cmd.StdinPipe()
	if err == nil {
		a.out, err = cmd.StdoutPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	errW.Close()
	if err != nil {
		errR.Close()
		return nil, fmt.Errorf("%s: start the agent with %s: %w", host.Name, s.Name, err)
	}
	go func() {
		defer close(a.errDone)
		defer errR.Close()
		io.Copy(&a.errTail, errR)
	}()
	a.in = in
	return a, nil
}

// errWait bounds the wait for the end of a launcher's stderr once its
// stdout has ended: a process the launcher left behind may hold it.
const errWait = 2 * time.Second

// commandAgent is an agent started through a batch system's launcher.
type commandAgent struct {
	cmd        *exec.Cmd
	in         io.WriteCloser
	out        io.Reader
	name, host string
	errTail    tailWriter    // the launcher's stderr, passed on as it comes
	errDone    chan struct{} // closed when the launcher's stderr has ended
}

// waitErr waits (errWait at most) until the launcher's stderr has ended.
func (a *commandAgent) waitErr() {
	select {
	case <-a.errDone:
	case <-time.After(errWait):
	}
}

func (a *commandAgent) Read(p []byte) (int, error) {
	n, err := a.out.Read(p)
	if err == io.EOF && n == 0 {
		a.waitErr()
		if tail := a.errTail.tail(); tail != "" {
			return 0, fmt.Errorf("%s to %s ended: %s", a.name, a.host, tail)
		}
	}
	return n, err
}
func (a *commandAgent) Write(p []byte) (int, error) { return a.in.Write(p) }
func (a *commandAgent) Close() error                { return a.in.Close() }
func (a *commandAgent) Remote() bool                { return true }
func (a *commandAgent) Wait() error {
	err := a.cmd.Wait()
	a.waitErr() // its diagnostics are passed on before the head reports
	return err
}
func (a *commandAgent) Kill() error { return a.cmd.Process.Kill() }

// tailWriter passes what is written on to w (when set) and keeps its last
// line, to say why a launcher ended.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	last []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		t.w.Write(p)
	}
	t.last = append(t.last, p...)
	if len(t.last) > 4096 {
		t.last = t.last[len(t.last)-4096:]
	}
	return len(p), nil
}

func (t *tailWriter) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := bytes.TrimRight(t.last, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
