package gridenginetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// Defaults and limits of Options.
const (
	// DefaultNodes is the number of exec hosts when Options.Nodes is 0.
	DefaultNodes = 2
	// DefaultSlots is the number of slots per exec host when Options.Slots
	// is 0.
	DefaultSlots = 4
	// MaxNodes is the largest number of exec hosts one cluster may have.
	MaxNodes = 16
	// MaxSlots is the largest number of slots per exec host.
	MaxSlots = 64
)

// Names in the cluster's configuration.
const (
	// MasterHost is the name of the host running sge_qmaster, the one
	// submit and admin host (SGE_O_HOST in jobs).
	MasterHost = "qmaster"
	// PE is the parallel environment: allocation_rule $round_robin,
	// control_slaves TRUE, job_is_first_task FALSE.
	PE = "gorun"
	// Queue is the one cluster queue, on every exec host.
	Queue = "all.q"
	// Cell is SGE_CELL.
	Cell = "default"
	// ClusterName is the cell's cluster_name.
	ClusterName = "gorun"
)

// The ports. Every cluster has network namespaces of its own, so Grid
// Engine's usual ports never collide with another cluster's or with
// anything on this machine.
const (
	// QmasterPort is sge_qmaster's TCP port (SGE_QMASTER_PORT).
	QmasterPort = 6444
	// ExecdPort is every sge_execd's TCP port (SGE_EXECD_PORT).
	ExecdPort = 6445
)

// Debian's paths of the Grid Engine programs.
const (
	// BinDir holds Debian's Grid Engine binaries: the daemons, the clients
	// (without Debian's /usr/bin wrapper script) and the spooling tools.
	BinDir = "/usr/lib/gridengine"
	// UtilDir is the util directory of SGE_ROOT (arch, resources).
	UtilDir = "/usr/share/gridengine/util"
)

// clients are the client programs for which Up writes a wrapper into
// ClientsDir; the package and its tests run qsub, qstat, qdel and qconf.
var clients = []string{"qsub", "qrsh", "qstat", "qdel", "qconf", "qhost", "qacct", "qalter",
	"qhold", "qrls", "qmod", "qping", "qselect", "qlogin", "qsh", "qresub", "qquota"}

// stateFile is the cluster description in the state directory, read by Load.
const stateFile = "cluster.json"

// markerEnv is set in the environment of the processes Up starts to the
// state directory; the execds pass it on to the jobs. Down uses it to
// recognise the cluster's namespaces from another process.
const markerEnv = "GORUN_GRIDENGINETEST"

// Options configure Up. The zero value is a cluster of DefaultNodes exec
// hosts with DefaultSlots slots each.
type Options struct {
	// Nodes is the number of exec hosts, node01..nodeNN; 0 means
	// DefaultNodes, at most MaxNodes.
	Nodes int
	// Slots is the number of slots of the queue on each exec host; 0 means
	// DefaultSlots, at most MaxSlots. It may exceed the machine's CPUs.
	Slots int
	// StateDir is the directory for everything the cluster writes; it is
	// SGE_ROOT. "" means a new directory under os.TempDir(). A given
	// directory must be absent, empty, or hold a previous cluster (which Up
	// tears down first); it is removed by Down.
	StateDir string

	// pdeathsig makes the processes Up starts die with the calling thread
	// (Start).
	pdeathsig bool
}

// Host is one host of a Cluster: the qmaster host or an exec host.
type Host struct {
	// Name is the host's name: what `hostname` prints in it and Grid
	// Engine calls it.
	Name string
	// Addr is its IPv4 address on the cluster's private network.
	Addr netip.Addr
	// GIDs is the execd's gid_range ("" on the qmaster host).
	GIDs string
}

// Cluster is a running Grid Engine cluster. Its exported fields are paths
// and settings for the tests and scripts that use it; they must not be
// changed.
type Cluster struct {
	// Dir is the state directory, SGE_ROOT, holding everything below.
	Dir string
	// CommonDir is the cell's common directory (bootstrap, act_qmaster,
	// configuration, accounting), Dir/common. Inside the cluster's hosts it
	// is bind-mounted on Dir/default/common, where Grid Engine looks for
	// it; outside, that directory is empty, so that a client run outside
	// the cluster (not through Env's wrappers) fails at once instead of
	// looking the qmaster's name up in this machine's DNS.
	CommonDir string
	// ClientsDir holds the client wrappers that Env puts first in PATH.
	ClientsDir string
	// LogDir holds each process's stdout and stderr (NAME.out); the
	// daemons' own logs are their spool directories' messages files
	// (spool/qmaster/messages, spool/execd/nodeNN/messages).
	LogDir string
	// JobsDir is the working directory of Command and of the jobs that
	// Qsub and QsubSync submit, and holds their scripts and output files.
	JobsDir string
	// Subnet is the cluster's private network, 10.215.X.0/24.
	Subnet netip.Prefix
	// Slots is the number of slots per exec host.
	Slots int
	// Arch is Grid Engine's architecture string (lx-amd64).
	Arch string

	master Host
	nodes  []Host
	// procs are the processes Up started: one holder per host, then the
	// qmaster, then the execds.
	procs []*proc
	// route is set while the unreachable route is ours to delete.
	route bool

	downOnce sync.Once
	downErr  error
}

