package launcher

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"

	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/sshclient"
	"github.com/gorun/gorun/topology"
)

// AgentOptions configures [RunAgent].
type AgentOptions struct {
	In      io.Reader // the control channel from the head (the agent's stdin)
	Out     io.Writer // the control channel to the head (the agent's stdout)
	Log     io.Writer // diagnostics (the agent's stderr)
	Host    string    // the host's name in the plan, for messages
	Version string    // gorun's version, sent in the hello
	// Step says the agent runs as a task of a resource manager's step
	// (srun), which signals the step's processes itself (scancel, time
	// limits), the ranks among them: the agent then only reports USR1,
	// USR2 and a first SIGTERM, SIGINT or SIGHUP to the head, and a
	// second interrupt stops the ranks at once.
	Step bool
	// ConnAddr and ClientAddr are this host's and the head's addresses on
	// the control connection when it is not SSH's (which says them in
	// SSH_CONNECTION): the head picks MASTER_ADDR from them.
	ConnAddr, ClientAddr string
}

// stopGraceOnEOF is how long ranks get between SIGTERM and SIGKILL when the
// head has gone away without saying goodbye.
const stopGraceOnEOF = time.Second

// readerDrain bounds how long an exited rank's output pipes are read after
// its process group was killed (an escaped grandchild may hold them open).
const readerDrain = 2 * time.Second

type agent struct {
	o   AgentOptions
	w   *control.Writer
	log *log

	mu      sync.Mutex // guards everything below; held across fork+register
	byPID   map[int]*rankProc
	live    int // ranks of gen not yet reported
	gen     int
	stopped bool // Kill was received for gen
	// leftovers: an ended rank's process group still had processes
	// when it was killed, so orphans may be on their way here.
	leftovers bool
	killT     *time.Timer
	stdin     map[int]chan []byte // rank -> chunks for its stdin pipe

	heard atomic.Int64 // unix nanoseconds of the last frame from the head

	probe checkListener // gorun check's probe listener

	pmi       *pmiState  // this generation's PMI-1 server
	pmix      *pmixState // this generation's PMIx server, when the program needs one
	sockDir   string     // private directory (0700) of the ranks' rendezvous sockets
	shm       shmSweep   // the /dev/shm files that killed ranks leave
	fenceMu   sync.Mutex
	fenceSeq  int
	fenceWait map[int]chan control.FenceReply

	kidsMu   sync.Mutex
	kids     map[int]*kid // lower agents by node (--launch-fanout)
	dialOnce sync.Once
	dialer   *sshclient.Dialer
	dialErr  error
}

// watchSilence returns a channel that fires when no frame came from the
// head for timeout.
func (a *agent) watchSilence(timeout time.Duration) <-chan time.Time {
	a.heard.Store(time.Now().UnixNano())
	fire := make(chan time.Time, 1)
	go func() {
		t := time.NewTicker(timeout / 4)
		defer t.Stop()
		for now := range t.C {
			if now.Sub(time.Unix(0, a.heard.Load())) > timeout {
				fire <- now
				return
			}
		}
	}()
	return fire
}

type rankProc struct {
	rank    int
	pid     int
	start   time.Time
	readers sync.WaitGroup
	outR    []*os.File // read ends of stdout and stderr
	tail    tail
	stopped bool
	ooms    int
	stdin   chan []byte // chunks for its stdin pipe; nil if it takes none
}

// maxForkers bounds the goroutines that fork ranks side by side.
const maxForkers = 4

