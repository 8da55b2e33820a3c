package launcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/rendezvous"
	"github.com/gorun/gorun/sshclient"
	"github.com/gorun/gorun/stacks"
	"github.com/gorun/gorun/topology"
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
	ExitHang        = 123 // no rank made progress for --hang-timeout
	exitSignalStart = 128 // 128+N: a rank was killed by signal N, or gorun got signal N
)

// Options is everything the head needs to run a job.
type Options struct {
	Argv []string // the program and its arguments (with Apps: the whole command line, for records)
	// Apps are the job's programs when it runs several (MPMD: prog1 :
	// -np 2 prog2), each on its ranks, in rank order; nil = every rank
	// runs Argv. Plan.NP is then their sum (see App).
	Apps []App
	// DisplayAllocation prints the hosts and their slots before the plan
	// (--display-allocation, Open MPI's).
	DisplayAllocation bool
	// PrintExitCodes prints every rank's exit status when the job ends
	// (--print-exit-codes, Hydra's -print-all-exitcodes).
	PrintExitCodes bool
	// RankFiles writes ranks' output to files on their hosts (torchrun's
	// --log-dir, Hydra's -outfile-pattern); nil = none.
	RankFiles *RankFiles
	// Personality is the launcher whose command line gorun took (gorun
	// mpirun ...), whose contract the ranks keep; "" = gorun's own.
	Personality env.Launcher
	// Dir is the ranks' working directory on every host (--wdir), an
	// absolute path; "" = gorun's own working directory.
	Dir           string
	Hosts         []hostfile.Host // where ranks may run
	ImplicitHosts bool            // Hosts is the embedded localhost default, not the user's
	Plan          PlanOptions
	Exports       []env.Export  // -x
	DisplayMap    bool          // print the plan
	DryRun        bool          // stop after the plan
	PrintEnv      int           // print rank PrintEnv's environment and stop; -1 = off
	Tag           bool          // --tag-output
	Timestamp     bool          // --timestamp-output
	MergeOutput   bool          // --merge-output: identical lines of several ranks as one
	MergeWindow   time.Duration // --merge-window; 0 = output.DefaultMergeWindow
	OutputDir     string        // --output-filename
	StdinRank     int           // rank that gets gorun's stdin; -1 = none
	Grace         time.Duration
	Timeout       time.Duration // 0 = none
	MaxRestarts   int
	SummaryJSON   string   // --summary-json file
	RecordDir     string   // --record: the directory the job's record (package jobrecord) is written into; "" = none
	ConfigFiles   []string // the configuration files that gave settings, for the record
	// HangTimeout reports a job in which no rank made progress for this
	// long (--hang-timeout); 0 = never. OnHang says what follows:
	// OnHangStop ("" too) or OnHangReport.
	HangTimeout time.Duration
	OnHang      string
	// JobsDir is where the job file goes (gorun ps, status, stacks); ""
	// = jobs.Dir(), "off" = nowhere.
	JobsDir     string
	Iface       string        // --iface: MASTER_ADDR is this interface's address on rank 0's host
	Plugin      env.Plugin    // --plugin, --plugin-dir, --plugin-opt, --transport-fallback: for Go ranks' collectives
	Fanout      int           // --launch-fanout: the head starts this many agents, agents the rest; 0 = flat; FanoutAuto: by the host count
	BindTo      string        // --bind-to: none, core, numa, package, gpu; "" = gpu where GPUs are, else none
	CPUsPerRank int           // --cpus-per-rank
	GPUBind     string        // --gpu-bind: all ("" too: every GPU visible to every rank) or single
	ReportBind  bool          // --report-bindings
	SSH         control.SSH   // how to reach other hosts
	BeatTimeout time.Duration // remote agents silent this long are lost; 0 = 5s
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

	// PerNode makes this gorun one node of a per-node launch (--nnodes,
	// --rdzv-endpoint): Hosts, Plan's NP and Starter come from the
	// endpoint, which runs the job (see RunPerNode).
	PerNode *PerNode
	// What a per-node launch sets for each of its rounds: the number of
	// the round's first generation (restarts before it: ranks'
	// TORCHELASTIC_RESTART_COUNT), the job id (the same in every round),
	// the run id (--rdzv-id: ranks'
	// TORCHELASTIC_RUN_ID; "" = the job id), the membership changes so
	// far (in the summary), and Rejoin, asked when the agent of host
	// ("" = not known) is lost in generation gen, why saying so: true ends
	// Run without a summary, with ErrRejoin, for a new round.
	FirstGeneration int
	JobID           string // the job's id; "" = a new one
	RunID           string
	Membership      []string
	Rejoin          func(gen int, host, why string) bool

	Starter Starter // nil = LocalStarter
	// EarlyAgent is this machine's agent, started before the options
	// were read: the default starter gives it to the plan's first local
	// host. The caller discards it after Run if no host took it.
	EarlyAgent *EarlyAgent
	// Alloc is the resource manager's allocation the job runs in, if any:
	// it chooses the starter for other hosts (srun for Slurm) and the
	// ranks' Slurm variables.
	Alloc   *Allocation
	Stdin   io.Reader // nil = os.Stdin
	Stdout  io.Writer // nil = os.Stdout
	Stderr  io.Writer // nil = os.Stderr
	Version string
	// Trace prints where the job's time went when it ends (--trace):
	// from Started (gorun's main; zero = Run's start) to the agents' end.
	Trace   bool
	Started time.Time

	// nodeOutput says that each node of this per-node launch's round
	// prints its own ranks' output (RunPerNode sets it): the head prints
	// none of it, and asks the agents to (head.printFor).
	nodeOutput bool
}