// record is what save writes and Load reads.
type record struct {
	*Cluster
	Master Host
	Nodes  []Host
	Procs  []*proc
	Route  bool
}

// Up stands up a cluster and returns once every exec host has reported to
// the qmaster, with its queue instance available: a job of all the slots
// starts at once. On error, everything it started is stopped and removed.
// The processes outlive the calling process (unless started by Start); Down
// stops them. ctx bounds the start only.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return nil, fmt.Errorf("gridenginetest: %d exec hosts: want 1 to %d", o.Nodes, MaxNodes)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.Slots < 1 || o.Slots > MaxSlots {
		return nil, fmt.Errorf("gridenginetest: %d slots per exec host: want 1 to %d", o.Slots, MaxSlots)
	}
	arch, err := sgeArch(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := prepareDir(o.StateDir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		Dir:        dir,
		CommonDir:  filepath.Join(dir, "common"),
		ClientsDir: filepath.Join(dir, "clients"),
		LogDir:     filepath.Join(dir, "log"),
		JobsDir:    filepath.Join(dir, "jobs"),
		Slots:      o.Slots,
		Arch:       arch,
	}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = fmt.Errorf("%w (and tearing down: %v)", err, derr)
			}
			c = nil
		}
	}()
	if err := c.claimSubnet(ctx); err != nil {
		return c, err
	}
	x := int(c.Subnet.Addr().As4()[2])
	c.master = Host{Name: MasterHost, Addr: hostAddr(c.Subnet, 1)}
	c.nodes = make([]Host, o.Nodes)
	for i := range c.nodes {
		c.nodes[i] = Host{Name: NodeName(i + 1), Addr: hostAddr(c.Subnet, 10+i+1), GIDs: gidRange(x, i+1)}
	}
	if err := c.save(); err != nil {
		return c, err
	}
	if err := c.writeFiles(); err != nil {
		return c, err
	}
	err = c.start(ctx, o.pdeathsig)
	if serr := c.save(); err == nil {
		err = serr
	}
	if err != nil {
		return c, err
	}
	return c, nil
}

// NodeName returns the name of exec host i (from 1): node01, node02, ...
func NodeName(i int) string {
	return fmt.Sprintf("node%02d", i)
}

// hostAddr returns address .n of the /24 p.
func hostAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(n)
	return netip.AddrFrom4(a)
}

// gidRange returns the gid_range of exec host i (from 1) of the cluster on
// 10.215.x.0/24: 50 group ids of a block of 1000 that is the cluster's
// alone, far above the group ids of real groups.
func gidRange(x, i int) string {
	lo := 300000 + 1000*x + 50*i
	return fmt.Sprintf("%d-%d", lo, lo+49)
}

// sgeArch runs Grid Engine's arch script: lx-amd64 on x86-64 Linux.
func sgeArch(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(UtilDir, "arch")).Output()
	arch := strings.TrimSpace(string(out))
	if err != nil || arch == "" || strings.ContainsAny(arch, "/ \n") {
		return "", fmt.Errorf("gridenginetest: %s/arch printed %q: %v", UtilDir, arch, err)
	}
	return arch, nil
}

// prepareDir makes the state directory (see Options.StateDir) and returns
// its absolute, resolved path.
func prepareDir(dir string) (string, error) {
	return testcluster.PrepareDir("gridenginetest", dir, 0o755, downOld)
}

// downOld tears down the cluster in dir, if there is one.
func downOld(dir string) error {
	if old, err := Load(dir); err == nil {
		return old.Down()
	}
	return nil
}

// Check reports why this machine cannot run a cluster (not Linux, not root,
// a program missing), or nil.
func Check() error {
	if runtime.GOOS != "linux" {
		return errors.New("gridenginetest needs Linux")
	}
	if os.Geteuid() != 0 {
		return errors.New("gridenginetest needs root (namespaces, and the daemons run jobs as root)")
	}
	var missing []string
	need := []struct{ path, pkg string }{
		{BinDir + "/sge_qmaster", "gridengine-master"},
		{BinDir + "/spoolinit", "gridengine-master"},
		{BinDir + "/spooldefaults.bin", "gridengine-master"},
		{BinDir + "/sge_execd", "gridengine-exec"},
		{BinDir + "/sge_shepherd", "gridengine-exec"},
		{BinDir + "/qrsh_starter", "gridengine-client"},
		{UtilDir + "/arch", "gridengine-common"},
		{"/bin/sh", "dash"},
	}
	for _, name := range clients {
		need = append(need, struct{ path, pkg string }{BinDir + "/" + name, "gridengine-client"})
	}
	for _, d := range need {
		if fi, err := os.Stat(d.path); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, d.path+" ("+d.pkg+")")
		}
	}
	for _, t := range []struct{ name, pkg string }{{"ip", "iproute2"}, {"nsenter", "util-linux"}, {"mount", "mount"}, {"sleep", "coreutils"}} {
		if _, err := exec.LookPath(t.name); err != nil {
			missing = append(missing, t.name+" ("+t.pkg+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("gridenginetest: missing %s; run scripts/test-deps.sh as root", strings.Join(missing, ", "))
	}
	return nil
}

// Master returns the qmaster host.
func (c *Cluster) Master() Host {
	return c.master
}

// Nodes returns the exec hosts, node01..nodeNN in order (a copy).
func (c *Cluster) Nodes() []Host {
	return append([]Host(nil), c.nodes...)
}

// NodeNames returns the exec hosts' names, node01..nodeNN.
func (c *Cluster) NodeNames() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.Name
	}
	return names
}

