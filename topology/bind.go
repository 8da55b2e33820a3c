package topology

// The binding plan: which GPU, CPUs, memory NUMA nodes and NIC each rank
// on one node gets, and why. It is pure logic over a Node; Apply and
// BindExec carry a plan out.

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// BindTo says what a rank is bound to.
type BindTo string

// The binding modes.
const (
	// BindDefault lets BindOptions.Default choose: BindGPU when the node
	// has visible GPUs, and without them what the rule's launcher does
	// (nothing for gorun's own and Hydra's, core or NUMA nodes for Open
	// MPI's); when the node is oversubscribed it binds nothing at all.
	BindDefault BindTo = ""
	// BindNone binds nothing: no GPU, CPUs, memory policy or NIC.
	BindNone BindTo = "none"
	// BindCore gives each rank CPUsPerRank (default 1) whole cores of its
	// own.
	BindCore BindTo = "core"
	// BindNUMA gives each rank every CPU of a NUMA node; ranks mapped to
	// the same node share it.
	BindNUMA BindTo = "numa"
	// BindPackage gives each rank every CPU of a package (socket); ranks
	// mapped to the same package share it.
	BindPackage BindTo = "package"
	// BindGPU gives each rank one GPU, a block of the cores of the GPU's
	// NUMA node of its own, memory on that node and the NIC closest to
	// the GPU.
	BindGPU BindTo = "gpu"
)

// ParseBindTo parses a --bind-to value: "", "none", "core", "numa",
// "package" or "gpu" (case-insensitive; "socket" is "package").
func ParseBindTo(s string) (BindTo, error) {
	switch b := BindTo(strings.ToLower(strings.TrimSpace(s))); b {
	case BindDefault, BindNone, BindCore, BindNUMA, BindPackage, BindGPU:
		return b, nil
	case "socket":
		return BindPackage, nil
	case "hwthread", "hwthreads", "thread":
		// Open MPI's: gorun keeps a core's hardware threads together.
		return "", fmt.Errorf("bind-to %q: gorun binds whole cores, never one hardware thread of a core: use --bind-to core", s)
	}
	return "", fmt.Errorf("bind-to %q: want none, core, numa, package or gpu", s)
}

// DefaultRule is the rule by which BindDefault binds: gorun's own, or
// that of the launcher whose command line gorun took. On a node with
// visible GPUs every rule binds one rank per GPU (BindGPU: what GPU users
// of each launcher set by hand); on an oversubscribed node none binds
// anything. They differ on a node without GPUs, where each binds as its
// launcher does when no binding is asked for.
type DefaultRule string

// The default rules.
const (
	// RuleGorun is gorun's own (plain gorun and gorun torchrun, whose
	// torchrun binds nothing): without GPUs, nothing is bound. With
	// more local ranks than visible GPUs it is an error, as BindGPU is.
	RuleGorun DefaultRule = ""
	// RuleOpenMPI is Open MPI 4.1's mpirun's (gorun mpirun). Without
	// GPUs: with CPUsPerRank, CPUsPerRank cores each (BindCore); with
	// MapBy "numa" or "package", the object mapped to; else, by the
	// job's rank count (JobRanks), BindCore for 2 ranks or fewer and
	// BindNUMA (mapped round-robin by NUMA node) above. Where that would
	// put more ranks on the node than it has cores (Open MPI's
	// "overload"), nothing is bound, as Open MPI does when no binding
	// was asked. With more local ranks than visible GPUs it binds as
	// without GPUs.
	RuleOpenMPI DefaultRule = "openmpi"
	// RuleHydra is MPICH's Hydra's (gorun mpiexec): without GPUs, or
	// with more local ranks than visible GPUs, nothing is bound, as
	// Hydra binds nothing without -bind-to.
	RuleHydra DefaultRule = "hydra"
)

// String names the rule as --report-bindings does: "gorun's default",
// "Open MPI 4.1's default", "Hydra's default".
func (r DefaultRule) String() string {
	switch r {
	case RuleOpenMPI:
		return "Open MPI 4.1's default"
	case RuleHydra:
		return "Hydra's default"
	}
	return "gorun's default"
}