// RunAgent runs the agent side of a job until the head says shutdown or
// goes away. Everything it started is gone when it returns.
func RunAgent(ctx context.Context, o AgentOptions) error {
	// Orphaned grandchildren of ranks are re-parented to the agent, so that
	// it can find and kill them; ranks die with the agent's thread.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	a := &agent{
		o:     o,
		w:     control.NewWriter(o.Out),
		log:   &log{w: o.Log, prefix: "gorun agent " + o.Host + ": "},
		byPID: map[int]*rankProc{},
		stdin: map[int]chan []byte{},
	}
	if err := a.w.WritePreamble(selfBuildID()); err != nil {
		return err
	}
	host, _ := os.Hostname()
	r := control.NewReader(o.In)
	headHello, err := control.Handshake(a.w, r, control.Hello{
		Version: o.Version, Host: host, PID: os.Getpid(), Cores: runtime.NumCPU(), FreePort: freePort(), NUMA: numaNodes(),
		MaxFiles: openFileLimit(),
		ConnAddr: cmp.Or(o.ConnAddr, sshAddr(os.Getenv("SSH_CONNECTION"), 2)), ClientAddr: cmp.Or(o.ClientAddr, sshAddr(os.Getenv("SSH_CONNECTION"), 0)),
	})
	if err != nil {
		return fmt.Errorf("handshake with the head: %w", err)
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	interrupted := false
	// A write to the control channel after the head is gone must be an
	// error, not death by SIGPIPE before the ranks are stopped. Caught,
	// not ignored: an ignored SIGPIPE would be inherited by the ranks.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	defer signal.Stop(sigs)
	frames := make(chan error, 1)
	go func() { frames <- a.readFrames(r) }()
	var silent <-chan time.Time
	if headHello.Beat > 0 {
		// Over a network a dead head can look like a quiet one (a cut
		// link leaves the connection half-open): beat, and listen for it.
		t := time.NewTicker(headHello.Beat)
		defer t.Stop()
		go func() {
			for range t.C {
				if a.w.Send(control.TypeBeat, nil) != nil {
					return
				}
			}
		}()
		silent = a.watchSilence(headHello.BeatTimeout)
	}
	for {
		select {
		case <-silent:
			a.log.printf("heard nothing from the head for %v: stopping every rank", headHello.BeatTimeout)
			a.shutdown(stopGraceOnEOF)
			return errors.New("the head went silent")
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				a.reap()
				continue
			}
			sig := s.(syscall.Signal)
			// USR1 and USR2 (a preemption warning, say) go to the ranks,
			// and so does a step's first interrupt; the head hears of it,
			// to pass it on to ranks the resource manager did not signal.
			// A step's ranks already got it: Slurm signals every process
			// of a step (proctrack/cgroup and linuxproc), so passing it on
			// here would deliver it twice.
			if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 || o.Step && !interrupted {
				interrupted = interrupted || (sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2)
				if !o.Step {
					a.signalAll(sig)
				}
				a.w.Send(control.TypeSignaled, control.Signal{Signal: int(sig)})
				continue
			}
			a.log.printf("got %v: stopping every rank", s)
			return a.shutdown(stopGraceOnEOF)
		case err := <-frames:
			if err != nil && !errors.Is(err, errShutdown) {
				if !errors.Is(err, io.EOF) {
					a.log.printf("control channel: %v", err)
				}
				// The head is gone: nothing may survive it.
				a.shutdown(stopGraceOnEOF)
				return err
			}
			return a.shutdown(0)
		case <-ctx.Done():
			a.shutdown(stopGraceOnEOF)
			return ctx.Err()
		}
	}
}

var errShutdown = errors.New("shutdown")

