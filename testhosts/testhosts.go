package testhosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// MaxHosts is the largest number of hosts one cluster may have.
const MaxHosts = 200

// DefaultMaxStartups is the sshd MaxStartups used when Options.MaxStartups is
// empty: generous enough for a launcher that opens one connection per host at
// once to 200 hosts.
const DefaultMaxStartups = "200:30:400"

// SSHD is the OpenSSH server the hosts run (Debian's openssh-server).
const SSHD = "/usr/sbin/sshd"

// stateFile is the cluster description in the state directory, read by Load.
const stateFile = "cluster.json"

// Options configure Up.
type Options struct {
	// Hosts is the number of hosts, h1..hN; 1 to MaxHosts.
	Hosts int
	// Slots is the slot count per host written to the hostfile; 0 means 4.
	Slots int
	// MaxStartups is sshd's MaxStartups; "" means DefaultMaxStartups.
	MaxStartups string
	// StateDir is the directory for the keys, configs and logs. "" means a
	// new directory under os.TempDir(). A given directory must be absent,
	// empty, or hold a previous cluster (which Up tears down first); it is
	// removed by Down.
	StateDir string
	// KeepRealRC keeps root's real ~/.bashrc and ~/.profile inside the
	// hosts; by default they are replaced by an empty file there, because
	// this machine's root rc runs pyenv init (about 90 ms per ssh command,
	// and racy under parallel ssh).
	KeepRealRC bool
	// KexAlgorithms, if set, is written as KexAlgorithms into the client's
	// ssh config, such as "curve25519-sha256": OpenSSH 9's default,
	// sntrup761x25519-sha512, costs about 70 ms of CPU per connection on
	// each side, which dominates Up's ssh check of many hosts on a small
	// machine. "" keeps OpenSSH's default (what a real cluster does).
	KexAlgorithms string
}

// Host is one fake host of a Cluster.
type Host struct {
	// Name is the host's name: hN, what `hostname` prints on it.
	Name string
	// IP is the host's IPv4 address in Cluster.Subnet.
	IP string
	// Netns is the network namespace's name (as `ip netns list` shows it).
	Netns string
	// Veth is the root-namespace end of the host's veth pair, a bridge port.
	Veth string
	// SSHDPid is the pid of the host's sshd daemon, whose UTS and mount
	// namespaces are the host's.
	SSHDPid int
}

// Cluster is a running set of fake hosts. Its exported fields are paths and
// names for the tests and scripts that use it; they must not be changed.
type Cluster struct {
	// Dir is the state directory holding everything below (mode 0700). It
	// is also visible at the same path inside the hosts.
	Dir string
	// SSHConfig is the ssh config file (ssh -F): every host by name and by
	// IP, HostName = IP, strict host key checking against KnownHosts.
	SSHConfig string
	// KnownHosts holds every host's key under its name and IP.
	KnownHosts string
	// Key is the client's private key (ed25519), authorized on every host.
	Key string
	// SSHWrapper is an executable running `ssh -F SSHConfig "$@"`, for
	// launchers that take an ssh program rather than ssh options.
	SSHWrapper string
	// Hostfile is an Open MPI hostfile: one "hN slots=S" line per host.
	Hostfile string
	// NodeHosts is the /etc/hosts seen inside the hosts: localhost, the
	// head (as "head" and as this machine's name) and the cluster.
	NodeHosts string
	// HeadHosts is the /etc/hosts that HeadCommand shows: this machine's
	// own, plus the cluster.
	HeadHosts string
	// Subnet is the cluster's private network, such as "10.213.7.0/24".
	Subnet string
	// HeadIP is the head's (root namespace's) address on the bridge, .254.
	HeadIP string
	// ID is the fixture's unique id, part of every namespace and link name.
	ID string
	// Bridge is the Linux bridge in the root namespace.
	Bridge string
	// Hosts are h1..hN in order.
	Hosts []Host

	downOnce sync.Once
	downErr  error
}

