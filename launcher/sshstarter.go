package launcher

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/ssh"
	sshagent "golang.org/x/crypto/ssh/agent"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/plugins/pmixbridge"
	"github.com/gorun/gorun/sshclient"
)

// ErrGorunMissing means gorun is not at the head's path on a host and
// staging was turned off.
var ErrGorunMissing = errors.New("gorun missing")

// SSHStarter starts agents on other hosts over SSH: one connection per
// host, gorun's control protocol over the session's stdin and stdout.
type SSHStarter struct {
	Dialer *sshclient.Dialer
	Exe    string    // the path of gorun that remote hosts run (the head's own)
	Source string    // the local binary to copy when staging; "" = Exe
	Stage  bool      // copy gorun over when it is not at Exe on a host
	Stderr io.Writer // the agents' diagnostics
	Log    func(format string, args ...any)
	// ForwardAgent forwards the ssh-agent at $SSH_AUTH_SOCK to the
	// session, so that an agent that starts lower agents (a launch tree)
	// authenticates with the user's keys without holding any.
	ForwardAgent bool
	// PMIx and Argv are the job's --pmix mode (PMIxAuto, PMIxOn, PMIxOff;
	// "" is PMIxOff) and program. Where gorun is staged to a host and the
	// job may need PMIx (see pmixToStage), the gorun-pmix plugin next to
	// the staged binary here is staged with it, so that the agent finds it
	// next to its own executable there.
	PMIx string
	Argv []string

	extrasOnce sync.Once
	pmixPlugin string // the local gorun-pmix to stage with gorun, or ""
	tools      string // the local gorun-tools to stage with gorun, or "" (toolsToStage)
}

var _ Starter = (*SSHStarter)(nil)

// errNotThere means no executable gorun was at the path on the host.
var errNotThere = errors.New("not there")

// StaticBinary is the name of the static build of gorun (CGO_ENABLED=0)
// that `make build` puts next to gorun, its cgo build. Where a host's
// glibc is too old for the cgo build, gorun stages this one there instead.
const StaticBinary = "gorun-static"

// glibcRefusedError means that glibc's dynamic loader on a host refused to
// start gorun because the host's C library lacks a symbol version gorun
// was linked against.
type glibcRefusedError struct {
	version string // as the loader said it, such as "2.34"
}

func (e *glibcRefusedError) Error() string {
	return "its dynamic loader found no GLIBC_" + e.version
}

// StartAgent connects to host and starts `gorun agent` there: at the
// head's own path when the gorun there is this very build (its build id
// comes in the agent's preamble, so nothing is hashed on the fast path),
// else from a copy that gorun stages over the same connection. Where the
// host's glibc is too old for this gorun (a cgo build), as the staging
// probe or the host's dynamic loader tells, it stages StaticBinary from
// next to gorun's own executable instead, and says so.
//
// With staging on, the first command also runs, where the head's path
// holds no gorun, a copy that an earlier run staged there and that is
// still sound and this build's (sshclient.StartCommand): one session, as
// on a shared path, instead of a probe and a second start. gorun's binary
// is hashed for it while the connection is made.
func (s *SSHStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	var fast chan string
	if s.Stage {
		fast = make(chan string, 1)
		go func() { fast <- s.fastCommand(host) }()
	}
	c, err := s.Dialer.Dial(ctx, host.Name, host.User, host.Port)
	if err != nil {
		return nil, withHostGuess(err, host.Name) // a typo: did you mean h2?
	}
	mine := selfBuildID()
	cmd := ""
	if fast != nil {
		cmd = <-fast
	}
	if cmd == "" {
		cmd = s.command(host, s.Exe, false)
	}
	a, id, err := s.startCmd(c, host, s.Exe, cmd)
	if err == nil && id == mine {
		return a, nil
	}
	var refused *glibcRefusedError
	if err != nil && !errors.Is(err, errNotThere) && !errors.As(err, &refused) {
		c.Close()
		return nil, err
	}
	why := fmt.Sprintf("%s is not there", s.Exe)
	switch {
	case a != nil:
		a.sess.Close() // another build: its agent sees EOF and leaves
		why = fmt.Sprintf("the gorun at %s there is another build (%s, this is %s)", s.Exe, id, mine)
	case refused != nil:
		why = fmt.Sprintf("the gorun at %s cannot start there: %v", s.Exe, refused)
	}
	if !s.Stage {
		c.Close()
		if refused != nil {
			return nil, fmt.Errorf("%s: %s (its glibc is too old for that gorun); without --no-stage gorun copies itself, or %s, there", host.Name, why, StaticBinary)
		}
		return nil, fmt.Errorf("%s: %w: %s (no shared file system?); without --no-stage gorun copies itself", host.Name, ErrGorunMissing, why)
	}
	a, err = s.stageAndStart(ctx, c, host, mine, why, refused)
	if err != nil {
		c.Close()
		return nil, err
	}
	return a, nil
}

