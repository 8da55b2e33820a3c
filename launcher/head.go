package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/sshclient"
)

// Exit codes of gorun itself. A job whose rank failed exits with that
// rank's code (128+N for signal N) instead.
const (
	ExitOK          = 0   // every rank exited 0
	ExitUsage       = 2   // bad flags, configuration, host list or plan: nothing started
	ExitLaunch      = 125 // gorun itself failed while running the job (an agent was lost)
	ExitNotExec     = 126 // the program exists but cannot be executed
	ExitNotFound    = 127 // the program was not found
	ExitTimeout     = 124 // --timeout expired
	exitSignalStart = 128 // 128+N: a rank was killed by signal N, or gorun got signal N
)

// Options is everything the head needs to run a job.
type Options struct {
	Argv          []string        // the program and its arguments
	Hosts         []hostfile.Host // where ranks may run
	ImplicitHosts bool            // Hosts is the embedded localhost default, not the user's
	Plan          PlanOptions
	Exports       []env.Export // -x
	DisplayMap    bool         // print the plan
	DryRun        bool         // stop after the plan
	PrintEnv      int          // print rank PrintEnv's environment and stop; -1 = off
	Tag           bool         // --tag-output
	Timestamp     bool         // --timestamp-output
	OutputDir     string       // --output-filename
	StdinRank     int          // rank that gets gorun's stdin; -1 = none
	Grace         time.Duration
	Timeout       time.Duration // 0 = none
	MaxRestarts   int
	SummaryJSON   string        // --summary-json file
	Iface         string        // --iface: MASTER_ADDR is this interface's address on rank 0's host
	Plugin        env.Plugin    // --plugin, --plugin-dir, --plugin-opt, --transport-fallback: for Go ranks' collectives
	Fanout        int           // --launch-fanout: the head starts this many agents, agents the rest; 0 = flat
	BindTo        string        // --bind-to: none, core, numa, package, gpu; "" = gpu where GPUs are, else none
	CPUsPerRank   int           // --cpus-per-rank
	GPUBind       string        // --gpu-bind: all ("" too: every GPU visible to every rank) or single
	ReportBind    bool          // --report-bindings
	SSH           control.SSH   // how to reach other hosts
	BeatTimeout   time.Duration // remote agents silent this long are lost; 0 = 5s
	// RendezvousTimeout bounds a fence (PMI barrier) from its first host
	// on; 0 = 5 minutes.
	RendezvousTimeout time.Duration
	// PMIx is PMIxAuto, PMIxOn or PMIxOff: whether agents serve PMIx
	// (through the gorun-pmix plugin) to Open MPI programs.
	PMIx string
	// KVRankBudget and KVJobBudget bound the rendezvous store: what one
	// rank may put, and what the job may hold, in a generation
	// (--kv-rank-budget, --kv-job-budget); zero fields take package
	// rendezvous's defaults.
	KVRankBudget, KVJobBudget rendezvous.Budget

	Starter Starter // nil = LocalStarter
	// Alloc is the resource manager's allocation the job runs in, if any:
	// it chooses the starter for other hosts (srun for Slurm) and the
	// ranks' Slurm variables.
	Alloc   *Allocation
	Stdin   io.Reader // nil = os.Stdin
	Stdout  io.Writer // nil = os.Stdout
	Stderr  io.Writer // nil = os.Stderr
	Version string
}

// ErrUsage is wrapped by errors that are the user's to fix before anything
// starts (exit code [ExitUsage]).
var ErrUsage = errors.New("usage")

// Run runs a job to its end and returns gorun's exit code. A non-nil error
// means the job could not run or gorun itself failed; its message is for
// the user, and the code still applies.
func Run(ctx context.Context, o Options) (int, error) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if len(o.Argv) == 0 && !o.DryRun && !o.DisplayMap {
		return ExitUsage, fmt.Errorf("%w: no program to run (gorun [flags] PROGRAM [ARGS...])", ErrUsage)
	}
	if o.ImplicitHosts {
		o.Plan.Oversubscribe = true
	}
	first := o.Plan
	if o.Plan.MapBy.NeedsNUMA() {
		// ppr:N:numa: one agent on every host first; the plan follows
		// from their NUMA counts (head.replan).
		first.NP = 0
	}
	plan, err := NewPlan(o.Hosts, first)
	if err != nil {
		return ExitUsage, err
	}
	if o.ImplicitHosts && plan.Oversubscribed {
		fmt.Fprintf(o.Stderr, "gorun: note: %d ranks on localhost's %d slots: running oversubscribed and unbound (give -H or --hostfile to make this an error)\n",
			len(plan.Ranks), plan.Slots)
	}
	if o.DisplayMap || o.DryRun {
		fmt.Fprintf(o.Stderr, "gorun: backend: %s\n", backendLine(o.Alloc))
	}
	if (o.DisplayMap || o.DryRun) && !o.Plan.MapBy.NeedsNUMA() {
		plan.Format(o.Stderr)
		if o.DryRun {
			return ExitOK, nil
		}
	}
	o.SSH = absPaths(o.SSH)
	if o.Starter == nil {
		st, err := defaultStarter(o, plan)
		if err != nil {
			return ExitUsage, err
		}
		o.Starter = st
	}
	if _, local := o.Starter.(*LocalStarter); local {
		for _, n := range plan.Nodes {
			if !IsLocal(n.Host.Name) {
				return ExitUsage, fmt.Errorf("%w: host %s is not this machine, and this gorun starts ranks on this machine only (no remote starter yet)", ErrUsage, n.Host.Name)
			}
		}
	}
	if o.PrintEnv >= len(plan.Ranks) {
		return ExitUsage, fmt.Errorf("%w: --print-env %d: the job has ranks 0-%d", ErrUsage, o.PrintEnv, len(plan.Ranks)-1)
	}
	if o.StdinRank >= len(plan.Ranks) {
		return ExitUsage, fmt.Errorf("%w: --stdin %d: the job has ranks 0-%d", ErrUsage, o.StdinRank, len(plan.Ranks)-1)
	}
	exports, missing := env.Resolve(env.WithPlugin(env.WithIface(o.Exports, o.Iface), o.Plugin, os.LookupEnv), os.LookupEnv)
	for _, name := range missing {
		fmt.Fprintf(o.Stderr, "gorun: warning: -x %s: %s is not set in gorun's environment; not exported\n", name, name)
	}
	h := &head{o: o, plan: plan, exports: exports, jobID: newJobID(), secret: newSecret(), events: make(chan event, 256), done: make(chan struct{})}
	defer close(h.done)
	return h.run(ctx)
}