// Up stands up a cluster of o.Hosts hosts and checks, with the OpenSSH
// client, that every host answers `ssh hN hostname` with its name under
// strict host key checking. On error, everything it made is removed. The
// sshd daemons outlive the calling process; Down removes them.
func Up(ctx context.Context, o Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if o.Hosts < 1 || o.Hosts > MaxHosts {
		return nil, fmt.Errorf("testhosts: %d hosts: want 1 to %d", o.Hosts, MaxHosts)
	}
	if o.Slots == 0 {
		o.Slots = 4
	}
	if o.Slots < 0 {
		return nil, fmt.Errorf("testhosts: %d slots per host: want 1 or more", o.Slots)
	}
	if o.MaxStartups == "" {
		o.MaxStartups = DefaultMaxStartups
	}
	if strings.ContainsAny(o.MaxStartups, " \t\n#") {
		return nil, fmt.Errorf("testhosts: bad MaxStartups %q", o.MaxStartups)
	}
	if strings.ContainsAny(o.KexAlgorithms, " \t\n#") {
		return nil, fmt.Errorf("testhosts: bad KexAlgorithms %q", o.KexAlgorithms)
	}
	dir, err := prepareDir(o.StateDir)
	if err != nil {
		return nil, err
	}
	c = &Cluster{
		Dir:        dir,
		SSHConfig:  filepath.Join(dir, "ssh_config"),
		KnownHosts: filepath.Join(dir, "known_hosts"),
		Key:        filepath.Join(dir, "id_ed25519"),
		SSHWrapper: filepath.Join(dir, "ssh"),
		Hostfile:   filepath.Join(dir, "hostfile"),
		NodeHosts:  filepath.Join(dir, "hosts.node"),
		HeadHosts:  filepath.Join(dir, "hosts.head"),
	}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = fmt.Errorf("%w (and tearing down: %v)", err, derr)
			}
			c = nil
		}
	}()

	for i := 1; i <= o.Hosts; i++ {
		if err := os.Mkdir(c.hostDir(i), 0o700); err != nil {
			return c, fmt.Errorf("testhosts: %w", err)
		}
	}
	if err := c.makeKeys(ctx, o.Hosts); err != nil {
		return c, err
	}
	if err := c.makeNetwork(ctx, o.Hosts); err != nil {
		return c, err
	}
	if err := c.writeFiles(o); err != nil {
		return c, err
	}
	rc, home := "", ""
	if !o.KeepRealRC {
		rc = filepath.Join(dir, "node-rc")
		home = rootHome()
	}
	err = parallel(len(c.Hosts), func(i int) error { return c.startHost(ctx, i, rc, home) })
	if serr := c.save(); err == nil {
		err = serr
	}
	if err != nil {
		return c, err
	}
	if err := c.Verify(ctx); err != nil {
		return c, err
	}
	return c, nil
}

// prepareDir makes the state directory (see Options.StateDir) and returns
// its absolute, resolved path.
func prepareDir(dir string) (string, error) {
	return testcluster.PrepareDir("testhosts", dir, 0o700, downOld)
}

// downOld tears down the cluster in dir, if there is one.
func downOld(dir string) error {
	if old, err := Load(dir); err == nil {
		return old.Down()
	}
	return nil
}

func (c *Cluster) hostDir(i int) string { return filepath.Join(c.Dir, "h"+strconv.Itoa(i)) }

