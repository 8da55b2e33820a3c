package gridenginetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// proc is a process that Up started: a host's holder (the process whose
// namespaces are the host's), sge_qmaster or an sge_execd.
type proc struct {
	// Name is "host-NAME" for a holder, "sge_qmaster" or
	// "sge_execd-nodeNN".
	Name string
	// Host is the name of the host it runs on.
	Host string
	// Pid is its pid.
	Pid int
	// Start is its start time (/proc/PID/stat field 22), which tells a
	// reused pid apart.
	Start uint64
	// Net, UTS and Mnt are the inodes of its namespaces, the host's.
	Net, UTS, Mnt uint64

	// In the process that ran Up only:
	done chan struct{} // closed when cmd.Wait has reaped it
	ns   []*os.File    // a holder's net, uts and mnt namespaces, held open
}

// daemonPath is the PATH of the processes Up starts.
const daemonPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// holderScript runs in a new network, UTS and mount namespace and makes it
// host $1's: its hostname, /etc/hosts ($2), /etc/nsswitch.conf ($3) and the
// cell's common directory ($4 on the empty directory $5), bind-mounted in
// the private mount namespace only, and loopback up. It prints "ready" and
// becomes a process that holds the namespaces.
const holderScript = `set -e
echo "$1" > /proc/sys/kernel/hostname
mount --make-rprivate /
mount --bind "$2" /etc/hosts
mount --bind "$3" /etc/nsswitch.conf
mount --bind "$4" "$5"
ip link set lo up
echo ready
exec sleep infinity >/dev/null </dev/null
`

// daemonEnv is the environment of the processes Up starts. The execds pass
// it on to the jobs.
func (c *Cluster) daemonEnv() []string {
	return []string{
		"PATH=" + daemonPath,
		"HOME=/root",
		"LANG=C",
		"SGE_ROOT=" + c.Dir,
		"SGE_CELL=" + Cell,
		"SGE_QMASTER_PORT=" + strconv.Itoa(QmasterPort),
		"SGE_EXECD_PORT=" + strconv.Itoa(ExecdPort),
		markerEnv + "=" + c.Dir,
	}
}

// startHolder starts the process that makes and holds host h's namespaces,
// and waits until it has set them up.
func (c *Cluster) startHolder(ctx context.Context, h Host, pdeathsig bool) (*proc, error) {
	name := "host-" + h.Name
	out, err := os.OpenFile(filepath.Join(c.LogDir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: %w", err)
	}
	defer out.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", holderScript, "sh", h.Name,
		filepath.Join(c.Dir, "etc", "hosts"), filepath.Join(c.Dir, "etc", "nsswitch.conf"),
		c.CommonDir, filepath.Join(c.Dir, Cell, "common"))
	cmd.Dir = c.Dir
	cmd.Env = c.daemonEnv()
	cmd.Stdout, cmd.Stderr = w, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNS,
		Setsid:     true,
	}
	if pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: starting %s: %w", name, err)
	}
	p := c.track(name, h.Name, cmd)
	// The namespaces are the holder's from the start: hold them now.
	for _, ns := range []string{"net", "uts", "mnt"} {
		f, err := os.Open("/proc/" + strconv.Itoa(p.Pid) + "/ns/" + ns)
		if err != nil {
			return p, fmt.Errorf("gridenginetest: %s (pid %d) exited at once%s", name, p.Pid, c.logTails())
		}
		p.ns = append(p.ns, f)
	}
	p.Net, p.UTS, p.Mnt = inode(p.ns[0]), inode(p.ns[1]), inode(p.ns[2])
	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = r.SetReadDeadline(deadline)
	line, _ := bufio.NewReader(r).ReadString('\n')
	if line != "ready\n" {
		return p, fmt.Errorf("gridenginetest: %s (pid %d) did not set up host %s%s", name, p.Pid, h.Name, c.logTails())
	}
	return p, nil
}