func (a *agent) readFrames(r *control.Reader) error {
	for {
		f, err := r.Next()
		if err != nil {
			return err
		}
		a.heard.Store(time.Now().UnixNano())
		switch f.Type {
		case control.TypeBeat:
		case control.TypeRoute:
			var q control.Route
			if err := f.Decode(&q); err != nil {
				return err
			}
			addr, err := routeAddr(q.Peers, q.Iface)
			rep := control.RouteReply{Addr: addr}
			if err != nil {
				rep.Err = err.Error()
			}
			a.w.Send(control.TypeRouteRe, rep)
		case control.TypeLaunch:
			var l control.Launch
			if err := f.Decode(&l); err != nil {
				return err
			}
			a.launch(l)
		case control.TypeStdin:
			s, err := f.Stdin()
			if err != nil {
				return err
			}
			a.mu.Lock()
			ch := a.stdin[s.Rank]
			if len(s.Data) == 0 {
				delete(a.stdin, s.Rank)
			}
			a.mu.Unlock()
			if ch == nil {
				// The rank is gone or takes no stdin: acknowledge and drop.
				a.w.Send(control.TypeStdinAck, control.StdinAck{Rank: s.Rank, Bytes: len(s.Data)})
				continue
			}
			if len(s.Data) == 0 {
				close(ch)
			} else {
				ch <- append([]byte(nil), s.Data...) // the head keeps at most a window in flight
			}
		case control.TypeSignal:
			var s control.Signal
			if err := f.Decode(&s); err != nil {
				return err
			}
			a.signalAll(syscall.Signal(s.Signal))
		case control.TypeKill:
			var k control.Kill
			if err := f.Decode(&k); err != nil {
				return err
			}
			a.kill(k.Grace)
		case control.TypeFenceRe:
			var r control.FenceReply
			if err := f.Decode(&r); err != nil {
				return err
			}
			a.fenceDone(r)
		case control.TypeCheck:
			var q control.Check
			if err := f.Decode(&q); err != nil {
				return err
			}
			go func() { a.w.Send(control.TypeCheckRe, a.check(q)) }()
		case control.TypeSpawn:
			var sp control.Spawn
			if err := f.Decode(&sp); err != nil {
				return err
			}
			k := &kid{in: make(chan []byte, 1024), ready: make(chan struct{})}
			a.kidsMu.Lock()
			if a.kids == nil {
				a.kids = map[int]*kid{}
			}
			a.kids[sp.Node] = k
			a.kidsMu.Unlock()
			go a.spawn(sp, k)
		case control.TypeRelay:
			r, err := f.Relay()
			if err != nil {
				return err
			}
			a.relayTo(r)
		case control.TypeShutdown:
			return errShutdown
		default:
			return fmt.Errorf("%w: unexpected %s frame from the head", control.ErrProtocol, f.Type)
		}
	}
}