// absPaths makes the SSH settings' file names absolute: agents of a launch
// tree read them on other hosts, where a relative name means another file.
func absPaths(s control.SSH) control.SSH {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
			return p
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	s.ConfigFile = abs(s.ConfigFile)
	ids := make([]string, len(s.Identities))
	for i, id := range s.Identities {
		ids[i] = abs(id)
	}
	s.Identities = ids
	return s
}

// backendLine says, for --display-map, how agents will be started and why.
func backendLine(a *Allocation) string {
	switch {
	case a == nil:
		return "local and SSH (no resource manager's allocation)"
	case a.Kind == BackendSlurm:
		return "slurm: agents on other nodes through srun; " + a.Why
	default:
		return "pbs: hosts from the node file, agents on other hosts over SSH; " + a.Why
	}
}

// defaultStarter starts agents on this machine locally and on other hosts
// over SSH, or through srun inside a Slurm allocation (the dialer is only
// made when some host needs it).
func defaultStarter(o Options, plan *Plan) (Starter, error) {
	m := &MixedStarter{Local: &LocalStarter{Stderr: o.Stderr}}
	for _, n := range plan.Nodes {
		if IsLocal(n.Host.Name) && n.Host.User == "" && n.Host.Port == 0 {
			continue
		}
		if o.Alloc != nil && o.Alloc.Kind == BackendSlurm {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("find gorun's own binary: %w", err)
			}
			m.Remote = NewSlurmStarter(exe, plan, o.Iface, o.Stderr)
			break
		}
		logf := func(format string, args ...any) { fmt.Fprintf(o.Stderr, "gorun: "+format+"\n", args...) }
		d, err := sshclient.NewDialer(sshOptions(o.SSH, logf))
		if err != nil {
			return nil, fmt.Errorf("ssh: %w", err)
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find gorun's own binary: %w", err)
		}
		m.Remote = &SSHStarter{Dialer: d, Exe: exe, Stage: o.SSH.Stage, Stderr: o.Stderr, Log: logf, ForwardAgent: o.Fanout > 0,
			PMIx: o.PMIx, Argv: o.Argv}
		break
	}
	return m, nil
}

// newSecret returns a random secret for the job's rendezvous: it travels
// to the agents in the Launch (over their private control channels) and to
// the ranks in their environment, which only the job's user can read.
func newSecret() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func newJobID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// event is what the head's loop reacts to.
type event struct {
	node   int
	exited *control.Exited
	start  *control.Started
	done   *control.Done
	env    *control.Env
	route  *control.RouteReply
	fence  *control.Fence
	abort  *control.Abort
	check  *control.CheckReply
	// signaled: the agent got a signal from outside and forwarded it
	signaled *control.Signal
	msg      string // TypeError text
	err      error  // the agent's channel failed or ended (frame 0)
	// outputLost says that a rank's output could not be written to its
	// --output-filename file.
	outputLost string
}

type agentConn struct {
	node   int
	proc   AgentProcess
	w      *control.Writer
	r      *control.Reader
	hello  control.Hello
	maxRSS int64
	gone   bool
	acks   chan int
	remote bool         // heartbeats are on
	heard  atomic.Int64 // unix nanoseconds of its last frame
	ended  atomic.Bool  // its reader has returned
	// lostWhy says why the head dropped the agent (silence), if it did.
	lostWhy atomic.Value
	upAt    time.Time // when its hello arrived
}

type head struct {
	o       Options
	plan    *Plan
	exports []string
	jobID   string
	secret  string // the job's rendezvous secret, for the agents' KV servers

	hostsOnce sync.Once
	hostNames []string // the plan's node names, for PMIx (pmixHosts)
	agents    []*agentConn
	events    chan event
	mux       *output.Mux

	rec      []RankRecord
	phases   Phases
	start    time.Time
	readers  sync.WaitGroup
	firstErr *RankRecord // the first failure of the last generation
	master   string      // MASTER_ADDR

	relayMu sync.Mutex
	relayed map[int]*relayedAgent // agents reached through others, by node

	done chan struct{} // closed when the head is finished: heartbeats stop

	store   *rendezvous.Store // the job-wide key-value store (PMI fences)
	mapping string            // PMI_process_mapping

	topoFirst     string // the first host's topology summary (when bound)
	topoFirstNode int
	topoWarned    map[int]bool
}

