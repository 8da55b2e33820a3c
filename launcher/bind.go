package launcher

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/internal/intranges"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
	"github.com/gorun/gorun/topology/nvmllib"
)

// BindExecCommand is the hidden first argument with which the agent
// starts a bound rank as gorun itself: `gorun bind-exec CPUS MEMS PATH
// ARGV...`. main hands it to [BindExecMain] before anything else runs, so
// that the step costs one exec of a small Go program.
const BindExecCommand = "bind-exec"

// BindExecMain runs the binding step: bind this thread (CPUs, memory
// policy) and exec the rank's program, which keeps both. args are what
// follows BindExecCommand. It returns only on error.
func BindExecMain(args []string) error {
	if len(args) < 4 {
		return fmt.Errorf("%s: want CPUS MEMS PATH ARGV0 [ARGS...]", BindExecCommand)
	}
	var cpus topology.CPUSet
	if args[0] != "-" {
		var err error
		if cpus, err = topology.ParseCPUList(args[0]); err != nil {
			return fmt.Errorf("%s: %w", BindExecCommand, err)
		}
	}
	var mems []int
	if args[1] != "-" {
		set, err := topology.ParseCPUList(args[1]) // same list syntax
		if err != nil {
			return fmt.Errorf("%s: %w", BindExecCommand, err)
		}
		mems = set.CPUs()
	}
	return topology.BindExec(cpus, mems, args[2], args[3:], os.Environ())
}

// bindArgv returns how to start a rank under binding b: through gorun's
// binding step when b binds anything, else directly.
func bindArgv(b *topology.RankBinding, path string, argv []string) (string, []string) {
	if b == nil || (b.CPUs.IsEmpty() && len(b.Mems) == 0) {
		return path, argv
	}
	self, err := os.Executable()
	if err != nil {
		return path, argv
	}
	cpus, mems := "-", "-"
	if !b.CPUs.IsEmpty() {
		cpus = b.CPUs.String()
	}
	if len(b.Mems) > 0 {
		mems = intranges.Format(b.Mems)
	}
	return self, append([]string{self, BindExecCommand, cpus, mems, path}, argv...)
}

// localNodes caches this host's discovery, once per agent for each of
// the two kinds.
var localNodes [2]struct {
	once sync.Once
	node *topology.Node
	err  error
}

// localNode discovers this host: from sysfs alone, or with NVML too. The
// binding itself needs sysfs only (the GPUs' PCI bus order, NUMA nodes and
// CPUs); NVML adds UUIDs, MIG modes and NVLinks, and costs its Init,
// which takes a second or more on a node whose driver is not kept loaded
// (no persistence mode), so a launch asks for it only where it needs it.
func localNode(withNVML bool) (*topology.Node, error) {
	k := 0
	if withNVML {
		k = 1
	}
	c := &localNodes[k]
	c.once.Do(func() {
		var lib topology.NVML
		if withNVML {
			lib = nvmllib.New()
		}
		c.node, c.err = topology.Discover(os.DirFS("/"), lib)
	})
	return c.node, c.err
}

// topoSummary is a one-line description of a node, for comparing hosts:
// "2 packages, 2 NUMA nodes, 224 CPUs, 8 GPUs, 8 NICs up".
func topoSummary(n *topology.Node) string {
	gpus := fmt.Sprintf("%d GPUs", len(n.GPUs))
	up := 0
	for _, c := range n.NICs {
		if c.Up {
			up++
		}
	}
	return fmt.Sprintf("%d packages, %d NUMA nodes, %d CPUs, %s, %d NICs up", len(n.Packages), len(n.NUMANodes), len(n.CPUs), gpus, up)
}

// hostBindings are the bindings of a launch's ranks on this host, and a
// summary of the host's topology when the plan looked at it.
type hostBindings struct {
	NodeBindings
	Topo string
}

// hostGPUs counts this host's GPUs once: RunAgent starts it before the
// first launch arrives, which then finds the count made.
var hostGPUs = sync.OnceValue(topology.LocalGPUs)