// launch starts a generation of ranks, or answers a print-env request.
func (a *agent) launch(l control.Launch) {
	base := os.Environ()
	plan, hints, report, topo, bindErr := bindings(l, base)
	bindingOf := func(i int) *topology.RankBinding {
		if i < len(plan) {
			return &plan[i]
		}
		return nil
	}
	var pmixEnv map[int][]string
	var kvSock, kvSecret string
	rankEnv := func(i int, s control.RankSpec) []string {
		var vars []string
		if i < len(hints) {
			vars = hints[i].Vars
		}
		return env.Build(base, env.Rank{
			JobID: l.JobID, Rank: s.Rank, WorldSize: l.WorldSize, LocalRank: s.LocalRank,
			LocalWorldSize: l.LocalWorldSize, NodeRank: l.NodeRank, NodeCount: l.NodeCount,
			Host: l.Host, MasterAddr: l.MasterAddr, MasterPort: l.MasterPort,
			RestartCount: l.Generation, MaxRestarts: l.MaxRestarts, Dir: l.Dir, Binding: vars, PMIFD: pmiFD,
			PMIx: pmixEnv[s.Rank], AgentSocket: kvSock, Secret: kvSecret, Slurm: l.Slurm,
		}, l.Exports)
	}
	if l.PrintEnv > 0 {
		// What the rank would get: the socket that would be served.
		if len(l.Secret) >= 16 && a.ensureSockDir() == nil {
			kvSock, kvSecret = filepath.Join(a.sockDir, kvSockName(l.Generation)), l.Secret
		}
		for i, s := range l.Ranks {
			if s.Rank == l.PrintEnv-1 {
				a.w.Send(control.TypeEnv, control.Env{Rank: s.Rank, Env: rankEnv(i, s)})
				return
			}
		}
		a.w.Send(control.TypeError, control.Error{Msg: fmt.Sprintf("rank %d is not on this host", l.PrintEnv-1)})
		return
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen, a.stopped, a.live = l.Generation, false, len(l.Ranks)
	a.shm.begin()
	if a.killT != nil {
		a.killT.Stop()
	}
	ooms := oomKills()
	a.pmi.close()
	a.pmi = nil
	if p, err := a.startPMI(l); err == nil {
		a.pmi = p
		if kvSock = p.socket(); kvSock != "" {
			kvSecret = l.Secret
		}
	} else {
		a.log.printf("PMI server: %v", err)
	}
	fail := func(s control.RankSpec, code int, msg string) {
		a.w.Send(control.TypeExited, control.Exited{Generation: l.Generation, Rank: s.Rank, End: time.Now(), Code: code, Err: msg})
		a.live--
	}
	path, code, msg := a.resolve(l, base)
	if msg == "" && bindErr != nil {
		code, msg = 2, "binding: "+bindErr.Error()
	}
	a.pmix.close()
	a.pmix = nil
	if msg == "" {
		p, err := a.startPMIx(l, path)
		if err != nil {
			code, msg = 2, err.Error()
		} else if p != nil {
			a.pmix, pmixEnv = p, p.env
		}
	}
	if msg != "" {
		for _, s := range l.Ranks {
			fail(s, code, msg)
		}
	} else {
		// Forking costs most of a launch: on a box with several cores,
		// a few goroutines fork side by side. The reaper waits on a.mu,
		// held here, so no rank is reaped before it is registered.
		procs := make([]*rankProc, len(l.Ranks))
		errs := make([]error, len(l.Ranks))
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(runtime.NumCPU(), len(l.Ranks), maxForkers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < len(l.Ranks); i = int(next.Add(1) - 1) {
					exe, argv := bindArgv(bindingOf(i), path, l.Argv)
					procs[i], errs[i] = a.start(l, l.Ranks[i], exe, argv, rankEnv(i, l.Ranks[i]))
				}
			}()
		}
		wg.Wait()
		started := control.Started{Generation: l.Generation, Report: report, Topo: topo}
		for i, s := range l.Ranks {
			p, err := procs[i], errs[i]
			if err != nil {
				code := 1
				if errors.Is(err, syscall.ENOENT) {
					code = 127
				} else if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) {
					code = 126
				}
				fail(s, code, fmt.Sprintf("cannot start %s: %v", l.Argv[0], err))
				continue
			}
			p.ooms = ooms
			a.byPID[p.pid] = p
			if p.stdin != nil {
				a.stdin[s.Rank] = p.stdin
			}
			started.Ranks = append(started.Ranks, control.RankStart{Rank: s.Rank, PID: p.pid, Time: p.start})
		}
		if len(started.Ranks) > 0 {
			a.w.Send(control.TypeStarted, started)
		}
	}
	if a.live == 0 {
		a.done()
	}
}

// SelfProgram, as a job's program, names the gorun binary that each host's
// agent runs: `gorun bench` launches its ranks so, wherever gorun was
// staged.
const SelfProgram = "gorun:self"

// resolve finds the program as a shell would, in the ranks' PATH, and
// checks the working directory.
func (a *agent) resolve(l control.Launch, base []string) (path string, code int, msg string) {
	if len(l.Argv) == 0 {
		return "", 2, "no program to run"
	}
	if st, err := os.Stat(l.Dir); err != nil || !st.IsDir() {
		return "", 1, fmt.Sprintf("working directory %s does not exist here", l.Dir)
	}
	prog := l.Argv[0]
	if prog == SelfProgram {
		exe, err := os.Executable()
		if err != nil {
			return "", 127, fmt.Sprintf("gorun's own executable: %v", err)
		}
		return exe, 0, ""
	}
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(l.Dir, prog)
		}
		st, err := os.Stat(prog)
		switch {
		case err != nil:
			return "", 127, fmt.Sprintf("%s: no such file", l.Argv[0])
		case st.IsDir() || st.Mode()&0o111 == 0:
			return "", 126, fmt.Sprintf("%s: not an executable file", l.Argv[0])
		}
		if code, bad := badInterpreter(prog, l.Dir); bad != "" {
			return "", code, l.Argv[0] + ": " + bad
		}
		return prog, 0, ""
	}
	pathVar := ""
	for _, kv := range append(base, l.Exports...) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(l.Dir, dir)
		}
		p := filepath.Join(dir, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			if code, bad := badInterpreter(p, l.Dir); bad != "" {
				return "", code, p + ": " + bad
			}
			return p, 0, ""
		}
	}
	return "", 127, fmt.Sprintf("%s: command not found in PATH (%s)", prog, pathVar)
}