func (h *head) run(ctx context.Context) (int, error) {
	h.start = time.Now()
	o := h.o
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	mux, err := output.New(output.Options{
		Stdout: o.Stdout, Stderr: o.Stderr, Tag: o.Tag, TagHost: o.Tag && len(h.plan.Nodes) > 1,
		Host:      func(r int) string { return h.plan.Nodes[h.plan.Ranks[r].Node].Host.Name },
		Timestamp: o.Timestamp, Dir: o.OutputDir, SameTerminal: sameFile(o.Stdout, o.Stderr),
	})
	if err != nil {
		return ExitUsage, fmt.Errorf("%w: --output-filename: %w", ErrUsage, err)
	}
	h.mux = mux
	defer h.mux.Close()
	if err := h.startAgents(ctx); err != nil {
		h.stopAgents()
		return ExitLaunch, err
	}
	h.phases.AgentsUp = time.Since(h.start)
	if o.Plan.MapBy.NeedsNUMA() {
		if err := h.replan(); err != nil {
			h.stopAgents()
			return ExitUsage, err
		}
		if o.DisplayMap || o.DryRun {
			h.plan.Format(o.Stderr)
		}
		if o.DryRun {
			h.stopAgents()
			return ExitOK, nil
		}
	}
	if o.PrintEnv < 0 {
		if err := h.checkFiles(); err != nil {
			h.stopAgents()
			return ExitUsage, err
		}
	}
	if h.master, err = h.masterAddr(); err != nil {
		h.stopAgents()
		return ExitLaunch, err
	}
	if o.PrintEnv >= 0 {
		code, err := h.printEnv()
		h.stopAgents()
		return code, err
	}
	if h.store, err = rendezvous.NewStore(len(h.plan.Nodes), rendezvous.StoreOptions{FenceTimeout: storeFenceTimeout(h.o.RendezvousTimeout),
		Budget: rendezvous.Budget{Keys: o.KVJobBudget.Keys, Bytes: o.KVJobBudget.Bytes, Setting: JobBudgetSetting}}); err != nil {
		h.stopAgents()
		return ExitLaunch, err
	}
	nodeOf := make([]int, len(h.plan.Ranks))
	for r, p := range h.plan.Ranks {
		nodeOf[r] = p.Node
	}
	h.mapping, _ = rendezvous.ProcessMappingOf(nodeOf)
	h.rec = make([]RankRecord, len(h.plan.Ranks))
	for r, p := range h.plan.Ranks {
		h.rec[r] = RankRecord{Rank: r, Host: h.plan.Nodes[p.Node].Host.Name, Code: -1}
	}

	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	res := result{}
	for gen := 0; ; gen++ {
		res = h.generation(gen, sigs, timeout)
		if res.reason != reasonFailed || gen >= o.MaxRestarts {
			break
		}
		f := h.firstErr
		h.notef("gorun: rank %d on %s %s; restarting the job (restart %d of %d)\n",
			f.Rank, f.Host, f.describe(), gen+1, o.MaxRestarts)
		for i := range h.rec {
			h.rec[i].Restarts = gen + 1
		}
	}
	h.phases.AllExited = time.Since(h.start)
	h.stopAgents()
	h.mux.Close()
	code := h.summarize(res)
	return code, nil
}

type reason int

const (
	reasonSuccess reason = iota
	reasonFailed
	reasonTimeout
	reasonSignal
	reasonAgentLost
	reasonOutputLost
)

type result struct {
	reason reason
	signal syscall.Signal // reasonSignal: what gorun received
	lost   string         // reasonAgentLost: which host, why; reasonOutputLost: whose output, why
}

