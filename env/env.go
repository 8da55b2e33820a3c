package env

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Launcher is the launcher whose contract a rank's environment keeps:
// gorun's own (""), or that of the personality whose command line gorun
// took (gorun mpirun ...). Under a personality a rank gets no variable of
// gorun's making that the peer leaves unset (OMP_NUM_THREADS under mpirun
// and mpiexec).
type Launcher string

// The launchers whose contracts gorun keeps.
const (
	Gorun    Launcher = ""         // plain gorun
	MPIRun   Launcher = "mpirun"   // gorun mpirun: Open MPI's
	MPIExec  Launcher = "mpiexec"  // gorun mpiexec: MPICH's Hydra
	TorchRun Launcher = "torchrun" // gorun torchrun
	// HorovodRun is gorun horovodrun: the mpirun horovodrun writes.
	HorovodRun Launcher = "horovodrun"
	// DeepSpeed is gorun deepspeed: DeepSpeed's launch.py.
	DeepSpeed Launcher = "deepspeed"
)

// SetsThreads reports whether l gives ranks OMP_NUM_THREADS of its own:
// gorun and torchrun do (see [DefaultThreads] and [Bindings]); Open MPI's
// mpirun, Hydra, horovodrun's mpirun and DeepSpeed's launch.py leave it
// unset, so that a hybrid MPI+OpenMP program takes its threads from the
// user's environment or OpenMP's default.
func (l Launcher) SetsThreads() bool {
	return l != MPIRun && l != MPIExec && l != HorovodRun && l != DeepSpeed
}

// Rank is everything a rank's environment is computed from.
type Rank struct {
	// Launcher is the launcher whose contract the rank's environment
	// keeps; "" = gorun's.
	Launcher       Launcher
	JobID          string // gorun's job id, also TORCHELASTIC_RUN_ID unless RunID is set
	RunID          string // TORCHELASTIC_RUN_ID: a per-node launch's --rdzv-id; "" = JobID
	Rank           int    // global rank, 0-based
	WorldSize      int    // number of ranks in the job
	LocalRank      int    // rank among the ranks on the same host
	LocalWorldSize int    // number of ranks on the same host
	NodeRank       int    // index of the host among the job's hosts
	NodeCount      int    // number of hosts that run ranks
	Host           string // the host's name as the plan knows it
	MasterAddr     string // address of rank 0's host, reachable by every rank
	MasterPort     int    // a free port on rank 0's host chosen by gorun, the same for every rank
	RestartCount   int    // how many times the job was restarted before this start
	MaxRestarts    int    // --max-restarts
	AgentSocket    string // path of the agent's local socket; "" when it has none
	Dir            string // the rank's working directory: PWD, so that it agrees; "" = leave PWD
	// CrossRank and CrossSize are Horovod's cross rank and size of the
	// rank (see [CrossRanks]): among the hosts that run a rank of this
	// LocalRank, in node order, the index of this rank's host, and how
	// many they are. CrossSize 0 = not computed: NodeRank and NodeCount
	// stand for them, which is right when every host runs as many ranks.
	CrossRank int
	CrossSize int
	// Binding holds the NAME=value hints of the rank's binding
	// ([Bindings] or [UnboundHints]: CUDA_DEVICE_ORDER, UCX_NET_DEVICES,
	// OMP_NUM_THREADS, ...), which leave alone what the user set. They
	// override the agent's environment and are overridden by -x, except
	// a GPU visibility variable (CUDA_VISIBLE_DEVICES, ...), which gorun
	// narrowed from the user's own list and so wins over -x too.
	Binding []string
	// PMIFD is the rank's end of its PMI-1 socketpair (PMI_FD, with
	// PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS, as MPICH's
	// Hydra sets them); 0 = none.
	PMIFD int
	// PMIx is the environment a PMIx server made for the rank (PMIX_*
	// names from PMIx_server_setup_fork); when set, the rank also gets
	// OMPI_MCA_schizo=ompi and OMPI_MCA_ess=pmi: without them Open MPI 4.1
	// ignores a launcher it does not know and runs each rank as a
	// singleton, and inside a Slurm allocation its Slurm component takes
	// gorun's ranks for srun's.
	PMIx []string
	// Secret is the per-job secret that GORUN_AGENT_SOCKET asks for
	// (GORUN_JOB_SECRET); "" = none.
	Secret string
	// Slurm is set inside a Slurm allocation: the rank then also gets the
	// variables Slurm gives a task (SLURM_PROCID, SLURM_LOCALID,
	// SLURM_NODEID, SLURM_NTASKS, SLURM_NPROCS), which tools such as
	// PyTorch Lightning and submitit read, replacing the batch step's.
	Slurm bool
	// StacksDir is the directory where a Python rank's stacks hook writes
	// its dumps for `gorun stacks` (GORUN_STACKS_DIR); its subdirectory
	// py holds the hook (a sitecustomize.py that package stacks writes),
	// which Build puts first on the rank's PYTHONPATH. "" = no hook.
	StacksDir string
	// StacksSignal is the signal on which the hook dumps
	// (GORUN_STACKS_SIGNAL): the agent sets stacks.DumpSignal. 0 = the
	// hook's default, the same.
	StacksSignal int
}