// startDaemon starts argv in host's namespaces (nsenter execs it: its pid
// is the daemon's), in a new session, in the foreground (SGE_ND), with its
// output in LogDir/NAME.out, and reaps it when it exits.
func (c *Cluster) startDaemon(name, host string, pdeathsig bool, argv ...string) (*proc, error) {
	out, err := os.OpenFile(filepath.Join(c.LogDir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("gridenginetest: %w", err)
	}
	defer out.Close()
	nsArgs, files, err := c.enter(host)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", append(append(nsArgs, "--wd="+c.Dir, "--"), argv...)...)
	cmd.Env = append(c.daemonEnv(), "SGE_ND=true")
	cmd.ExtraFiles = files
	// A file, not a pipe: Wait must not wait for the daemon's children.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if pdeathsig {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("gridenginetest: starting %s: %w", name, err)
	}
	p := c.track(name, host, cmd)
	h := c.holder(host)
	p.Net, p.UTS, p.Mnt = h.Net, h.UTS, h.Mnt
	return p, nil
}

// track records a started process and reaps it when it exits.
func (c *Cluster) track(name, host string, cmd *exec.Cmd) *proc {
	p := &proc{Name: name, Host: host, Pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if info, ok := readProc(p.Pid); ok {
		p.Start = info.Start
	}
	c.procs = append(c.procs, p)
	return p
}

// inode returns the inode of an open file, 0 if unknown.
func inode(f *os.File) uint64 {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	return st.Ino
}

// holder returns host's holder, nil if there is none.
func (c *Cluster) holder(host string) *proc {
	for _, p := range c.procs {
		if p.Name == "host-"+host {
			return p
		}
	}
	return nil
}

// enter returns the nsenter options that enter host's namespaces, and the
// files they name (as fds 3, 4 and 5) if this process holds them. Otherwise
// (a cluster from Load) they name the holder's /proc/PID/ns files, once its
// pid, start time and namespace are checked.
func (c *Cluster) enter(host string) ([]string, []*os.File, error) {
	h := c.holder(host)
	if h == nil {
		return nil, nil, fmt.Errorf("gridenginetest: no host %q: want %s or one of %s", host, MasterHost, strings.Join(c.NodeNames(), ", "))
	}
	if len(h.ns) == 3 {
		return []string{"--net=/proc/self/fd/3", "--uts=/proc/self/fd/4", "--mount=/proc/self/fd/5"}, h.ns, nil
	}
	if !c.isOurs(h.Pid, h.Start) || testcluster.NSInode(h.Pid, "net") != h.Net {
		return nil, nil, fmt.Errorf("gridenginetest: host %s of the cluster in %s is down (its holder, pid %d, is gone)", host, c.Dir, h.Pid)
	}
	d := "/proc/" + strconv.Itoa(h.Pid) + "/ns/"
	return []string{"--net=" + d + "net", "--uts=" + d + "uts", "--mount=" + d + "mnt"}, nil, nil
}

// isOurs reports whether pid is alive with the given start time.
func (c *Cluster) isOurs(pid int, start uint64) bool {
	p, ok := readProc(pid)
	return ok && !p.Zombie && start != 0 && p.Start == start
}

// waitFor polls ready every few milliseconds until it is true, ctx is done,
// timeout passes or one of the processes in watch exits (testcluster.Wait).
// more adds to the error.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, watch []*proc, ready func() bool, more ...func() string) error {
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
	w := testcluster.Wait{Name: "gridenginetest", Tick: 5 * time.Millisecond, MaxTick: 100 * time.Millisecond, Exited: exited, Tails: c.logTails}
	return w.For(ctx, what, timeout, ready, more...)
}

// Down stops the cluster: it kills every process of the cluster (every
// process in its hosts' network namespaces: the daemons, shepherds, the
// jobs' processes, those started by qrsh -inherit, and the holders of the
// namespaces) with SIGKILL until none is left, deletes the unreachable
// route, detaches anything mounted under Dir (Up mounts nothing there; a job
// might have), and removes Dir. It may be called more than once, also on a
// cluster from Load (another process), and returns what it could not do.
func (c *Cluster) Down() error {
	c.downOnce.Do(func() { c.downErr = c.down() })
	return c.downErr
}

