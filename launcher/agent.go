// This file holds the agent's loop: its hello to the head, the inputs it
// listens to, how it stops, and the handlers of the head's silence and
// the agent's signals. The agent is one event loop, as the head is:
// agent_state.go holds its state, agent_events.go its events and the
// loop's two halves (next, handle), agent_outbox.go what it sends to the
// head. The rest is split by concern, as Hydra's proxy is: agent_spawn.go
// starts a generation of ranks, agent_relay.go relays their output and
// stdin, agent_reap.go reaps them, kills them and clears away what they
// leave, agent_probe.go answers probes, agent_dyn.go serves dynamic
// processes, netaddr.go finds addresses and ports, fanout.go starts lower
// agents and gathers their fences, pmi.go and pmix.go serve the ranks'
// rendezvous, and shm.go sweeps /dev/shm; internal/procfs reads /proc for
// them.

package launcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/launcher/control"
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
	// Leave says the agent is a node of an elastic per-node launch: a
	// SIGTERM, SIGINT or SIGHUP makes it stop its ranks and leave without
	// telling the head, which takes the node as lost and goes on without
	// it, instead of stopping the whole job.
	Leave bool
	// ConnAddr and ClientAddr are this host's and the head's addresses on
	// the control connection when it is not SSH's (which says them in
	// SSH_CONNECTION): the head picks MASTER_ADDR from them.
	ConnAddr, ClientAddr string
	// Procs starts the ranks when they are not real processes (the
	// cluster simulator's); nil: fork and exec. See [Procs].
	Procs Procs
	// Kids starts the agents below this one in a launch tree; nil: over
	// SSH with the head's settings.
	Kids Starter
	// Stdout and Stderr are where the agent prints its ranks' output
	// when the head asks it to (control.Launch.Print: in a per-node
	// launch each node prints its own ranks'); with Stdout nil it prints
	// nothing. An agent whose stdout is its control channel leaves it nil.
	Stdout, Stderr io.Writer
}

// stopGraceOnEOF is how long ranks get between SIGTERM and SIGKILL when the
// head has gone away without saying goodbye.
const stopGraceOnEOF = time.Second

// endWait is how long an ending agent waits for its ranks beyond their
// grace period, before it kills them with the orphans.
const endWait = 2 * time.Second

// outboxDrain bounds how long an ending agent waits for its last frames
// to reach the head.
const outboxDrain = 2 * time.Second

// errHeadSilent is RunAgent's error when the head went silent.
var errHeadSilent = errors.New("the head went silent")

// RunAgent runs the agent side of a job until the head says shutdown or
// goes away, a signal stops it, or ctx is done. Everything it started is
// gone when it returns.
//
// It returns nil after the head's shutdown or a signal; the control
// channel's error when the head went away (io.EOF: it closed the
// channel); an error when the head was silent for its heartbeats'
// timeout; and ctx.Err() when ctx was done first. In every case but the
// shutdown, the ranks get SIGTERM, and SIGKILL a second later.
func RunAgent(ctx context.Context, o AgentOptions) error {
	// Orphaned grandchildren of ranks are re-parented to the agent, so that
	// it can find and kill them; ranks die with the agent's thread.
	if o.Procs == nil {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		go hostGPUs()     // read while the head plans; bindings needs it
		go control.Warm() // the launch's frames, decoded and encoded soon
	}
	a := newAgent(o)
	go a.out.run()
	defer a.closePrint()
	defer func() { a.masterPort.release() }() // once hello took it
	defer a.out.close(outboxDrain)
	r := control.NewReader(o.In)
	headHello, err := a.hello(r)
	if err != nil {
		close(a.quit)
		return err
	}
	a.prepareHost()
	stopListening := a.listen(ctx, r, headHello)
	defer stopListening()
	for !a.over() {
		a.handle(a.next())
	}
	return a.end()
}

