// This file holds the agent's state: what every goroutine of the agent
// may use (agent), and what only its loop reads and writes (loopState),
// which the handlers change and tests build and feed without processes.

package launcher

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/sshclient"
)

// agent is one host's agent. Its loop (RunAgent) is one goroutine that
// owns loopState and changes it in one small handler per event
// (agent_events.go). The goroutines that must block (reading the head's
// frames, relaying a rank's output, waiting for it to drain, serving the
// ranks' rendezvous, starting lower agents) only turn what happens into
// events, or write to the head themselves.
type agent struct {
	// These are set before the loop starts, or are safe for concurrent
	// use: any goroutine may use them.
	o   AgentOptions
	log *agentLog
	// w writes to the head for the goroutines: output, stdin acks, probe
	// and check answers, rendezvous aborts, a lower agent's frames. The
	// loop never writes to the head itself: it sends through out, so that
	// no handler waits on the head's connection.
	w      *control.Writer
	out    *outbox
	events chan agentEvent // to the loop ([agent.post])
	quit   chan struct{}   // closed as the loop ends: its helpers stop
	heard  atomic.Int64    // unix nanoseconds of the last frame from the head
	// parent is the agent's parent process at its start: the head, for
	// an agent a LocalStarter started. Another one later says the parent
	// is gone.
	parent int
	// print prints the ranks' output here (Launch.Print). The loop makes
	// it before the first rank that prints starts, and never replaces it:
	// the relays read it.
	print *output.Mux

	probe    checkListener // gorun check's probe listener
	cpuMu    sync.Mutex
	cpuPrev  map[int]cpuSample // by pid: each rank's CPU time at the last status probe
	dialOnce sync.Once
	dialer   *sshclient.Dialer // for lower agents, made once
	dialErr  error

	loopState
}

// loopState is the agent's state. Only the loop's goroutine reads or
// writes it: no lock guards it.
type loopState struct {
	// What the loop waits on besides posted events (next); nil when
	// there is nothing to wait for. Each timer is nil once handled.
	ctx         context.Context
	ctxDone     <-chan struct{}
	sigs        <-chan os.Signal // nil: the agent takes no signals (Procs)
	beatC       <-chan time.Time // heartbeats to the head
	silenceC    <-chan time.Time // the silence watch's ticks
	beatTimeout time.Duration    // the head is lost after this long unheard
	killT       *time.Timer      // a kill's grace period
	killC       <-chan time.Time
	endT        *time.Timer // the ranks' time to end as the agent stops
	endC        <-chan time.Time
	kidBeat     *time.Ticker // heartbeats to the lower agents, when asked for
	kidBeatC    <-chan time.Time
	kidTimeout  time.Duration

	// The generation's ranks.
	gen     int
	live    int  // ranks of gen (and its spawned jobs) not yet reported
	stopped bool // Kill was received for gen
	byPID   map[int]*rankProc
	stdin   map[int]chan []byte // rank -> chunks for its stdin pipe
	// finishing counts ended ranks whose report waits for the rest of
	// their output (agent.finish).
	finishing int
	// leftovers: an ended rank's process group still had processes
	// when it was killed, so orphans may be on their way here.
	leftovers bool
	// interrupted says a step's first interrupt was passed on to the head.
	interrupted bool
	// ending says how the agent ends, once it does; nil until then.
	ending *ending

	// The generation's servers and files.
	pmi       *pmiState  // its PMI-1 and KV servers
	pmix      *pmixState // its PMIx server, when the program needs one
	sockDir   string     // private directory (0700) of the ranks' rendezvous sockets
	stacksDir string     // where the ranks' Python hook writes its dumps; "" = none
	// prepDone is closed when the host's preparation that hello starts
	// (prepareHost: sockDir, stacksDir) is done; nil when none runs.
	prepDone chan struct{}
	shm      shmSweep // the /dev/shm files that killed ranks leave
	// masterPort is the port this agent offered for MASTER_PORT at its
	// hello, held until its ranks start (masterport.go); nil where none
	// could be had.
	masterPort *heldPort

	// The jobs the generation's ranks spawned (MPI_Comm_spawn) that this
	// host runs ranks of or registered, by number (agent_dyn.go), and the
	// Launch frames of the generation received so far.
	dyn      map[int]*dynJob
	launches int

	// The questions this host's ranks asked the head, until answered:
	// fences by generation, job and number (fenceSeq numbers them, by
	// generation and job), and dynamic-process requests by ID.
	fenceSeq  map[[2]int]int
	fenceWait waiters[fenceKey, control.FenceReply]
	dynNext   uint64
	dynWait   waiters[uint64, control.DynReply]

	kids map[int]*kid // lower agents by node (--launch-fanout)
	tree treeFence    // the fences of this agent's subtree
}

// ending is how the agent ends: with what error RunAgent returns, and
// what it clears away after its ranks.
type ending struct {
	err error
	// careful: processes were killed as it began, so orphans may still
	// be on their way (killOrphans).
	careful bool
	// expired: the ranks had their time to end; those left are killed
	// with the orphans.
	expired bool
}

// rankProc is a rank the agent started.
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

// newAgent makes an agent with no rank, no server and no loop running.
func newAgent(o AgentOptions) *agent {
	a := &agent{
		o:      o,
		w:      control.NewWriter(o.Out),
		log:    &agentLog{w: o.Log, prefix: "gorun agent " + o.Host + ": "},
		events: make(chan agentEvent, 64),
		quit:   make(chan struct{}),
		parent: os.Getppid(),
	}
	a.out = newOutbox(a.w)
	a.byPID, a.stdin = map[int]*rankProc{}, map[int]chan []byte{}
	a.fenceSeq, a.fenceWait, a.dynWait = map[[2]int]int{}, waiters[fenceKey, control.FenceReply]{}, waiters[uint64, control.DynReply]{}
	return a
}

// send sends a frame to the head, from the loop: out writes it.
func (a *agent) send(t control.Type, v any) { a.out.send(t, v) }

// waiters are the goroutines waiting for the head's answers, by the
// question's key.
type waiters[K comparable, V any] map[K]chan<- V

// deliver hands v to the waiter for k, if one waits (its channel has
// room for one answer).
func (w waiters[K, V]) deliver(k K, v V) {
	if ch := w[k]; ch != nil {
		delete(w, k)
		ch <- v
	}
}

// armKill arms the kill's timer: SIGKILL after grace.
func (a *agent) armKill(grace time.Duration) {
	a.disarmKill()
	a.killT = time.NewTimer(grace)
	a.killC = a.killT.C
}

// disarmKill stops the kill's timer, if it runs.
func (a *agent) disarmKill() {
	if a.killT != nil {
		a.killT.Stop()
	}
	a.killT, a.killC = nil, nil
}