// The variables of the Python stacks hook (see [Rank.StacksDir]).
const (
	// StacksDirVar names the directory the hook writes <pid>.txt into.
	StacksDirVar = "GORUN_STACKS_DIR"
	// StacksSignalVar is the signal number the hook dumps on.
	StacksSignalVar = "GORUN_STACKS_SIGNAL"
	// StacksPython set to 0 (by -x or in the agent's environment) keeps
	// the hook off the rank's PYTHONPATH.
	StacksPython = "GORUN_STACKS_PYTHON"
)

// StacksHookDir is the directory of the Python stacks hook under a
// rank's StacksDir, which Build puts first on PYTHONPATH.
func StacksHookDir(stacksDir string) string {
	return strings.TrimSuffix(stacksDir, "/") + "/py"
}

// ErrBadExport is wrapped by the errors of [ParseExport].
var ErrBadExport = errors.New("bad -x export")

// Export is one -x argument: NAME (take the value from gorun's own
// environment) or NAME=value.
type Export struct {
	Name     string
	Value    string
	HasValue bool
}

// ParseExport parses one -x argument.
func ParseExport(s string) (Export, error) {
	name, value, has := strings.Cut(s, "=")
	if !validName(name) {
		return Export{}, fmt.Errorf("%w %q: %q is not a variable name", ErrBadExport, s, name)
	}
	return Export{Name: name, Value: value, HasValue: has}, nil
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Hostname is the variable that tells every rank the name of its host in
// the plan (gorun's host list), which may differ from the kernel's name.
const Hostname = "GORUN_HOSTNAME"

// CollIface is the variable through which gorun's --iface reaches the TCP
// transport of Go ranks' collectives (package collectives reads it).
const CollIface = "GORUN_COLL_IFACE"

// The variables through which `gorun bench --transport`, --streams and
// --thresholds reach Go ranks' collectives (package collectives reads
// them, and documents them as its EnvTransport, EnvStreams and
// EnvThresholds).
const (
	// CollTransport forces one transport between every pair of ranks
	// (transport.ParseMode's names).
	CollTransport = "GORUN_COLL_TRANSPORT"
	// CollStreams is the number of TCP streams per connection.
	CollStreams = "GORUN_COLL_STREAMS"
	// CollThresholds overrides entries of the collectives' algorithm
	// table.
	CollThresholds = "GORUN_COLL_THRESHOLDS"
)

// WithIface returns exports with CollIface=iface added, so that the
// collectives use the interface --iface names, unless iface is empty or
// exports set CollIface already (-x wins).
func WithIface(exports []Export, iface string) []Export {
	return withDefault(exports, CollIface, iface)
}

// withDefault returns exports with name=value added, unless value is empty
// or exports set name already (-x wins).
func withDefault(exports []Export, name, value string) []Export {
	if value == "" {
		return exports
	}
	for _, e := range exports {
		if e.Name == name {
			return exports
		}
	}
	return append(append([]Export(nil), exports...), Export{Name: name, Value: value, HasValue: true})
}

// The variables through which gorun's plugin flags reach Go ranks'
// collectives (package collectives and package plugins read them).
const (
	// CollPlugin names the transport or collective plugin (--plugin).
	CollPlugin = "GORUN_COLL_PLUGIN"
	// PluginPath lists the directories searched for plugins first,
	// colon-separated (--plugin-dir, then gorun's own GORUN_PLUGIN_PATH).
	PluginPath = "GORUN_PLUGIN_PATH"
	// PluginOpts are the plugin's options, key=value separated by commas
	// (--plugin-opt, --fabric-provider).
	PluginOpts = "GORUN_PLUGIN_OPTS"
	// CollFallback "tcp" lets a rank whose plugin cannot start go on over
	// TCP (--transport-fallback).
	CollFallback = "GORUN_COLL_FALLBACK"
	// PluginLog is the level of the plugin log entries a rank shows, and
	// of those the plugin writes ("trace" ... "error", "off").
	PluginLog = "GORUN_PLUGIN_LOG"
	// CollDevice names the device plugin whose memory Go ranks' device
	// buffers are (--device).
	CollDevice = "GORUN_COLL_DEVICE"
	// PluginHandoff "0" keeps a transport plugin on the data path even
	// when it could hand its connections' sockets to the rank (the
	// default: the rank then moves the data with gorun's TCP protocol).
	PluginHandoff = "GORUN_PLUGIN_HANDOFF"
)

// ParsePluginOpts reads the value of PluginOpts: key=value pairs separated
// by commas.
func ParsePluginOpts(v string) (map[string]string, error) {
	out := map[string]string{}
	if v == "" {
		return out, nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", PluginOpts, kv)
		}
		out[k] = val
	}
	return out, nil
}

