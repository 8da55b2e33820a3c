package control

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Version is the protocol version this build speaks.
const Version = 1

// Preamble starts the line the agent writes before its first frame:
// Preamble, the agent binary's build id (may be empty), a newline.
const Preamble = "\x00GORUN-CONTROL"

// MaxFrame bounds a frame's length field; longer frames are refused.
const MaxFrame = 16 << 20

// maxGarbage bounds what the head skips before the preamble.
const maxGarbage = 64 << 10

// MaxPreambleLine bounds the rest of the preamble line (the build id and
// its newline); the reader reads no further.
const MaxPreambleLine = 256

// KeepAbove is the payload size above which the Reader leaves a frame's
// payload to the caller rather than keep its buffer for the next frame.
const KeepAbove = 256 << 10

// growStep is the least a frame's buffer grows by when a frame is larger
// than it: the buffer grows eightfold as the payload arrives (growth),
// so that a length field alone allocates at most growStep, and a frame
// at most eight times what arrived of it.
const growStep = 64 << 10

// growth is how many times a frame's buffer grows when it is full: each
// growth copies what arrived, so the fewer the better, within what a
// peer that promises more than it sends may make the reader allocate.
const growth = 8

// ErrProtocol is wrapped by every error about malformed input.
var ErrProtocol = errors.New("control protocol")

// Type identifies a frame's message.
type Type uint8

// The message types. Directions: H->A is head to agent, A->H agent to head.
const (
	TypeHello    Type = 1  // both: Hello
	TypeLaunch   Type = 2  // H->A: Launch
	TypeStarted  Type = 3  // A->H: Started
	TypeExited   Type = 4  // A->H: Exited
	TypeOutput   Type = 5  // A->H: binary Output
	TypeStdin    Type = 6  // H->A: binary Stdin; empty data is EOF
	TypeSignal   Type = 7  // H->A: Signal
	TypeKill     Type = 8  // H->A: Kill
	TypeDone     Type = 9  // A->H: Done
	TypeShutdown Type = 10 // H->A: no payload
	TypeError    Type = 11 // A->H: Error
	TypeEnv      Type = 12 // A->H: Env, the answer to a Launch with PrintEnv
	TypeStdinAck Type = 13 // A->H: StdinAck
	TypeBeat     Type = 14 // both: Beat, a heartbeat on an otherwise quiet channel
	TypeRoute    Type = 15 // H->A: Route, which local address reaches these peers
	TypeRouteRe  Type = 16 // A->H: RouteReply
	TypeSpawn    Type = 17 // H->A: Spawn, start an agent below this one (--launch-fanout)
	TypeRelay    Type = 18 // both: binary Relay, bytes of a lower agent's control stream
	TypeSpawnErr Type = 19 // A->H: a lower agent could not start or its stream failed
	TypeCheck    Type = 20 // H->A: Check, a preflight question
	TypeCheckRe  Type = 21 // A->H: CheckReply
	TypeFence    Type = 22 // A->H: Fence, this host's ranks reached a PMI barrier
	TypeFenceRe  Type = 23 // H->A: binary FenceReply, the job-wide fence completed (or failed)
	TypeAbort    Type = 24 // A->H: Abort, a rank called MPI_Abort or left before finalize
	TypeSignaled Type = 25 // A->H: Signal, the agent got a signal from outside (a resource manager) and forwarded it
	TypeProbe    Type = 26 // H->A: Probe, a question about the host's ranks (their stacks, their state) or the host
	TypeProbeRe  Type = 27 // A->H: ProbeReply
	TypeDyn      Type = 28 // both: Dyn, a request about dynamic processes (MPI_Comm_spawn, name publishing, connect, another host's PMIx data)
	TypeDynRe    Type = 29 // both: DynReply, the answer to a Dyn
	maxType      Type = 29
)

var typeNames = [...]string{"", "hello", "launch", "started", "exited", "output", "stdin", "signal", "kill", "done", "shutdown", "error", "env", "stdin-ack", "beat", "route", "route-reply", "spawn", "relay", "spawn-error", "check", "check-reply", "fence", "fence-reply", "abort", "signaled", "probe", "probe-reply", "dyn", "dyn-reply"}

