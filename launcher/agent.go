// This file holds the agent's loop: its hello to the head, signals, the
// head's frames and heartbeats, and the small handlers of the frames. The
// rest of the agent is split by concern, as Hydra's proxy is:
// agent_spawn.go starts a generation of ranks, agent_relay.go relays their
// output and stdin, agent_reap.go reaps them and clears away what they
// leave, netaddr.go finds addresses and ports, fanout.go starts lower
// agents, pmi.go and pmix.go serve the ranks' rendezvous, and shm.go
// sweeps /dev/shm; internal/procfs reads /proc for them.

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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/sshclient"
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

type agent struct {
	o   AgentOptions
	w   *control.Writer
	log *log
	// parent is the agent's parent process at its start: the head, for
	// an agent a LocalStarter started. Another one later says the parent
	// is gone.
	parent int

	// interrupted says a step's first interrupt was passed on to the head;
	// only the loop uses it.
	interrupted bool

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
	// print prints the ranks' output here (Launch.Print), once the first
	// such Launch made it; it is not replaced after.
	print *output.Mux

	heard atomic.Int64 // unix nanoseconds of the last frame from the head

	probe checkListener // gorun check's probe listener

	// masterPort is the port this agent offered for MASTER_PORT at its
	// hello, held until its ranks start (masterport.go); nil where none
	// could be had.
	masterPort *heldPort

	stacksDir string // where the ranks' Python hook writes its dumps; "" = none
	cpuMu     sync.Mutex
	cpuPrev   map[int]cpuSample // by pid: each rank's CPU time at the last status probe

	pmi       *pmiState  // this generation's PMI-1 server
	pmix      *pmixState // this generation's PMIx server, when the program needs one
	sockDir   string     // private directory (0700) of the ranks' rendezvous sockets
	shm       shmSweep   // the /dev/shm files that killed ranks leave
	fenceMu   sync.Mutex
	fenceSeq  map[int]int // fences of the generation so far, by job (0: the generation's, n: its n-th spawned job's)
	fenceGen  int
	fenceWait map[fenceKey]chan control.FenceReply

	// The jobs the generation's ranks spawned (MPI_Comm_spawn) that this
	// host runs ranks of or registered, by number (agent_dyn.go), and the
	// Launch frames of the generation received so far.
	dyn      map[int]*dynJob
	launches int
	dynMu    sync.Mutex
	dynNext  uint64
	dynWait  map[uint64]chan control.DynReply // requests to the head, by ID

	kidsMu  sync.Mutex
	kids    map[int]*kid // lower agents by node (--launch-fanout)
	kidBeat *time.Ticker // heartbeats to them, when the head asked for some
	// kidsDropped: the agent is ending; a lower agent that finishes
	// starting now is killed at once.
	kidsDropped bool
	tree        treeFence     // the fences of this agent's subtree, when it has lower agents
	quit        chan struct{} // closed as the agent ends: its helpers stop
	quitOnce    sync.Once
	dialOnce    sync.Once
	dialer      *sshclient.Dialer
	dialErr     error
}

type rankProc struct {
	rank    int // its number in the job's frames (a spawned job's: from its Base)
	job     int // its spawned job (control.Spawned.Job); 0: the generation's
	mpiRank int // its rank in its job
	pid     int
	start   time.Time
	readers sync.WaitGroup
	outR    []*os.File // read ends of stdout and stderr
	tail    tail
	stopped bool
	ooms    int
	stdin   chan []byte // chunks for its stdin pipe; nil if it takes none
	files   *rankOutput // its output's files (RankSpec.Files); nil if none
}

// RunAgent runs the agent side of a job until the head says shutdown or
// goes away. Everything it started is gone when it returns.
func RunAgent(ctx context.Context, o AgentOptions) error {
	// Orphaned grandchildren of ranks are re-parented to the agent, so that
	// it can find and kill them; ranks die with the agent's thread.
	if o.Procs == nil {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	a := &agent{
		o:      o,
		w:      control.NewWriter(o.Out),
		log:    &log{w: o.Log, prefix: "gorun agent " + o.Host + ": "},
		byPID:  map[int]*rankProc{},
		stdin:  map[int]chan []byte{},
		quit:   make(chan struct{}),
		parent: os.Getppid(),
	}
	defer a.quitOnce.Do(func() { close(a.quit) })
	defer a.closePrint()
	defer func() { a.masterPort.release() }() // once hello took it
	r := control.NewReader(o.In)
	headHello, err := a.hello(r)
	if err != nil {
		return err
	}

	var sigs chan os.Signal // an agent sharing its process (Procs) takes no signals
	if o.Procs == nil {
		sigs = make(chan os.Signal, 16)
		signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		// A write to the control channel after the head is gone must be an
		// error, not death by SIGPIPE before the ranks are stopped. Caught,
		// not ignored: an ignored SIGPIPE would be inherited by the ranks.
		pipes := make(chan os.Signal, 1)
		signal.Notify(pipes, syscall.SIGPIPE)
		defer signal.Stop(pipes)
		defer signal.Stop(sigs)
	}
	frames := make(chan error, 1)
	go func() { frames <- a.readFrames(r) }()
	var silent <-chan time.Time
	if headHello.Beat > 0 {
		// Over a network a dead head can look like a quiet one (a cut
		// link leaves the connection half-open): beat, and listen for it.
		stop := a.beat(headHello.Beat)
		defer stop()
		silent = a.watchSilence(headHello.BeatTimeout)
	}
	for {
		select {
		case <-silent:
			a.log.printf("heard nothing from the head for %v: stopping every rank", headHello.BeatTimeout)
			a.shutdown(stopGraceOnEOF)
			return errors.New("the head went silent")
		case s := <-sigs:
			if stop, err := a.onSignal(s); stop {
				return err
			}
		case err := <-frames:
			return a.framesEnded(err)
		case <-ctx.Done():
			a.shutdown(stopGraceOnEOF)
			return ctx.Err()
		}
	}
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
	return headHello, nil
}

// numaNodes counts the host's NUMA nodes (sysfs); 1 when it cannot tell.
func numaNodes() int {
	m, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	return max(len(m), 1)
}

// beat sends the head a heartbeat every interval until the returned
// function is called, the agent ends, or a send fails.
func (a *agent) beat(interval time.Duration) (stop func()) {
	t := time.NewTicker(interval)
	go func() {
		for {
			select {
			case <-t.C:
				if a.w.Send(control.TypeBeat, nil) != nil {
					return
				}
			case <-a.quit:
				return
			}
		}
	}()
	return t.Stop
}

// watchSilence returns a channel that fires when no frame came from the
// head for timeout.
func (a *agent) watchSilence(timeout time.Duration) <-chan time.Time {
	a.heard.Store(time.Now().UnixNano())
	fire := make(chan time.Time, 1)
	go func() {
		t := time.NewTicker(timeout / 4)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				if now.Sub(time.Unix(0, a.heard.Load())) > timeout {
					fire <- now
					return
				}
			case <-a.quit:
				return
			}
		}
	}()
	return fire
}