// ErrUsage is wrapped by errors that are the user's to fix before anything
// starts (exit code [ExitUsage]).
var ErrUsage = errors.New("usage")

// ErrRejoin is wrapped by Run's error when Options.Rejoin took a lost
// agent for a change of membership: the per-node launch starts a new
// round.
var ErrRejoin = errors.New("membership changed")

// Run runs a job to its end and returns gorun's exit code. A non-nil error
// means the job could not run, gorun itself failed, or ctx stopped the
// job; its message is for the user, and the code still applies.
//
// Cancelling ctx, or its deadline passing, stops the job as --timeout
// does: every rank gets SIGTERM, and SIGKILL after Options.Grace; the
// agents are shut down once they confirm their ranks are gone; the
// summary is printed and --summary-json written, with the reason
// "cancelled" and the code 143 (128+SIGTERM, as for a job that gorun's
// SIGTERM ended). As with --timeout, what ended the job first stands: if
// a rank had already failed, the summary names it and the code is its.
// No restart follows a cancellation.
//
// Cancelled before the ranks start (while the agents start and shake
// hands, or while MASTER_ADDR or --print-env's answer is awaited), Run
// kills the agents still shaking hands, shuts down the others, and
// returns 143 without a summary; with ctx done before the call, it starts
// no agent. In every case where ctx is done by the time a job that did
// not succeed ends, the error wraps ctx.Err().
func Run(ctx context.Context, o Options) (int, error) {
	go control.Warm() // the frames the head sends and reads first
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if err := o.setApps(); err != nil {
		return ExitUsage, err
	}
	if o.PerNode != nil || o.Starter != nil {
		o.EarlyAgent.Discard() // their agents come from elsewhere
	}
	if o.PerNode != nil {
		return RunPerNode(ctx, o)
	}
	if len(o.Argv) == 0 && !o.DryRun && !o.DisplayMap {
		return ExitUsage, fmt.Errorf("%w: no program to run (gorun [flags] PROGRAM [ARGS...])", ErrUsage)
	}
	if o.DryRun && o.PrintEnv >= 0 {
		// Each stops before the program starts, in its own way: --dry-run
		// before any agent starts, --print-env after the agents compute
		// rank N's environment. Doing one silently is a surprise.
		return ExitUsage, fmt.Errorf("%w: --dry-run and --print-env %d exclude each other: --dry-run prints the plan and starts nothing; --print-env starts the agents to show rank %d's environment; give one", ErrUsage, o.PrintEnv, o.PrintEnv)
	}
	if _, err := topology.ParseBindTo(o.BindTo); err != nil {
		return ExitUsage, fmt.Errorf("%w: --%v", ErrUsage, err)
	}
	if o.Dir != "" && !filepath.IsAbs(o.Dir) {
		return ExitUsage, fmt.Errorf("%w: --wdir %s: not an absolute path", ErrUsage, o.Dir)
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
	if o.DisplayAllocation {
		FormatAllocation(o.Stderr, o.Hosts, o.Plan.Source)
	}
	if o.RankFiles != nil && o.RankFiles.Dir != "" && !o.DryRun {
		fmt.Fprintf(o.Stderr, "gorun: note: the ranks' logs go to %s on each host\n", o.RankFiles.Dir)
	}
	if (o.DisplayMap || o.DryRun) && !o.Plan.MapBy.NeedsNUMA() {
		plan.Format(o.Stderr)
		if o.DryRun {
			return ExitOK, nil
		}
	}
	o.SSH = absPaths(o.SSH)
	o.Fanout = EffectiveFanout(o, len(plan.Nodes))
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
	h := &head{o: o, plan: plan, exports: exports, jobID: cmp.Or(o.JobID, newJobID()), secret: newSecret(), events: make(chan event, 256), done: make(chan struct{})}
	h.apps = launchApps(o.Apps, func(app int, name string) {
		fmt.Fprintf(o.Stderr, "gorun: warning: -x %s of program %d: %s is not set in gorun's environment; not exported\n", name, app+1, name)
	})
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

// backendLine says, for --display-map and --dry-run, which batch system
// gorun found, how agents will be started and why.
func backendLine(a *Allocation) string {
	if a == nil {
		return "local and SSH (no resource manager's allocation)"
	}
	how := map[string]string{
		LauncherSrun:     "srun",
		LauncherQrsh:     "qrsh -inherit HOST (tight integration)",
		LauncherBlaunch:  "blaunch HOST",
		LauncherPBSTmrsh: "pbs_tmrsh HOST (the TM interface)",
		LauncherFlux:     "flux exec --rank=RANK",
		LauncherSSH:      "SSH",
	}[a.Launcher]
	line := fmt.Sprintf("%s: %s; agents on other hosts through %s; %s", a.Kind, a.Name(), how, a.Why)
	if a.Note != "" {
		line += " (" + a.Note + ")"
	}
	return line
}

// defaultStarter starts agents on this machine locally and on other hosts
// over SSH, or through the batch system's launcher inside its allocation:
// srun, qrsh -inherit, blaunch, pbs_tmrsh or flux exec (the dialer is
// only made when some host needs it).
func defaultStarter(o Options, plan *Plan) (Starter, error) {
	m := &MixedStarter{Local: &LocalStarter{Stderr: o.Stderr, Early: o.EarlyAgent}}
	for _, n := range plan.Nodes {
		if IsLocal(n.Host.Name) && n.Host.User == "" && n.Host.Port == 0 {
			continue
		}
		if o.Alloc != nil && o.Alloc.Launcher != LauncherSSH {
			exe, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("find gorun's own binary: %w", err)
			}
			if o.Alloc.Kind == BackendSlurm {
				m.Remote = NewSlurmStarter(exe, plan, o.Iface, o.Stderr)
				break
			}
			if cs := NewCommandStarter(o.Alloc, exe, o.Stderr); cs != nil {
				m.Remote = cs
				break
			}
		}
		logf := func(format string, args ...any) { fmt.Fprintf(o.Stderr, "gorun: "+format+"\n", args...) }
		if o.Alloc != nil && o.Alloc.Note != "" {
			logf("note: %s", o.Alloc.Note) // its own launcher not found: SSH
		}
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

// head runs one job: the agents, the generations, the summary. Its files:
// head_agents.go (connections to the agents), head_events.go (what the
// head reacts to), head_generation.go (the loop and one handler per
// event), head_launch.go (what starts ranks) and head_rendezvous.go
// (MASTER_ADDR and the fences).
type head struct {
	o       Options
	plan    *Plan
	exports []string
	apps    []control.App // the job's programs (MPMD), nil when it runs one
	jobID   string
	secret  string // the job's rendezvous secret, for the agents' KV servers

	hostsOnce sync.Once
	hostNames []string // the plan's node names, for PMIx (pmixHosts)
	crossOnce sync.Once
	crossRank [][]int // Horovod's cross rank by node and local rank (crossRanks)
	crossSize []int   // Horovod's cross size by local rank
	agents    []*agentConn
	events    chan event
	mux       *output.Mux

	rec     []RankRecord
	phases  Phases
	start   time.Time
	readers sync.WaitGroup
	master  string // MASTER_ADDR

	relayMu sync.Mutex
	relayed map[int]*relayedAgent // agents reached through others, by node

	done chan struct{} // closed when the head is finished: heartbeats stop

	store   *rendezvous.Store // the job-wide key-value store (PMI fences)
	mapping string            // PMI_process_mapping

	fenceMu    sync.Mutex
	fenceKey   [3]int // the generation, spawned job and number of the fence whose answer fenceBytes is
	fenceBytes []byte

	// What the job socket and the hang watch read while the loop runs.
	jobsMu   sync.Mutex    // guards jobsrv, jobState, jobsDone
	jobsrv   *jobs.Server  // the job socket, once published
	jobState string        // the state to write in the job file
	jobsDone chan struct{} // closed when publishing is over
	jobsStop chan struct{} // closed to stop a publish that has not started
	// planned is closed once the plan is final (prepare: a ppr:N:numa
	// plan is made again from the agents' NUMA counts): the job is not
	// published, and its socket asks nothing of the plan, before.
	planned     chan struct{}
	plannedOnce sync.Once
	probes      probeSet
	live        []rankLive   // by rank
	gen         atomic.Int32 // the current generation
	launched    atomic.Bool  // the first generation was launched
	hang        *stacks.Verdict
	// For --record: each rank's binding, and the hosts' descriptions
	// (hostInfo, done once the agents answered).
	binds    []control.Binding
	hostInfo map[int]control.ProbeReply
	infoDone chan struct{}
	// finalProg is what Go ranks' collectives reported as they ended
	// (loop-owned), for the summary's stragglers.
	finalProg map[int]rendezvous.Progress
	// firstFence is when the first fence completed (phases.FirstFence).
	firstFence atomic.Int64
	// firstOutput is when the first output of a rank came (phases.FirstOutput).
	firstOutput atomic.Int64

	threads defaultThreads // the first generation's ranks given OMP_NUM_THREADS=1, for one note

	// The ranks that the generations' ranks spawned (head_dyn.go): where
	// each runs, by its number in the job's frames (read by the output's
	// writers), and the last generation's records.
	spawnMu     sync.Mutex
	spawnOf     map[int]spawnLabel
	spawnedRecs []RankRecord

	topoFirst     string // the first host's topology summary (when bound)
	topoFirstNode int
	topoWarned    map[int]bool
}

func (h *head) run(ctx context.Context) (int, error) {
	h.start = time.Now()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	if err := h.openOutput(); err != nil {
		return ExitUsage, err
	}
	defer h.mux.Close()
	h.publish()
	defer h.unpublish()
	if done, code, err := h.prepare(ctx); done {
		h.stopAgents()
		if h.o.RecordDir != "" && err != nil {
			h.writeRecord(context.Background(), Summary{JobID: h.jobID, Argv: h.o.Argv, NP: len(h.plan.Ranks),
				Reason: "not-started", Message: err.Error(), ExitCode: code})
		}
		if err != nil && ctx.Err() != nil {
			return exitCancelled, h.cancelled(ctx)
		}
		return code, err
	}
	h.live = make([]rankLive, len(h.plan.Ranks))
	if h.o.RecordDir != "" {
		h.binds = make([]control.Binding, len(h.plan.Ranks))
		h.infoDone = make(chan struct{})
	}
	if h.o.HangTimeout > 0 {
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go h.watchHang(wctx)
	}
	res := h.generations(ctx, sigs)
	h.unpublishSoon()
	h.phases.AllExited = time.Since(h.start)
	h.phases.FirstFence = time.Duration(h.firstFence.Load())
	h.phases.FirstOutput = time.Duration(h.firstOutput.Load())
	if h.infoDone != nil {
		// The agents' answers about their hosts, before they go.
		select {
		case <-h.infoDone:
		case <-time.After(infoTimeout + 3*time.Second):
		}
	}
	h.stopAgents()
	h.mux.Close()
	if h.o.Trace {
		h.trace()
	}
	if res.reason == reasonAgentLost && h.o.Rejoin != nil && ctx.Err() == nil && h.o.Rejoin(int(h.gen.Load()), res.host, res.lost) {
		return ExitLaunch, fmt.Errorf("%w: %s", ErrRejoin, res.lost)
	}
	h.printExitCodes()
	code := h.summarize(res)
	if ctx.Err() != nil && res.reason != reasonSuccess {
		return code, h.cancelled(ctx)
	}
	return code, nil
}

// cancelled is Run's error when its context stopped the job.
func (h *head) cancelled(ctx context.Context) error {
	return fmt.Errorf("job %s cancelled: %w", h.jobID, ctx.Err())
}

// prepare brings the job to where its ranks can start: the agents up, the
// plan final (ppr:N:numa), the hosts' descriptors checked, MASTER_ADDR
// chosen, the store made. It reports done when Run ends here instead
// (something failed, --dry-run, --print-env), with Run's code and error.
func (h *head) prepare(ctx context.Context) (done bool, code int, err error) {
	o := h.o
	if err := ctx.Err(); err != nil {
		return true, ExitLaunch, err
	}
	direct := len(h.plan.Nodes)
	if h.o.Fanout > 0 {
		direct = min(direct, h.o.Fanout)
	}
	if err := checkHeadFiles(len(h.plan.Nodes), direct, openFileLimit()); err != nil {
		return true, ExitUsage, err
	}
	if !o.Plan.MapBy.NeedsNUMA() {
		h.planFinal()
	}
	err = h.startAgents(ctx)
	o.EarlyAgent.Discard() // every host has its agent: one no host took goes
	if err != nil {
		return true, ExitLaunch, err
	}
	h.phases.AgentsUp = time.Since(h.start)
	if o.Plan.MapBy.NeedsNUMA() {
		err := h.replan()
		h.planFinal()
		if err != nil {
			return true, ExitUsage, err
		}
		if o.DisplayMap || o.DryRun {
			h.plan.Format(o.Stderr)
		}
		if o.DryRun {
			return true, ExitOK, nil
		}
	}
	if o.PrintEnv < 0 {
		if err := h.checkFiles(); err != nil {
			return true, ExitUsage, err
		}
	}
	if h.master, err = h.masterAddr(ctx); err != nil {
		return true, ExitLaunch, err
	}
	if o.PrintEnv >= 0 {
		code, err := h.printEnv(ctx)
		return true, code, err
	}
	if err := h.newStore(); err != nil {
		return true, ExitLaunch, err
	}
	h.newRecords()
	return false, 0, nil
}

// newRecords makes every rank's record, which the generations fill in.
func (h *head) newRecords() {
	h.rec = make([]RankRecord, len(h.plan.Ranks))
	for r, p := range h.plan.Ranks {
		h.rec[r] = RankRecord{Rank: r, Host: h.plan.Nodes[p.Node].Host.Name, Code: -1}
	}
}

// replan makes the plan of a ppr:N:numa job from the NUMA counts the
// agents (one per host) reported. Every host must keep ranks, since its
// agent already runs.
func (h *head) replan() error {
	o := h.o.Plan
	o.NUMA = make([]int, len(h.plan.Nodes))
	o.Packages = make([]int, len(h.plan.Nodes))
	for i, a := range h.agents {
		o.NUMA[i], o.Packages[i] = a.hello.NUMA, a.hello.Packages
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
	if err := h.mux.SetRanks(len(p.Ranks)); err != nil {
		return fmt.Errorf("%w: --output-filename: %w", ErrUsage, err)
	}
	return nil
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