func (c *Cluster) down() error {
	var errs []error
	if err := c.killAll(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.procs {
		if p.done != nil {
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("gridenginetest: %s (pid %d) was not reaped", p.Name, p.Pid))
			}
		}
		for _, f := range p.ns {
			f.Close()
		}
		p.ns = nil
	}
	// The route is the cluster's claim on its subnet: once another process
	// has torn the cluster down (and removed Dir, last), the subnet may be
	// another cluster's.
	if _, err := os.Stat(c.Dir); err == nil || c.Dir == "" {
		if err := c.releaseSubnet(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Dir != "" {
		if err := testcluster.RemoveDir(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("gridenginetest: %w", err))
		}
	}
	return errors.Join(errs...)
}

// readProc reads pid's /proc/PID/stat and its net namespace.
func readProc(pid int) (testcluster.Proc, bool) {
	return testcluster.ReadProc(pid, "net")
}

// allProcs returns every process but this one, with its net namespace.
func allProcs() []testcluster.Proc {
	return testcluster.Procs("net")
}

// isRecorded reports whether p is one of the processes Up started (same pid
// and start time).
func (c *Cluster) isRecorded(p testcluster.Proc) bool {
	for _, q := range c.procs {
		if q.Pid == p.Pid && q.Start == p.Start && q.Start != 0 {
			return true
		}
	}
	return false
}

// environ returns pid's environment, nil if unreadable.
func environ(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// hasMarker reports whether pid's environment names the cluster.
func (c *Cluster) hasMarker(pid int) bool {
	return contains(environ(pid), markerEnv+"="+c.Dir)
}

// trustedNamespaces returns the network namespaces of the cluster's hosts
// that are surely the cluster's: held open by this process, or holding a
// recorded process or one with the cluster's marker. (Not merely the
// recorded inode: the kernel reuses the inodes of dead namespaces.) held are
// those held open; host maps each to its host's name.
func (c *Cluster) trustedNamespaces(procs []testcluster.Proc) (trusted, held map[uint64]bool, host map[uint64]string) {
	trusted, held, host = map[uint64]bool{}, map[uint64]bool{}, map[uint64]string{}
	ours := map[uint64]bool{}
	for _, q := range c.procs {
		if q.Net == 0 {
			continue
		}
		host[q.Net] = q.Host
		if len(q.ns) > 0 {
			trusted[q.Net], held[q.Net] = true, true
		} else {
			ours[q.Net] = true
		}
	}
	for _, p := range procs {
		if p.Zombie || p.NS == 0 || !ours[p.NS] || trusted[p.NS] {
			continue
		}
		if c.isRecorded(p) || c.hasMarker(p.Pid) {
			trusted[p.NS] = true
		}
	}
	return trusted, held, host
}

// procsOf returns the live processes of the cluster among procs.
func (c *Cluster) procsOf(procs []testcluster.Proc, trusted map[uint64]bool) []int {
	return testcluster.Live(procs, trusted, c.isRecorded)
}

// killAll sends SIGKILL to the cluster's processes until none is left
// (zombies count as gone).
func (c *Cluster) killAll(timeout time.Duration) error {
	if err := testcluster.KillAll("net", timeout, func(ps []testcluster.Proc) (map[uint64]bool, map[uint64]bool) {
		trusted, held, _ := c.trustedNamespaces(ps)
		return trusted, held
	}, c.isRecorded); err != nil {
		return fmt.Errorf("gridenginetest: %w", err)
	}
	return nil
}

// Processes returns the pids of the cluster's live processes: every process
// in its hosts' network namespaces. After Down it returns none.
func (c *Cluster) Processes() []int {
	procs := allProcs()
	trusted, _, _ := c.trustedNamespaces(procs)
	pids := c.procsOf(procs, trusted)
	sort.Ints(pids)
	return pids
}

// Proc is a live process of a job, as JobProcesses reports it.
type Proc struct {
	// Pid is its pid.
	Pid int
	// Host is the exec host it runs on.
	Host string
	// Cmdline is its command line, arguments joined by blanks.
	Cmdline string
}

// String returns "PID on HOST: CMDLINE".
func (p Proc) String() string {
	return fmt.Sprintf("%d on %s: %s", p.Pid, p.Host, p.Cmdline)
}

// JobProcesses returns the live processes of job id on the exec hosts: the
// processes in the exec hosts' namespaces whose environment holds
// JOB_ID=id (the job script and everything it starts, the tasks that
// `qrsh -inherit` starts and their children: the execd sets JOB_ID for
// both), or whose supplementary groups hold one of gids (the job's
// additional group ids, see JobGIDs; a process can clear its environment,
// not its groups). After qdel, a job with none left is gone for good. The
// shepherds (sge_shepherd-ID) are not the job's and are not listed.
func (c *Cluster) JobProcesses(id int, gids ...int) []Proc {
	procs := allProcs()
	trusted, _, host := c.trustedNamespaces(procs)
	want := "JOB_ID=" + strconv.Itoa(id)
	var out []Proc
	for _, p := range procs {
		if p.Zombie || !trusted[p.NS] || host[p.NS] == MasterHost {
			continue
		}
		if !contains(environ(p.Pid), want) && !hasGroup(p.Pid, gids) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/cmdline")
		cl := strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		if strings.HasPrefix(cl, "sge_shepherd-") {
			continue
		}
		out = append(out, Proc{Pid: p.Pid, Host: host[p.NS], Cmdline: cl})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out
}

// hasGroup reports whether pid's supplementary groups hold one of gids.
func hasGroup(pid int, gids []int) bool {
	if len(gids) == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			g, err := strconv.Atoi(f)
			if err == nil && slices.Contains(gids, g) {
				return true
			}
		}
	}
	return false
}