// makeKeys generates the client key and one host key per host, in parallel.
func (c *Cluster) makeKeys(ctx context.Context, n int) error {
	return parallel(n+1, func(i int) error {
		path, comment := c.Key, "gorun-testhosts"
		if i > 0 {
			path, comment = filepath.Join(c.hostDir(i), "ssh_host_ed25519_key"), "h"+strconv.Itoa(i)
		}
		out, err := exec.CommandContext(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("testhosts: ssh-keygen %s: %v: %s", path, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

// startHost starts host i's sshd in its namespaces and waits for its pid.
func (c *Cluster) startHost(ctx context.Context, i int, rc, home string) error {
	h := &c.Hosts[i]
	hd := c.hostDir(i + 1)
	logf, err := os.Create(filepath.Join(hd, "start.log"))
	if err != nil {
		return fmt.Errorf("testhosts: %w", err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.Netns,
		"unshare", "--uts", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", nodeScript, "sh", h.Name, c.Dir, hd, c.NodeHosts, rc, home)
	// A file, not a pipe: the daemon must not hold a pipe that Wait waits on.
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testhosts: starting sshd on %s: %v%s", h.Name, err, c.logTails(i+1))
	}
	pidFile := filepath.Join(hd, "sshd.pid")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				h.SSHDPid = pid
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testhosts: sshd on %s wrote no pid file in 5 s%s", h.Name, c.logTails(i+1))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testhosts: starting sshd on %s: %w", h.Name, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// logTails returns the ends of host i's start and sshd logs, for errors.
func (c *Cluster) logTails(i int) string {
	var b strings.Builder
	for _, name := range []string{"start.log", "sshd.log"} {
		p := filepath.Join(c.hostDir(i), name)
		data, err := os.ReadFile(p)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "\n%s:\n%s", p, strings.TrimSpace(string(data)))
	}
	return b.String()
}

// nodeScript runs in a host's network namespace, in new UTS and mount
// namespaces, and becomes its sshd. $1 host name, $2 state dir, $3 host dir,
// $4 hosts file, $5 empty rc file or "", $6 root's home.
const nodeScript = `set -e
for f in all default lo eth0; do { echo 1 > /proc/sys/net/ipv6/conf/$f/disable_ipv6; } 2>/dev/null || :; done
ip -batch "$3/net.batch"
echo "$1" > /proc/sys/kernel/hostname
cd "$2"
mount --bind "$4" /etc/hosts
if [ -n "$5" ]; then
  for f in .bashrc .profile; do if [ -f "$6/$f" ]; then mount --bind "$5" "$6/$f"; fi; done
fi
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -m 755 /run/sshd
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# The state directory may be under /tmp or /run, now hidden: bind it back at
# its own path from the working directory, which still refers to it.
mkdir -p "$2"
mount --no-canonicalize --bind /proc/self/cwd "$2"
cd /
exec ` + SSHD + ` -f "$3/sshd_config" -E "$3/sshd.log"
`

// Verify runs `ssh -F SSHConfig hN hostname` to every host in parallel and
// checks that each prints its name.
func (c *Cluster) Verify(ctx context.Context) error {
	return parallel(len(c.Hosts), func(i int) error {
		h := c.Hosts[i]
		out, err := exec.CommandContext(ctx, "ssh", "-F", c.SSHConfig, h.Name, "hostname").CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil {
			return fmt.Errorf("testhosts: ssh %s hostname: %v: %s%s", h.Name, err, got, c.logTails(i+1))
		}
		if got != h.Name {
			return fmt.Errorf("testhosts: ssh %s hostname printed %q", h.Name, got)
		}
		return nil
	})
}

// Host returns the host named name (hN) or with address name.
func (c *Cluster) Host(name string) (Host, error) {
	for _, h := range c.Hosts {
		if h.Name == name || h.IP == name {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("testhosts: no host %q in this cluster", name)
}

// Names returns the hosts' names, h1..hN.
func (c *Cluster) Names() []string {
	names := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		names[i] = h.Name
	}
	return names
}

// Exec returns a command that runs argv "on" host (a name or IP) without
// ssh: nsenter into its sshd's network, UTS and mount namespaces. It runs in
// the caller's working directory when the host can see it (not under the
// node-local /tmp, /run or /dev/shm), else in /. Errors (no such host) are
// returned by the command's Start.
func (c *Cluster) Exec(ctx context.Context, host string, argv ...string) *exec.Cmd {
	h, err := c.Host(host)
	if err == nil && len(argv) == 0 {
		err = errors.New("testhosts: Exec: no command")
	}
	args := []string{"-t", strconv.Itoa(h.SSHDPid), "-n", "-u", "-m", "--wd=" + c.nodeWD(), "--"}
	cmd := exec.CommandContext(ctx, "nsenter", append(args, argv...)...)
	if err != nil {
		cmd.Err = err
	}
	return cmd
}

// nodeWD is the caller's working directory if the hosts see it, else "/".
func (c *Cluster) nodeWD() string {
	wd, err := os.Getwd()
	if err != nil {
		return "/"
	}
	if within(wd, c.Dir) {
		return wd
	}
	for _, local := range []string{"/tmp", "/run", "/dev/shm"} {
		if within(wd, local) {
			return "/"
		}
	}
	return wd
}

func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// HeadCommand returns a command that runs argv on the head (this namespace)
// with a private /etc/hosts (HeadHosts: this machine's own plus hN -> IP),
// bind-mounted in a new mount namespace; the real /etc/hosts is untouched.
// Use it for tools that resolve host names themselves (Open MPI's mpirun),
// so that hN never reaches DNS.
func (c *Cluster) HeadCommand(ctx context.Context, argv ...string) *exec.Cmd {
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		`mount --bind "$1" /etc/hosts && shift && exec "$@"`, "sh", c.HeadHosts}
	cmd := exec.CommandContext(ctx, "unshare", append(args, argv...)...)
	if len(argv) == 0 {
		cmd.Err = errors.New("testhosts: HeadCommand: no command")
	}
	return cmd
}

// SetLink sets host's link up or down (`ip link set <veth> up|down` on its
// bridge port), to cut a host off the network in fault tests; its processes
// keep running.
func (c *Cluster) SetLink(host string, up bool) error {
	h, err := c.Host(host)
	if err != nil {
		return err
	}
	state := "down"
	if up {
		state = "up"
	}
	if out, err := exec.Command("ip", "link", "set", h.Veth, state).CombinedOutput(); err != nil {
		return fmt.Errorf("testhosts: ip link set %s %s: %v: %s", h.Veth, state, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Pids returns the pids of every process in host's network namespace (`ip
// netns pids`): its sshd, its ssh sessions and what they started, and what
// Exec started.
func (c *Cluster) Pids(host string) ([]int, error) {
	h, err := c.Host(host)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("ip", "netns", "pids", h.Netns).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("testhosts: ip netns pids %s: %v: %s", h.Netns, err, strings.TrimSpace(string(out)))
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("testhosts: ip netns pids %s: bad pid %q", h.Netns, f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// save writes the cluster description for Load.
func (c *Cluster) save() error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("testhosts: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, stateFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("testhosts: %w", err)
	}
	return nil
}

// Load returns the cluster that Up left in state directory dir (for a
// process other than the one that ran Up, such as the testhosts command).
func Load(dir string) (*Cluster, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("testhosts: no cluster in %s: %w", dir, err)
	}
	c := new(Cluster)
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("testhosts: %s: %w", filepath.Join(dir, stateFile), err)
	}
	if c.ID == "" || !validID(c.ID) || c.Dir == "" {
		return nil, fmt.Errorf("testhosts: %s: not a cluster description", filepath.Join(dir, stateFile))
	}
	// Down removes c.Dir: it must be the directory the description is in.
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil || abs != c.Dir {
		return nil, fmt.Errorf("testhosts: %s describes a cluster in %s, not in %s", filepath.Join(dir, stateFile), c.Dir, dir)
	}
	if _, err := netip.ParsePrefix(c.Subnet); err != nil {
		return nil, fmt.Errorf("testhosts: %s: bad subnet: %w", filepath.Join(dir, stateFile), err)
	}
	for _, h := range c.Hosts {
		if !strings.HasPrefix(h.Netns, "gt"+c.ID+"h") || !strings.HasPrefix(h.Veth, "gtv"+c.ID+"_") {
			return nil, fmt.Errorf("testhosts: %s: host %s is not named from id %s", filepath.Join(dir, stateFile), h.Name, c.ID)
		}
	}
	return c, nil
}

// parallel runs f(0..n-1) concurrently and returns the first error.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
