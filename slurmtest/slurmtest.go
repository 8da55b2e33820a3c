package slurmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// Defaults of Options.
const (
	// DefaultNodes is the number of nodes when Options.Nodes is 0.
	DefaultNodes = 2
	// DefaultCPUs is the number of CPUs per node when Options.CPUs is 0.
	DefaultCPUs = 4
	// DefaultGPUs is the number of fake GPUs per node when Options.GPUs is 0.
	DefaultGPUs = 4
)

// Limits of Options.
const (
	// MaxNodes is the largest number of nodes one cluster may have (one
	// slurmd process and one port each).
	MaxNodes = 64
	// MaxGPUs is the largest number of fake GPUs per node.
	MaxGPUs = 64
)

// Names written into slurm.conf.
const (
	// ClusterName is the cluster's ClusterName (SLURM_CLUSTER_NAME in jobs).
	ClusterName = "gorun"
	// Partition is the one partition, the default, holding every node
	// (SLURM_JOB_PARTITION in jobs).
	Partition = "debug"
)

// The daemons a cluster runs (Debian's paths). The clients (sbatch, srun,
// squeue, scancel, scontrol, sinfo) are looked up in PATH.
const (
	// Munged is the munge daemon (Debian package munge).
	Munged = "/usr/sbin/munged"
	// Slurmctld is the controller (Debian package slurmctld).
	Slurmctld = "/usr/sbin/slurmctld"
	// Slurmd is the node daemon (Debian package slurmd).
	Slurmd = "/usr/sbin/slurmd"
)

// clients are the client commands the package and its tests run.
var clients = []string{"sbatch", "srun", "squeue", "scancel", "scontrol", "sinfo"}

// stateFile is the cluster description in the state directory, read by Load.
const stateFile = "cluster.json"

// markerEnv is set in the daemons' environment to the state directory; Down
// uses it to recognise the cluster's processes from another process.
const markerEnv = "GORUN_SLURMTEST"

// Options configure Up. The zero value is a cluster of DefaultNodes nodes
// with DefaultCPUs CPUs and DefaultGPUs fake GPUs each.
type Options struct {
	// Nodes is the number of nodes, node01..nodeNN; 0 means DefaultNodes, at
	// most MaxNodes.
	Nodes int
	// CPUs is the number of CPUs each node advertises; 0 means DefaultCPUs.
	// It may exceed the machine's cores (SlurmdParameters=config_overrides).
	CPUs int
	// GPUs is the number of fake GPUs (gres/gpu) per node: 0 means
	// DefaultGPUs, a negative number means none (no GresTypes at all).
	GPUs int
	// StateDir is the directory for everything the cluster writes. "" means
	// a new directory under os.TempDir(). A given directory must be absent,
	// empty, or hold a previous cluster (which Up tears down first); it is
	// removed by Down. Every directory above it must be searchable by all
	// (munged insists), and it must be short enough for the munge socket's
	// path to fit in 107 bytes.
	StateDir string
	// Extra is appended to slurm.conf as is, one setting per line (such as
	// "MpiDefault=pmi2"); a later setting overrides an earlier one.
	Extra string

	// pdeathsig makes the daemons die with the calling thread (Start).
	pdeathsig bool
}

// Node is one node of a Cluster.
type Node struct {
	// Name is the node's name, nodeNN: its NodeName, SLURMD_NODENAME and
	// what `hostname` prints on it.
	Name string
	// Port is the TCP port its slurmd listens on (on every address; the
	// cluster reaches it at 127.0.0.1).
	Port int
	// Pid is the pid of its slurmd, whose UTS namespace is the node's.
	Pid int
}

// Cluster is a running Slurm cluster. Its exported fields are paths and
// settings for the tests and scripts that use it; they must not be changed.
type Cluster struct {
	// Dir is the state directory holding everything below (mode 0755:
	// munged wants its socket's directories searchable by all).
	Dir string
	// Conf is slurm.conf, what SLURM_CONF names (see Env).
	Conf string
	// GresConf is gres.conf, next to Conf.
	GresConf string
	// MungeSocket is munged's socket (slurm.conf's AuthInfo=socket=...).
	MungeSocket string
	// MungeKey is the cluster's own munge key (mode 0400).
	MungeKey string
	// LogDir holds the daemons' logs: munged.log, slurmctld.log and
	// slurmd-nodeNN.log, and each daemon's stdout and stderr (NAME.out).
	LogDir string
	// JobsDir is the working directory of Command and of the jobs submitted
	// by Sbatch and SbatchWait, and holds their scripts and output files.
	JobsDir string
	// ControllerPort is slurmctld's TCP port on 127.0.0.1.
	ControllerPort int
	// CPUs is the number of CPUs per node.
	CPUs int
	// GPUs is the number of fake GPUs per node (0: none).
	GPUs int

	nodes   []Node
	daemons []*daemon

	downOnce sync.Once
	downErr  error
}