// Env returns the variables, as "KEY=value", that a client (qsub, qstat,
// qdel, ...) run from outside the cluster needs: SGE_ROOT, SGE_CELL,
// SGE_QMASTER_PORT, SGE_EXECD_PORT, and PATH with ClientsDir first, whose
// wrappers run the clients on the qmaster host. Append them to an
// environment without other SGE_* variables (see Environ), or use Command.
// Inside the cluster's jobs, the execd sets the SGE_* variables itself.
func (c *Cluster) Env() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = daemonPath
	}
	return []string{
		"SGE_ROOT=" + c.Dir,
		"SGE_CELL=" + Cell,
		"SGE_QMASTER_PORT=" + strconv.Itoa(QmasterPort),
		"SGE_EXECD_PORT=" + strconv.Itoa(ExecdPort),
		"PATH=" + c.ClientsDir + string(os.PathListSeparator) + path,
	}
}

// jobEnv are the variables, besides SGE_*, that Grid Engine's clients read
// as job context (qrsh -inherit reads JOB_ID); Environ drops them.
var jobEnv = []string{"JOB_ID", "JOB_NAME", "PE", "PE_HOSTFILE", "NSLOTS", "NHOSTS", "NQUEUES", "QUEUE", "ARC", "RESTARTED"}

// Environ returns this process's environment without any variable a Grid
// Engine client would read as configuration or job context (SGE_*, QRSH_*,
// JOB_ID, PE_HOSTFILE, ...: the test may itself run inside a job) and
// without PATH, plus Env.
func (c *Cluster) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || strings.HasPrefix(k, "SGE_") || strings.HasPrefix(k, "QRSH_") || contains(jobEnv, k) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, c.Env()...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Command returns a command that runs name on the qmaster host (the submit
// host, in its namespaces, where /etc/hosts names the cluster), with
// Environ as its environment, looked up in its PATH: a Grid Engine client,
// or anything else (sh -c '...'). It runs in JobsDir, which a job submitted
// with -cwd inherits (the hosts share this machine's file system): a
// different cmd.Dir does not change that (run `sh -c 'cd DIR && ...'`, or
// give qsub -wd DIR). The caller may change Env, Stdin, Stdout and Stderr.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return c.HostCommand(ctx, MasterHost, name, args...)
}

// HostCommand is Command on host (MasterHost or an exec host's name): it
// runs name in that host's network, UTS and mount namespaces with nsenter.
// An unknown host, or a cluster that is down, makes a command whose Start
// fails.
func (c *Cluster) HostCommand(ctx context.Context, host, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter")
	cmd.Env = c.Environ()
	cmd.Dir = c.JobsDir
	cmd.WaitDelay = 5 * time.Second
	nsArgs, files, err := c.enter(host)
	if err != nil {
		cmd.Err = err
		return cmd
	}
	cmd.ExtraFiles = files
	cmd.Args = append(append(append([]string{"nsenter"}, nsArgs...), "--wd="+c.JobsDir, "--", name), args...)
	return cmd
}

// save writes the cluster description for Load.
func (c *Cluster) save() error {
	return testcluster.SaveState("gridenginetest", c.Dir, stateFile, record{c, c.master, c.nodes, c.procs, c.route})
}

// Load returns the cluster that Up left in state directory dir (for a
// process other than the one that ran Up, such as the gridenginetest
// command).
func Load(dir string) (*Cluster, error) {
	r := record{Cluster: new(Cluster)}
	name, err := testcluster.LoadState("gridenginetest", dir, stateFile, &r, func() string { return r.Cluster.Dir })
	if err != nil {
		return nil, err
	}
	c := r.Cluster
	c.master, c.nodes, c.procs, c.route = r.Master, r.Nodes, r.Procs, r.Route
	if c.CommonDir != filepath.Join(c.Dir, "common") || len(c.nodes) == 0 {
		return nil, fmt.Errorf("gridenginetest: %s: not a cluster description", name)
	}
	return c, nil
}

// logTails returns the ends of the logs, for errors.
func (c *Cluster) logTails() string {
	var b strings.Builder
	names, _ := filepath.Glob(filepath.Join(c.LogDir, "*"))
	more, _ := filepath.Glob(filepath.Join(c.Dir, "spool", "qmaster", "messages"))
	names = append(names, more...)
	more, _ = filepath.Glob(filepath.Join(c.Dir, "spool", "execd", "*", "messages"))
	names = append(names, more...)
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
