package simcluster

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/launcher"
)

// Script is what every simulated rank does.
type Script struct {
	// Fence: each rank puts one key (key-RANK), enters one fence and gets
	// the key of the next rank (and, with GetAll, local rank 0 of each
	// host gets every rank's key), over PMI-1 to its agent.
	Fence bool
	// GetAllEvery > 0: ranks whose number it divides get every rank's
	// key too.
	GetAllEvery int
	// FailRank, when >= 0, exits with code 1 once every rank is through
	// the fence (or has started, without Fence); the others then wait to
	// be stopped. With FailRank < 0 every rank exits 0 when done, unless
	// Hold keeps every rank running until it is stopped.
	FailRank int
	Hold     bool
	// NoFence names a host whose ranks never enter the fence (they hold
	// until stopped), as ranks stuck before MPI_Init's barrier.
	NoFence string
}

// Config describes a simulated cluster.
type Config struct {
	Hosts int // how many (named sim0001, ...)
	// Latency is each link's one-way latency, Bandwidth its bytes per
	// second in each direction (0: unlimited): the head's link to each
	// agent it starts, and each agent's link to the agents it starts.
	Latency   time.Duration
	Bandwidth float64
	Script    Script
	// Log receives the agents' diagnostics (nil: discarded).
	Log io.Writer
	// Real, when set, says which hosts run a real `gorun agent` process
	// (RealExe) instead of an agent in this process: its ranks are real
	// processes too. Real agents take part in launch and teardown only
	// (their ranks run the job's real program), so a Script with Fence
	// or FailRank must not have them.
	Real    func(host int) bool
	RealExe string
	// OnStart, when set, is called as each simulated rank starts.
	OnStart func(host string, r launcher.ProcRank)
	// Crash names hosts that crash (Cluster.Crash) this long after their
	// agent starts: during the handshake, before the launch, ...
	Crash map[string]time.Duration
}

// Cluster is a simulated cluster: a launcher.Starter for the head, and
// for its agents' launch trees.
type Cluster struct {
	cfg   Config
	hosts []hostfile.Host
	index map[string]int

	mu     sync.Mutex
	nodes  map[int]*node
	agents sync.WaitGroup

	world     int // ranks in the job (set at the first start)
	started   atomic.Int64
	fenced    atomic.Int64 // ranks through their fence and gets
	allFenced chan struct{}
	fenceOnce sync.Once
	stats     Stats
}

// node is a running simulated host.
type node struct {
	name   string
	cancel context.CancelFunc
	link   *End // the agent's end of its link to its parent (head or agent)
	done   chan struct{}
	err    error
	kids   []*End // the parent's ends of the links to its lower agents
	procs  *procs
	crash  atomic.Bool
}

// New makes a cluster of cfg.Hosts hosts, none running yet.
func New(cfg Config) *Cluster {
	c := &Cluster{cfg: cfg, index: map[string]int{}, nodes: map[int]*node{}, allFenced: make(chan struct{})}
	for i := range cfg.Hosts {
		name := fmt.Sprintf("sim%04d", i+1)
		c.hosts = append(c.hosts, hostfile.Host{Name: name, Slots: 1})
		c.index[name] = i
	}
	return c
}

// Hosts are the cluster's hosts, for the head's plan (slots: 1 each;
// callers set what they need).
func (c *Cluster) Hosts() []hostfile.Host { return append([]hostfile.Host(nil), c.hosts...) }