// JobGIDs returns the additional group ids that the execds gave job id's
// processes while it runs (from the job's spool directories on the exec
// hosts: the addgrpid file of the job and of each task), for
// JobProcesses. It returns none once the job has ended.
func (c *Cluster) JobGIDs(id int) []int {
	var gids []int
	seen := map[int]bool{}
	for _, n := range c.nodes {
		pat := filepath.Join(c.Dir, "spool", "execd", n.Name, "active_jobs", strconv.Itoa(id)+".*")
		dirs, _ := filepath.Glob(pat)
		for _, d := range dirs {
			files, _ := filepath.Glob(filepath.Join(d, "addgrpid"))
			more, _ := filepath.Glob(filepath.Join(d, "*", "addgrpid"))
			for _, f := range append(files, more...) {
				b, err := os.ReadFile(f)
				if err != nil {
					continue
				}
				if g, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && !seen[g] {
					seen[g] = true
					gids = append(gids, g)
				}
			}
		}
	}
	sort.Ints(gids)
	return gids
}

// Daemon is one process that Up started, as Daemons reports it.
type Daemon struct {
	// Name is "host-NAME" (the process holding host NAME's namespaces),
	// "sge_qmaster" or "sge_execd-nodeNN".
	Name string
	// Host is the host it runs on.
	Host string
	// Pid is its pid.
	Pid int
	// Running reports whether it still runs (the same process: a reused
	// pid does not count).
	Running bool
}

// Daemons returns the processes Up started, in start order: each host's
// holder, sge_qmaster, then each exec host's sge_execd.
func (c *Cluster) Daemons() []Daemon {
	ds := make([]Daemon, len(c.procs))
	for i, p := range c.procs {
		ds[i] = Daemon{Name: p.Name, Host: p.Host, Pid: p.Pid, Running: c.isOurs(p.Pid, p.Start)}
	}
	return ds
}
