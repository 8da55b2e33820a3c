package testhosts

import (
	"bufio"
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
	"sync/atomic"
	"syscall"
	"time"
)

// lockPath is the machine-wide lock held while an id and a subnet are chosen
// and the bridge and route that claim them are made.
func lockPath() string {
	for _, d := range []string{"/run/lock", "/run"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return filepath.Join(d, "gorun-testhosts.lock")
		}
	}
	return filepath.Join(os.TempDir(), "gorun-testhosts.lock")
}

// seq numbers the clusters of this process, so that each has its own id.
var seq atomic.Int64

// validID reports whether id has the form of the ids made by makeNetwork.
func validID(id string) bool {
	if len(id) < 2 || len(id) > 7 {
		return false
	}
	for _, r := range id {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'z') {
			return false
		}
	}
	return true
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func linkExists(name string) bool  { return exists("/sys/class/net/" + name) }
func netnsExists(name string) bool { return exists("/run/netns/" + name) }

// ipBatch runs `ip [-force] -batch -` with the given commands.
func ipBatch(ctx context.Context, force bool, cmds []string) error {
	if len(cmds) == 0 {
		return nil
	}
	args := []string{"-batch", "-"}
	if force {
		args = append([]string{"-force"}, args...)
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testhosts: ip -batch: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeNetwork chooses the id and the subnet, and makes the bridge, the
// unreachable route, the namespaces and the veth pairs.
func (c *Cluster) makeNetwork(ctx context.Context, n int) error {
	lf, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("testhosts: lock: %w", err)
	}
	defer lf.Close() // releases the lock
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("testhosts: lock %s: %w", lf.Name(), err)
	}

	pidPart := strconv.FormatInt(int64(os.Getpid()), 36)
	for {
		k := seq.Add(1) - 1
		if k >= 36*36 {
			return errors.New("testhosts: out of cluster ids for this process")
		}
		id := pidPart + strconv.FormatInt(k, 36)
		if !linkExists("gtb"+id) && !netnsExists("gt"+id+"h1") && !linkExists("gtv"+id+"_1") {
			c.ID = id
			break
		}
	}
	subnet, err := pickSubnet(ctx, os.Getpid())
	if err != nil {
		return err
	}
	base := subnet.Addr().As4()
	addr := func(last byte) string {
		a := base
		a[3] = last
		return netip.AddrFrom4(a).String()
	}
	c.Subnet = subnet.String()
	c.HeadIP = addr(254)
	c.Bridge = "gtb" + c.ID
	cmds := []string{
		"link add " + c.Bridge + " type bridge",
		"addr add " + c.HeadIP + "/24 dev " + c.Bridge,
		"link set " + c.Bridge + " up",
		"route add unreachable " + c.Subnet + " metric 9999",
	}
	c.Hosts = make([]Host, n)
	for i := range c.Hosts {
		num := strconv.Itoa(i + 1)
		h := Host{Name: "h" + num, IP: addr(byte(i + 1)), Netns: "gt" + c.ID + "h" + num, Veth: "gtv" + c.ID + "_" + num}
		c.Hosts[i] = h
		cmds = append(cmds,
			"netns add "+h.Netns,
			"link add "+h.Veth+" type veth peer name eth0 netns "+h.Netns,
			"link set "+h.Veth+" master "+c.Bridge+" up")
	}
	if err := ipBatch(ctx, false, cmds); err != nil {
		return err
	}
	// IPv6 is of no use here: keep the bridge quiet (no link-local chatter).
	disableIPv6(c.Bridge)
	for _, h := range c.Hosts {
		disableIPv6(h.Veth)
	}
	return nil
}

// onlyGone reports whether every failure of an ip -batch was a device
// that no longer exists.
func onlyGone(err error) bool {
	for _, l := range strings.Split(err.Error(), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.Contains(l, "Cannot find device") && !strings.HasPrefix(l, "Command failed") {
			return false
		}
	}
	return true
}

func disableIPv6(link string) {
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/disable_ipv6", []byte("1\n"), 0o644)
}

// pickSubnet returns a 10.213.X.0/24 that no address or route of this
// namespace overlaps (except a default route), starting from a place that
// depends on seed. The caller holds the lock.
func pickSubnet(ctx context.Context, seed int) (netip.Prefix, error) {
	used, err := usedPrefixes(ctx)
	if err != nil {
		return netip.Prefix{}, err
	}
	for k := range 254 {
		x := 1 + (seed+k)%254
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(x), 0}), 24)
		free := true
		for _, p := range used {
			if p.Bits() > 0 && p.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, errors.New("testhosts: no free 10.213.X.0/24 on this machine (see ip -4 route show table all)")
}

// routeTypes are the words that may come before a route's prefix.
var routeTypes = map[string]bool{"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"throw": true, "unreachable": true, "prohibit": true, "blackhole": true, "nat": true, "anycast": true}

// usedPrefixes returns the IPv4 prefixes of this namespace's addresses and
// routes (all tables).
func usedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	var used []netip.Prefix
	add := func(s string) {
		if p, err := netip.ParsePrefix(s); err == nil {
			used = append(used, p.Masked())
		} else if a, err := netip.ParseAddr(s); err == nil {
			used = append(used, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	out, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("testhosts: ip -4 addr: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				add(f[i+1])
			}
		}
	}
	out, err = exec.CommandContext(ctx, "ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("testhosts: ip -4 route: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) > 0 && f[0] != "default" {
			add(f[0])
		}
	}
	return used, nil
}

