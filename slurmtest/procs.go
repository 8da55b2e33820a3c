package slurmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// daemon is a process that Up started: munged, slurmctld or a slurmd.
type daemon struct {
	// Name is "munged", "slurmctld" or "slurmd-nodeNN".
	Name string
	// Pid is its pid.
	Pid int
	// Start is its start time (/proc/PID/stat field 22), which tells a
	// reused pid apart.
	Start uint64
	// UTS is the inode of its UTS namespace, where every process it starts
	// lives too.
	UTS uint64

	// In the process that ran Up only:
	done chan struct{} // closed when cmd.Wait has reaped it
	ns   *os.File      // its UTS namespace, held open: its inode stays ours
}

// daemonPath is the PATH of the daemons (and so of slurmstepd's).
const daemonPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// nodeScript runs in a new UTS namespace, sets the node's hostname and
// becomes its slurmd. $1 is the node name, the rest slurmd's argv.
const nodeScript = `h=$1; shift; echo "$h" > /proc/sys/kernel/hostname && exec "$@"`

// startDaemons starts munged, then slurmctld, then every slurmd, each once
// the one before is ready, and waits until every node is idle.
func (c *Cluster) startDaemons(ctx context.Context, pdeathsig bool) error {
	munged, err := c.start("munged", pdeathsig, Munged, "-F",
		"--socket="+c.MungeSocket, "--key-file="+c.MungeKey,
		"--pid-file="+filepath.Join(c.Dir, "munge", "munged.pid"),
		"--seed-file="+filepath.Join(c.Dir, "munge", "munged.seed"),
		"--log-file="+filepath.Join(c.LogDir, "munged.log"))
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "munged to listen on "+c.MungeSocket, 10*time.Second, []*daemon{munged}, func() bool {
		return dials("unix", c.MungeSocket)
	}); err != nil {
		return err
	}

	ctld, err := c.start("slurmctld", pdeathsig, Slurmctld, "-D", "-f", c.Conf)
	if err != nil {
		return err
	}
	ctlAddr := "127.0.0.1:" + strconv.Itoa(c.ControllerPort)
	if err := c.waitFor(ctx, "slurmctld to listen on "+ctlAddr, 20*time.Second, []*daemon{munged, ctld}, func() bool {
		return dials("tcp4", ctlAddr)
	}); err != nil {
		return err
	}

	watch := []*daemon{munged, ctld}
	for i := range c.nodes {
		n := &c.nodes[i]
		d, err := c.start("slurmd-"+n.Name, pdeathsig, "/bin/sh", "-c", nodeScript, "sh", n.Name,
			Slurmd, "-D", "-N", n.Name, "-f", c.Conf)
		if err != nil {
			return err
		}
		n.Pid = d.Pid
		watch = append(watch, d)
	}
	return c.waitIdle(ctx, "every node to be idle", watch...)
}

// waitIdle waits until sinfo shows every node idle.
func (c *Cluster) waitIdle(ctx context.Context, what string, watch ...*daemon) error {
	var states string
	return c.waitFor(ctx, what, 30*time.Second, watch, func() bool {
		var ok bool
		states, ok = c.allIdle(ctx)
		return ok
	}, func() string { return "sinfo: " + states })
}

// start starts a daemon in a new UTS namespace and session, with its output
// in LogDir/NAME.out, and reaps it when it exits.
func (c *Cluster) start(name string, pdeathsig bool, argv ...string) (*daemon, error) {
	out, err := os.OpenFile(filepath.Join(c.LogDir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("slurmtest: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = []string{"PATH=" + daemonPath, markerEnv + "=" + c.Dir}
	// A file, not a pipe: Wait must not wait for the daemon's children.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS, Setsid: true}
	if pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("slurmtest: starting %s: %w", name, err)
	}
	d := &daemon{Name: name, Pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(d.done)
	}()
	c.daemons = append(c.daemons, d)
	if p, ok := readProc(d.Pid); ok {
		d.Start = p.Start
	}
	// Hold the namespace: while it is open, no other namespace can get its
	// inode, so Down may kill whatever is in it.
	if f, err := os.Open("/proc/" + strconv.Itoa(d.Pid) + "/ns/uts"); err == nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err == nil {
			d.UTS, d.ns = st.Ino, f
		} else {
			f.Close()
		}
	}
	if d.UTS == 0 {
		return d, fmt.Errorf("slurmtest: %s (pid %d) exited at once%s", name, d.Pid, c.logTails())
	}
	return d, nil
}

// waitFor polls ready every few milliseconds until it is true, ctx is done,
// timeout passes or one of the processes in watch exits (testcluster.Wait).
// more adds to the error.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, watch []*daemon, ready func() bool, more ...func() string) error {
	exited := func() string {
		for _, p := range watch {
			select {
			case <-p.done:
				return p.Name
			default:
			}
		}
		return ""
	}
	w := testcluster.Wait{Name: "slurmtest", Tick: 2 * time.Millisecond, MaxTick: 20 * time.Millisecond, Exited: exited, Tails: c.logTails}
	return w.For(ctx, what, timeout, ready, more...)
}