// record is what save writes and Load reads.
type record struct {
	*Cluster
	Nodes   []Node
	Daemons []*daemon
}

// Up stands up a cluster, waits until every node is idle, checks it with
// Verify, and returns with every node idle: a job of the whole cluster
// starts at once. On error, everything it started is stopped and removed. The daemons outlive
// the calling process; Down stops them. ctx bounds the start only.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return nil, fmt.Errorf("slurmtest: %d nodes: want 1 to %d", o.Nodes, MaxNodes)
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.CPUs < 0 {
		return nil, fmt.Errorf("slurmtest: %d CPUs per node: want 1 or more", o.CPUs)
	}
	switch {
	case o.GPUs == 0:
		o.GPUs = DefaultGPUs
	case o.GPUs < 0:
		o.GPUs = 0
	case o.GPUs > MaxGPUs:
		return nil, fmt.Errorf("slurmtest: %d GPUs per node: want at most %d", o.GPUs, MaxGPUs)
	}
	dir, err := prepareDir(o.StateDir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		Dir:         dir,
		Conf:        filepath.Join(dir, "etc", "slurm.conf"),
		GresConf:    filepath.Join(dir, "etc", "gres.conf"),
		MungeSocket: filepath.Join(dir, "munge", "munge.sock"),
		MungeKey:    filepath.Join(dir, "munge", "munge.key"),
		LogDir:      filepath.Join(dir, "log"),
		JobsDir:     filepath.Join(dir, "jobs"),
		CPUs:        o.CPUs,
		GPUs:        o.GPUs,
	}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = fmt.Errorf("%w (and tearing down: %v)", err, derr)
			}
			c = nil
		}
	}()
	if len(c.MungeSocket) > 107 {
		return c, fmt.Errorf("slurmtest: munge socket path %s is longer than 107 bytes; give a shorter state directory", c.MungeSocket)
	}
	if err := c.makeDirs(o.Nodes); err != nil {
		return c, err
	}

	// The ports are free now; the lock keeps another cluster from choosing
	// them until our daemons listen on them.
	unlock, err := lockPorts()
	if err != nil {
		return c, err
	}
	defer unlock()
	ports, err := freePorts(o.Nodes + 1)
	if err != nil {
		return c, err
	}
	c.ControllerPort = ports[0]
	c.nodes = make([]Node, o.Nodes)
	for i := range c.nodes {
		c.nodes[i] = Node{Name: fmt.Sprintf("node%02d", i+1), Port: ports[i+1]}
	}
	if err := c.writeFiles(o.Extra); err != nil {
		return c, err
	}
	err = c.startDaemons(ctx, o.pdeathsig)
	if serr := c.save(); err == nil {
		err = serr
	}
	if err != nil {
		return c, err
	}
	unlock()
	if err := c.Verify(ctx); err != nil {
		return c, err
	}
	// The nodes stay COMPLETING a moment after srun returns; a first job
	// that needs them whole would be queued, and start about 1 s later.
	if err := c.waitIdle(ctx, "every node to be idle after srun", c.daemons...); err != nil {
		return c, err
	}
	return c, nil
}

// prepareDir makes the state directory (see Options.StateDir) and returns
// its absolute, resolved path. munged refuses a socket whose directories are
// not searchable by all: the state directory gets mode 0755 (os.MkdirTemp
// makes 0700), and each directory above it must be searchable by all.
func prepareDir(dir string) (_ string, err error) {
	real, err := testcluster.PrepareDir("slurmtest", dir, 0o755, downOld)
	if err != nil {
		return "", err
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if dir == "" {
				os.Remove(real)
			}
			return "", fmt.Errorf("slurmtest: %s (above the state directory %s) is not searchable by all (mode %v), which munged refuses; give a state directory elsewhere", d, real, fi.Mode().Perm())
		}
		if d == "/" {
			break
		}
	}
	return real, nil
}

// downOld tears down the cluster in dir, if there is one.
func downOld(dir string) error {
	if old, err := Load(dir); err == nil {
		return old.Down()
	}
	return nil
}

// Check reports why this machine cannot run a cluster (not Linux, not root,
// a daemon or client missing), or nil.
func Check() error {
	if runtime.GOOS != "linux" {
		return errors.New("slurmtest needs Linux")
	}
	if os.Geteuid() != 0 {
		return errors.New("slurmtest needs root (UTS namespaces, and slurmd runs jobs as root)")
	}
	var missing []string
	for _, d := range []struct{ path, pkg string }{{Munged, "munge"}, {Slurmctld, "slurmctld"}, {Slurmd, "slurmd"}, {"/bin/sh", "dash"}} {
		if fi, err := os.Stat(d.path); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, d.path+" ("+d.pkg+")")
		}
	}
	for _, name := range clients {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name+" (slurm-client)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("slurmtest: missing %s; run scripts/test-deps.sh as root", strings.Join(missing, ", "))
	}
	return nil
}

