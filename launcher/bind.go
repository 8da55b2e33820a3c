package launcher

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/env"
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
		mems = topology.NewCPUSet(b.Mems...).String()
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

// needsNVML says whether binding the ranks of a launch needs NVML's
// answers: for --report-bindings (UUIDs, MIG), for --gpu-bind single
// (each rank's GPU by UUID, which holds whatever CUDA_DEVICE_ORDER says),
// and to find GPUs that the ranks' environment names by UUID.
func needsNVML(l control.Launch, environ []string) bool {
	if b, _ := env.ParseGPUBind(l.Bind.GPUBind); l.Bind.Report || b == env.GPUBindSingle {
		return true
	}
	for _, kv := range environ {
		name, v, _ := strings.Cut(kv, "=")
		if name == env.CUDAVisibleDevices && strings.Contains(v, "GPU-") {
			return true
		}
	}
	return false
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

// bindings plans the bindings of a launch's ranks on this host, their
// variables (hints, one per rank) and the --report-bindings text. No plan
// (nil) means: start the ranks unbound.
func bindings(l control.Launch, base []string) (plan []topology.RankBinding, hints []env.RankHints, report, topo string, err error) {
	to, err := topology.ParseBindTo(l.Bind.To)
	if err != nil {
		return nil, nil, "", "", err
	}
	gpuBind, err := env.ParseGPUBind(l.Bind.GPUBind)
	if err != nil {
		return nil, nil, "", "", err
	}
	all := append(append([]string(nil), base...), l.Exports...)
	// Unbound without looking at the node, unless a report is wanted: no
	// binding asked and none to be had (oversubscribed, or no GPU under a
	// rule that binds only GPUs).
	lch := env.Launcher(l.Personality)
	gpus := -1 // unknown
	if !l.Bind.Report && to == topology.BindDefault && !l.Bind.Oversubscribed && !defaultRule(lch).BindsWithoutGPUs() {
		gpus = topology.LocalGPUs()
	}
	if !l.Bind.Report && (to == topology.BindNone || to == topology.BindDefault && (l.Bind.Oversubscribed || gpus == 0)) {
		o, granted := env.NewBindingOptions(gpuBind, all)
		o.Launcher = lch
		if gpus < 0 {
			gpus = topology.LocalGPUs()
		}
		if gpus == 0 {
			o.Unseen = granted
		} else if gpuBind == env.GPUBindSingle {
			why := "--bind-to none"
			if to == topology.BindDefault {
				why = "the node is oversubscribed"
			}
			return nil, nil, "", "", fmt.Errorf("--gpu-bind single: the ranks are not bound to GPUs (%s); use --bind-to gpu", why)
		}
		plan = make([]topology.RankBinding, len(l.Ranks))
		for i := range plan {
			plan[i] = topology.RankBinding{LocalRank: i, BindTo: topology.BindNone}
		}
		hints, _ = env.Bindings(plan, o)
		return plan, hints, "", "", nil
	}
	n, err := localNode(needsNVML(l, all))
	if err != nil {
		return nil, nil, "", "", fmt.Errorf("discover the node: %w", err)
	}
	// Only the CPUs this agent may run on: a resource manager's cpuset
	// (Slurm's cgroup or task affinity), or a taskset around gorun.
	n = n.Restrict(allowedCPUs())
	topo = topoSummary(n)
	ranks := make([]int, len(l.Ranks))
	for i, s := range l.Ranks {
		ranks[i] = s.Rank
	}
	nb, err := BindNode(n, l.Host, ranks, l.WorldSize, l.Bind, lch, all)
	if err != nil {
		return nil, nil, "", topo, err
	}
	return nb.Plan, nb.Hints, nb.Report, topo, nil
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
// asks for no binding (see defaultRule). The agent calls it for the
// ranks it starts; `gorun topo --plan` for a recorded machine.
func BindNode(n *topology.Node, host string, ranks []int, jobRanks int, b control.Bind, lch env.Launcher, environ []string) (NodeBindings, error) {
	var nb NodeBindings
	to, err := topology.ParseBindTo(b.To)
	if err != nil {
		return nb, err
	}
	gpuBind, err := env.ParseGPUBind(b.GPUBind)
	if err != nil {
		return nb, err
	}
	o, granted := env.NewBindingOptions(gpuBind, environ)
	o.Launcher = lch
	vis, narrowed, err := jobGPUs(n, b.GPUs, environ)
	// MIG instances, which gorun does not place: no rank gets a GPU of its
	// own, and they get the list as it is (one instance each with
	// --gpu-bind single).
	mig := errors.Is(err, errMIG) && b.GPUs == nil && to != topology.BindGPU
	if errors.Is(err, errMIG) && to == topology.BindGPU {
		return nb, fmt.Errorf("--bind-to gpu: %w, which gorun does not place on GPUs; without --bind-to gpu the ranks run unbound with them", err)
	}
	if err != nil && !mig {
		return nb, err
	}
	var migErr error
	if mig {
		vis, migErr = []int{}, err
	}
	bo := topology.BindOptions{LocalRanks: len(ranks), JobRanks: jobRanks, BindTo: to, Default: defaultRule(lch), MapBy: b.MapBy,
		CPUsPerRank: b.CPUsPerRank, Oversubscribed: b.Oversubscribed, VisibleGPUs: vis}
	if nb.Plan, err = topology.PlanBindings(n, bo); err != nil {
		return nb, err
	}
	switch {
	case mig:
		o.Unseen = granted
		for i := range nb.Plan {
			nb.Plan[i].Why = strings.Replace(nb.Plan[i].Why, "no GPUs visible", "no GPU of its own", 1) + "; " + migErr.Error() + ", which gorun does not place"
		}
	case len(topology.BindableGPUs(n)) == 0:
		o.Unseen = granted
	case gpuBind == env.GPUBindSingle && nb.Plan[0].GPU == nil:
		return nb, fmt.Errorf("--gpu-bind single: the ranks are not bound to GPUs (%s); use --bind-to gpu", nb.Plan[0].Why)
	}
	o.Narrowed = narrowed
	var node string
	nb.Hints, node = env.Bindings(nb.Plan, o)
	if b.Report {
		var sb strings.Builder
		if node != "" {
			fmt.Fprintf(&sb, "%s: %s\n", host, node)
		}
		shown := append([]topology.RankBinding(nil), nb.Plan...)
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

// jobGPUs returns the GPUs the job may use on node n, as indexes into
// n.GPUs in the order the ranks' runtime numbers them, and whether gorun
// itself narrowed them: the GPU slots of --include/--exclude (slots, GPU
// indexes), within what the environment environ (the agent's, then -x)
// grants in the GPUs' visibility variable (CUDA_VISIBLE_DEVICES, set by
// the user or by Slurm; ROCR_VISIBLE_DEVICES for AMD GPUs;
// ZE_AFFINITY_MASK for Intel's). nil means every GPU.
func jobGPUs(n *topology.Node, slots []int, environ []string) (vis []int, narrowed bool, err error) {
	if len(n.GPUs) == 0 {
		return nil, false, nil
	}
	name := envVisibility(n)
	if granted, ok := env.Lookup(environ, name); ok {
		if vis, err = visibleGPUs(n, name, granted); err != nil {
			return nil, false, err
		}
	}
	if slots != nil {
		idx := make([]string, len(slots))
		for i, g := range slots {
			idx[i] = fmt.Sprint(g)
		}
		inc, err := visibleGPUs(n, "--include/--exclude", strings.Join(idx, ","))
		if err != nil {
			return nil, false, err
		}
		sort.Ints(inc)
		if vis != nil {
			inc = intersect(inc, vis)
		}
		return inc, true, nil
	}
	return vis, false, nil
}

// envVisibility is the visibility variable of the GPUs that ranks are
// bound to on n.
func envVisibility(n *topology.Node) string {
	b := topology.BindableGPUs(n)
	if len(b) == 0 {
		return env.CUDAVisibleDevices
	}
	return env.VisibilityVar(n.GPUs[b[0]].Vendor)
}

// intersect keeps the elements of a that are in b, in a's order.
func intersect(a, b []int) []int {
	out := []int{}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

// errMIG is wrapped by the error of a visibility list that names MIG
// instances (MIG-<uuid>), which gorun does not map to their GPUs.
var errMIG = errors.New("MIG instances")

// visibleGPUs maps a list of GPUs as a visibility variable (what, for
// errors) writes them (indexes in PCI bus order, or UUIDs and their
// prefixes) to positions in n.GPUs, among the GPUs ranks are bound to.
func visibleGPUs(n *topology.Node, what, v string) ([]int, error) {
	bindable := topology.BindableGPUs(n)
	out := []int{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if strings.HasPrefix(item, "MIG-") {
			return nil, fmt.Errorf("%s=%s names %w", what, v, errMIG)
		}
		found := -1
		for k, i := range bindable {
			g := n.GPUs[i]
			if item == strconv.Itoa(k) || g.UUID != "" && (item == g.UUID || strings.HasPrefix(item, "GPU-") && strings.HasPrefix(g.UUID, item)) {
				found = i
				break
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("%s=%s: no GPU %q on this host (%d GPUs)", what, v, item, len(bindable))
		}
		out = append(out, found)
	}
	return out, nil
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