// Plugin is a job's plugin settings, as gorun made them from its plugin
// flags (which it checks), for [WithPlugin].
type Plugin struct {
	// Name is the plugin's name, or an absolute path to its binary.
	Name string
	// Dirs are searched for it before the standard directories.
	Dirs []string
	// Options are key=value pairs for the plugin.
	Options []string
	// Fallback is "tcp" or "".
	Fallback string
	// Device is the device plugin's name, or an absolute path to its
	// binary.
	Device string
}

// WithPlugin returns exports with the variables that carry p to the ranks
// added (each unless -x set it). The plugin directories are dirs followed
// by the value of GORUN_PLUGIN_PATH that lookup gives (gorun's own).
func WithPlugin(exports []Export, p Plugin, lookup func(string) (string, bool)) []Export {
	exports = withDefault(exports, CollPlugin, p.Name)
	path := strings.Join(p.Dirs, ":")
	if own, ok := lookup(PluginPath); ok && own != "" && path != "" {
		path += ":" + own
	}
	exports = withDefault(exports, PluginPath, path)
	exports = withDefault(exports, PluginOpts, strings.Join(p.Options, ","))
	exports = withDefault(exports, CollDevice, p.Device)
	return withDefault(exports, CollFallback, p.Fallback)
}

// Resolve turns exports into NAME=value pairs, taking the value of a bare
// NAME from lookup (gorun's own environment, as mpirun -x does). Names that
// lookup does not know are returned in missing, in order, so that the
// caller can say so; they are left out of the result.
func Resolve(exports []Export, lookup func(string) (string, bool)) (vars, missing []string) {
	for _, e := range exports {
		if e.HasValue {
			vars = append(vars, e.Name+"="+e.Value)
			continue
		}
		v, ok := lookup(e.Name)
		if !ok {
			missing = append(missing, e.Name)
			continue
		}
		vars = append(vars, e.Name+"="+v)
	}
	return vars, missing
}

// CrossRanks returns Horovod's cross ranks and sizes for a job whose node
// k (in node order) runs nodeSizes[k] ranks, as horovodrun computes them
// (get_host_assignments): the ranks of one local rank l form a
// communicator across the nodes that have such a rank; rank[k][l] is node
// k's index in it (how many nodes before k run more than l ranks) and
// size[l] is its size (how many nodes run more than l ranks). With 3
// ranks on 2 nodes (2, then 1), local rank 0 has cross size 2 and cross
// ranks 0 and 1; local rank 1 has cross size 1.
func CrossRanks(nodeSizes []int) (rank [][]int, size []int) {
	rank = make([][]int, len(nodeSizes))
	for k, n := range nodeSizes {
		rank[k] = make([]int, n)
		for l := range n {
			if l == len(size) {
				size = append(size, 0)
			}
			rank[k][l] = size[l]
			size[l]++
		}
	}
	return rank, size
}