// BindsWithoutGPUs reports whether the rule binds anything on a node
// without GPUs that is not oversubscribed: a launch that asks for no
// binding under another rule can start its ranks unbound without
// looking at the node.
func (r DefaultRule) BindsWithoutGPUs() bool { return r == RuleOpenMPI }

// The mapping policies of BindOptions.MapBy.
const (
	MapBySlot    = "slot"
	MapByNUMA    = "numa"
	MapByPackage = "package"
)

// BindOptions are the inputs of PlanBindings besides the node.
type BindOptions struct {
	// LocalRanks is the number of ranks on this node (at least 1).
	LocalRanks int
	// GPUs counts the node's GPUs for PlanWithoutNode; nil counts them
	// there (CountGPUs of its sysroot). An agent passes a count it
	// started before its launch arrived.
	GPUs func() int
	// JobRanks is the number of ranks of the whole job, on every node,
	// which RuleOpenMPI counts as Open MPI does; 0 (or fewer than
	// LocalRanks) means LocalRanks.
	JobRanks int
	// BindTo is the binding mode; BindDefault picks one (see BindDefault).
	BindTo BindTo
	// Default is the rule BindDefault follows; the zero value is
	// gorun's own (RuleGorun).
	Default DefaultRule
	// MapBy spreads the ranks over the node before BindCore, BindNUMA and
	// BindPackage bind them: "slot" fills the cores in order (NUMA node
	// by NUMA node), "numa" and "package" deal the ranks round-robin
	// over the NUMA nodes or packages, each taking the next free cores
	// there. "" is "slot" for BindCore, "numa" for BindNUMA and
	// "package" for BindPackage. BindGPU ignores it: a rank goes where
	// its GPU is. ppr:N:numa is the caller's: it gives LocalRanks and
	// MapBy "numa".
	MapBy string
	// CPUsPerRank is --cpus-per-rank, counted in whole cores (both
	// hardware threads of a core go to the same rank). 0 means: 1 core
	// for BindCore; the rank's even share of its NUMA node for BindGPU.
	// With BindGPU it caps the block: the rank gets the first
	// CPUsPerRank cores of its share, and asking for more than the share
	// is an error. With BindNUMA and BindPackage it only sizes the slots
	// the ranks are mapped to.
	CPUsPerRank int
	// Grant says which GPUs the job may use on this node (the usable
	// GPUs), in the order the ranks' GPU runtime numbers them (the order
	// of CUDA_VISIBLE_DEVICES): local rank i gets the i-th. The zero
	// value grants every GPU of the node's GPU vendor (BindableGPUs), in
	// PCI bus order; see GPUGrant.
	Grant GPUGrant
	// OwnGPU says that each rank must see a GPU of its own (--gpu-bind
	// single): a plan that binds the ranks to no GPU is an error, except
	// where gorun places none of the granted GPUs (a node without GPUs,
	// MIG instances), whose ranks then get the grant's list (Unplaced).
	OwnGPU bool
	// Oversubscribed says the node runs more ranks than slots: with
	// BindDefault nothing is bound; with an explicit BindTo, ranks may
	// share GPUs, cores and CPU blocks instead of failing.
	Oversubscribed bool
}