// start forks one rank. The caller registers it.
func (a *agent) start(l control.Launch, s control.RankSpec, path string, argv, environ []string) (*rankProc, error) {
	// Every descriptor made here: the child's ends are closed once it is
	// forked, and all of them if anything fails.
	var parent, child []*os.File
	fail := func(err error) (*rankProc, error) {
		for _, f := range append(parent, child...) {
			f.Close()
		}
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, outR), append(child, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, errR), append(child, errW)
	pmiMine, pmiTheirs, err := socketpair(s.Rank)
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, pmiMine), append(child, pmiTheirs)
	var inR, inW *os.File
	if s.Stdin {
		inR, inW, err = os.Pipe()
	} else {
		inR, err = os.Open(os.DevNull)
	}
	if err != nil {
		return fail(err)
	}
	child = append(child, inR)
	if inW != nil {
		parent = append(parent, inW)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   l.Dir,
		Env:   environ,
		Files: []uintptr{inR.Fd(), outW.Fd(), errW.Fd(), pmiTheirs.Fd()},
		// Each rank leads its own session (and so its own process group,
		// which the agent signals), as Hydra's ranks do: with the kernel's
		// autogroup scheduling a session is one CPU share, and ranks
		// sharing the launcher's would together weigh as one process
		// against the rest of the machine.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fail(err)
	}
	for _, f := range child {
		f.Close()
	}
	p := &rankProc{rank: s.Rank, pid: pid, start: time.Now(), outR: []*os.File{outR, errR}}
	if a.pmi != nil {
		a.pmi.serve(pmiMine, s.Rank)
	} else {
		pmiMine.Close()
	}
	p.readers.Add(2)
	go a.relay(p, outR, output.Stdout)
	go a.relay(p, errR, output.Stderr)
	if inW != nil {
		p.stdin = make(chan []byte, stdinWindow+1)
		go a.feed(s.Rank, inW, p.stdin)
	}
	return p, nil
}

// relay sends what a rank writes to one of its pipes to the head.
func (a *agent) relay(p *rankProc, f *os.File, s output.Stream) {
	defer p.readers.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if s == output.Stderr {
				p.tail.write(buf[:n])
			}
			a.w.SendOutput(control.Output{Rank: p.rank, Stream: uint8(s), Time: time.Now(), Data: buf[:n]})
		}
		if err != nil {
			return
		}
	}
}

// feed writes stdin chunks to a rank and acknowledges them, so the head
// keeps only a window in flight.
func (a *agent) feed(rank int, w *os.File, ch chan []byte) {
	broken := false
	for b := range ch {
		if !broken {
			if _, err := w.Write(b); err != nil {
				broken = true // the rank closed its stdin: drop the rest
			}
		}
		a.w.Send(control.TypeStdinAck, control.StdinAck{Rank: rank, Bytes: len(b)})
	}
	w.Close()
}

// reap collects every child that has ended: ranks, and orphans re-parented
// to the agent.
func (a *agent) reap() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if pid <= 0 || err != nil {
			return
		}
		p := a.byPID[pid]
		if p == nil {
			continue // an orphan: reaped, nothing to report
		}
		delete(a.byPID, pid)
		// What the rank left behind in its process group goes with it.
		if unix.Kill(-pid, unix.SIGKILL) == nil {
			a.leftovers = true // something of the rank's still ran
		}
		if ch := a.stdin[p.rank]; ch != nil {
			delete(a.stdin, p.rank)
			close(ch)
		}
		e := control.Exited{Generation: a.gen, Rank: p.rank, PID: pid, Start: p.start, End: time.Now(),
			MaxRSS: ru.Maxrss, Stopped: p.stopped || a.stopped}
		switch {
		case ws.Exited():
			e.Code = ws.ExitStatus()
		case ws.Signaled():
			e.Code, e.Signal = -1, int(ws.Signal())
			if ws.Signal() == unix.SIGKILL {
				e.OOMKills = oomKills() - p.ooms
			}
		}
		go a.finish(p, e)
	}
}