// source returns the local binary to copy when staging.
func (s *SSHStarter) source() string {
	if s.Source != "" {
		return s.Source
	}
	return s.Exe
}

// fastCommand returns sshclient.StartCommand's command that starts the
// agent on host from s.Exe or else from a sound copy in its staging cache,
// or "" where gorun's binaries cannot be read here (Stage then says why).
func (s *SSHStarter) fastCommand(host hostfile.Host) string {
	src := s.source()
	s.findExtras(src)
	cmd, err := sshclient.StartCommand(s.Exe, src, s.extra(), "agent", "--host", host.Name)
	if err != nil {
		return ""
	}
	return cmd
}

// stageAndStart copies gorun to the host of c (sshclient.Stage) and starts
// its agent there, mine being gorun's build id and why the reason, for the
// log. Where the host's glibc is too old for gorun, as Stage finds or as
// the host's dynamic loader says (refused, at the head's path, or at the
// copy), it goes on with startStatic.
func (s *SSHStarter) stageAndStart(ctx context.Context, c *ssh.Client, host hostfile.Host, mine, why string, refused *glibcRefusedError) (*sshAgent, error) {
	src := s.source()
	s.findExtras(src)
	st, err := sshclient.Stage(ctx, c, src, s.Exe, s.extra()...)
	var ge *sshclient.GlibcError
	if errors.As(err, &ge) {
		if refused != nil {
			ge.Missing = refused.version
		}
		return s.startStatic(ctx, c, host, ge)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: copy gorun there: %w", host.Name, err)
	}
	if refused != nil && !st.Cached {
		// The very file that the loader refused: no need to try it again.
		return s.startStatic(ctx, c, host, refusedGlibc(src, refused))
	}
	a, id, err := s.startOn(c, host, st.Path, st.Cached)
	if errors.As(err, &refused) {
		return s.startStatic(ctx, c, host, refusedGlibc(src, refused))
	}
	if err == nil && id != mine {
		err = fmt.Errorf("the copy of gorun at %s reports build %s, not %s", st.Path, id, mine)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: start gorun agent: %w", host.Name, err)
	}
	if s.Log != nil && st.Copied {
		// Said once, when the copy is made: a run that finds it in the
		// cache says nothing.
		s.Log("%s: %s; using a copy in %s%s", host.Name, why, st.Path, s.with())
	}
	return a, nil
}

// refusedGlibc is the GlibcError of a host whose dynamic loader refused
// gorun (its glibc version unknown here), src being gorun's binary.
func refusedGlibc(src string, refused *glibcRefusedError) *sshclient.GlibcError {
	need, _, err := sshclient.GlibcNeeds(src)
	if err != nil || need == "" {
		need = refused.version
	}
	return &sshclient.GlibcError{Need: need, Missing: refused.version}
}

// startStatic stages StaticBinary, the static build of gorun next to
// gorun's own executable, to the host of c, whose glibc ge says is too
// old for gorun, starts its agent there and says so in one line. Without
// a StaticBinary, the error says how to make one.
func (s *SSHStarter) startStatic(ctx context.Context, c *ssh.Client, host hostfile.Host, ge *sshclient.GlibcError) (*sshAgent, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: %v, and gorun cannot find its own binary to look for %s next to it: %w", host.Name, ge, StaticBinary, err)
	}
	static := filepath.Join(filepath.Dir(self), StaticBinary)
	if st, err := os.Stat(static); errors.Is(err, fs.ErrNotExist) || err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %v, and there is no %s to use instead: `make build` makes one next to gorun, or run CGO_ENABLED=0 go build -o %s ./cmd/gorun",
			host.Name, ge, static, static)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %v, and %s cannot be used instead: %w", host.Name, ge, static, err)
	}
	st, err := sshclient.Stage(ctx, c, static, s.Exe, s.extra()...)
	if err != nil {
		return nil, fmt.Errorf("%s: %v; copy %s there: %w", host.Name, ge, StaticBinary, err)
	}
	a, id, err := s.startOn(c, host, st.Path, st.Cached)
	if want := fileBuildID(static); err == nil && id != want {
		err = fmt.Errorf("the copy of %s at %s reports build %s, not %s", StaticBinary, st.Path, id, want)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v; start gorun agent from %s: %w", host.Name, ge, StaticBinary, err)
	}
	if s.Log != nil && st.Copied {
		s.Log("%s: %v: using %s, a copy in %s%s", host.Name, ge, StaticBinary, st.Path, s.with())
	}
	return a, nil
}