// StartAgent starts host's agent on a new link and returns the caller's
// end of it: the head calls it for the hosts it starts, and agents for
// their lower agents (AgentOptions.Kids).
func (c *Cluster) StartAgent(ctx context.Context, host hostfile.Host) (launcher.AgentProcess, error) {
	i, ok := c.index[host.Name]
	if !ok {
		return nil, fmt.Errorf("simcluster: no host %s", host.Name)
	}
	if c.cfg.Real != nil && c.cfg.Real(i) {
		st := &launcher.LocalStarter{Exe: c.cfg.RealExe, Stderr: c.cfg.Log}
		return st.StartAgent(ctx, host)
	}
	mine, theirs := Link(c.cfg.Latency, c.cfg.Bandwidth)
	actx, cancel := context.WithCancel(context.Background())
	n := &node{name: host.Name, cancel: cancel, link: theirs, done: make(chan struct{})}
	n.procs = &procs{c: c, host: host.Name, live: map[int]*rank{}}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	log := c.cfg.Log
	if log == nil {
		log = io.Discard
	}
	if d, ok := c.cfg.Crash[host.Name]; ok {
		time.AfterFunc(d, func() { c.Crash(host.Name) })
	}
	c.agents.Add(1)
	go func() {
		defer c.agents.Done()
		defer close(n.done)
		n.err = launcher.RunAgent(actx, launcher.AgentOptions{
			In: theirs, Out: theirs, Log: log, Host: host.Name, Version: "sim",
			// As over SSH: the head then asks rank 0's agent for
			// MASTER_ADDR, and waits for its answer.
			ConnAddr: "127.0.0.1", ClientAddr: "127.0.0.1",
			Procs: n.procs, Kids: &kidStarter{c: c, parent: n},
		})
		theirs.Close()
	}()
	return &agentProc{end: mine, n: n}, nil
}

// kidStarter starts an agent's lower agents, noting their links so that
// a crash of the agent's host cuts them.
type kidStarter struct {
	c      *Cluster
	parent *node
}

func (k *kidStarter) StartAgent(ctx context.Context, host hostfile.Host) (launcher.AgentProcess, error) {
	p, err := k.c.StartAgent(ctx, host)
	if ap, ok := p.(*agentProc); ok {
		k.c.mu.Lock()
		k.parent.kids = append(k.parent.kids, ap.end)
		k.c.mu.Unlock()
	}
	return p, err
}

// agentProc is the starter's end of a simulated agent.
type agentProc struct {
	end *End
	n   *node
}

func (a *agentProc) Read(p []byte) (int, error)  { return a.end.Read(p) }
func (a *agentProc) Write(p []byte) (int, error) { return a.end.Write(p) }
func (a *agentProc) Close() error                { return a.end.Close() }
func (a *agentProc) Remote() bool                { return true }
func (a *agentProc) Wait() error                 { <-a.n.done; return nil }

// Kill cuts the link, as the head's kill of an agent's connection does.
func (a *agentProc) Kill() error {
	a.end.Cut()
	return nil
}

// Crash makes host fail as a machine does: its links (to its parent and
// to its lower agents) are cut, and its agent and ranks vanish without a
// word. It reports whether the host was running.
func (c *Cluster) Crash(host string) bool {
	c.mu.Lock()
	n := c.nodes[c.index[host]]
	var kids []*End
	if n != nil {
		kids = append(kids, n.kids...)
	}
	c.mu.Unlock()
	if n == nil {
		return false
	}
	n.crash.Store(true)
	n.link.Cut()
	for _, k := range kids {
		k.Cut()
	}
	n.cancel()
	return true
}

// Wait waits until every simulated agent has returned, and returns how
// many did.
func (c *Cluster) Wait() int {
	c.agents.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Stats are the simulated ranks' timings, as wall-clock times.
type Stats struct {
	Ranks      int       // ranks started
	FirstStart time.Time // the first rank started
	LastStart  time.Time // every rank had started
	FenceIn    time.Time // the first rank entered the fence
	FenceAll   time.Time // the last rank entered the fence
	FenceOut   time.Time // the last rank was through it (and its gets)
	BarrierOut time.Time // the first rank was let out of the barrier
	FailAt     time.Time // FailRank exited
	LastStop   time.Time // the last rank stopped after FailAt
	Stopped    int       // ranks that ended after FailAt
	Errors     []string  // what went wrong in the ranks (PMI errors, wrong values)
}

// Stats returns the timings so far.
func (c *Cluster) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Errors = append([]string(nil), s.Errors...)
	return s
}