// finish reports a rank's end after its output has been relayed.
func (a *agent) finish(p *rankProc, e control.Exited) {
	done := make(chan struct{})
	go func() { p.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(readerDrain):
		// An escaped grandchild holds the pipes: stop reading them.
		for _, f := range p.outR {
			f.Close()
		}
		<-done
	}
	for _, f := range p.outR {
		f.Close()
	}
	e.StderrTail = p.tail.String()
	a.mu.Lock()
	px := a.pmix
	a.mu.Unlock()
	early := e.Code == 0 && e.Signal == 0 && px != nil && px.gen == e.Generation && px.leftEarly(p.rank)
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Generation != a.gen {
		return
	}
	if early {
		a.w.Send(control.TypeAbort, control.Abort{Generation: e.Generation, Rank: p.rank, Early: true,
			Msg: "left before MPI_Finalize (it called PMIx_Init and exited without PMIx_Finalize)"})
	}
	a.w.Send(control.TypeExited, e)
	a.live--
	if a.live == 0 {
		a.done()
	}
}

// done reports the generation finished, once its leftovers are gone.
func (a *agent) done() {
	if a.killT != nil {
		a.killT.Stop()
	}
	a.pmix.close() // before the orphan sweep, which would take it for one
	a.pmix = nil
	killOrphans(time.Second, a.leftovers)
	a.shm.sweep()
	a.leftovers = false
	a.w.Send(control.TypeDone, control.Done{Generation: a.gen, MaxRSS: peakRSS()})
}

func (a *agent) signalAll(sig syscall.Signal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pid := range a.byPID {
		unix.Kill(-pid, sig)
		if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
			unix.Kill(-pid, unix.SIGCONT) // a stopped rank must see it
		}
	}
}

// kill stops every rank: SIGTERM now, SIGKILL after grace.
func (a *agent) kill(grace time.Duration) {
	a.mu.Lock()
	a.stopped = true
	for pid, p := range a.byPID {
		p.stopped = true
		// MPI libraries leave their shared-memory segments behind when
		// killed (Open MPI's vader, MPICH's and UCX's): note what the
		// ranks have mapped, to remove what they made once they are gone.
		a.shm.note(pid)
	}
	a.mu.Unlock()
	if grace <= 0 {
		a.signalAll(unix.SIGKILL)
		return
	}
	a.signalAll(unix.SIGTERM)
	a.mu.Lock()
	if a.killT != nil {
		a.killT.Stop()
	}
	a.killT = time.AfterFunc(grace, func() { a.signalAll(unix.SIGKILL) })
	a.mu.Unlock()
}