// generation runs one start of the whole job until every agent is done.
func (h *head) generation(gen int, sigs chan os.Signal, timeout <-chan time.Time) result {
	o := h.o
	h.firstErr = nil
	master := h.agents[0].hello.FreePort
	masterAddr := h.master
	pending := 0
	for i, n := range h.plan.Nodes {
		a := h.agents[i]
		if a.gone {
			continue
		}
		l := h.launchFor(gen, i, n, masterAddr, master)
		if err := a.w.Send(control.TypeLaunch, l); err != nil {
			return result{reason: reasonAgentLost, lost: fmt.Sprintf("agent on %s: %v", n.Host.Name, err)}
		}
		pending++
	}
	if gen == 0 && o.StdinRank >= 0 {
		go h.pumpStdin(h.agents[h.plan.Ranks[o.StdinRank].Node], o.StdinRank)
	}
	res := result{reason: reasonSuccess}
	stopping := false
	interrupts := 0
	lastSig := map[syscall.Signal]time.Time{}
	started := 0
	var escalate <-chan time.Time
	stop := func(grace time.Duration) {
		stopping = true
		for _, a := range h.agents {
			if !a.gone {
				a.w.Send(control.TypeKill, control.Kill{Grace: grace})
			}
		}
		// Agents escalate to SIGKILL themselves; this is the head's own
		// bound in case an agent does not answer.
		escalate = time.After(grace + 5*time.Second)
	}
	for pending > 0 {
		select {
		case e := <-h.events:
			switch {
			case e.err != nil:
				a := h.agents[e.node]
				if !a.gone {
					a.gone = true
					pending--
					if res.reason == reasonSuccess || res.reason == reasonFailed && h.firstErr == nil {
						res = result{reason: reasonAgentLost, lost: fmt.Sprintf("lost the agent on %s: %v", h.plan.Nodes[e.node].Host.Name, e.err)}
					}
					h.markLost(e.node, gen)
					if !stopping {
						stop(o.Grace)
					}
				}
			case e.start != nil:
				for _, rs := range e.start.Ranks {
					r := &h.rec[rs.Rank]
					r.PID, r.Start = rs.PID, rs.Time
				}
				started += len(e.start.Ranks)
				if e.start.Report != "" {
					h.notef("%s", e.start.Report)
				}
				h.compareTopo(e.node, e.start.Topo)
				if started == len(h.plan.Ranks) && gen == 0 {
					h.phases.RanksStarted = time.Since(h.start)
				}
			case e.exited != nil:
				x := e.exited
				if x.Generation != gen {
					continue
				}
				r := &h.rec[x.Rank]
				r.update(x)
				if r.failed() && !x.Stopped && h.firstErr == nil && res.reason == reasonSuccess {
					cp := *r
					h.firstErr = &cp
					res.reason = reasonFailed
					if !stopping {
						stop(o.Grace)
					}
				}
			case e.fence != nil:
				// The store waits for every host; answer off the loop.
				go func(node int, f *control.Fence) {
					kvs, err := h.store.Fence(context.Background(), f.Generation, node, f.Puts)
					rep := control.FenceReply{Generation: f.Generation, Seq: f.Seq, KVs: kvs}
					if err != nil {
						rep.Err = err.Error()
						h.fenceTimedOut(f.Generation, err)
					}
					w := h.agents[node].w
					if err := w.Send(control.TypeFenceRe, rep); errors.Is(err, control.ErrProtocol) {
						// More than one frame carries: fail the fence
						// rather than leave the host waiting for it.
						w.Send(control.TypeFenceRe, control.FenceReply{Generation: f.Generation, Seq: f.Seq,
							Err: fmt.Sprintf("the fence's key-values cannot reach %s: %v", h.plan.Nodes[node].Host.Name, err)})
					}
				}(e.node, e.fence)
			case e.abort != nil:
				x := e.abort
				if x.Generation != gen {
					continue
				}
				r := h.rec[x.Rank]
				why := fmt.Sprintf("called MPI_Abort(%d)", x.Code)
				if x.Msg != "" {
					why += ": " + x.Msg
				}
				code := x.Code
				if len(x.Missing) > 0 {
					why, code = fmt.Sprintf("never reached a rendezvous fence within %v (--rendezvous-timeout); ranks that never arrived: %s",
						x.Timeout, h.rankList(x.Missing)), ExitTimeout
				}
				if x.Early {
					why, code = "left before MPI_Finalize (its PMI connection closed)", 1
					if x.Msg != "" {
						why = x.Msg
					}
				}
				// Nobody waits on it in a fence any more.
				h.store.Leave(gen, e.node, fmt.Sprintf("rank %d on %s %s", x.Rank, r.Host, why))
				if h.firstErr == nil && res.reason == reasonSuccess {
					r.Err, r.Code, r.End = why, code, time.Now()
					if r.PID == 0 {
						r.PID = -1
					}
					h.firstErr = &r
					res.reason = reasonFailed
					if !stopping {
						stop(o.Grace)
					}
				}
			case e.done != nil:
				if e.done.Generation == gen {
					h.agents[e.node].maxRSS = e.done.MaxRSS
					pending--
				}
			case e.outputLost != "":
				if res.reason == reasonSuccess {
					res = result{reason: reasonOutputLost, lost: e.outputLost}
					if !stopping {
						stop(o.Grace)
					}
				}
			case e.msg != "":
				h.notef("gorun: agent on %s: %s\n", h.plan.Nodes[e.node].Host.Name, e.msg)
			case e.signaled != nil:
				// A resource manager signalled its step's agents, which
				// passed it to their ranks: the ranks it did not reach
				// (those gorun started itself) get it too, once.
				sig := syscall.Signal(e.signaled.Signal)
				if time.Since(lastSig[sig]) < time.Second {
					continue
				}
				lastSig[sig] = time.Now()
				h.notef("gorun: %s got %s from outside: forwarded to every rank\n", h.plan.Nodes[e.node].Host.Name, sigName(sig))
				h.broadcastUnstepped(control.TypeSignal, control.Signal{Signal: int(sig)})
				if sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 {
					interrupts++
					if res.reason == reasonSuccess {
						res = result{reason: reasonSignal, signal: sig}
					}
				}
			}
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if time.Since(lastSig[sig]) < time.Second && interrupts == 1 {
				continue // the same signal, which a step's agent reported first
			}
			if sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 {
				h.broadcast(control.TypeSignal, control.Signal{Signal: int(sig)})
				continue
			}
			interrupts++
			if res.reason == reasonSuccess {
				res = result{reason: reasonSignal, signal: sig}
			}
			if interrupts == 1 {
				h.notef("gorun: got %s: forwarded to every rank (send it again to kill them)\n", sigName(sig))
				h.broadcast(control.TypeSignal, control.Signal{Signal: int(sig)})
			} else {
				h.notef("gorun: got %s again: killing every rank\n", sigName(sig))
				stop(0)
			}
		case <-timeout:
			timeout = nil
			if res.reason == reasonSuccess {
				res = result{reason: reasonTimeout}
			}
			h.notef("gorun: --timeout %v expired: stopping the job\n", o.Timeout)
			stop(o.Grace)
		case <-escalate:
			escalate = nil
			for i, a := range h.agents {
				if !a.gone {
					h.notef("gorun: agent on %s did not confirm its ranks ended; killing it\n", h.plan.Nodes[i].Host.Name)
					a.proc.Kill()
				}
			}
		}
	}
	return res
}

