package launcher

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
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

var (
	nodeOnce sync.Once
	nodeInfo *topology.Node
	nodeErr  error
)

// localNode discovers this host once per agent.
func localNode() (*topology.Node, error) {
	nodeOnce.Do(func() { nodeInfo, nodeErr = topology.DiscoverLocal() })
	return nodeInfo, nodeErr
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

// bindings plans the bindings of a launch's ranks on this host, and the
// --report-bindings text. No plan (nil) means: start the ranks unbound.
func bindings(l control.Launch, base []string) (plan []topology.RankBinding, report, topo string, err error) {
	to, err := topology.ParseBindTo(l.Bind.To)
	if err != nil {
		return nil, "", "", err
	}
	// Unbound without looking at the node, unless a report is wanted: no
	// binding asked and none to be had (oversubscribed, or no GPU).
	if !l.Bind.Report && (to == topology.BindNone || to == topology.BindDefault && (l.Bind.Oversubscribed || topology.LocalGPUs() == 0)) {
		if to == topology.BindDefault {
			return unboundHints(l, base), "", "", nil
		}
		return nil, "", "", nil
	}
	n, err := localNode()
	if err != nil {
		return nil, "", "", fmt.Errorf("discover the node: %w", err)
	}
	// Only the CPUs this agent may run on: a resource manager's cpuset
	// (Slurm's cgroup or task affinity), or a taskset around gorun.
	n = n.Restrict(allowedCPUs())
	topo = topoSummary(n)
	user := map[string]bool{}
	var cvd *string
	for _, kv := range append(append([]string(nil), base...), l.Exports...) {
		name, v, _ := strings.Cut(kv, "=")
		user[name] = true
		if name == "CUDA_VISIBLE_DEVICES" {
			cvd = &v
		}
	}
	o := topology.BindOptions{LocalRanks: len(l.Ranks), BindTo: to, MapBy: l.Bind.MapBy, CPUsPerRank: l.Bind.CPUsPerRank,
		Oversubscribed: l.Bind.Oversubscribed, UserEnv: user}
	if l.Bind.GPUs != nil {
		// GPU slots chosen with --include/--exclude: GPU indexes.
		idx := make([]string, len(l.Bind.GPUs))
		for i, g := range l.Bind.GPUs {
			idx[i] = fmt.Sprint(g)
		}
		if o.VisibleGPUs, err = visibleGPUs(n, strings.Join(idx, ",")); err != nil {
			return nil, "", topo, fmt.Errorf("--include/--exclude: %w", err)
		}
	}
	if cvd != nil {
		// GPUs already granted (by the user, or Slurm): rank i gets the
		// i-th of them, and its own narrowing replaces the list.
		granted, err := visibleGPUs(n, *cvd)
		if err != nil {
			return nil, "", topo, err
		}
		if o.VisibleGPUs == nil {
			o.VisibleGPUs = granted
		} else {
			o.VisibleGPUs = intersect(o.VisibleGPUs, granted)
		}
		delete(user, "CUDA_VISIBLE_DEVICES")
	}
	if plan, err = topology.PlanBindings(n, o); err != nil {
		return nil, "", topo, err
	}
	if l.Bind.Report {
		var sb strings.Builder
		ranks := make([]int, len(l.Ranks))
		for i, s := range l.Ranks {
			ranks[i] = s.Rank
		}
		topology.FormatBindingsOf(&sb, l.Host, ranks, plan)
		report = sb.String()
	}
	return plan, report, topo, nil
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

// visibleGPUs maps a CUDA_VISIBLE_DEVICES value (indexes or UUIDs) to
// positions in n.GPUs.
func visibleGPUs(n *topology.Node, v string) ([]int, error) {
	out := []int{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		found := -1
		for i, g := range n.GPUs {
			if item == g.UUID || item == fmt.Sprint(g.Index) || strings.HasPrefix(g.UUID, item) && strings.HasPrefix(item, "GPU-") {
				found = i
				break
			}
		}
		if found < 0 {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%s: no GPU %q on this host (%d GPUs)", v, item, len(n.GPUs))
		}
		out = append(out, found)
	}
	return out, nil
}

// unboundHints are the environment hints of ranks gorun does not bind,
// from what a resource manager granted this host:
//   - the GPUs (SLURM_STEP_GPUS or SLURM_JOB_GPUS, with
//     CUDA_VISIBLE_DEVICES naming them), when gorun cannot see them to
//     bind (no driver in this node's view, or GPUs that exist only for
//     Slurm): local rank i gets the i-th entry of CUDA_VISIBLE_DEVICES,
//     round robin;
//   - the CPUs (SLURM_CPUS_ON_NODE): OMP_NUM_THREADS is the node's CPUs
//     divided among its ranks, as it is for bound ranks.
//
// What the user set (in gorun's environment or with -x) is left alone.
func unboundHints(l control.Launch, base []string) []topology.RankBinding {
	var cvd, cpus string
	granted, userOMP, userCVD := false, false, false
	for _, kv := range base {
		name, v, _ := strings.Cut(kv, "=")
		switch name {
		case "CUDA_VISIBLE_DEVICES":
			cvd = v
		case "SLURM_STEP_GPUS", "SLURM_JOB_GPUS":
			granted = granted || v != ""
		case "SLURM_CPUS_ON_NODE":
			cpus = v
		case "OMP_NUM_THREADS":
			userOMP = true
		}
	}
	for _, kv := range l.Exports {
		userCVD = userCVD || strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=")
		userOMP = userOMP || strings.HasPrefix(kv, "OMP_NUM_THREADS=")
	}
	gpus := strings.Split(cvd, ",")
	shareGPUs := granted && !userCVD && cvd != "" && len(gpus) > 1
	threads := 0
	if n, err := strconv.Atoi(cpus); err == nil && n > 0 && !userOMP && len(l.Ranks) > 0 {
		threads = max(1, n/len(l.Ranks))
	}
	if !shareGPUs && threads == 0 {
		return nil
	}
	plan := make([]topology.RankBinding, len(l.Ranks))
	for i := range plan {
		plan[i] = topology.RankBinding{LocalRank: i, BindTo: topology.BindNone}
		if shareGPUs {
			plan[i].Env = append(plan[i].Env, "CUDA_VISIBLE_DEVICES="+gpus[i%len(gpus)])
		}
		if threads > 0 {
			plan[i].Env = append(plan[i].Env, "OMP_NUM_THREADS="+strconv.Itoa(threads))
		}
	}
	return plan
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