// Down tears the cluster down: it kills every process in each host's network
// namespace, then deletes the namespaces (and so their veth pairs), the
// bridge, the unreachable route and the state directory. It touches only names of this cluster's id, may be
// called more than once, and returns what it could not remove.
func (c *Cluster) Down() error {
	c.downOnce.Do(func() { c.downErr = c.down() })
	return c.downErr
}

func (c *Cluster) down() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if err := c.killAll(); err != nil {
		errs = append(errs, err)
	}
	// Deleting the namespaces destroys their veth pairs in one batch in the
	// kernel, much faster than deleting each veth (about 20 ms each); wait
	// for that, then delete what is left by name.
	var cmds []string
	for _, h := range c.Hosts {
		if netnsExists(h.Netns) {
			cmds = append(cmds, "netns del "+h.Netns)
		}
	}
	if err := ipBatch(ctx, true, cmds); err != nil {
		errs = append(errs, err)
	}
	vethsLeft := func() []string {
		var left []string
		for _, h := range c.Hosts {
			if h.Veth != "" && linkExists(h.Veth) {
				left = append(left, h.Veth)
			}
		}
		return left
	}
	for deadline := time.Now().Add(3 * time.Second); len(vethsLeft()) > 0 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	cmds = cmds[:0]
	for _, v := range vethsLeft() {
		cmds = append(cmds, "link del "+v)
	}
	if c.Bridge != "" && linkExists(c.Bridge) {
		cmds = append(cmds, "link del "+c.Bridge)
	}
	// A veth that the kernel destroys between the look and the delete is
	// "Cannot find device": gone, as wanted; the checks below say what
	// is still there.
	if err := ipBatch(ctx, true, cmds); err != nil && !onlyGone(err) {
		errs = append(errs, err)
	}
	if c.Subnet != "" {
		out, err := exec.CommandContext(ctx, "ip", "route", "del", "unreachable", c.Subnet, "metric", "9999").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such process") {
			errs = append(errs, fmt.Errorf("testhosts: ip route del unreachable %s: %v: %s", c.Subnet, err, strings.TrimSpace(string(out))))
		}
	}
	for _, h := range c.Hosts {
		if netnsExists(h.Netns) {
			errs = append(errs, fmt.Errorf("testhosts: namespace %s is still there", h.Netns))
		}
		if linkExists(h.Veth) {
			errs = append(errs, fmt.Errorf("testhosts: link %s is still there", h.Veth))
		}
	}
	if c.Bridge != "" && linkExists(c.Bridge) {
		errs = append(errs, fmt.Errorf("testhosts: bridge %s is still there", c.Bridge))
	}
	if c.Dir != "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("testhosts: %w", err))
		}
	}
	return errors.Join(errs...)
}

// killAll kills every process in the cluster's network namespaces: SIGTERM,
// then SIGKILL to what is left after a second.
func (c *Cluster) killAll() error {
	inos := map[uint64]string{}
	for _, h := range c.Hosts {
		var st syscall.Stat_t
		if err := syscall.Stat("/run/netns/"+h.Netns, &st); err == nil {
			inos[st.Ino] = h.Netns
		}
	}
	if len(inos) == 0 {
		return nil
	}
	signal := func(sig syscall.Signal) int {
		pids := pidsIn(inos)
		for _, p := range pids {
			_ = syscall.Kill(p, sig)
		}
		return len(pids)
	}
	wait := func(d time.Duration) bool {
		for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
			if len(pidsIn(inos)) == 0 {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	if signal(syscall.SIGTERM) == 0 || wait(time.Second) {
		return nil
	}
	signal(syscall.SIGKILL)
	if wait(3 * time.Second) {
		return nil
	}
	return fmt.Errorf("testhosts: processes %v outlived SIGKILL in the cluster's namespaces", pidsIn(inos))
}

// pidsIn returns the live processes whose network namespace is one of inos
// (what `ip netns pids` lists, for several namespaces in one pass).
func pidsIn(inos map[uint64]string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) != nil {
			continue
		}
		if _, ok := inos[st.Ino]; ok {
			pids = append(pids, pid)
		}
	}
	return pids
}

// rootHome returns root's home directory from /etc/passwd ("/root" if not
// found).
func rootHome() string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return "/root"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Split(s.Text(), ":")
		if len(fs) >= 6 && fs[0] == "root" && fs[5] != "" {
			return fs[5]
		}
	}
	return "/root"
}

// Check reports why this machine cannot run a cluster (not root, not Linux,
// a missing tool), or nil.
func Check() error {
	if runtime.GOOS != "linux" {
		return errors.New("testhosts needs Linux")
	}
	if os.Geteuid() != 0 {
		return errors.New("testhosts needs root (network namespaces, bridges, mounts)")
	}
	var missing []string
	for _, tool := range []struct{ name, pkg string }{
		{"ip", "iproute2"}, {"unshare", "util-linux"}, {"nsenter", "util-linux"}, {"mount", "mount"},
		{"ssh-keygen", "openssh-client"}, {"ssh", "openssh-client"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			missing = append(missing, tool.name+" ("+tool.pkg+")")
		}
	}
	if fi, err := os.Stat(SSHD); err != nil || fi.Mode()&0o111 == 0 {
		missing = append(missing, SSHD+" (openssh-server)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("testhosts: missing %s; run scripts/test-deps.sh as root", strings.Join(missing, ", "))
	}
	return nil
}