// storeFenceTimeout is the job-wide fence's bound: a tenth longer than
// the hosts' local barriers', so that a host whose ranks arrived in part
// names its missing ranks before the store names whole hosts.
func storeFenceTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + d/10
}

// fenceTimedOut turns the store's fence timeout, which names hosts, into
// an abort that names their ranks: none of them arrived (a host whose ranks
// arrived in part reports its own missing ones, from its local barrier).
func (h *head) fenceTimedOut(gen int, err error) {
	var te *rendezvous.FenceTimeoutError
	if !errors.As(err, &te) || len(te.Missing) == 0 {
		return
	}
	var ranks []int
	for r, p := range h.plan.Ranks {
		if slices.Contains(te.Missing, p.Node) {
			ranks = append(ranks, r)
		}
	}
	if len(ranks) == 0 {
		return
	}
	select {
	case h.events <- event{node: te.Missing[0], abort: &control.Abort{Generation: gen, Rank: ranks[0], Missing: ranks, Timeout: te.Timeout}}:
	case <-h.done:
	}
}

// rankList names ranks with their hosts: "2, 3 (on h2)".
func (h *head) rankList(ranks []int) string {
	var b strings.Builder
	for i, r := range ranks {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 16 {
			fmt.Fprintf(&b, "and %d more", len(ranks)-i)
			break
		}
		fmt.Fprintf(&b, "%d (on %s)", r, h.plan.Nodes[h.plan.Ranks[r].Node].Host.Name)
	}
	return b.String()
}

// pmixHosts are the node names a PMIx server needs, unless PMIx is off;
// made once, as every agent's Launch of every generation carries them.
func (h *head) pmixHosts() []string {
	if h.o.PMIx == PMIxOff {
		return nil
	}
	h.hostsOnce.Do(func() {
		h.hostNames = make([]string, len(h.plan.Nodes))
		for i, n := range h.plan.Nodes {
			h.hostNames[i] = n.Host.Name
		}
	})
	return h.hostNames
}

func (h *head) launchFor(gen, node int, n Node, masterAddr string, masterPort int) control.Launch {
	l := control.Launch{
		Generation: gen, JobID: h.jobID, Secret: h.secret, Argv: h.o.Argv, Dir: cwd(), Slurm: h.o.Alloc != nil && h.o.Alloc.Kind == BackendSlurm,
		WorldSize: len(h.plan.Ranks), LocalWorldSize: len(n.Ranks), NodeRank: node, NodeCount: len(h.plan.Nodes),
		Host: n.Host.Name, MasterAddr: masterAddr, MasterPort: masterPort, MaxRestarts: h.o.MaxRestarts,
		Exports: h.exports,
		PMI: control.PMI{KVSName: kvsName(h.jobID, gen), Mapping: h.mapping, PMIx: h.o.PMIx, Hosts: h.pmixHosts(),
			FenceTimeout: h.o.RendezvousTimeout,
			RankBudget:   control.KVBudget{Keys: h.o.KVRankBudget.Keys, Bytes: h.o.KVRankBudget.Bytes},
			JobBudget:    control.KVBudget{Keys: h.o.KVJobBudget.Keys, Bytes: h.o.KVJobBudget.Bytes}},
		Bind: control.Bind{To: h.o.BindTo, MapBy: h.plan.MapBy.Within, CPUsPerRank: h.o.CPUsPerRank, Report: h.o.ReportBind, GPUs: n.Host.GPUs, GPUBind: h.o.GPUBind,
			// With no host source gorun runs "oversubscribed and unbound".
			Oversubscribed: len(n.Ranks) > n.Host.Slots || h.o.ImplicitHosts && h.plan.Oversubscribed},
	}
	for i, r := range n.Ranks {
		l.Ranks = append(l.Ranks, control.RankSpec{Rank: r, LocalRank: i, Stdin: r == h.o.StdinRank && gen == 0})
	}
	return l
}

func cwd() string {
	d, err := os.Getwd()
	if err != nil {
		return "/"
	}
	return d
}

// broadcast sends to every agent still connected.
func (h *head) broadcast(t control.Type, v any) { h.broadcastTo(false, t, v) }

// broadcastUnstepped sends to the agents that are not tasks of a resource
// manager's step (srun), which signals those itself.
func (h *head) broadcastUnstepped(t control.Type, v any) { h.broadcastTo(true, t, v) }