// RankBinding is the plan for one local rank.
type RankBinding struct {
	// LocalRank is the rank's index on the node.
	LocalRank int
	// BindTo is the mode that applied: BindNone when the rank is not
	// bound.
	BindTo BindTo
	// GPU is the rank's GPU, pointing into Node.GPUs; nil unless BindTo
	// is BindGPU.
	GPU *GPU
	// CPUs is the rank's CPU affinity; empty means unbound.
	CPUs CPUSet
	// Mems are the NUMA nodes of the memory policy (MPOL_BIND): the NUMA
	// nodes of CPUs (the GPU's node with BindGPU); nil means unbound.
	Mems []int
	// NUMA are the NUMA nodes CPUs lie on.
	NUMA []int
	// NIC is the NIC closest to the rank's GPU (or, without a GPU, to its
	// CPUs), pointing into Node.NICs; nil when unbound or no NIC is up.
	NIC *NIC
	// Visible are the GPUs the job may use on this node, in the order its
	// GPU runtime numbers them (BindOptions.Grant), pointing into
	// Node.GPUs; nil unless BindTo is BindGPU. Every rank of the node
	// gets the same slice.
	Visible []*GPU
	// Device is GPU's position in Visible: the device number the rank's
	// runtime gives its GPU while every GPU of Visible stays visible
	// (LOCAL_RANK, when the node has as many GPUs as ranks).
	Device int
	// Unplaced is the grant's list (BindOptions.Grant) where it names GPUs
	// that gorun does not place, so that no rank has a GPU: MIG instances,
	// or the NVIDIA list on a node that shows no GPU (a resource manager
	// granted GPUs this node's view lacks). nil otherwise. Every rank of
	// the node gets the same list; package env hands it out.
	Unplaced *GPUList
	// Why explains the binding in one line.
	Why string
}

// bindCore is one core: its online hardware threads.
type bindCore struct {
	cpus  CPUSet
	first int // lowest CPU
	numa  int
	pkg   int
}

// nodeCores returns the node's cores ordered by NUMA node, then by their
// lowest CPU: "consecutive" cores stay on one NUMA node even where the
// kernel numbers CPUs across nodes alternately.
func nodeCores(n *Node) []bindCore {
	byKey := map[string]int{}
	var cores []bindCore
	for _, c := range n.CPUs {
		key := strconv.Itoa(c.ID)
		if !c.Siblings.IsEmpty() {
			key = c.Siblings.String()
		}
		i, ok := byKey[key]
		if !ok {
			i = len(cores)
			byKey[key] = i
			cores = append(cores, bindCore{first: c.ID, numa: c.NUMA, pkg: c.Package})
		}
		cores[i].cpus.Add(c.ID)
		if c.ID < cores[i].first {
			cores[i].first, cores[i].numa, cores[i].pkg = c.ID, c.NUMA, c.Package
		}
	}
	sort.Slice(cores, func(i, j int) bool {
		if cores[i].numa != cores[j].numa {
			return cores[i].numa < cores[j].numa
		}
		return cores[i].first < cores[j].first
	})
	return cores
}

func unionCores(cores []bindCore) CPUSet {
	var s CPUSet
	for _, c := range cores {
		s = s.Union(c.cpus)
	}
	return s
}