func (t Type) String() string {
	if t >= 1 && t <= maxType {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Hello is the first message in each direction.
type Hello struct {
	Proto   int    `json:"proto"`
	Version string `json:"version"`        // gorun's version
	Host    string `json:"host,omitempty"` // the agent's host name (os.Hostname)
	// Name is, in the head's hello, the host's name in the plan: the
	// agent's name in its messages when it was started without one
	// (launcher.EarlyAgent).
	Name     string `json:"name,omitempty"`
	PID      int    `json:"pid,omitempty"`       // the agent's pid
	Cores    int    `json:"cores,omitempty"`     // CPUs the agent may use
	NUMA     int    `json:"numa,omitempty"`      // NUMA nodes of the host
	Packages int    `json:"packages,omitempty"`  // packages (sockets) of the host
	FreePort int    `json:"free_port,omitempty"` // a port free on the agent's host, outside the ephemeral range
	// ConnAddr is the agent host's own address on the connection the head
	// reached it by (the server side of SSH_CONNECTION); "" when local.
	ConnAddr string `json:"conn_addr,omitempty"`
	// ClientAddr is the head's address on that connection (the client
	// side of SSH_CONNECTION): an address of the head's host that this
	// agent's host reaches.
	ClientAddr string `json:"client_addr,omitempty"`
	// Beat is how often the head sends heartbeats, in the head's hello;
	// an agent that hears nothing for BeatTimeout takes the head for
	// gone. Zero: no heartbeats (a local pipe reports EOF by itself).
	Beat        time.Duration `json:"beat,omitempty"`
	BeatTimeout time.Duration `json:"beat_timeout,omitempty"`
	// MaxFiles is the most descriptors the agent may hold (its soft
	// RLIMIT_NOFILE, raised to the hard limit): the head refuses a plan
	// whose ranks on this host would need more. Zero: not said (an older
	// agent).
	MaxFiles int `json:"max_files,omitempty"`
}

// Route asks an agent which of its addresses it would use to reach the
// peers (by routing, no packet sent), or the address of Iface if set;
// with neither, the address of its default route's interface.
type Route struct {
	Peers []string `json:"peers"`
	Iface string   `json:"iface,omitempty"`
}

// RouteReply answers Route.
type RouteReply struct {
	Addr string `json:"addr"`
	Err  string `json:"err,omitempty"`
}

// RankSpec is one rank an agent must start.
type RankSpec struct {
	Rank      int  `json:"rank"`
	LocalRank int  `json:"local_rank"`
	Stdin     bool `json:"stdin,omitempty"` // this rank gets gorun's stdin
	// CrossRank and CrossSize are Horovod's cross rank and size of the
	// rank (env.CrossRanks), which need every node's rank count.
	CrossRank int `json:"cross_rank,omitempty"`
	CrossSize int `json:"cross_size,omitempty"`
	// App is the index in Launch.Apps of the app context the rank runs;
	// 0 when the launch has none (every rank runs Launch.Argv).
	App int `json:"app,omitempty"`
	// Slot is the cores a rankfile binds the rank to (Open MPI's slot=:
	// PACKAGE:CORES or CORES, logical numbers); "" = as Bind says.
	Slot string `json:"slot,omitempty"`
	// Files, if set, writes the rank's output to files on its host.
	Files *RankFiles `json:"files,omitempty"`
}

// RankFiles sends a rank's output to files on its host (torchrun's
// --log-dir, Hydra's -outfile-pattern), created with their directories
// and truncated as the rank starts.
type RankFiles struct {
	Stdout string `json:"stdout,omitempty"` // its stdout's file; "" = none
	Stderr string `json:"stderr,omitempty"` // its stderr's file; "" = none
	// Quiet are the streams (1 stdout, 2 stderr) that are not relayed
	// to gorun's output: they go to their file only.
	Quiet uint8 `json:"quiet,omitempty"`
}

// App is one application context of a job (MPMD): Size consecutive ranks
// from First that run one program. The apps of a job share its ranks'
// numbering and rendezvous (one MPI_COMM_WORLD). A dynamic spawn
// (MPI_Comm_spawn_multiple) is a list of them too, in a job of its own.
type App struct {
	Argv    []string `json:"argv"`
	Dir     string   `json:"dir,omitempty"`     // its ranks' working directory; "" = Launch.Dir
	Exports []string `json:"exports,omitempty"` // its own resolved -x NAME=value pairs, after Launch.Exports
	First   int      `json:"first"`             // its first rank
	Size    int      `json:"size"`              // its number of ranks
}

// Launch asks an agent to start a generation of its ranks.
type Launch struct {
	Generation     int        `json:"generation"` // restart count
	JobID          string     `json:"job_id"`
	RunID          string     `json:"run_id,omitempty"`      // TORCHELASTIC_RUN_ID: a per-node launch's --rdzv-id
	Secret         string     `json:"secret"`                // the job's rendezvous secret (GORUN_JOB_SECRET)
	Slurm          bool       `json:"slurm,omitempty"`       // inside a Slurm allocation: ranks get SLURM_PROCID and the like
	Personality    string     `json:"personality,omitempty"` // the launcher whose contract the ranks keep (env.Launcher): "", mpirun, mpiexec, torchrun
	Argv           []string   `json:"argv"`
	Dir            string     `json:"dir"` // working directory
	Ranks          []RankSpec `json:"ranks"`
	WorldSize      int        `json:"world_size"`
	LocalWorldSize int        `json:"local_world_size"`
	NodeRank       int        `json:"node_rank"`
	NodeCount      int        `json:"node_count"`
	Host           string     `json:"host"` // the host's name in the plan
	MasterAddr     string     `json:"master_addr"`
	MasterPort     int        `json:"master_port"`
	MaxRestarts    int        `json:"max_restarts"`
	Exports        []string   `json:"exports,omitempty"` // resolved -x NAME=value pairs
	Bind           Bind       `json:"bind"`
	PMI            PMI        `json:"pmi"`
	PrintEnv       int        `json:"print_env,omitempty"` // if > 0, reply with the Env of rank PrintEnv-1 and start nothing
	// Print, if set, asks the agent to print its ranks' output on its own
	// stdout and stderr, as the head would print it (a per-node launch:
	// each node prints its own ranks'); it still relays the output.
	Print *Print `json:"print,omitempty"`
	// Apps are the job's app contexts when it runs several programs
	// (MPMD: prog1 : -np 2 prog2), in rank order; each rank runs the app
	// its RankSpec names. Empty: every rank runs Argv.
	Apps []App `json:"apps,omitempty"`
	// Spawned, when set, says the launch starts a job that the
	// generation's ranks spawned (MPI_Comm_spawn), beside the
	// generation's own ranks: its ranks (RankSpec.Rank, WorldSize) are
	// the spawned job's own, numbered from 0. A host with none of them
	// gets the launch too, to register the job's namespace for the ranks
	// here that connect to it.
	Spawned *Spawned `json:"spawned,omitempty"`
}

// Spawned describes a spawned job to the agents (Launch.Spawned).
type Spawned struct {
	// Job is its number in the generation: 1 for the first spawn.
	Job int `json:"job"`
	// Base numbers its ranks in the frames of the job (Started, Exited,
	// Output, Abort, Stdin): its rank r is Base+r, after the
	// generation's ranks and those of the jobs spawned before it.
	Base int `json:"base"`
	// Nspace is its PMIx namespace; Launch.PMI.KVSName its PMI-1 KVS.
	Nspace string `json:"nspace"`
	// Parent is the process that spawned it.
	Parent Proc `json:"parent"`
	// NodeOf is the node of each of its ranks, in the plan's numbering.
	NodeOf []int `json:"node_of"`
	// Nodes are the nodes its ranks run on, in the plan's numbering:
	// the members of its fences (a Fence's Nodes name a member by its
	// index in it).
	Nodes []int `json:"nodes"`
	// SlotsUsed is how many ranks of the job already ran on this host
	// when it was placed: its ranks are bound to the slots after theirs.
	SlotsUsed int `json:"slots_used,omitempty"`
	// Preput are key-values its PMI-1 KVS holds from the start: what the
	// spawner put for it (MPICH's PARENT_ROOT_PORT_NAME).
	Preput map[string]string `json:"preput,omitempty"`
	// Known are the namespaces of the generation and of the jobs spawned
	// before this one, which a PMIx server that starts with this launch
	// registers too (so that the ranks can connect to them).
	Known []Namespace `json:"known,omitempty"`
}

// Namespace is one job of a generation as a PMIx server registers it:
// its name, and the node of each of its ranks.
type Namespace struct {
	Nspace string `json:"nspace"`
	Job    int    `json:"job,omitempty"`  // its Spawned.Job; 0: the generation's
	Base   int    `json:"base,omitempty"` // its Spawned.Base
	NodeOf []int  `json:"node_of"`
	Parent *Proc  `json:"parent,omitempty"`
}

// Proc names a process of the generation's jobs: a rank of a PMIx
// namespace (or PMI-1 KVS). Rank -1 is every rank of it.
type Proc struct {
	Nspace string `json:"nspace"`
	Rank   int    `json:"rank"`
}

// Print is how an agent prints its ranks' output (Launch.Print): the
// head's --tag-output, --timestamp-output and --merge-output, in the
// formats of Launch.Personality.
type Print struct {
	Tag         bool          `json:"tag,omitempty"`          // --tag-output
	Timestamp   bool          `json:"timestamp,omitempty"`    // --timestamp-output
	Merge       bool          `json:"merge,omitempty"`        // --merge-output, of this host's ranks
	MergeWindow time.Duration `json:"merge_window,omitempty"` // --merge-window; 0 = the default
}

// Bind says how an agent binds its ranks (package topology plans it).
type Bind struct {
	To             string `json:"to,omitempty"`     // none, core, numa, package, gpu; "" = gpu with GPUs, else none
	MapBy          string `json:"map_by,omitempty"` // slot, numa, package: how ranks spread inside the node
	CPUsPerRank    int    `json:"cpus_per_rank,omitempty"`
	Oversubscribed bool   `json:"oversubscribed,omitempty"` // more ranks here than slots: unbound unless To is set
	Report         bool   `json:"report,omitempty"`         // describe the bindings in Started.Report
	GPUs           []int  `json:"gpus,omitempty"`           // the host's GPU slots a DeepSpeed --include/--exclude left; nil = all
	GPUBind        string `json:"gpu_bind,omitempty"`       // all (every GPU visible to every rank; "" too) or single
}

// PMI describes the job to the agents' PMI-1 and PMIx servers.
type PMI struct {
	KVSName string `json:"kvsname"`
	Mapping string `json:"mapping,omitempty"` // PMI_process_mapping
	// PMIx is auto (serve PMIx when the program needs it), on or off.
	PMIx string `json:"pmix,omitempty"`
	// Hosts are the job's node names in node order (for PMIx's maps);
	// sent unless PMIx is off.
	Hosts []string `json:"hosts,omitempty"`
	// FenceTimeout bounds a barrier from its first local rank (--rendezvous-timeout).
	FenceTimeout time.Duration `json:"fence_timeout,omitempty"`
	// RankBudget and JobBudget bound the rendezvous puts of one rank and
	// of the whole job in a generation (--kv-rank-budget,
	// --kv-job-budget); zero fields take package rendezvous's defaults.
	RankBudget KVBudget `json:"rank_budget,omitzero"`
	JobBudget  KVBudget `json:"job_budget,omitzero"`
	// UnivSize is the universe size the ranks are told (MPI_UNIVERSE_SIZE:
	// the slots of the job's hosts); 0: the job's size.
	UnivSize int `json:"univ_size,omitempty"`
}

// KVBudget is a budget of the rendezvous store: at most Keys keys and
// Bytes of keys and values together.
type KVBudget struct {
	Keys  int   `json:"keys,omitempty"`
	Bytes int64 `json:"bytes,omitempty"`
}

// Started reports that ranks' processes run.
type Started struct {
	Generation int         `json:"generation"`
	Ranks      []RankStart `json:"ranks"`
	Report     string      `json:"report,omitempty"` // --report-bindings text for this host
	// Topo summarises the host's topology when the agent looked at it
	// (to bind): the head warns about hosts that differ from the others.
	Topo string `json:"topo,omitempty"`
	// DefaultThreads counts the ranks started here that got
	// OMP_NUM_THREADS=1 because they share the host unbound and nobody set
	// it (env.DefaultThreads): the head says so once.
	DefaultThreads int `json:"default_threads,omitempty"`
}

// RankStart is one rank's process.
type RankStart struct {
	Rank int       `json:"rank"`
	PID  int       `json:"pid"`
	Time time.Time `json:"time"`
	// Binding says what the rank was bound to (CPUs, NUMA nodes, GPU),
	// or why not, for the job record.
	Binding *Binding `json:"binding,omitempty"`
}

// Binding is a rank's binding as the job record keeps it.
type Binding struct {
	CPUs string `json:"cpus,omitempty"`
	Mems string `json:"mems,omitempty"`
	GPUs string `json:"gpus,omitempty"`
	Why  string `json:"why,omitempty"`
}

// Exited reports how a rank ended (or that it could not start).
type Exited struct {
	Generation int       `json:"generation"`
	Rank       int       `json:"rank"`
	PID        int       `json:"pid,omitempty"`
	Start      time.Time `json:"start,omitempty"`
	End        time.Time `json:"end"`
	Code       int       `json:"code"`                  // exit code; -1 when killed by a signal
	Signal     int       `json:"signal,omitempty"`      // the signal that killed it, 0 if none
	Err        string    `json:"err,omitempty"`         // set when the rank could not start
	StderrTail string    `json:"stderr_tail,omitempty"` // the last lines it wrote to stderr
	MaxRSS     int64     `json:"max_rss_kb,omitempty"`  // ru_maxrss of the rank, KiB: Linux counts the agent's peak at fork in it
	Stopped    bool      `json:"stopped,omitempty"`     // gorun had signalled it (Kill) before it ended
	OOMKills   int       `json:"oom_kills,omitempty"`   // OOM kills the kernel counted while the rank ran
	// Coll is the final report of a Go rank's collectives
	// (rendezvous.Progress as JSON), sent with its goodbye.
	Coll json.RawMessage `json:"coll,omitempty"`
}

// Signal asks an agent to send a signal to every rank's process group.
type Signal struct {
	Signal int `json:"signal"`
}

// Kill asks an agent to stop its ranks: SIGTERM to every process group,
// SIGKILL to what is left after Grace (0: SIGKILL at once).
type Kill struct {
	Grace time.Duration `json:"grace"`
}

// Done reports that every rank of a generation has ended and nothing the
// ranks started is left.
type Done struct {
	Generation int   `json:"generation"`
	MaxRSS     int64 `json:"max_rss_kb"` // the agent's own peak resident set, KiB
	// Launches counts the Launch frames of the generation the agent had
	// received (the generation's, then one per spawned job): a Done that
	// counts fewer than the head sent is followed by another.
	Launches int `json:"launches,omitempty"`
}

// Error reports an agent-side failure that is not one rank's.
type Error struct {
	Msg string `json:"msg"`
}

// Env answers a Launch with PrintEnv set.
type Env struct {
	Rank int      `json:"rank"`
	Env  []string `json:"env"`
}

// StdinAck says that Bytes of stdin were written to (or dropped for) a
// rank, so that the head may send more.
type StdinAck struct {
	Rank  int `json:"rank"`
	Bytes int `json:"bytes"`
}

// Spawn asks an agent to start the agent of another host over SSH and
// relay its control stream (as TypeRelay frames tagged with Node), so that
// the head holds one connection per subtree rather than one per host.
type Spawn struct {
	Node int    `json:"node"`
	Host string `json:"host"`
	User string `json:"user,omitempty"`
	Port int    `json:"port,omitempty"`
	Exe  string `json:"exe"` // the path of gorun the head runs
	SSH  SSH    `json:"ssh"`
	// Beat and BeatTimeout are the heartbeats on the link to the lower
	// agent, which the agent that starts it exchanges with it (the head
	// exchanges them with the agents it started itself only).
	Beat        time.Duration `json:"beat,omitempty"`
	BeatTimeout time.Duration `json:"beat_timeout,omitempty"`
}

// SSH carries the head's SSH settings to agents that start other agents.
type SSH struct {
	ConfigFile     string        `json:"config_file,omitempty"`
	Port           int           `json:"port,omitempty"`
	Identities     []string      `json:"identities,omitempty"`
	AcceptNew      bool          `json:"accept_new,omitempty"`
	ConnectTimeout time.Duration `json:"connect_timeout,omitempty"`
	MaxHandshakes  int           `json:"max_handshakes,omitempty"`
	Stage          bool          `json:"stage,omitempty"`
}

// Relay is a chunk of a lower agent's control stream; empty Data is EOF
// (from the head: close its input; from an agent: its output ended, and
// Err may say why).
type Relay struct {
	Node int
	Data []byte
}

// The kinds of Probe.
const (
	// ProbeStacks asks for every rank's stacks: ProbeReply.Data is a
	// JSON array of stacks.Rank.
	ProbeStacks = "stacks"
	// ProbeStatus asks for every rank's state: Data is a JSON array of
	// RankStatus.
	ProbeStatus = "status"
	// ProbeInfo asks about the host (versions, environment) for a job
	// record: Data is a JSON HostInfo.
	ProbeInfo = "info"
)

// Probe asks an agent about its ranks or its host, without changing
// anything in them; the agent answers with one ProbeReply of the same ID.
type Probe struct {
	ID   uint64 `json:"id"`
	Kind string `json:"kind"`
	// Timeout bounds the agent's work on the answer (a stack tool that
	// does not return); 0: the agent's default.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Lines asks for native frames' files and lines too (ProbeStacks),
	// which costs eu-stack 20 times as much.
	Lines bool `json:"lines,omitempty"`
}

// ProbeReply answers a Probe: Data's form depends on the probe's kind;
// Err says why there is none.
type ProbeReply struct {
	ID   uint64          `json:"id"`
	Data json.RawMessage `json:"data,omitempty"`
	Err  string          `json:"err,omitempty"`
}

// RankStatus is one rank's state as its agent sees it, for gorun status
// and the head's hang watch.
type RankStatus struct {
	Rank  int    `json:"rank"`
	PID   int    `json:"pid,omitempty"`
	State string `json:"state"` // the kernel's state letter (R, S, D, T, Z) or "exited"
	// CPU is the CPU time the rank's processes used, in seconds.
	CPU float64 `json:"cpu_s"`
	// CPUPercent is its CPU use since the agent's previous status probe
	// (or since the rank started), 100 per core.
	CPUPercent float64 `json:"cpu_pct"`
	RSSKB      int64   `json:"rss_kb"`
	// Ops counts the rank's rendezvous calls (PMI or KV) so far.
	Ops uint64 `json:"ops"`
	// Coll is what a Go rank's collectives report about their calls
	// (rendezvous.Progress as JSON), absent for other ranks.
	Coll json.RawMessage `json:"coll,omitempty"`
}

// Check is `gorun check`'s question to an agent. With Program set, the
// agent resolves it in its PATH and opens a listener for the peers' probes;
// with Peers set, it connects to each peer's listener and says how.
type Check struct {
	Program string      `json:"program,omitempty"`
	Dir     string      `json:"dir,omitempty"`
	Peers   []CheckPeer `json:"peers,omitempty"`
}

// CheckPeer is another agent's probe listener.
type CheckPeer struct {
	Node int    `json:"node"`
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// CheckReply answers Check.
type CheckReply struct {
	Program    string        `json:"program,omitempty"` // the resolved path, or
	ProgramErr string        `json:"program_err,omitempty"`
	Port       int           `json:"port,omitempty"`  // the probe listener
	GPUs       int           `json:"gpus,omitempty"`  // GPUs on the host
	Addrs      []string      `json:"addrs,omitempty"` // the host's addresses, by interface: "eth0=10.0.0.1"
	Probes     []CheckResult `json:"probes,omitempty"`
}

// CheckResult is one probe of a peer.
type CheckResult struct {
	Node    int           `json:"node"`
	OK      bool          `json:"ok"`
	Iface   string        `json:"iface,omitempty"` // the local interface that reached it
	Latency time.Duration `json:"latency,omitempty"`
	Err     string        `json:"err,omitempty"`
}

// Fence carries a host's puts into the job-wide fence of a generation. In
// a launch tree an agent with lower agents sends one Fence for its whole
// subtree, once every host in it has reached the fence: Nodes then lists
// them, and Puts holds all their puts.
type Fence struct {
	Generation int `json:"generation"`
	// Job is the spawned job whose fence it is (Spawned.Job); 0: the
	// generation's. A spawned job's fences go straight to the head, and
	// Nodes then holds the host's index in its Spawned.Nodes.
	Job   int               `json:"job,omitempty"`
	Seq   int               `json:"seq"` // the fence's number in its generation (1, 2, ...), to match the reply
	Puts  map[string]string `json:"puts,omitempty"`
	Nodes []int             `json:"nodes,omitempty"` // the hosts it stands for; nil: the sender's alone
}

// FenceReply ends a fence: everything the fence published, or why it
// failed. It is the same for every host, so that the head encodes it once
// (EncodeFenceReply) and an agent passes it on to its lower agents as it
// came. Its frame is binary: a 4-byte length, that many bytes of JSON
// (generation, number, error), then KVs.
type FenceReply struct {
	Generation int    `json:"generation"`
	Job        int    `json:"job,omitempty"`
	Seq        int    `json:"seq"`
	Err        string `json:"err,omitempty"`
	// KVs is the published key-values as rendezvous.EncodePublished
	// encodes them (sorted, indexed where they land instead of decoded).
	KVs []byte `json:"-"`
}

// EncodeFenceReply is the payload of r's frame.
func EncodeFenceReply(r FenceReply) []byte {
	head, _ := json.Marshal(r) // ints and a string: cannot fail
	b := make([]byte, 0, 4+len(head)+len(r.KVs))
	b = binary.BigEndian.AppendUint32(b, uint32(len(head)))
	b = append(b, head...)
	return append(b, r.KVs...)
}

// FenceReply decodes a TypeFenceRe frame. KVs aliases the frame's payload.
func (f Frame) FenceReply() (FenceReply, error) {
	var r FenceReply
	if len(f.Payload) < 4 {
		return r, fmt.Errorf("%w: short fence-reply frame (%d bytes)", ErrProtocol, len(f.Payload))
	}
	n := binary.BigEndian.Uint32(f.Payload)
	if uint64(n) > uint64(len(f.Payload)-4) {
		return r, fmt.Errorf("%w: fence-reply header of %d bytes in a %d-byte frame", ErrProtocol, n, len(f.Payload))
	}
	if err := json.Unmarshal(f.Payload[4:4+n], &r); err != nil {
		return r, fmt.Errorf("%w: bad fence-reply header: %w", ErrProtocol, err)
	}
	r.KVs = f.Payload[4+n:]
	return r, nil
}

// Abort reports a rank that ends the job through PMI: MPI_Abort (Code,
// Msg), or a connection closed before finalize (Early).
type Abort struct {
	Generation int    `json:"generation"`
	Rank       int    `json:"rank"`
	Code       int    `json:"code"`
	Msg        string `json:"msg,omitempty"`
	Early      bool   `json:"early,omitempty"`
	// Missing, when set, says a rendezvous fence timed out (after Timeout)
	// with these ranks never arriving; Rank is the first of them.
	Missing []int         `json:"missing,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
}

// The kinds of Dyn: what ranks ask through PMIx or PMI-1, and what the
// head asks an agent's PMIx server.
const (
	DynSpawn      = "spawn"      // A->H: start Apps as a new job; the reply names it
	DynPublish    = "publish"    // A->H: publish Info's names
	DynLookup     = "lookup"     // A->H: look Keys up (Wait: until published, Timeout bounds it)
	DynUnpublish  = "unpublish"  // A->H: unpublish Keys
	DynConnect    = "connect"    // A->H: this host's ranks of Procs connect; the reply comes when every host's did
	DynDisconnect = "disconnect" // A->H: likewise, to disconnect
	DynModex      = "modex"      // A->H: the PMIx data of Procs[0], which another host holds; H->A: this host's, for it
	DynFence      = "fence"      // A->H: a PMIx fence over Procs (ranks of several namespaces), with this host's Data; the reply has every host's
)

// The status classes of a DynReply (pmixbridge's, which the PMIx plugin
// turns into PMIx statuses; PMI-1 answers rc=-1 to all but DynOK).
const (
	DynOK           = 0
	DynError        = 1
	DynNotFound     = 2
	DynNotSupported = 3
	DynTimeout      = 4
	DynExists       = 5
)

// Dyn is a request about dynamic processes. From an agent: what one of its
// ranks asked through PMIx or PMI-1 (a spawn, name publishing, a connect,
// another host's PMIx data), which only the head can answer. From the
// head: a question for the agent's PMIx server (the data of one of its
// ranks, which another host's ranks want). The receiver answers each with
// one DynReply of the same ID.
type Dyn struct {
	ID         uint64 `json:"id"`
	Kind       string `json:"kind"`
	Generation int    `json:"generation"`
	// From is the requester, by namespace (PMIx) or KVS (PMI-1) and rank;
	// a connect's is its namespace with rank -1.
	From Proc `json:"from"`
	// PMI says the request came over PMI-1 (MPICH) rather than PMIx.
	PMI bool `json:"pmi,omitempty"`
	// Apps are a spawn's programs (Size: its maxprocs), Info its
	// job-level attributes.
	Apps []DynApp `json:"apps,omitempty"`
	// Info are the request's attributes (a spawn's, a lookup's
	// directives), or a publish's names and their values.
	Info []KV `json:"info,omitempty"`
	// Keys are a lookup's or unpublish's names.
	Keys []string `json:"keys,omitempty"`
	// Procs are a connect's or disconnect's processes, or a modex's.
	Procs []Proc `json:"procs,omitempty"`
	// Preput are PMI-1 key-values a spawner puts into its children's
	// KVS.
	Preput map[string]string `json:"preput,omitempty"`
	// Data is a fence's contribution of this host (opaque PMIx bytes).
	Data []byte `json:"data,omitempty"`
}

// DynApp is one program of a spawn.
type DynApp struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // NAME=value pairs the spawner adds
	Dir  string   `json:"dir,omitempty"`
	Size int      `json:"size"`           // maxprocs
	Info []KV     `json:"info,omitempty"` // its attributes: host, wdir, ...
}

// KV is an attribute or a published name with its value, as text.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DynReply answers a Dyn: a status class (DynOK, ...), and why it failed
// (for the requester's eyes; the head prints it too), or what it returns.
type DynReply struct {
	ID     uint64 `json:"id"`
	Kind   string `json:"kind"`
	Status int    `json:"status,omitempty"`
	Err    string `json:"err,omitempty"`
	// Nspace is a spawn's new namespace.
	Nspace string `json:"nspace,omitempty"`
	// Found are a lookup's names, with who published each.
	Found []Found `json:"found,omitempty"`
	// Data is a modex's answer, or a fence's: every host's contribution
	// (opaque PMIx bytes).
	Data []byte `json:"data,omitempty"`
}

// Found is a published name a lookup found.
type Found struct {
	Key       string `json:"key"`
	Value     string `json:"value"`
	Publisher Proc   `json:"publisher"`
}

// Output is a chunk of a rank's stdout (Stream 1) or stderr (Stream 2).
type Output struct {
	Rank   int
	Stream uint8
	Time   time.Time // when the agent read it
	Data   []byte
}

// Stdin is a chunk of gorun's stdin for a rank; empty Data means EOF.
type Stdin struct {
	Rank int
	Data []byte
}

// Frame is one received message, its payload not yet decoded.
type Frame struct {
	Type    Type
	Payload []byte
}

// Decode unmarshals a JSON payload into v.
func (f Frame) Decode(v any) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("%w: bad %s message: %w", ErrProtocol, f.Type, err)
	}
	return nil
}

// Output decodes a TypeOutput frame. Data aliases the frame's payload.
func (f Frame) Output() (Output, error) {
	if len(f.Payload) < 13 {
		return Output{}, fmt.Errorf("%w: short output frame (%d bytes)", ErrProtocol, len(f.Payload))
	}
	return Output{
		Rank:   int(binary.BigEndian.Uint32(f.Payload)),
		Stream: f.Payload[4],
		Time:   time.Unix(0, int64(binary.BigEndian.Uint64(f.Payload[5:]))),
		Data:   f.Payload[13:],
	}, nil
}

// Relay decodes a TypeRelay frame. Data aliases the frame's payload.
func (f Frame) Relay() (Relay, error) {
	if len(f.Payload) < 4 {
		return Relay{}, fmt.Errorf("%w: short relay frame (%d bytes)", ErrProtocol, len(f.Payload))
	}
	return Relay{Node: int(binary.BigEndian.Uint32(f.Payload)), Data: f.Payload[4:]}, nil
}

// Stdin decodes a TypeStdin frame. Data aliases the frame's payload.
func (f Frame) Stdin() (Stdin, error) {
	if len(f.Payload) < 4 {
		return Stdin{}, fmt.Errorf("%w: short stdin frame (%d bytes)", ErrProtocol, len(f.Payload))
	}
	return Stdin{Rank: int(binary.BigEndian.Uint32(f.Payload)), Data: f.Payload[4:]}, nil
}

// Writer sends frames; it is safe for concurrent use. A frame of up to
// 256 KiB goes out in one Write call; a larger one in several, with no other
// frame between them.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WritePreamble writes the preamble line with the agent's build id;
// agents call it once, first.
func (w *Writer) WritePreamble(buildID string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := io.WriteString(w.w, Preamble+" "+buildID+"\n")
	return err
}

func (w *Writer) send(t Type, parts ...[]byte) error {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxFrame {
		return fmt.Errorf("%w: %s frame of %d bytes is over the %d limit", ErrProtocol, t, n, MaxFrame)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b := w.buf[:0]
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, byte(t))
	if n > bigFrame {
		// A large frame (a fence's answer, the same for many agents)
		// is written from where it lies, not copied into a buffer
		// that each agent's writer would then keep.
		_, err := w.w.Write(b)
		for _, p := range parts {
			if err != nil {
				break
			}
			_, err = w.w.Write(p)
		}
		w.buf = b[:0]
		w.err = err
		return err
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	_, err := w.w.Write(b)
	w.buf = b[:0]
	if err != nil {
		w.err = err
	}
	return err
}

// bigFrame is the frame size above which a Writer writes the payload
// from where it lies (above the 64 KiB of an output chunk, which stays one
// write on the relay's path): a frame of at most bigFrame goes out in one Write
// call, a larger one in several (a stream; relays count its bytes).
const bigFrame = 256 << 10

// SendPayload sends a frame of type t with an encoded payload, such as one
// encoded once for many receivers.
func (w *Writer) SendPayload(t Type, payload []byte) error { return w.send(t, payload) }

// AppendFrame appends the bytes of a frame of type t to dst, as a Writer
// would send them: what an agent relays of a lower agent's frames.
func AppendFrame(dst []byte, t Type, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(1+len(payload)))
	dst = append(dst, byte(t))
	return append(dst, payload...)
}

// Send sends a JSON message of type t (v may be nil for no payload).
func (w *Writer) Send(t Type, v any) error {
	if v == nil {
		return w.send(t)
	}
	p, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", t, err)
	}
	return w.send(t, p)
}

// maxChunk keeps an output or stdin frame under MaxFrame.
const maxChunk = MaxFrame - 64

// SendOutput sends a chunk of a rank's output, split if it is large.
func (w *Writer) SendOutput(o Output) error {
	var h [13]byte
	binary.BigEndian.PutUint32(h[:], uint32(o.Rank))
	h[4] = o.Stream
	binary.BigEndian.PutUint64(h[5:], uint64(o.Time.UnixNano()))
	for d := o.Data; ; {
		c := d[:min(len(d), maxChunk)]
		if err := w.send(TypeOutput, h[:], c); err != nil {
			return err
		}
		d = d[len(c):]
		if len(d) == 0 {
			return nil
		}
	}
}

// SendStdin sends a chunk of stdin for a rank; empty data means EOF.
func (w *Writer) SendStdin(s Stdin) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(s.Rank))
	if len(s.Data) == 0 {
		return w.send(TypeStdin, h[:])
	}
	for d := s.Data; len(d) > 0; {
		c := d[:min(len(d), maxChunk)]
		if err := w.send(TypeStdin, h[:], c); err != nil {
			return err
		}
		d = d[len(c):]
	}
	return nil
}

// SendRelay sends a chunk of a lower agent's stream; empty data is EOF.
func (w *Writer) SendRelay(r Relay) error {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(r.Node))
	if len(r.Data) == 0 {
		return w.send(TypeRelay, h[:])
	}
	for d := r.Data; len(d) > 0; {
		c := d[:min(len(d), maxChunk)]
		if err := w.send(TypeRelay, h[:], c); err != nil {
			return err
		}
		d = d[len(c):]
	}
	return nil
}

// Reader receives frames. It is not safe for concurrent use.
type Reader struct {
	r   *bufio.Reader
	buf []byte
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// SkipPreamble reads up to and including the preamble line and returns
// the agent's build id. Whatever came before it (at most 64 KiB) is
// returned too, so that the caller can show it: it is usually a login
// shell's chatter.
func (r *Reader) SkipPreamble() (garbage []byte, buildID string, err error) {
	var seen []byte
	for {
		b, err := r.r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return seen, "", err
		}
		seen = append(seen, b)
		if bytes.HasSuffix(seen, []byte(Preamble)) {
			garbage := seen[:len(seen)-len(Preamble)]
			line, err := r.preambleLine()
			if err != nil {
				return garbage, "", err
			}
			return garbage, strings.TrimSpace(line), nil
		}
		if len(seen) > maxGarbage+len(Preamble) {
			return seen[:maxGarbage], "", fmt.Errorf("%w: no preamble in the first %d bytes", ErrProtocol, maxGarbage)
		}
	}
}

// preambleLine reads the rest of the preamble line, newline included, but
// never more than MaxPreambleLine bytes of it.
func (r *Reader) preambleLine() (string, error) {
	var line []byte
	for len(line) < MaxPreambleLine {
		b, err := r.r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", fmt.Errorf("%w: preamble line cut short: %w", ErrProtocol, err)
		}
		line = append(line, b)
		if b == '\n' {
			return string(line), nil
		}
	}
	return "", fmt.Errorf("%w: preamble line longer than %d bytes", ErrProtocol, MaxPreambleLine)
}

// Buffered returns what the reader has read ahead and not yet returned.
func (r *Reader) Buffered() []byte {
	b, _ := r.r.Peek(r.r.Buffered())
	return b
}

// Next reads the next frame. The payload is valid until the next call,
// but one of more than KeepAbove bytes is the caller's to keep: the
// reader does not reuse it (a fence's answer is kept as it came).
// io.EOF means the peer closed the stream between frames.
func (r *Reader) Next() (Frame, error) {
	var h [5]byte
	if _, err := io.ReadFull(r.r, h[:4]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Frame{}, fmt.Errorf("%w: stream ended inside a frame header", ErrProtocol)
		}
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 || n > MaxFrame {
		return Frame{}, fmt.Errorf("%w: frame length %d out of range", ErrProtocol, n)
	}
	t, err := r.r.ReadByte()
	if err != nil {
		return Frame{}, fmt.Errorf("%w: stream ended inside a frame: %w", ErrProtocol, err)
	}
	if Type(t) == 0 || Type(t) > maxType {
		return Frame{}, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, t)
	}
	p, err := r.payload(int(n - 1))
	if err != nil {
		return Frame{}, fmt.Errorf("%w: stream ended inside a %s frame: %w", ErrProtocol, Type(t), err)
	}
	return Frame{Type: Type(t), Payload: p}, nil
}

// payload reads n bytes into the reader's buffer. A buffer too small for
// them grows as they arrive (eightfold, from growStep), so that a length
// field that promises more than comes allocates about what came.
func (r *Reader) payload(n int) ([]byte, error) {
	if n <= cap(r.buf) {
		p := r.buf[:n]
		_, err := io.ReadFull(r.r, p)
		return p, err
	}
	p := r.buf[:0]
	if n > KeepAbove {
		p = nil // the caller's to keep
	}
	for len(p) < n {
		if len(p) == cap(p) {
			p = slices.Grow(p, min(n-len(p), max((growth-1)*len(p), growStep)))
		}
		k, err := io.ReadFull(r.r, p[len(p):min(n, cap(p))])
		p = p[:len(p)+k]
		if err != nil {
			return nil, err
		}
	}
	if n <= KeepAbove {
		r.buf = p
	}
	return p, nil
}

// Handshake sends our Hello and reads the peer's, which must come first
// and speak our Version.
func Handshake(w *Writer, r *Reader, mine Hello) (Hello, error) {
	mine.Proto = Version
	if err := w.Send(TypeHello, mine); err != nil {
		return Hello{}, fmt.Errorf("send hello: %w", err)
	}
	f, err := r.Next()
	if err != nil {
		return Hello{}, fmt.Errorf("read hello: %w", err)
	}
	if f.Type != TypeHello {
		return Hello{}, fmt.Errorf("%w: first frame is %s, want hello", ErrProtocol, f.Type)
	}
	var h Hello
	if err := f.Decode(&h); err != nil {
		return Hello{}, err
	}
	if h.Proto != Version {
		return h, fmt.Errorf("%w: peer speaks version %d (gorun %s), this gorun speaks %d", ErrProtocol, h.Proto, h.Version, Version)
	}
	return h, nil
}

// Warm fills encoding/json's caches for the messages of a job's start
// and end (Hello, Launch, Started, Exited, Done, and those they hold), as
// both ends send and read them. A process's first encoding or decoding
// of a type works out its fields by reflection, a few hundred
// microseconds for Launch: the head and the agent call Warm in a
// goroutine of its own as they start, off the path of the frames.
func Warm() {
	for _, v := range []any{&Hello{}, &Launch{Ranks: []RankSpec{{}}, Apps: []App{{}}}, &Started{Ranks: []RankStart{{}}},
		&Exited{}, &Done{}, &Binding{}} {
		b, err := json.Marshal(v)
		if err == nil {
			json.Unmarshal(b, v)
		}
	}
}