func (h *head) broadcastTo(unsteppedOnly bool, t control.Type, v any) {
	for _, a := range h.agents {
		if _, stepped := a.proc.(*tcpAgent); !a.gone && !(unsteppedOnly && stepped) {
			a.w.Send(t, v)
		}
	}
}

// markLost records the ranks of a lost agent as ended.
func (h *head) markLost(node, gen int) {
	now := time.Now()
	for _, r := range h.plan.Nodes[node].Ranks {
		if h.rec[r].End.IsZero() || h.rec[r].Generation != gen {
			h.rec[r].Generation, h.rec[r].End, h.rec[r].Err = gen, now, "its host's agent was lost"
		}
	}
}

// startAgents starts one agent per node in parallel and shakes hands.
// With a launch tree (--launch-fanout K) only K agents are started by the
// head; each agent starts the agents below it when its own is up. Each
// agent's reader runs from its handshake on, since lower agents' streams
// pass through it.
func (h *head) startAgents(ctx context.Context) error {
	n := len(h.plan.Nodes)
	h.agents = make([]*agentConn, n)
	h.relayed = map[int]*relayedAgent{}
	errs := make([]error, n)
	ready := make([]chan struct{}, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i, nd := range h.plan.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ready[i])
			parent := fanoutParent(i, h.o.Fanout)
			if parent < 0 || IsLocal(nd.Host.Name) {
				p, err := h.o.Starter.StartAgent(ctx, nd.Host)
				if err != nil {
					if !strings.HasPrefix(err.Error(), nd.Host.Name+":") {
						err = fmt.Errorf("start the agent on %s: %w", nd.Host.Name, err)
					}
					errs[i] = err
					return
				}
				h.connected(time.Since(h.start))
				h.agents[i], errs[i] = h.connect(i, nd.Host, p)
				return
			}
			<-ready[parent]
			pa := h.agents[parent]
			if pa == nil || errs[parent] != nil {
				errs[i] = fmt.Errorf("%s: not started: its parent in the launch tree, %s, did not start", nd.Host.Name, h.plan.Nodes[parent].Host.Name)
				return
			}
			r := newRelayedAgent(i, pa)
			h.relayMu.Lock()
			h.relayed[i] = r
			h.relayMu.Unlock()
			exe, _ := os.Executable()
			if err := pa.w.Send(control.TypeSpawn, control.Spawn{Node: i, Host: nd.Host.Name, User: nd.Host.User,
				Port: nd.Host.Port, Exe: exe, SSH: h.o.SSH}); err != nil {
				errs[i] = fmt.Errorf("start the agent on %s through %s: %w", nd.Host.Name, h.plan.Nodes[parent].Host.Name, err)
				return
			}
			h.agents[i], errs[i] = h.connect(i, nd.Host, r)
			h.connected(time.Since(h.start))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// connected records that an agent's process runs; the phase ends with
// the last.
func (h *head) connected(d time.Duration) {
	h.relayMu.Lock()
	defer h.relayMu.Unlock()
	h.phases.Connected = max(h.phases.Connected, d)
}

// connect shakes hands with a started agent and starts its reader.
func (h *head) connect(node int, host hostfile.Host, p AgentProcess) (*agentConn, error) {
	a := &agentConn{node: node, proc: p, w: control.NewWriter(p), r: control.NewReader(p), acks: make(chan int, stdinWindow+1)}
	if r, ok := p.(Remote); ok && r.Remote() {
		a.remote = true
	}
	a.heard.Store(time.Now().UnixNano())
	garbage, _, err := a.r.SkipPreamble()
	if len(garbage) > 0 {
		h.notef("gorun: %s printed this before its agent started (shell start-up files?): %q\n", host.Name, clip(garbage, 200))
	}
	if err != nil {
		p.Kill()
		return a, fmt.Errorf("agent on %s did not start: %w", host.Name, err)
	}
	mine := control.Hello{Version: h.o.Version}
	if a.remote {
		mine.BeatTimeout = h.beatTimeout()
		mine.Beat = mine.BeatTimeout / 5
	}
	a.hello, err = control.Handshake(a.w, a.r, mine)
	if err != nil {
		p.Kill()
		return a, fmt.Errorf("agent on %s: %w", host.Name, err)
	}
	a.upAt = time.Now()
	h.readers.Add(1)
	go h.read(a)
	if a.remote {
		go h.beat(a)
	}
	return a, nil
}

func (h *head) beatTimeout() time.Duration {
	if h.o.BeatTimeout > 0 {
		return h.o.BeatTimeout
	}
	return 5 * time.Second
}

// beat exchanges heartbeats with a remote agent from its handshake on,
// and declares it lost when it goes silent, until the head is done.
func (h *head) beat(a *agentConn) {
	timeout := h.beatTimeout()
	t := time.NewTicker(timeout / 5)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case now := <-t.C:
			if a.ended.Load() {
				return
			}
			a.w.Send(control.TypeBeat, nil)
			if last := time.Unix(0, a.heard.Load()); now.Sub(last) > timeout {
				// Kill ends the connection: read() reports the loss.
				a.lostWhy.Store(fmt.Sprintf("heard nothing from it for %v (host down, or its link cut)", now.Sub(last).Round(time.Millisecond)))
				a.proc.Kill()
				return
			}
		}
	}
}