// listen turns the agent's inputs into events: the head's frames and its
// silence, the agent's signals and heartbeats, and ctx's end. It returns
// what stops them.
func (a *agent) listen(ctx context.Context, r *control.Reader, headHello control.Hello) (stop func()) {
	var stops []func()
	if a.o.Procs == nil { // an agent sharing its process (Procs) takes no signals
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		// A write to the control channel after the head is gone must be an
		// error, not death by SIGPIPE before the ranks are stopped. Caught,
		// not ignored: an ignored SIGPIPE would be inherited by the ranks.
		pipes := make(chan os.Signal, 1)
		signal.Notify(pipes, syscall.SIGPIPE)
		a.sigs = sigs
		// Stop waits until the runtime delivers no signal to the
		// channels (a quarter of a millisecond as the agent ends, where
		// it is on the path to the head's end): RunAgent does not wait.
		stops = append(stops, func() { go func() { signal.Stop(sigs); signal.Stop(pipes) }() })
	}
	a.ctx, a.ctxDone = ctx, ctx.Done()
	a.heard.Store(time.Now().UnixNano())
	go a.read(r)
	if headHello.Beat > 0 {
		// Over a network a dead head can look like a quiet one (a cut
		// link leaves the connection half-open): beat, and listen for it.
		beat, silence := time.NewTicker(headHello.Beat), time.NewTicker(headHello.BeatTimeout/4)
		a.beatC, a.silenceC, a.beatTimeout = beat.C, silence.C, headHello.BeatTimeout
		stops = append(stops, beat.Stop, silence.Stop)
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// stop makes the agent end, with err for RunAgent: its lower agents lose
// their connection (and stop their hosts' ranks), its ranks are stopped
// (SIGTERM, SIGKILL after grace), and the loop is over once they have
// ended, or endWait after the grace period. A second stop changes nothing.
func (a *agent) stop(grace time.Duration, err error) {
	if a.ending != nil {
		return
	}
	a.ending = &ending{err: err, careful: len(a.byPID) > 0 || a.leftovers}
	a.dropKids()
	if len(a.byPID) > 0 {
		a.kill(grace)
		a.endT = time.NewTimer(grace + endWait)
		a.endC = a.endT.C
	}
}

// over says whether the loop is done: the agent is ending, and its ranks
// have ended or had their time.
func (a *agent) over() bool {
	return a.ending != nil && (len(a.byPID) == 0 || a.ending.expired)
}

// end clears away what the agent leaves once its loop is over: orphans,
// /dev/shm files, the rendezvous servers and their sockets. It returns
// what RunAgent returns.
func (a *agent) end() error {
	close(a.quit) // the goroutines waiting on the loop give up
	a.disarmKill()
	if a.endT != nil {
		a.endT.Stop()
	}
	if a.simulated() {
		a.closeServers()
		return a.ending.err
	}
	// The servers and their directory go while the orphans are looked
	// for: each waits on the kernel (file system, /proc), and they share
	// nothing.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		a.closeServers()
	}()
	killOrphans(2*time.Second, a.ending.careful)
	a.shm.sweep()
	<-closed
	return a.ending.err
}

// onHeadGone handles the end of the head's frames: the head is gone, and
// nothing may survive it.
func (a *agent) onHeadGone(err error) {
	if a.ending != nil {
		return
	}
	if !errors.Is(err, io.EOF) {
		a.log.printf("control channel: %v", err)
	}
	a.stop(stopGraceOnEOF, err)
}

// onSilence stops the agent when the head has not been heard from for
// the heartbeats' timeout.
func (a *agent) onSilence(now time.Time) {
	if a.ending != nil || now.Sub(time.Unix(0, a.heard.Load())) <= a.beatTimeout {
		return
	}
	a.log.printf("heard nothing from the head for %v: stopping every rank", a.beatTimeout)
	a.stop(stopGraceOnEOF, errHeadSilent)
}

// onSignal handles a signal to the agent (but SIGCHLD: reap).
func (a *agent) onSignal(sig syscall.Signal) {
	if a.ending != nil {
		return
	}
	// USR1 and USR2 (a preemption warning, say) go to the ranks, and so
	// does a step's first interrupt; the head hears of it, to pass it on
	// to ranks the resource manager did not signal. A step's ranks
	// already got it: Slurm signals every process of a step
	// (proctrack/cgroup and linuxproc), so passing it on here would
	// deliver it twice.
	if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 || a.o.Step && !a.interrupted {
		a.interrupted = a.interrupted || (sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2)
		if !a.o.Step {
			a.signalAll(sig)
		}
		a.send(control.TypeSignaled, control.Signal{Signal: int(sig)})
		return
	}
	if a.o.Leave {
		a.log.printf("got %v: stopping this node's ranks and leaving the job", sig)
		a.stop(stopGraceOnEOF, nil)
		return
	}
	if sig == syscall.SIGTERM && a.parentGone(parentGoneWait) {
		// The head is gone: a local agent's Pdeathsig, sent as the head's
		// thread that started it exits (gorun dying of SIGPIPE in
		// `gorun ... | head -1`, say). Stop quietly, as on EOF from the
		// head: a line now would land on the terminal after gorun's exit
		// and explain nothing.
		a.stop(stopGraceOnEOF, nil)
		return
	}
	a.log.printf("got %v: stopping every rank", sig)
	// The head hears of it first, so that the job ends as one that got
	// the signal (128+N, naming this host), not as a success of ranks
	// that the agent stopped.
	a.send(control.TypeSignaled, control.Signal{Signal: int(sig)})
	a.stop(stopGraceOnEOF, nil)
}

// parentGoneWait bounds how long a SIGTERM waits to learn whether the
// agent's parent is dying: a Pdeathsig comes as the parent's thread exits,
// before the parent has ended.
const parentGoneWait = 250 * time.Millisecond

// parentGone says whether the agent's parent ends within wait: the kernel
// then gives the agent another parent.
func (a *agent) parentGone(wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for os.Getppid() == a.parent {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// hello sends the preamble and this host's hello to the head, and returns
// the head's.
func (a *agent) hello(r *control.Reader) (control.Hello, error) {
	if err := a.w.WritePreamble(selfBuildID()); err != nil {
		return control.Hello{}, err
	}
	host, _ := os.Hostname()
	sshConn := os.Getenv("SSH_CONNECTION")
	// Every agent holds a port: the head takes the first host's for
	// MASTER_PORT, and each lets its own go as its ranks start.
	port := 0
	if a.masterPort = holdFreePort(); a.masterPort != nil {
		port = a.masterPort.port
	}
	headHello, err := control.Handshake(a.w, r, control.Hello{
		Version: a.o.Version, Host: host, PID: os.Getpid(), Cores: runtime.NumCPU(), FreePort: port, NUMA: numaNodes(), Packages: packages(),
		MaxFiles: openFileLimit(),
		ConnAddr: cmp.Or(a.o.ConnAddr, sshAddr(sshConn, 2)), ClientAddr: cmp.Or(a.o.ClientAddr, sshAddr(sshConn, 0)),
	})
	if err != nil {
		return control.Hello{}, fmt.Errorf("handshake with the head: %w", err)
	}
	if a.o.Host == "" && headHello.Name != "" {
		// Started before the plan named this host (EarlyAgent).
		a.o.Host = headHello.Name
		a.log.setPrefix("gorun agent " + a.o.Host + ": ")
	}
	return headHello, nil
}

// numaNodes counts the host's NUMA nodes (sysfs); 1 when it cannot tell.
func numaNodes() int {
	m, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	return max(len(m), 1)
}

// answerRoute tells the head which local address reaches the peers;
// with neither peers nor interface, the address of the default route's
// interface (listenAddr).
func (a *agent) answerRoute(q control.Route) {
	var addr string
	var err error
	if len(q.Peers) == 0 && q.Iface == "" {
		addr, err = listenAddr("")
	} else {
		addr, err = routeAddr(q.Peers, q.Iface)
	}
	rep := control.RouteReply{Addr: addr}
	if err != nil {
		rep.Err = err.Error()
	}
	a.send(control.TypeRouteRe, rep)
}

// agentLog writes the agent's diagnostics.
type agentLog struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

// setPrefix changes the prefix of the lines printf writes.
func (l *agentLog) setPrefix(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prefix = p
}

func (l *agentLog) printf(format string, args ...any) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, l.prefix+format+"\n", args...)
}