// bindings binds a launch's ranks on this host: env reads the user's
// variables once (the agent's environment base, then the -x exports),
// the launch's Bind and they become the typed options of topology's plan
// and env's variables (bindRequest), topology plans (without looking at
// the node where nothing is bound, as for a launch that asks for no
// binding and has none to get), and env turns the plan into variables.
// No plan (nil) means: start the ranks unbound.
func bindings(l control.Launch, base []string) (hostBindings, error) {
	user := env.ReadUserVars(append(slices.Clip(base), l.Exports...))
	req, err := newBindRequest(l.Bind, len(l.Ranks), l.WorldSize, env.Launcher(l.Personality), user)
	if err != nil {
		return hostBindings{}, err
	}
	if !req.report {
		req.plan.GPUs = hostGPUs
		plan, ok, err := topology.PlanWithoutNode(os.DirFS("/"), req.plan)
		if err != nil {
			return hostBindings{}, err
		}
		if ok {
			hints, _ := env.Bindings(plan, req.vars)
			return hostBindings{NodeBindings: NodeBindings{Plan: plan, Hints: hints}}, nil
		}
	}
	n, err := localNode(req.needsNVML())
	if err != nil {
		return hostBindings{}, fmt.Errorf("discover the node: %w", err)
	}
	// Only the CPUs this agent may run on: a resource manager's cpuset
	// (Slurm's cgroup or task affinity), or a taskset around gorun.
	n = n.Restrict(allowedCPUs())
	hb := hostBindings{Topo: topoSummary(n)}
	ranks := make([]int, len(l.Ranks))
	for i, s := range l.Ranks {
		ranks[i] = s.Rank
	}
	hb.NodeBindings, err = req.bind(n, l.Host, ranks)
	return hb, err
}

// setBindings keeps what bindings returned in p (called by newLaunchPlan).
func (p *launchPlan) setBindings(hb hostBindings, err error) {
	p.plan, p.hints, p.report, p.topo, p.bindErr = hb.Plan, hb.Hints, hb.Report, hb.Topo, err
}

// bindRequest is what a launch asks of its ranks' binding on a node, as
// typed options: topology's for the plan, env's for its variables.
type bindRequest struct {
	plan   topology.BindOptions
	vars   env.BindingOptions
	report bool // --report-bindings
}

// newBindRequest turns b, the binding a launch asks for local ranks of a
// job of job ranks (0: local) under the contract of launcher lch
// (env.Launcher: "" for gorun's), and the user's variables u into the
// options of the plan and its variables: the mode and its rule (see
// defaultRule), the usable GPUs (the visibility lists of u, narrowed to
// b's GPU slots), --gpu-bind, and the names and CPUs u says.
func newBindRequest(b control.Bind, local, job int, lch env.Launcher, u env.UserVars) (bindRequest, error) {
	to, err := topology.ParseBindTo(b.To)
	if err != nil {
		return bindRequest{}, err
	}
	gpuBind, err := env.ParseGPUBind(b.GPUBind)
	if err != nil {
		return bindRequest{}, err
	}
	return bindRequest{
		plan: topology.BindOptions{LocalRanks: local, JobRanks: job, BindTo: to, Default: defaultRule(lch), MapBy: b.MapBy,
			CPUsPerRank: b.CPUsPerRank, Oversubscribed: b.Oversubscribed,
			Grant: topology.GPUGrant{Lists: u.GPUs, Slots: b.GPUs}, OwnGPU: gpuBind == env.GPUBindSingle},
		vars:   env.BindingOptions{GPUBind: gpuBind, Narrowed: b.GPUs != nil, User: u.Names, Launcher: lch, NodeCPUs: u.NodeCPUs},
		report: b.Report,
	}, nil
}

// needsNVML says whether binding the ranks needs NVML's answers: for
// --report-bindings (UUIDs, MIG), and where the plan wants the GPUs'
// UUIDs (--gpu-bind single, GPUs the user names by UUID). NVML's Init
// takes a second or more on a node whose driver is not kept loaded.
func (r bindRequest) needsNVML() bool { return r.report || r.plan.NeedsUUIDs() }