// replan makes the plan of a ppr:N:numa job from the NUMA counts the
// agents (one per host) reported. Every host must keep ranks, since its
// agent already runs.
func (h *head) replan() error {
	o := h.o.Plan
	o.NUMA = make([]int, len(h.plan.Nodes))
	for i, a := range h.agents {
		o.NUMA[i] = a.hello.NUMA
	}
	hosts := make([]hostfile.Host, len(h.plan.Nodes))
	for i, n := range h.plan.Nodes {
		hosts[i] = n.Host
	}
	p, err := NewPlan(hosts, o)
	if err != nil {
		return err
	}
	if len(p.Nodes) != len(h.plan.Nodes) {
		return fmt.Errorf("%w: --map-by %s with -np %d leaves %d of the %d hosts without ranks; give every host ranks (no -np runs %s on all)",
			ErrPlan, o.MapBy, o.NP, len(h.plan.Nodes)-len(p.Nodes), len(h.plan.Nodes), o.MapBy)
	}
	h.plan = p
	return nil
}

// compareTopo warns, once per host, when a host's topology differs from
// the first one reported (bindings then differ across hosts too).
func (h *head) compareTopo(node int, topo string) {
	if topo == "" || h.topoWarned[node] {
		return
	}
	if h.topoFirst == "" {
		h.topoFirst, h.topoFirstNode = topo, node
		return
	}
	if topo != h.topoFirst {
		if h.topoWarned == nil {
			h.topoWarned = map[int]bool{}
		}
		h.topoWarned[node] = true
		h.notef("gorun: warning: %s differs from %s: %s, against %s\n", h.plan.Nodes[node].Host.Name,
			h.plan.Nodes[h.topoFirstNode].Host.Name, topo, h.topoFirst)
	}
}

// masterAddr picks MASTER_ADDR: an address of rank 0's host that the
// other hosts reach, chosen by rank 0's own routing table (or --iface).
func (h *head) masterAddr() (string, error) {
	a0 := h.agents[0]
	var peers []string
	for _, a := range h.agents[1:] {
		switch {
		case a.hello.ConnAddr != "":
			peers = append(peers, a.hello.ConnAddr)
		case a0.hello.ClientAddr != "":
			peers = append(peers, a0.hello.ClientAddr) // a local node: the head's host
		}
	}
	if h.o.Iface == "" && len(peers) == 0 {
		if a0.hello.ConnAddr != "" {
			return a0.hello.ConnAddr, nil
		}
		return "127.0.0.1", nil // one machine
	}
	if err := a0.w.Send(control.TypeRoute, control.Route{Peers: peers, Iface: h.o.Iface}); err != nil {
		return "", err
	}
	for e := range h.events {
		if e.node == 0 && e.route != nil {
			if e.route.Err != "" {
				return "", fmt.Errorf("MASTER_ADDR on %s: %s", h.plan.Nodes[0].Host.Name, e.route.Err)
			}
			return e.route.Addr, nil
		}
		if e.err != nil && e.node == 0 {
			return "", e.err
		}
	}
	return "", errors.New("MASTER_ADDR: no answer")
}