// findExtras finds, once, the files to stage next to src, the gorun
// binary to copy (pmixToStage, toolsToStage).
func (s *SSHStarter) findExtras(src string) {
	s.extrasOnce.Do(func() { s.pmixPlugin, s.tools = pmixToStage(src, s.PMIx, s.Argv), toolsToStage(src, s.Argv) })
}

// extra returns the files to stage next to gorun (see findExtras).
func (s *SSHStarter) extra() []string {
	var out []string
	for _, p := range []string{s.pmixPlugin, s.tools} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// with says, for the log, what was staged next to gorun.
func (s *SSHStarter) with() string {
	var names []string
	for _, p := range s.extra() {
		names = append(names, filepath.Base(p))
	}
	if len(names) == 0 {
		return ""
	}
	return " (with " + strings.Join(names, " and ") + " next to it)"
}

// toolsToStage returns the gorun-tools to stage along with the gorun
// binary exe, or "": the file of that name next to exe, where the job's
// program is ToolsProgram (gorun bench's ranks). Jobs of other programs
// are spared the copy.
func toolsToStage(exe string, argv []string) string {
	if len(argv) == 0 || argv[0] != ToolsProgram {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), ToolsBinary)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return "" // the agent says that it is missing
	}
	return p
}

// pmixToStage returns the gorun-pmix plugin to stage along with the gorun
// binary exe, or "": the file of that name next to exe (where `make build`
// puts it), if there is one and the job may need PMIx: never with mode
// PMIxOff (or ""), always with PMIxOn, and with PMIxAuto when
// programMayNeedPMIx says so. Staging it costs the copy of some 4 MB, on
// the first job only, which jobs that need no PMIx are spared.
func pmixToStage(exe, mode string, argv []string) string {
	if mode == "" || mode == PMIxOff {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), pmixbridge.Binary)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return "" // another error is Stage's to report, naming the file
	}
	if mode != PMIxOn && !programMayNeedPMIx(argv) {
		return ""
	}
	return p
}

// programMayNeedPMIx says whether the program argv[0], as this host
// resolves it (a path relative to the working directory, else a name in
// PATH), may need PMIx: needsPMIx says so, or this host cannot resolve
// it, as when it is on the other hosts only. gorun's own programs
// (ToolsProgram, SelfProgram) do not.
func programMayNeedPMIx(argv []string) bool {
	if len(argv) == 0 || argv[0] == ToolsProgram || argv[0] == SelfProgram {
		return false // gorun's own: Go ranks, which speak no PMIx
	}
	path, err := exec.LookPath(argv[0])
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return true
	}
	need, _ := needsPMIx(path, argv, "")
	return need
}

// startOn starts `path agent` in a new session on c and reads its
// preamble. The returned agent replays what was read, so the head's
// handshake sees the stream from its start. A path that sshclient.Stage
// staged runs through sshclient.StagedCommand, which checks in the same
// shell, before the exec, that nobody but the user and root can change it
// or a directory above it up to $HOME: the error names the host, the path
// and why when they could.
func (s *SSHStarter) startOn(c *ssh.Client, host hostfile.Host, path string, staged bool) (*sshAgent, string, error) {
	return s.startCmd(c, host, path, s.command(host, path, staged))
}

// command returns the command line that starts `path agent` for host: sh
// whatever the login shell is; exec, so that the agent is the session's
// process and sshd's EOF reaches it; 127 when not there. A staged path
// runs through sshclient.StagedCommand.
func (s *SSHStarter) command(host hostfile.Host, path string, staged bool) string {
	if staged {
		return sshclient.StagedCommand(path, "agent", "--host", host.Name)
	}
	return "exec /bin/sh -c " + shellQuote("if [ -x "+shellQuote(path)+" ]; then exec "+shellQuote(path)+" agent --host "+shellQuote(host.Name)+"; fi; exit 127")
}