// PlanBindings plans the bindings of o.LocalRanks ranks on node n, one
// RankBinding per local rank in order. The plan is typed: package env
// turns it into the ranks' variables.
//
// BindGPU (the default on a node with visible GPUs): local rank i gets
// the i-th usable GPU (in PCI bus order unless o.Grant orders
// them), the one its runtime numbers i while all of them stay visible,
// so that a script's device LOCAL_RANK is its GPU, even where the GPUs
// are not numbered in NUMA order (its Why says so); more ranks than visible GPUs is an
// error unless o.Oversubscribed (then ranks take the GPUs round-robin)
// or another BindTo is asked for, which assigns no GPU at all. The rank's
// CPUs are a block of whole cores of its GPU's NUMA node: the node's
// cores split without overlap, in contiguous blocks in local rank order,
// among the ranks whose GPUs sit on that node, the earlier ranks getting
// one core more when the split is uneven. The GPU's own NUMA node counts,
// not its position in the numbering (GPUs 0 and 1 of a machine may sit on
// NUMA node 1). A GPU whose NUMA node is unknown or has no CPUs uses its
// CPU affinity, else every CPU. With fewer cores than ranks the split
// goes by hardware thread; with fewer CPUs than ranks it is an error
// unless oversubscribed (then the ranks share the node's CPUs). Memory
// is bound to the GPU's NUMA node. The NIC is the up NIC with the
// closest link to the GPU (PIX, PXB, PHB, NODE, SYS); at equal link one
// with an RDMA device comes first, then the faster, then the one fewer
// earlier ranks got, then the lower index.
//
// BindCore, BindNUMA, BindPackage: the ranks are mapped per o.MapBy, each
// to a slot of CPUsPerRank (default 1) consecutive whole cores, then
// bound to the slot's cores (BindCore), NUMA nodes (BindNUMA) or
// packages (BindPackage); memory to the NUMA nodes of those CPUs. For
// BindCore, slots that run out of cores are an error unless
// oversubscribed (then they wrap around and overlap); BindNUMA and
// BindPackage share their domains by design. The NIC is an up NIC on
// one of the rank's NUMA nodes (else any up NIC), by the same order.
//
// BindDefault follows o.Default (see DefaultRule), and each rank's Why
// then starts with the rule that applied and what it chose ("Open MPI
// 4.1's default for a job of 2 ranks (core for 2 or fewer, NUMA above);
// bind to core: ..."). BindNone binds nothing; BindDefault with
// o.Oversubscribed binds nothing either. Every rank's Why says which rule
// applied.
//
// The usable GPUs are those o.Grant grants on n: an error where its list
// names a GPU the node lacks, or one twice. Where it names MIG instances,
// which gorun does not place, no GPU is usable, each rank's Why says so
// and every rank gets the list (Unplaced); with BindGPU that is an error.
// On a node without GPUs every rank gets the grant's NVIDIA list. With
// o.OwnGPU, ranks that get no GPU elsewhere are an error.
func PlanBindings(n *Node, o BindOptions) ([]RankBinding, error) {
	mode, err := o.check(n)
	if err != nil {
		return nil, err
	}
	usable, mig, err := o.usableGPUs(n, mode)
	if err != nil {
		return nil, err
	}
	out, err := planRanks(n, o, mode, usable)
	if err != nil {
		return nil, err
	}
	if err := o.placeGrant(n, out, mig); err != nil {
		return nil, err
	}
	return out, nil
}

// check checks o for planning on n, and returns its mode.
func (o BindOptions) check(n *Node) (BindTo, error) {
	if n == nil {
		return "", fmt.Errorf("plan bindings: no node")
	}
	if o.LocalRanks < 1 {
		return "", fmt.Errorf("plan bindings: %d local ranks", o.LocalRanks)
	}
	if o.CPUsPerRank < 0 {
		return "", fmt.Errorf("plan bindings: --cpus-per-rank %d", o.CPUsPerRank)
	}
	mode, err := ParseBindTo(string(o.BindTo))
	if err != nil {
		return "", fmt.Errorf("plan bindings: %w", err)
	}
	switch o.MapBy {
	case "", MapBySlot, MapByNUMA, MapByPackage:
	default:
		return "", fmt.Errorf("plan bindings: map-by %q: want slot, numa or package", o.MapBy)
	}
	return mode, nil
}

// NeedsUUIDs reports whether a plan for o wants the GPUs' UUIDs, which
// only NVML gives (discovery from sysfs alone has none): to find the GPUs
// that o.Grant names by UUID, and, with o.OwnGPU, to name each rank's
// own GPU whatever order its runtime numbers GPUs in.
func (o BindOptions) NeedsUUIDs() bool { return o.OwnGPU || o.Grant.namesUUIDs() }

// planRanks binds o's ranks on n as mode asks, to the usable GPUs usable
// (indexes into n.GPUs) where it binds GPUs.
func planRanks(n *Node, o BindOptions, mode BindTo, usable []int) ([]RankBinding, error) {
	out := make([]RankBinding, o.LocalRanks)
	for i := range out {
		out[i] = RankBinding{LocalRank: i, BindTo: BindNone}
	}
	rule := "" // the default rule that chose mode, to start each Why
	switch mode {
	case BindDefault:
		mode, rule = o.Default.choose(n, o, len(usable))
		if mode == BindNone {
			for i := range out {
				out[i].Why = rule
			}
			return out, nil
		}
	case BindNone:
		for i := range out {
			out[i].Why = "not bound: --bind-to none"
		}
		return out, nil
	}
	var err error
	if mode == BindGPU {
		err = planGPU(n, o, usable, out)
	} else {
		err = planCPU(n, o, mode, out)
	}
	if err != nil {
		return nil, err
	}
	if err := checkOverlap(out, mode, o.Oversubscribed); err != nil {
		return nil, err
	}
	if rule != "" {
		for i := range out {
			out[i].Why = rule + "; " + out[i].Why
		}
	}
	finish(n, out)
	return out, nil
}