// shutdown stops every rank and orphan, waits for them, and returns.
// Lower agents lose their connection and do the same on their hosts.
func (a *agent) shutdown(grace time.Duration) error {
	a.dropKids()
	defer func() {
		a.mu.Lock()
		a.pmi.close()
		a.pmix.close()
		a.pmix = nil
		if a.sockDir != "" {
			os.RemoveAll(a.sockDir)
		}
		a.mu.Unlock()
	}()
	a.mu.Lock()
	n := len(a.byPID)
	careful := n > 0 || a.leftovers
	a.mu.Unlock()
	if n > 0 {
		a.kill(grace)
		deadline := time.Now().Add(grace + 2*time.Second)
		for time.Now().Before(deadline) {
			a.reap()
			a.mu.Lock()
			n = len(a.byPID)
			a.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	killOrphans(2*time.Second, careful)
	a.mu.Lock()
	a.shm.sweep()
	a.mu.Unlock()
	return nil
}

// killOrphans kills and reaps every remaining child of the agent: ranks'
// descendants that escaped their process group and were re-parented here.
// careful (process groups were just killed) makes it look a few more times
// after finding none: a process that was forking as its group died may
// arrive a moment later.
func killOrphans(limit time.Duration, careful bool) {
	self := os.Getpid()
	deadline := time.Now().Add(limit)
	quiet := 0
	for {
		kids := children(self)
		if len(kids) == 0 {
			// A process that was forking while its group was killed may
			// still arrive here: look twice more before calling it done.
			if quiet++; !careful || quiet >= 3 || time.Now().After(deadline) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		quiet = 0
		for _, pid := range kids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
		for {
			var ws unix.WaitStatus
			if pid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

// children lists the pids whose parent is ppid, from /proc.
func children(ppid int) []int {
	// /proc/PID/task/TID/children lists them directly where the kernel
	// has it (CONFIG_PROC_CHILDREN); otherwise scan /proc.
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", ppid))
	found := false
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", ppid, t.Name()))
		if err != nil {
			continue
		}
		found = true
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	if found {
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) start after ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// numaNodes counts the host's NUMA nodes (sysfs); 1 when it cannot tell.
func numaNodes() int {
	m, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	return max(len(m), 1)
}

// sshAddr returns field i of an SSH_CONNECTION value ("client_ip
// client_port server_ip server_port").
func sshAddr(v string, i int) string {
	f := strings.Fields(v)
	if len(f) != 4 {
		return ""
	}
	return f[i]
}

// routeAddr returns the local address the kernel would use to reach the
// peers (a UDP "connect" sends nothing), or iface's first IPv4 address.
// Peers that disagree are resolved by majority.
func routeAddr(peers []string, iface string) (string, error) {
	if iface != "" {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return "", fmt.Errorf("--iface %s: %w", iface, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("--iface %s: %w", iface, err)
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), nil
			}
		}
		return "", fmt.Errorf("--iface %s has no IPv4 address", iface)
	}
	votes := map[string]int{}
	best := ""
	var firstErr error
	for _, p := range peers {
		c, err := net.Dial("udp", net.JoinHostPort(p, "9"))
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("no route to %s: %w", p, err)
			}
			continue
		}
		ip := c.LocalAddr().(*net.UDPAddr).IP.String()
		c.Close()
		votes[ip]++
		if votes[ip] > votes[best] {
			best = ip
		}
	}
	if best == "" {
		if firstErr == nil {
			firstErr = errors.New("no peers to route to")
		}
		return "", firstErr
	}
	return best, nil
}

// oomKills reads the kernel's count of OOM kills (/proc/vmstat oom_kill).
func oomKills() int {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// freePort picks a TCP port that is free now and lies outside the
// kernel's ephemeral range, so that no outgoing connection takes it
// before rank 0 listens on it. It never returns a fixed default.
func freePort() int {
	lo, hi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, _ = strconv.Atoi(f[0])
			hi, _ = strconv.Atoi(f[1])
		}
	}
	pick := func() int {
		if lo > 11024 {
			return 10000 + rand.IntN(lo-10000)
		}
		if hi < 64000 {
			return hi + 1 + rand.IntN(65535-hi)
		}
		return 1024 + rand.IntN(64511)
	}
	for range 64 {
		p := pick()
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	return 0
}

// tail keeps the last lines a rank wrote to stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tail) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailBytes {
		t.buf = append(t.buf[:0], p[len(p)-tailBytes:]...)
		return
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
}

// String returns at most the last 10 lines.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(t.buf), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// log writes the agent's diagnostics.
type log struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (l *log) printf(format string, args ...any) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, l.prefix+format+"\n", args...)
}

// Stdin flow control: the head sends chunks of at most stdinChunk bytes and
// keeps at most stdinWindow chunks unacknowledged, so the agent's queue for
// a rank that does not read its stdin never blocks the control channel.
const (
	stdinChunk  = 32 << 10
	stdinWindow = 32
)