func (c *Cluster) note(f func(s *Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

func (c *Cluster) failf(format string, args ...any) {
	c.note(func(s *Stats) {
		if len(s.Errors) < 20 {
			s.Errors = append(s.Errors, fmt.Sprintf(format, args...))
		}
	})
}

// procs is one simulated host's ranks (launcher.Procs).
type procs struct {
	c    *Cluster
	host string

	mu   sync.Mutex
	next int
	live map[int]*rank
}

type rank struct {
	r    launcher.ProcRank
	sig  chan syscall.Signal
	once sync.Once
}

// Start runs a simulated rank.
func (p *procs) Start(r launcher.ProcRank) (int, error) {
	p.mu.Lock()
	p.next++
	pid := p.next
	rk := &rank{r: r, sig: make(chan syscall.Signal, 4)}
	p.live[pid] = rk
	p.mu.Unlock()
	go p.run(pid, rk)
	return pid, nil
}

// Signal delivers sig: SIGTERM, SIGINT, SIGHUP and SIGKILL end the rank.
func (p *procs) Signal(pid int, sig syscall.Signal) {
	p.mu.Lock()
	rk := p.live[pid]
	p.mu.Unlock()
	if rk == nil {
		return
	}
	select {
	case rk.sig <- sig:
	default:
	}
}

func (p *procs) exit(pid int, rk *rank, code int, sig syscall.Signal) {
	rk.once.Do(func() {
		p.mu.Lock()
		delete(p.live, pid)
		p.mu.Unlock()
		if rk.r.PMI != nil {
			rk.r.PMI.Close()
		}
		rk.r.Exit(code, sig)
	})
}

func fatal(sig syscall.Signal) bool {
	return sig == syscall.SIGTERM || sig == syscall.SIGINT || sig == syscall.SIGHUP || sig == syscall.SIGKILL
}

// run is a simulated rank's life: start, the script, then wait for the
// end the script gives it.
func (p *procs) run(pid int, rk *rank) {
	c := p.c
	now := time.Now()
	world := envInt(rk.r.Env, "WORLD_SIZE")
	n := c.started.Add(1)
	c.note(func(s *Stats) {
		s.Ranks++
		if s.FirstStart.IsZero() {
			s.FirstStart = now
		}
		if now.After(s.LastStart) {
			s.LastStart = now
		}
	})
	if c.cfg.OnStart != nil {
		c.cfg.OnStart(p.host, rk.r)
	}
	sc := c.cfg.Script
	if sc.Fence && p.host == sc.NoFence {
		for sig := range rk.sig {
			if fatal(sig) {
				p.stopped(pid, rk, sig)
				return
			}
		}
		return
	}
	if sc.Fence {
		if rk.r.PMI == nil {
			c.failf("rank %d on %s: no PMI connection", rk.r.Rank, p.host)
		} else if err := p.fence(rk, world); err != nil {
			c.failf("rank %d on %s: %v", rk.r.Rank, p.host, err)
		}
		if int(c.fenced.Add(1)) == world {
			c.note(func(s *Stats) { s.FenceOut = time.Now() })
			c.fenceOnce.Do(func() { close(c.allFenced) })
		}
	} else if int(n) == world {
		c.fenceOnce.Do(func() { close(c.allFenced) })
	}
	if sc.FailRank < 0 && !sc.Hold {
		p.exit(pid, rk, 0, 0)
		return
	}
	if rk.r.Rank == sc.FailRank {
		select {
		case <-c.allFenced:
			c.note(func(s *Stats) { s.FailAt = time.Now() })
			p.exit(pid, rk, 1, 0)
			return
		case sig := <-rk.sig:
			if fatal(sig) {
				p.stopped(pid, rk, sig)
				return
			}
		}
	}
	for sig := range rk.sig {
		if fatal(sig) {
			p.stopped(pid, rk, sig)
			return
		}
	}
}

// stopped ends a rank that a signal stopped.
func (p *procs) stopped(pid int, rk *rank, sig syscall.Signal) {
	now := time.Now()
	p.c.note(func(s *Stats) {
		if !s.FailAt.IsZero() {
			s.Stopped++
			if now.After(s.LastStop) {
				s.LastStop = now
			}
		}
	})
	p.exit(pid, rk, -1, sig)
}

func envInt(env []string, name string) int {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