// choose picks what BindDefault binds under rule r on node n, for o and
// the gpus GPUs visible there: BindNone and the whole Why of an unbound
// rank, or the mode and the words about the rule that start each bound
// rank's Why.
func (r DefaultRule) choose(n *Node, o BindOptions, gpus int) (mode BindTo, why string) {
	if o.Oversubscribed {
		return BindNone, fmt.Sprintf("not bound: the node is oversubscribed (%d local ranks), and %s binds nothing then; --bind-to binds anyway", o.LocalRanks, r)
	}
	noGPU, few := "no GPUs visible", "" // why the ranks get no GPU
	switch {
	case gpus > 0 && r == RuleGorun:
		return BindGPU, "gorun's default: one rank per GPU"
	case gpus > 0 && o.LocalRanks <= gpus:
		return BindGPU, fmt.Sprintf("gorun's default on a node with GPUs, kept under %s (%s applies without GPUs): one rank per GPU", r.launcher(), r)
	case gpus > 0:
		noGPU = fmt.Sprintf("%d local ranks for %s", o.LocalRanks, plural(gpus, "visible GPU"))
		few = noGPU + ", so "
	}
	switch r {
	case RuleOpenMPI:
		return r.openMPI(n, o, few)
	case RuleHydra:
		return BindNone, fmt.Sprintf("not bound: %s, and Hydra's default binds nothing without -bind-to; -bind-to core, numa or socket binds", noGPU)
	}
	return BindNone, "not bound: no GPUs visible, and gorun's default binds ranks to GPUs only; --bind-to core, numa or package binds"
}

// launcher names the command line of the rule's launcher.
func (r DefaultRule) launcher() string {
	switch r {
	case RuleOpenMPI:
		return "gorun mpirun"
	case RuleHydra:
		return "gorun mpiexec"
	}
	return "gorun"
}

// openMPI is Open MPI 4.1's default binding (orte_rmaps_base_map_job and
// bind_in_place in its rmaps framework) of o's ranks on n, which has no
// GPU for each rank (see RuleOpenMPI); few, when not empty, starts the
// rule's words: the node has GPUs, but fewer than ranks.
func (r DefaultRule) openMPI(n *Node, o BindOptions, few string) (BindTo, string) {
	job := max(o.JobRanks, o.LocalRanks)
	mode, per := BindNUMA, 1
	var rule string
	switch {
	case o.CPUsPerRank > 0:
		mode, per = BindCore, o.CPUsPerRank
		rule = fmt.Sprintf("%s with --cpus-per-rank %d (bind to core)", r, o.CPUsPerRank)
	case o.MapBy == MapByNUMA || o.MapBy == MapByPackage:
		mode = map[string]BindTo{MapByNUMA: BindNUMA, MapByPackage: BindPackage}[o.MapBy]
		rule = fmt.Sprintf("%s with --map-by %s (bind to what ranks are mapped to)", r, o.MapBy)
	default:
		if job <= 2 {
			mode = BindCore
		}
		rule = fmt.Sprintf("%s for a job of %s (core for 2 or fewer, NUMA above)", r, plural(job, "rank"))
	}
	rule = few + rule
	// Open MPI moves a rank whose object is full to a cousin object, and
	// binds nothing at all when none has a core left for it.
	if cores := len(nodeCores(n)); o.LocalRanks*per > cores {
		return BindNone, fmt.Sprintf("not bound: %s would put %s of %s on the node's %s, and Open MPI binds nothing then; --bind-to binds anyway",
			rule, plural(o.LocalRanks, "rank"), plural(per, "core"), plural(cores, "core"))
	}
	return mode, rule
}