// startCmd starts the agent with cmd (see command) in a new session on c
// and reads its preamble, as startOn says; path names the gorun in errors.
func (s *SSHStarter) startCmd(c *ssh.Client, host hostfile.Host, path, cmd string) (*sshAgent, string, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, "", fmt.Errorf("%s: open a session: %w", host.Name, err)
	}
	if s.ForwardAgent {
		if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
			if err := sshagent.ForwardToRemote(c, sock); err == nil {
				sshagent.RequestAgentForwarding(sess)
			}
		}
	}
	in, err1 := sess.StdinPipe()
	out, err2 := sess.StdoutPipe()
	errp, err3 := sess.StderrPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		sess.Close()
		return nil, "", fmt.Errorf("%s: %w", host.Name, err)
	}
	if err := sess.Start(cmd); err != nil {
		sess.Close()
		return nil, "", fmt.Errorf("%s: start gorun agent: %w", host.Name, err)
	}
	a := &sshAgent{c: c, sess: sess, in: in}
	// Until the preamble comes, a line of glibc's dynamic loader refusing
	// gorun is kept for the error, not shown: the caller says it in its
	// own words (the host's glibc is too old) and falls back.
	var started atomic.Bool
	var missing string
	var unsafe *sshclient.UnsafeCacheError
	a.relay.Add(1)
	go func() {
		defer a.relay.Done()
		sc := bufio.NewScanner(errp)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !started.Load() {
				if v, ok := sshclient.MissingGlibc(line); ok {
					missing = cmp.Or(missing, v)
					continue
				}
				if u, ok := sshclient.ParseUnsafe(line); ok {
					if unsafe == nil {
						unsafe = u
					}
					continue
				}
			}
			if !strings.HasPrefix(line, "gorun") {
				line = "gorun: " + host.Name + ": " + line
			}
			fmt.Fprintln(s.Stderr, line)
		}
	}()
	r := control.NewReader(out)
	garbage, id, err := r.SkipPreamble()
	if err != nil {
		werr := sess.Wait()
		a.relay.Wait()
		if missing != "" {
			return nil, "", &glibcRefusedError{version: missing}
		}
		if unsafe != nil {
			// The callers name the host.
			return nil, "", fmt.Errorf("refusing to run the copy of gorun at %s: %w; %s", path, unsafe, sshclient.UnsafeHint)
		}
		var ee *ssh.ExitError
		if errors.As(werr, &ee) && ee.ExitStatus() == 127 {
			return nil, "", errNotThere
		}
		return nil, "", fmt.Errorf("%s: gorun agent did not start (%v; it printed %q)", host.Name, err, clip(garbage, 200))
	}
	started.Store(true)
	replay := append(append(garbage, control.Preamble+" "+id+"\n"...), r.Buffered()...)
	a.out = io.MultiReader(bytes.NewReader(replay), out)
	return a, id, nil
}

// run runs a command on c and returns its error.
func run(c *ssh.Client, cmd string) error {
	sess, err := c.NewSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	return sess.Run(cmd)
}

type sshAgent struct {
	c     *ssh.Client
	sess  *ssh.Session
	in    io.WriteCloser
	out   io.Reader
	relay sync.WaitGroup
	once  sync.Once
}

func (a *sshAgent) Read(p []byte) (int, error)  { return a.out.Read(p) }
func (a *sshAgent) Write(p []byte) (int, error) { return a.in.Write(p) }
func (a *sshAgent) Close() error                { return a.in.Close() }
func (a *sshAgent) Remote() bool                { return true }

// Wait waits for the agent to end and closes the connection.
func (a *sshAgent) Wait() error {
	err := a.sess.Wait()
	a.relay.Wait()
	a.once.Do(func() { a.c.Close() })
	var ee *ssh.ExitMissingError
	if errors.As(err, &ee) {
		return nil // the connection went first: the agent saw EOF
	}
	return err
}

// Kill drops the connection: sshd closes the agent's stdin, and the agent
// stops its ranks.
func (a *sshAgent) Kill() error {
	a.once.Do(func() { a.c.Close() })
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// MixedStarter starts agents for hosts that are this machine locally and
// the others with Remote.
type MixedStarter struct {
	Local  Starter
	Remote Starter
}

// StartAgent picks the starter by the host's name.
func (m *MixedStarter) StartAgent(ctx context.Context, host hostfile.Host) (AgentProcess, error) {
	if IsLocal(host.Name) && host.User == "" && host.Port == 0 {
		return m.Local.StartAgent(ctx, host)
	}
	if m.Remote == nil {
		return nil, fmt.Errorf("%w: host %s is not this machine and no remote starter is set", ErrUsage, host.Name)
	}
	return m.Remote.StartAgent(ctx, host)
}
