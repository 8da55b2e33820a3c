// Package peerproc runs the peer process of a two-process test.
//
// The test process starts the test binary again, with -test.run selecting
// exactly the running test and an environment variable set to the test's
// name, so that the same test function runs in both processes: in the
// test process it calls Start; in the peer, Attach tells it so. The two
// talk over a line-based control channel (Ctl): the test process writes to
// the peer's standard input, and the peer writes to a pipe it inherits as
// file descriptor 3. Closing the test process's end tells the peer to
// finish.
package peerproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// ctlFD is the peer's file descriptor for its end of the control channel
// (the first of exec.Cmd.ExtraFiles).
const ctlFD = 3

// Config describes the peer process of a test: how Start runs it and how
// both ends use the control channel.
type Config struct {
	// Env is the environment variable that marks the peer process; Start
	// sets it to the test's name.
	Env string
	// Args are more flags for the test binary, such as -test.timeout.
	// Start itself passes -test.run, -test.count=1 and, in verbose runs,
	// -test.v.
	Args []string
	// ExitTimeout is how long Wait lets the peer take to exit once the
	// control channel is closed, before it kills it; zero means no bound.
	ExitTimeout time.Duration
	// ExpectTimeout bounds how long Ctl.Expect waits for a line, on
	// both sides; zero means no bound.
	ExpectTimeout time.Duration
}

// Child is the peer process, seen from the test process.
type Child struct {
	// Ctl is the test process's end of the control channel.
	Ctl *Ctl

	cmd         *exec.Cmd
	stdin       io.Closer
	ctl         io.Closer
	out         bytes.Buffer
	exitTimeout time.Duration
	once        sync.Once
	err         error
}

// Start starts the current test binary as the peer process of test t, with
// cfg.Env set to t.Name() and -test.run selecting t alone. When t ends, it
// kills the peer, waits for it and, if t failed, logs the peer's output.
// Start fails t if the peer cannot be started.
func Start(t *testing.T, cfg Config) *Child {
	t.Helper()
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], append(args, cfg.Args...)...)
	cmd.Env = append(os.Environ(), cfg.Env+"="+t.Name())
	cmd.SysProcAttr = dieWithParent()
	c := &Child{cmd: cmd, exitTimeout: cfg.ExitTimeout}
	cmd.Stdout, cmd.Stderr = &c.out, &c.out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("peer process: %v", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		stdin.Close()
		t.Fatalf("peer process: %v", err)
	}
	cmd.ExtraFiles = []*os.File{ctlW}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		ctlR.Close()
		ctlW.Close()
		t.Fatalf("start the peer process: %v", err)
	}
	ctlW.Close()
	c.Ctl = newCtl(ctlR, stdin, cfg.ExpectTimeout)
	c.stdin, c.ctl = stdin, ctlR
	t.Cleanup(func() {
		c.Kill()
		c.Wait()
		if t.Failed() {
			t.Logf("peer process output:\n%s", c.Output())
		}
	})
	return c
}

// Wait closes the control channel, which tells the peer to finish, and
// returns how it exited. A peer that does not exit within the configured
// ExitTimeout is killed. Only the first call waits; later ones return the
// same result.
func (c *Child) Wait() error {
	c.once.Do(func() {
		c.stdin.Close()
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case c.err = <-done:
		case <-after(c.exitTimeout):
			c.cmd.Process.Kill()
			c.err = fmt.Errorf("the peer process did not exit within %v: %w", c.exitTimeout, <-done)
		}
		c.ctl.Close()
	})
	return c.err
}

// Kill kills the peer process (with SIGKILL where there is one) without
// waiting for it to exit.
func (c *Child) Kill() error { return c.cmd.Process.Kill() }

// Output returns what the peer wrote to its standard output and standard
// error. Call it only after Wait.
func (c *Child) Output() string { return c.out.String() }

// InPeer reports whether this process is a peer process started with
// Config.Env set to env, for whichever test.
func InPeer(env string) bool { return os.Getenv(env) != "" }

// Attach is for the test function when it may be running in the peer
// process. If this process is t's peer (cfg.Env names t), Attach returns
// the peer's end of the control channel and true. If this is the peer of
// another test, Attach skips t. In the test process itself, it returns
// nil and false. Of cfg, Attach uses Env and ExpectTimeout.
func Attach(t *testing.T, cfg Config) (*Ctl, bool) {
	t.Helper()
	name := os.Getenv(cfg.Env)
	if name == "" {
		return nil, false
	}
	if name != t.Name() {
		t.Skip("another test's peer")
	}
	return newCtl(os.Stdin, os.NewFile(ctlFD, "control"), cfg.ExpectTimeout), true
}

// Ctl is one process's end of the control channel, which carries lines of
// text each way.
type Ctl struct {
	in      *bufio.Reader
	out     io.Writer
	timeout time.Duration
}

func newCtl(in io.Reader, out io.Writer, timeout time.Duration) *Ctl {
	return &Ctl{in: bufio.NewReader(in), out: out, timeout: timeout}
}

// Say sends the other process a line made as by fmt.Sprintf(format,
// args...). It fails t if the line cannot be written.
func (c *Ctl) Say(t *testing.T, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(c.out, format+"\n", args...); err != nil {
		t.Fatalf("control channel: %v", err)
	}
}

// Expect reads the next line from the other process, which must start
// with word, and returns the rest without surrounding space. It fails t if
// the line does not come (within the configured ExpectTimeout, if any) or
// does not start with word.
func (c *Ctl) Expect(t *testing.T, word string) string {
	t.Helper()
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := c.in.ReadString('\n')
		got <- result{line, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-after(c.timeout):
		t.Fatalf("control channel: no %q from the other process within %v", word, c.timeout)
	}
	if r.err != nil {
		t.Fatalf("control channel: waiting for %q: %v", word, r.err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(r.line), word)
	if !ok {
		t.Fatalf("control channel: got %q, want %q", r.line, word)
	}
	return strings.TrimSpace(rest)
}

// Drain reads and discards what comes until the other process closes the
// control channel; in the peer, it waits for the test process to be done
// with it.
func (c *Ctl) Drain() { io.Copy(io.Discard, c.in) }

// runPattern is the -test.run pattern that selects exactly test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// after is time.After(d), or a channel that never fires if d is zero.
func after(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return time.After(d)
}