// dials reports whether something accepts connections at addr.
func dials(network, addr string) bool {
	conn, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// allIdle runs sinfo and reports whether every node is idle, with sinfo's
// answer.
func (c *Cluster) allIdle(ctx context.Context) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "sinfo", "-h", "-N", "-o", "%N=%T").CombinedOutput()
	s := strings.Join(strings.Fields(string(out)), " ")
	if err != nil {
		return s, false
	}
	idle := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		if name, state, ok := strings.Cut(f, "="); ok && state == "idle" {
			idle[name] = true
		}
	}
	for _, n := range c.nodes {
		if !idle[n.Name] {
			return s, false
		}
	}
	return s, true
}

// Down stops the cluster: it kills every process of the cluster (the
// daemons, and every process in their UTS namespaces: slurmstepd's and the
// tasks of jobs still running) with SIGKILL until none is left, unmounts
// anything mounted under Dir (Up mounts nothing; a job might have), and
// removes Dir. It may be called more than once, also on a cluster from Load
// (another process), and returns what it could not do.
func (c *Cluster) Down() error {
	c.downOnce.Do(func() { c.downErr = c.down() })
	return c.downErr
}

func (c *Cluster) down() error {
	var errs []error
	if err := c.killAll(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, d := range c.daemons {
		if d.done != nil {
			select {
			case <-d.done:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("slurmtest: %s (pid %d) was not reaped", d.Name, d.Pid))
			}
		}
		if d.ns != nil {
			d.ns.Close()
			d.ns = nil
		}
	}
	if c.Dir != "" {
		if err := testcluster.RemoveDir(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("slurmtest: %w", err))
		}
	}
	return errors.Join(errs...)
}

// readProc reads pid's /proc/PID/stat and its UTS namespace.
func readProc(pid int) (testcluster.Proc, bool) {
	return testcluster.ReadProc(pid, "uts")
}

// allProcs returns every process but this one, with its UTS namespace.
func allProcs() []testcluster.Proc {
	return testcluster.Procs("uts")
}

// isDaemon reports whether p is one of the cluster's daemons (same pid and
// start time).
func (c *Cluster) isDaemon(p testcluster.Proc) bool {
	for _, d := range c.daemons {
		if d.Pid == p.Pid && d.Start == p.Start && d.Start != 0 {
			return true
		}
	}
	return false
}

// hasMarker reports whether pid's environment names the cluster: the
// daemons' marker, or the SLURM_CONF that slurmd gives steps and tasks.
func (c *Cluster) hasMarker(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if s := string(kv); s == markerEnv+"="+c.Dir || s == "SLURM_CONF="+c.Conf {
			return true
		}
	}
	return false
}

// trustedNamespaces returns the daemons' UTS namespaces that are surely the
// cluster's: held open by this process, or holding a daemon or a process
// with the cluster's marker. (Not merely the recorded inode: the kernel
// reuses the inodes of dead namespaces.) held are those held open.
func (c *Cluster) trustedNamespaces(procs []testcluster.Proc) (trusted, held map[uint64]bool) {
	trusted, held = map[uint64]bool{}, map[uint64]bool{}
	ours := map[uint64]bool{}
	for _, d := range c.daemons {
		if d.ns != nil {
			trusted[d.UTS], held[d.UTS] = true, true
		} else if d.UTS != 0 {
			ours[d.UTS] = true
		}
	}
	for _, p := range procs {
		if p.Zombie || p.NS == 0 || !ours[p.NS] || trusted[p.NS] {
			continue
		}
		if c.isDaemon(p) || c.hasMarker(p.Pid) {
			trusted[p.NS] = true
		}
	}
	return trusted, held
}

// procsOf returns the live processes of the cluster among procs.
func (c *Cluster) procsOf(procs []testcluster.Proc, trusted map[uint64]bool) []int {
	return testcluster.Live(procs, trusted, c.isDaemon)
}

// killAll sends SIGKILL to the cluster's processes until none is left
// (zombies count as gone).
func (c *Cluster) killAll(timeout time.Duration) error {
	if err := testcluster.KillAll("uts", timeout, c.trustedNamespaces, c.isDaemon); err != nil {
		return fmt.Errorf("slurmtest: %w", err)
	}
	return nil
}

// Processes returns the pids of the cluster's live processes: the daemons,
// slurmstepd's and the jobs' tasks (every process in the daemons' UTS
// namespaces). After Down it returns none.
func (c *Cluster) Processes() []int {
	procs := allProcs()
	trusted, _ := c.trustedNamespaces(procs)
	pids := c.procsOf(procs, trusted)
	sort.Ints(pids)
	return pids
}

// Daemon is one daemon of a Cluster, as Daemons reports it.
type Daemon struct {
	// Name is "munged", "slurmctld" or "slurmd-nodeNN".
	Name string
	// Pid is its pid.
	Pid int
	// Running reports whether it still runs (the same process: a reused
	// pid does not count).
	Running bool
}

// Daemons returns the cluster's daemons in start order: munged, slurmctld,
// then each node's slurmd.
func (c *Cluster) Daemons() []Daemon {
	ds := make([]Daemon, len(c.daemons))
	for i, d := range c.daemons {
		p, ok := readProc(d.Pid)
		ds[i] = Daemon{Name: d.Name, Pid: d.Pid, Running: ok && !p.Zombie && c.isDaemon(p)}
	}
	return ds
}