// onSignal handles a signal to the agent, and says whether the agent
// stops, with what RunAgent returns then.
func (a *agent) onSignal(s os.Signal) (stop bool, err error) {
	if s == syscall.SIGCHLD {
		a.reap()
		return false, nil
	}
	sig := s.(syscall.Signal)
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
		a.w.Send(control.TypeSignaled, control.Signal{Signal: int(sig)})
		return false, nil
	}
	if a.o.Leave {
		a.log.printf("got %v: stopping this node's ranks and leaving the job", s)
		return true, a.shutdown(stopGraceOnEOF)
	}
	if sig == syscall.SIGTERM && a.parentGone(parentGoneWait) {
		// The head is gone: a local agent's Pdeathsig, sent as the head's
		// thread that started it exits (gorun dying of SIGPIPE in
		// `gorun ... | head -1`, say). Stop quietly, as on EOF from the
		// head: a line now would land on the terminal after gorun's exit
		// and explain nothing.
		return true, a.shutdown(stopGraceOnEOF)
	}
	a.log.printf("got %v: stopping every rank", s)
	// The head hears of it first, so that the job ends as one that got
	// the signal (128+N, naming this host), not as a success of ranks
	// that the agent stopped.
	a.w.Send(control.TypeSignaled, control.Signal{Signal: int(sig)})
	return true, a.shutdown(stopGraceOnEOF)
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

// framesEnded stops the agent once the head's frames end with err: after a
// shutdown frame the ranks have ended; otherwise the head is gone and they
// are stopped. It returns what RunAgent returns.
func (a *agent) framesEnded(err error) error {
	if err != nil && !errors.Is(err, errShutdown) {
		if !errors.Is(err, io.EOF) {
			a.log.printf("control channel: %v", err)
		}
		// The head is gone: nothing may survive it.
		a.shutdown(stopGraceOnEOF)
		return err
	}
	return a.shutdown(0)
}

var errShutdown = errors.New("shutdown")

// readFrames handles the head's frames until a shutdown frame
// (errShutdown) or an error.
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
			a.answerRoute(q)
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
			a.stdinFrame(s)
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
			r, err := f.FenceReply()
			if err != nil {
				return err
			}
			if a.kidCount() > 0 && r.Job == 0 { // a spawned job's fences are each host's own
				a.toKids(control.AppendFrame(nil, f.Type, f.Payload))
			}
			if len(f.Payload) <= control.KeepAbove {
				r.KVs = append([]byte(nil), r.KVs...) // the reader reuses the payload
			}
			a.fenceDone(r)
		case control.TypeCheck:
			var q control.Check
			if err := f.Decode(&q); err != nil {
				return err
			}
			go func() { a.w.Send(control.TypeCheckRe, a.check(q)) }()
		case control.TypeProbe:
			var q control.Probe
			if err := f.Decode(&q); err != nil {
				return err
			}
			go a.answerProbe(q)
		case control.TypeSpawn:
			var sp control.Spawn
			if err := f.Decode(&sp); err != nil {
				return err
			}
			a.startKid(sp)
		case control.TypeRelay:
			r, err := f.Relay()
			if err != nil {
				return err
			}
			a.relayTo(r)
		case control.TypeDyn:
			var d control.Dyn
			if err := f.Decode(&d); err != nil {
				return err
			}
			go a.answerDyn(d)
		case control.TypeDynRe:
			var r control.DynReply
			if err := f.Decode(&r); err != nil {
				return err
			}
			a.dynDone(r)
		case control.TypeShutdown:
			return errShutdown
		default:
			return fmt.Errorf("%w: unexpected %s frame from the head", control.ErrProtocol, f.Type)
		}
	}
}

// answerRoute tells the head which local address reaches the peers.
func (a *agent) answerRoute(q control.Route) {
	addr, err := routeAddr(q.Peers, q.Iface)
	rep := control.RouteReply{Addr: addr}
	if err != nil {
		rep.Err = err.Error()
	}
	a.w.Send(control.TypeRouteRe, rep)
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