// Vars returns the variables gorun sets for r, as NAME=value pairs sorted
// by name: torchrun's, Open MPI's, MVAPICH's, Horovod's and gorun's own
// (GORUN_*), and, as r says, the agent socket's, Slurm's, PMIx's, PMI-1's
// and the stacks hook's. OMP_NUM_THREADS is not among them: the binding
// gives it (r.Binding), or [Build] (see [DefaultThreads]).
func Vars(r Rank) []string {
	itoa := strconv.Itoa
	crossRank, crossSize := r.CrossRank, r.CrossSize
	if crossSize == 0 {
		crossRank, crossSize = r.NodeRank, r.NodeCount
	}
	v := []string{
		"RANK=" + itoa(r.Rank),
		"WORLD_SIZE=" + itoa(r.WorldSize),
		"LOCAL_RANK=" + itoa(r.LocalRank),
		"LOCAL_WORLD_SIZE=" + itoa(r.LocalWorldSize),
		"GROUP_RANK=" + itoa(r.NodeRank),
		"GROUP_WORLD_SIZE=" + itoa(r.NodeCount),
		"NODE_RANK=" + itoa(r.NodeRank),
		"ROLE_RANK=" + itoa(r.Rank),
		"ROLE_WORLD_SIZE=" + itoa(r.WorldSize),
		"ROLE_NAME=default",
		"MASTER_ADDR=" + r.MasterAddr,
		"MASTER_PORT=" + itoa(r.MasterPort),
		"TORCHELASTIC_RESTART_COUNT=" + itoa(r.RestartCount),
		"TORCHELASTIC_MAX_RESTARTS=" + itoa(r.MaxRestarts),
		"TORCHELASTIC_RUN_ID=" + cmp.Or(r.RunID, r.JobID),
		// torchrun's agent sets "True" when it hosts the TCPStore at
		// MASTER_ADDR:MASTER_PORT itself (static rendezvous), and every
		// rank is then a client of it. gorun hosts no TCPStore there:
		// "False" tells torch's env:// rendezvous that rank 0 starts the
		// store (multi-tenant) and the others connect to it
		// (torch.distributed.rendezvous._create_c10d_store); the agent
		// holds the others' MASTER_PORT and passes them on to rank 0's.
		"TORCHELASTIC_USE_AGENT_STORE=False",
		"OMPI_COMM_WORLD_RANK=" + itoa(r.Rank),
		"OMPI_COMM_WORLD_SIZE=" + itoa(r.WorldSize),
		"OMPI_COMM_WORLD_LOCAL_RANK=" + itoa(r.LocalRank),
		"OMPI_COMM_WORLD_LOCAL_SIZE=" + itoa(r.LocalWorldSize),
		"OMPI_COMM_WORLD_NODE_RANK=" + itoa(r.NodeRank),
		"OMPI_UNIVERSE_SIZE=" + itoa(r.WorldSize),
		"MV2_COMM_WORLD_RANK=" + itoa(r.Rank),
		"MV2_COMM_WORLD_SIZE=" + itoa(r.WorldSize),
		"MV2_COMM_WORLD_LOCAL_RANK=" + itoa(r.LocalRank),
		"MV2_COMM_WORLD_LOCAL_SIZE=" + itoa(r.LocalWorldSize),
		"HOROVOD_RANK=" + itoa(r.Rank),
		"HOROVOD_SIZE=" + itoa(r.WorldSize),
		"HOROVOD_LOCAL_RANK=" + itoa(r.LocalRank),
		"HOROVOD_LOCAL_SIZE=" + itoa(r.LocalWorldSize),
		"HOROVOD_CROSS_RANK=" + itoa(crossRank),
		"HOROVOD_CROSS_SIZE=" + itoa(crossSize),
		"GORUN_JOB_ID=" + r.JobID,
		"GORUN_RANK=" + itoa(r.Rank),
		"GORUN_WORLD_SIZE=" + itoa(r.WorldSize),
		"GORUN_LOCAL_RANK=" + itoa(r.LocalRank),
		"GORUN_LOCAL_WORLD_SIZE=" + itoa(r.LocalWorldSize),
		"GORUN_NODE_RANK=" + itoa(r.NodeRank),
		"GORUN_NODE_COUNT=" + itoa(r.NodeCount),
		Hostname + "=" + r.Host,
		"GORUN_RESTART_COUNT=" + itoa(r.RestartCount),
	}
	if r.AgentSocket != "" {
		v = append(v, "GORUN_AGENT_SOCKET="+r.AgentSocket)
	}
	if r.Secret != "" {
		v = append(v, "GORUN_JOB_SECRET="+r.Secret)
	}
	if r.Slurm {
		v = append(v, "SLURM_PROCID="+itoa(r.Rank), "SLURM_LOCALID="+itoa(r.LocalRank), "SLURM_NODEID="+itoa(r.NodeRank),
			"SLURM_NTASKS="+itoa(r.WorldSize), "SLURM_NPROCS="+itoa(r.WorldSize))
	}
	if len(r.PMIx) > 0 {
		v = append(v, r.PMIx...)
		v = append(v, "OMPI_MCA_schizo=ompi", "OMPI_MCA_ess=pmi")
	}
	if r.Dir != "" {
		v = append(v, "PWD="+r.Dir)
	}
	if r.StacksDir != "" {
		v = append(v, StacksDirVar+"="+r.StacksDir)
		if r.StacksSignal > 0 {
			v = append(v, StacksSignalVar+"="+itoa(r.StacksSignal))
		}
	}
	if r.PMIFD > 0 {
		v = append(v, "PMI_FD="+itoa(r.PMIFD), "PMI_RANK="+itoa(r.Rank), "PMI_SIZE="+itoa(r.WorldSize),
			"MPI_LOCALRANKID="+itoa(r.LocalRank), "MPI_LOCALNRANKS="+itoa(r.LocalWorldSize))
	}
	sort.Strings(v)
	return v
}