// bind plans the bindings of the ranks ranks (job-wide numbers, in local
// rank order) on node n, named host: topology plans, env turns the plan
// into each rank's variables, and the report (when asked) shows both.
func (r bindRequest) bind(n *topology.Node, host string, ranks []int) (NodeBindings, error) {
	plan, err := topology.PlanBindings(n, r.plan)
	if err != nil {
		return NodeBindings{}, err
	}
	nb := NodeBindings{Plan: plan}
	var node string
	nb.Hints, node = env.Bindings(plan, r.vars)
	if r.report {
		var sb strings.Builder
		if node != "" {
			fmt.Fprintf(&sb, "%s: %s\n", host, node)
		}
		shown := slices.Clone(plan)
		for i := range shown {
			if nb.Hints[i].Note != "" {
				shown[i].Why += "; " + nb.Hints[i].Note
			}
		}
		topology.FormatBindingsOf(&sb, host, ranks, shown)
		nb.Report = sb.String()
	}
	return nb, nil
}

// NodeBindings are the bindings of a node's ranks.
type NodeBindings struct {
	// Plan is each local rank's binding.
	Plan []topology.RankBinding
	// Hints are the variables each local rank gets from its binding.
	Hints []env.RankHints
	// Report is what --report-bindings prints for the node (only when
	// b.Report is set): a line about the node, then two lines per rank.
	Report string
}

// BindNode plans the bindings of the ranks ranks (job-wide numbers, in
// local rank order) on node n, named host, of a job of jobRanks ranks in
// all (0: len(ranks)), as b asks, for ranks whose environment is environ
// (the agent's, then the -x exports: the GPUs a visibility variable
// grants, the variables the user set), under the contract of launcher
// lch (env.Launcher: "" for gorun's), whose rule binds the ranks when b
// asks for no binding (see defaultRule). The agent binds its ranks so;
// `gorun topo --plan` calls it for a recorded machine.
func BindNode(n *topology.Node, host string, ranks []int, jobRanks int, b control.Bind, lch env.Launcher, environ []string) (NodeBindings, error) {
	req, err := newBindRequest(b, len(ranks), jobRanks, lch, env.ReadUserVars(environ))
	if err != nil {
		return NodeBindings{}, err
	}
	return req.bind(n, host, ranks)
}

// defaultRule is the rule that binds the ranks of launcher lch when no
// --bind-to is given: Open MPI 4.1's mpirun's under gorun mpirun, Hydra's
// under gorun mpiexec, gorun's own under plain gorun and gorun torchrun
// (torchrun binds nothing). Each keeps gorun's one rank per GPU on a node
// with GPUs.
func defaultRule(lch env.Launcher) topology.DefaultRule {
	switch lch {
	case env.MPIRun:
		return topology.RuleOpenMPI
	case env.MPIExec:
		return topology.RuleHydra
	}
	return topology.RuleGorun
}

// ReportWithEnv is Report (made for host) with each rank's variables from
// its binding, LOCAL_RANK first, on a line after the rank's two: what
// `gorun topo --plan N --env` prints.
func (nb NodeBindings) ReportWithEnv(host string) string {
	var sb strings.Builder
	rank := -1
	for l := range strings.Lines(nb.Report) {
		if strings.HasPrefix(l, host+" rank ") {
			rank++
		}
		sb.WriteString(l)
		if rank >= 0 && rank < len(nb.Hints) && strings.HasPrefix(l, "  why: ") {
			fmt.Fprintf(&sb, "  env: %s\n", strings.Join(append([]string{"LOCAL_RANK=" + strconv.Itoa(rank)}, nb.Hints[rank].Vars...), " "))
		}
	}
	return sb.String()
}

// allowedCPUs is the set of CPUs this process may run on.
func allowedCPUs() topology.CPUSet {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return topology.CPUSet{}
	}
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return topology.NewCPUSet(cpus...)
}