func nicName(c *NIC) string {
	if c.IBDevice != "" {
		return c.IBDevice
	}
	return c.Name
}

// pickNIC returns the up NIC with the closest link by class, then with
// an RDMA device, then faster, then used by fewer earlier ranks, then
// lower index; -1 when no NIC is up. It counts the pick in used.
func pickNIC(n *Node, used map[int]int, class func(j int) LinkKind) (int, LinkKind) {
	best, bestK := -1, LinkSYS
	better := func(j int, k LinkKind) bool {
		if best < 0 || k != bestK {
			return best < 0 || k < bestK
		}
		a, b := &n.NICs[j], &n.NICs[best]
		if (a.IBDevice != "") != (b.IBDevice != "") {
			return a.IBDevice != ""
		}
		if a.SpeedMbps != b.SpeedMbps {
			return a.SpeedMbps > b.SpeedMbps
		}
		return used[j] < used[best]
	}
	for j := range n.NICs {
		if !n.NICs[j].Up {
			continue
		}
		if k := class(j); better(j, k) {
			best, bestK = j, k
		}
	}
	if best >= 0 {
		used[best]++
	}
	return best, bestK
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func joinLabels(kind string, ids []int) string {
	if len(ids) == 0 {
		return "no " + kind
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	if len(ids) > 1 {
		return kind + "s " + strings.Join(s, ",")
	}
	return kind + " " + s[0]
}

// checkOverlap rejects CPU sets that overlap where the mode hands out
// CPUs of a rank's own (core, gpu), unless oversubscribed.
func checkOverlap(out []RankBinding, mode BindTo, over bool) error {
	if over || (mode != BindCore && mode != BindGPU) {
		return nil
	}
	for i := range out {
		for j := 0; j < i; j++ {
			if x := out[i].CPUs.Intersect(out[j].CPUs); !x.IsEmpty() {
				return fmt.Errorf("plan bindings: local ranks %d and %d would share CPUs %s", j, i, x)
			}
		}
	}
	return nil
}

// finish fills NUMA.
func finish(n *Node, out []RankBinding) {
	for i := range out {
		out[i].NUMA = n.NUMAOfCPUs(out[i].CPUs)
	}
}

// FormatBindings writes the plan as --report-bindings shows it: per rank
// a line with the host, local rank, GPU (index and UUID), CPUs, NUMA
// node(s), memory NUMA nodes where they differ, and NIC, then an
// indented line with the reason.
func FormatBindings(w io.Writer, host string, plan []RankBinding) error {
	return FormatBindingsOf(w, host, nil, plan)
}

// FormatBindingsOf is FormatBindings naming each rank by its job-wide rank
// ranks[i] (nil: by local rank).
func FormatBindingsOf(w io.Writer, host string, ranks []int, plan []RankBinding) error {
	var sb strings.Builder
	for i, b := range plan {
		r := b.LocalRank
		if i < len(ranks) {
			r = ranks[i]
		}
		fmt.Fprintf(&sb, "%s rank %d:", host, r)
		if b.GPU == nil && b.CPUs.IsEmpty() {
			sb.WriteString(" not bound\n")
		} else {
			if g := b.GPU; g != nil {
				fmt.Fprintf(&sb, " %s", g.Name())
				if g.UUID != "" {
					fmt.Fprintf(&sb, " %s", g.UUID)
				}
			}
			fmt.Fprintf(&sb, " CPUs %s %s", orNA(b.CPUs.String()), joinLabels("NUMA", b.NUMA))
			if !slices.Equal(b.Mems, b.NUMA) {
				fmt.Fprintf(&sb, " mem %s", joinLabels("NUMA", b.Mems))
			}
			if c := b.NIC; c != nil {
				fmt.Fprintf(&sb, " NIC %s", nicName(c))
				if c.IBDevice != "" && c.Name != c.IBDevice {
					fmt.Fprintf(&sb, " (%s)", c.Name)
				}
			}
			sb.WriteString("\n")
		}
		fmt.Fprintf(&sb, "  why: %s\n", b.Why)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