// DefaultThreads reports whether [Build] gives rank r OMP_NUM_THREADS=1,
// as torchrun does when it starts more than one rank per node: r's
// launcher sets threads at all ([Launcher.SetsThreads]: not under mpirun
// and mpiexec), r shares its host with other ranks (r.LocalWorldSize > 1),
// and neither base (the agent's environment), nor its binding (r.Binding:
// bound ranks get their CPUs' share), nor exports (-x) set
// OMP_NUM_THREADS. Without it each rank's OpenMP and torch intra-op pool
// would take every core of the host, and ranks that share a host
// oversubscribe it.
func DefaultThreads(base []string, r Rank, exports []string) bool {
	if r.LocalWorldSize <= 1 || !r.Launcher.SetsThreads() {
		return false
	}
	for _, l := range [][]string{base, r.Binding, exports} {
		if _, ok := Lookup(l, OMPNumThreads); ok {
			return false
		}
	}
	return true
}

// UserMasterPort reports whether exports (-x) set MASTER_PORT, which then
// wins over gorun's for every rank.
func UserMasterPort(exports []string) bool {
	_, ok := Lookup(exports, "MASTER_PORT")
	return ok
}

// Build returns the environment of rank r: base (the agent's own
// environment), overridden by gorun's variables ([Vars]) and the binding's
// hints (r.Binding), overridden in turn by the resolved -x exports, which
// the user asked for explicitly; a GPU visibility variable of r.Binding
// goes last, since gorun narrowed it from the user's own list.
// OMP_NUM_THREADS=1 is added where [DefaultThreads] says so.
// A name appears once; the order is base's, with new names appended.
// Where r.StacksDir is set, the stacks hook's directory
// ([StacksHookDir]) then goes first on PYTHONPATH, unless the result
// has GORUN_STACKS_PYTHON=0.
func Build(base []string, r Rank, exports []string) []string {
	out := make([]string, 0, len(base)+40)
	index := make(map[string]int, len(base)+40)
	set := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := index[name]; ok {
			out[i] = kv
			return
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		set(kv)
	}
	for _, kv := range Vars(r) {
		set(kv)
	}
	if DefaultThreads(base, r, exports) {
		set(OMPNumThreads + "=1")
	}
	var last []string
	for _, kv := range r.Binding {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case CUDAVisibleDevices, ROCRVisibleDevices, ZEAffinityMask:
			last = append(last, kv)
		default:
			set(kv)
		}
	}
	for _, kv := range exports {
		set(kv)
	}
	for _, kv := range last {
		set(kv)
	}
	if r.StacksDir != "" {
		get := func(name string) string {
			if i, ok := index[name]; ok {
				_, v, _ := strings.Cut(out[i], "=")
				return v
			}
			return ""
		}
		if hook := StacksHookDir(r.StacksDir); get(StacksPython) != "0" {
			switch path := get("PYTHONPATH"); {
			case path == "":
				set("PYTHONPATH=" + hook)
			case path != hook && !strings.HasPrefix(path, hook+":"):
				set("PYTHONPATH=" + hook + ":" + path)
			}
		}
	}
	return out
}