func clip(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// read turns an agent's frames into events; output goes to the mux here,
// in order, before the rank's exit is reported.
func (h *head) read(a *agentConn) {
	defer h.readers.Done()
	defer a.ended.Store(true)
	for {
		f, err := a.r.Next()
		a.heard.Store(time.Now().UnixNano())
		if err != nil {
			if why, ok := a.lostWhy.Load().(string); ok {
				err = errors.New(why)
			} else if err == io.EOF {
				err = errors.New("its control channel closed")
			}
			h.loseSubtree(a.node, err)
			h.events <- event{node: a.node, err: err}
			return
		}
		ev := event{node: a.node}
		switch f.Type {
		case control.TypeOutput:
			out, err := f.Output()
			if err == nil {
				err = h.mux.Write(out.Rank, output.Stream(out.Stream), out.Time, out.Data)
			}
			if err != nil && h.o.OutputDir != "" && !errors.Is(err, output.ErrClosed) {
				// A rank's file (Write names it, once): its output is lost.
				h.events <- event{node: a.node, outputLost: fmt.Sprintf("rank %d's %s is lost: %v (--output-filename)",
					out.Rank, output.Stream(out.Stream), strings.TrimPrefix(err.Error(), "output: "))}
			}
			// gorun's own stdout failing (EPIPE) must not stop the job.
			continue
		case control.TypeStdinAck:
			select {
			case a.acks <- 1:
			default:
			}
			continue
		case control.TypeStarted:
			ev.start = new(control.Started)
			err = f.Decode(ev.start)
		case control.TypeExited:
			ev.exited = new(control.Exited)
			if err = f.Decode(ev.exited); err == nil {
				h.mux.CloseRank(ev.exited.Rank)
			}
		case control.TypeDone:
			ev.done = new(control.Done)
			err = f.Decode(ev.done)
		case control.TypeEnv:
			ev.env = new(control.Env)
			err = f.Decode(ev.env)
		case control.TypeFence:
			ev.fence = new(control.Fence)
			err = f.Decode(ev.fence)
		case control.TypeAbort:
			ev.abort = new(control.Abort)
			err = f.Decode(ev.abort)
		case control.TypeSignaled:
			ev.signaled = new(control.Signal)
			err = f.Decode(ev.signaled)
		case control.TypeCheckRe:
			ev.check = new(control.CheckReply)
			err = f.Decode(ev.check)
		case control.TypeRouteRe:
			ev.route = new(control.RouteReply)
			err = f.Decode(ev.route)
		case control.TypeBeat:
			continue
		case control.TypeRelay:
			if err = h.relayFrom(f); err == nil {
				continue
			}
		case control.TypeSpawnErr:
			if err = h.spawnFailed(f); err == nil {
				continue
			}
		case control.TypeError:
			var m control.Error
			err = f.Decode(&m)
			ev.msg = m.Msg
		default:
			err = fmt.Errorf("%w: unexpected %s frame", control.ErrProtocol, f.Type)
		}
		if err != nil {
			h.loseSubtree(a.node, err)
			h.events <- event{node: a.node, err: err}
			return
		}
		h.events <- ev
	}
}

// pumpStdin copies gorun's stdin to one rank, a window at a time.
func (h *head) pumpStdin(a *agentConn, rank int) {
	if f, ok := h.o.Stdin.(*os.File); ok && inBackground(f) {
		a.w.SendStdin(control.Stdin{Rank: rank}) // reading would stop gorun (SIGTTIN)
		return
	}
	buf := make([]byte, stdinChunk)
	inflight := 0
	for {
		n, err := h.o.Stdin.Read(buf)
		if n > 0 {
			for inflight >= stdinWindow {
				<-a.acks
				inflight--
			}
			if a.w.SendStdin(control.Stdin{Rank: rank, Data: buf[:n]}) != nil {
				return
			}
			inflight++
		}
		if err != nil {
			a.w.SendStdin(control.Stdin{Rank: rank})
			return
		}
	}
}

// inBackground reports whether f is a terminal that gorun's process group
// does not own, where reading would stop gorun with SIGTTIN.
func inBackground(f *os.File) bool {
	fg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return false // not a terminal
	}
	return fg != unix.Getpgrp()
}

// printEnv asks the agent of the rank's host for the rank's environment.
func (h *head) printEnv() (int, error) {
	r := h.o.PrintEnv
	node := h.plan.Ranks[r].Node
	a := h.agents[node]
	l := h.launchFor(0, node, h.plan.Nodes[node], h.master, h.agents[0].hello.FreePort)
	l.PrintEnv = r + 1
	if err := a.w.Send(control.TypeLaunch, l); err != nil {
		return ExitLaunch, err
	}
	name := h.plan.Nodes[node].Host.Name
	for e := range h.events {
		switch {
		case e.node != node:
		case e.env != nil:
			sort.Strings(e.env.Env)
			for _, kv := range e.env.Env {
				if strings.HasPrefix(kv, rendezvous.EnvSecret+"=") {
					// A throwaway secret (no job runs), but printed
					// environments end up in bug reports.
					kv = rendezvous.EnvSecret + "=<redacted>"
				}
				fmt.Fprintln(h.o.Stdout, kv)
			}
			return ExitOK, nil
		case e.msg != "":
			return ExitLaunch, fmt.Errorf("agent on %s: %s", name, e.msg)
		case e.err != nil:
			return ExitLaunch, fmt.Errorf("agent on %s: %w", name, e.err)
		}
	}
	return ExitLaunch, errors.New("print-env: no answer")
}

// stopAgents tells every agent to shut down and waits for it, bounded:
// an agent that has not closed its stream within 5 s is killed.
func (h *head) stopAgents() {
	for _, a := range h.agents {
		if a != nil {
			a.w.Send(control.TypeShutdown, nil)
			a.proc.Close()
		}
	}
	done := make(chan struct{})
	go func() { h.readers.Wait(); close(done) }()
	deadline := time.After(5 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-h.events:
		case <-deadline:
			for i, a := range h.agents {
				if a != nil && !a.ended.Load() {
					h.notef("gorun: the agent on %s did not exit; dropping it\n", h.plan.Nodes[i].Host.Name)
					a.proc.Kill()
				}
			}
		}
	}
	for _, a := range h.agents {
		if a != nil {
			a.proc.Wait()
		}
	}
}

// sameFile reports whether two writers are the same open file (a terminal
// that both stdout and stderr print on, or 2>&1).
func sameFile(a, b io.Writer) bool {
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	var sa, sb unix.Stat_t
	if unix.Fstat(int(fa.Fd()), &sa) != nil || unix.Fstat(int(fb.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Rdev == sb.Rdev
}

// notef writes a message of gorun's own to stderr, on a line of its own
// even when a rank's unfinished line was written there last.
func (h *head) notef(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if h.mux != nil {
		h.mux.Notice(msg)
		return
	}
	io.WriteString(h.o.Stderr, msg)
}

func sigName(s syscall.Signal) string {
	n := unix.SignalName(s)
	if n == "" {
		return fmt.Sprintf("signal %d", int(s))
	}
	return n
}

func describeSignal(sig int) string {
	return fmt.Sprintf("%s (signal %d)", sigName(syscall.Signal(sig)), sig)
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