// Nodes returns the cluster's nodes, node01..nodeNN in order (a copy).
func (c *Cluster) Nodes() []Node {
	return append([]Node(nil), c.nodes...)
}

// NodeNames returns the nodes' names, node01..nodeNN.
func (c *Cluster) NodeNames() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.Name
	}
	return names
}

// NodeList returns the nodes in Slurm's hostlist form, what
// SLURM_JOB_NODELIST is for a job on all of them: "node[01-02]", or
// "node01" for a single node.
func (c *Cluster) NodeList() string {
	switch len(c.nodes) {
	case 0:
		return ""
	case 1:
		return c.nodes[0].Name
	}
	return fmt.Sprintf("node[01-%02d]", len(c.nodes))
}

// Env returns the variables, as "KEY=value", that a client (sbatch, srun,
// squeue, scancel, scontrol, sinfo, salloc) needs to use this cluster:
// SLURM_CONF. Append them to an environment without other SLURM_* input
// variables (see Environ), or use Command. Inside the cluster's jobs, slurmd
// sets SLURM_CONF itself.
func (c *Cluster) Env() []string {
	return []string{"SLURM_CONF=" + c.Conf}
}

// clientEnvPrefixes are the prefixes of the variables that Slurm's clients
// read as options or job context; Environ drops them.
var clientEnvPrefixes = []string{"SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_",
	"SCANCEL_", "SCONTROL_", "SACCT_", "SBCAST_", "SATTACH_", "SPANK_"}

// Environ returns this process's environment without any variable a Slurm
// client would read as an option or as job context (SLURM_*, SBATCH_*,
// SRUN_*, ...: the test may itself run inside a Slurm job), plus Env.
func (c *Cluster) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range clientEnvPrefixes {
			if strings.HasPrefix(kv, p) {
				drop = true
				break
			}
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return append(env, c.Env()...)
}

// Command returns a command running a Slurm client (or anything that runs
// one) against the cluster: its environment is Environ and its working
// directory JobsDir, which a job or step started from it inherits (the
// nodes share this machine's file system). The caller may change both.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Environ()
	cmd.Dir = c.JobsDir
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Verify runs `srun -N<n> -n<n> hostname` and checks that it prints every
// node's name once: munge, the controller, every slurmd and the nodes' UTS
// namespaces work. The step needs one CPU of every node: while jobs hold
// them all, it waits.
func (c *Cluster) Verify(ctx context.Context) error {
	n := fmt.Sprint(len(c.nodes))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := c.Command(ctx, "srun", "-N"+n, "-n"+n, "hostname")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("slurmtest: srun -N%s -n%s hostname: %v: %s%s", n, n, err, strings.TrimSpace(string(out)), c.logTails())
	}
	got := strings.Fields(string(out))
	sort.Strings(got)
	if want := c.NodeNames(); strings.Join(got, " ") != strings.Join(want, " ") {
		return fmt.Errorf("slurmtest: srun -N%s -n%s hostname printed %q, want each of %v once", n, n, out, want)
	}
	return nil
}

// save writes the cluster description for Load.
func (c *Cluster) save() error {
	return testcluster.SaveState("slurmtest", c.Dir, stateFile, record{c, c.nodes, c.daemons})
}

// Load returns the cluster that Up left in state directory dir (for a
// process other than the one that ran Up, such as the slurmtest command).
func Load(dir string) (*Cluster, error) {
	r := record{Cluster: new(Cluster)}
	name, err := testcluster.LoadState("slurmtest", dir, stateFile, &r, func() string { return r.Cluster.Dir })
	if err != nil {
		return nil, err
	}
	c := r.Cluster
	c.nodes, c.daemons = r.Nodes, r.Daemons
	if c.Conf != filepath.Join(c.Dir, "etc", "slurm.conf") || len(c.nodes) == 0 || len(c.daemons) == 0 {
		return nil, fmt.Errorf("slurmtest: %s: not a cluster description", name)
	}
	return c, nil
}

// logTails returns the ends of the daemons' logs, for errors.
func (c *Cluster) logTails() string {
	var b strings.Builder
	names, _ := filepath.Glob(filepath.Join(c.LogDir, "*"))
	for _, p := range names {
		data, err := os.ReadFile(p)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		if len(data) > 1500 {
			data = data[len(data)-1500:]
		}
		fmt.Fprintf(&b, "\n%s:\n%s", p, strings.TrimSpace(string(data)))
	}
	return b.String()
}
