package testhosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sshTo runs the OpenSSH client with the cluster's config.
func sshTo(ctx context.Context, c *Cluster, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ssh", append([]string{"-F", c.SSHConfig}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", cmd.Args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestCluster(t *testing.T) {
	t0 := time.Now()
	c := Start(t, Options{Hosts: 3})
	t.Logf("up 3 in %v: %s, id %s, state %s", time.Since(t0), c.Subnet, c.ID, c.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if len(c.Hosts) != 3 || c.HeadIP == "" || !strings.HasSuffix(c.HeadIP, ".254") {
		t.Fatalf("cluster: %+v", c)
	}
	for i, h := range c.Hosts {
		if want := "h" + strconv.Itoa(i+1); h.Name != want || h.SSHDPid <= 0 || len(h.Veth) > 15 || len(c.Bridge) > 15 {
			t.Fatalf("host %d: %+v (bridge %s)", i, h, c.Bridge)
		}
	}

	t.Run("ssh", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, h := range c.Hosts {
			for _, target := range []string{h.Name, h.IP} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := sshTo(ctx, c, target, "hostname")
					if err != nil || out != h.Name {
						t.Errorf("ssh %s hostname: %q, %v", target, out, err)
					}
				}()
			}
		}
		wg.Wait()
		// The wrapper, as MPICH's hydra would call it.
		if out := run(t, exec.CommandContext(ctx, c.SSHWrapper, "h2", "hostname")); out != "h2" {
			t.Errorf("%s h2 hostname: %q", c.SSHWrapper, out)
		}
	})

	t.Run("files", func(t *testing.T) {
		hf, err := os.ReadFile(c.Hostfile)
		if err != nil || string(hf) != "h1 slots=4\nh2 slots=4\nh3 slots=4\n" {
			t.Errorf("hostfile: %q, %v", hf, err)
		}
		kh, err := os.ReadFile(c.KnownHosts)
		if err != nil || strings.Count(string(kh), "\n") != 3 || !strings.HasPrefix(string(kh), "h1,"+c.Hosts[0].IP+" ssh-ed25519 ") {
			t.Errorf("known_hosts: %q, %v", kh, err)
		}
		fi, err := os.Stat(c.Dir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("state dir %s: %v, %v", c.Dir, fi.Mode(), err)
		}
		loaded, err := Load(c.Dir)
		if err != nil || loaded.ID != c.ID || len(loaded.Hosts) != 3 || loaded.Hosts[2] != c.Hosts[2] {
			t.Errorf("Load: %+v, %v", loaded, err)
		}
	})

	t.Run("network", func(t *testing.T) {
		h2 := c.Hosts[1]
		// TCP from h1 to h2's sshd, without ssh.
		out := run(t, c.Exec(ctx, "h1", "bash", "-c", "exec 3<>/dev/tcp/"+h2.IP+"/22 && head -c 4 <&3"))
		if out != "SSH-" {
			t.Errorf("h1 -> %s:22 read %q", h2.IP, out)
		}
		// ssh from h1 to h2 by name: the state dir is visible in the hosts.
		if out := run(t, c.Exec(ctx, "h1", "ssh", "-F", c.SSHConfig, "h2", "hostname")); out != "h2" {
			t.Errorf("ssh from h1 to h2: %q", out)
		}
		// The hosts' /etc/hosts lists the cluster and the head.
		if out := run(t, c.Exec(ctx, "h3", "getent", "hosts", "h2")); !strings.HasPrefix(out, h2.IP+" ") {
			t.Errorf("getent hosts h2 on h3: %q", out)
		}
		if out := run(t, c.Exec(ctx, "h3", "getent", "hosts", "head")); !strings.HasPrefix(out, c.HeadIP+" ") {
			t.Errorf("getent hosts head on h3: %q", out)
		}
		// The head resolves hN only through HeadCommand.
		if out := run(t, c.HeadCommand(ctx, "getent", "hosts", "h3")); !strings.HasPrefix(out, c.Hosts[2].IP+" ") {
			t.Errorf("getent hosts h3 on the head: %q", out)
		}
		// A host's only route is the cluster's /24.
		if out := run(t, c.Exec(ctx, "h1", "ip", "-4", "route")); strings.Contains(out, "default") || !strings.Contains(out, "dev eth0") {
			t.Errorf("routes on h1: %q", out)
		}
		if out := run(t, exec.Command("ip", "-4", "route", "show", "table", "main", "type", "unreachable")); !strings.Contains(out, c.Subnet+" metric 9999") {
			t.Errorf("no unreachable route for %s: %q", c.Subnet, out)
		}
	})

	t.Run("filesystems", func(t *testing.T) {
		name := fmt.Sprintf("testhosts-probe-%d-%d", os.Getpid(), time.Now().UnixNano())
		tmp := "/tmp/" + name
		run(t, c.Exec(ctx, "h1", "sh", "-c", "echo h1 > "+tmp))
		if out := run(t, c.Exec(ctx, "h1", "cat", tmp)); out != "h1" {
			t.Errorf("h1 reads %s: %q", tmp, out)
		}
		if err := c.Exec(ctx, "h2", "test", "-e", tmp).Run(); err == nil {
			t.Errorf("%s written on h1 is on h2", tmp)
		}
		if _, err := os.Stat(tmp); err == nil {
			os.Remove(tmp)
			t.Errorf("%s written on h1 is on the head", tmp)
		}
		// root's home is shared, as an NFS home would be.
		shared := filepath.Join(rootHome(), "."+name)
		t.Cleanup(func() { os.Remove(shared) })
		if out, err := sshTo(ctx, c, "h1", "echo from-h1 > "+shared); err != nil {
			t.Fatalf("ssh h1 write %s: %v: %s", shared, err, out)
		}
		if data, err := os.ReadFile(shared); err != nil || string(data) != "from-h1\n" {
			t.Errorf("head reads %s: %q, %v", shared, data, err)
		}
		if out := run(t, c.Exec(ctx, "h2", "cat", shared)); out != "from-h1" {
			t.Errorf("h2 reads %s: %q", shared, out)
		}
		// root's rc files are empty inside (when they exist on the head).
		for _, rc := range []string{".bashrc", ".profile"} {
			p := filepath.Join(rootHome(), rc)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if out := run(t, c.Exec(ctx, "h3", "wc", "-c", p)); !strings.HasPrefix(out, "0 ") {
				t.Errorf("%s on h3: %q", p, out)
			}
		}
	})

	t.Run("pids", func(t *testing.T) {
		pids, err := c.Pids("h2")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range pids {
			found = found || p == c.Hosts[1].SSHDPid
		}
		if !found {
			t.Errorf("Pids(h2) = %v, without sshd %d", pids, c.Hosts[1].SSHDPid)
		}
		if _, err := c.Pids("h9"); err == nil {
			t.Error("Pids(h9): no error")
		}
		if err := c.Exec(ctx, "h9", "true").Run(); err == nil {
			t.Error("Exec(h9): no error")
		}
	})

	t.Run("setlink", func(t *testing.T) {
		if err := c.SetLink("h3", false); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		out, err := sshTo(ctx, c, "-o", "ConnectTimeout=1", "h3", "hostname")
		if d := time.Since(t1); err == nil || d > 4*time.Second {
			t.Errorf("ssh h3 with its link down: %q, %v after %v", out, err, d)
		}
		if out, err := sshTo(ctx, c, "h2", "hostname"); err != nil || out != "h2" {
			t.Errorf("ssh h2 while h3 is down: %q, %v", out, err)
		}
		if err := c.SetLink("h3", true); err != nil {
			t.Fatal(err)
		}
		if out, err := sshTo(ctx, c, "h3", "hostname"); err != nil || out != "h3" {
			t.Errorf("ssh h3 after its link is back: %q, %v", out, err)
		}
	})
}

// leftovers returns what of c is still on the machine.
func leftovers(t *testing.T, c *Cluster, pids []int) []string {
	t.Helper()
	var left []string
	netns := run(t, exec.Command("ip", "netns", "list"))
	links := run(t, exec.Command("ip", "-o", "link", "show"))
	routes := run(t, exec.Command("ip", "-4", "route", "show", "table", "all"))
	addrs := run(t, exec.Command("ip", "-4", "-o", "addr", "show"))
	for _, h := range c.Hosts {
		if strings.Contains(netns, h.Netns) {
			left = append(left, "netns "+h.Netns)
		}
		if strings.Contains(links, h.Veth) {
			left = append(left, "link "+h.Veth)
		}
	}
	if strings.Contains(links, c.Bridge) {
		left = append(left, "bridge "+c.Bridge)
	}
	prefix := strings.TrimSuffix(c.Subnet, "0/24")
	if prefix != "" && (strings.Contains(routes, prefix) || strings.Contains(addrs, prefix)) {
		left = append(left, "route or address in "+c.Subnet)
	}
	for _, p := range pids {
		if syscall.Kill(p, 0) == nil {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			if f := strings.Fields(string(stat)); len(f) > 2 && f[2] == "Z" {
				continue // dead; reaped by init in its time
			}
			left = append(left, "process "+strconv.Itoa(p))
		}
	}
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "state dir "+c.Dir)
	}
	return left
}

func TestDownLeavesNothing(t *testing.T) {
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Up(ctx, Options{Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, h := range c.Hosts {
		p, err := c.Pids(h.Name)
		if err != nil {
			c.Down()
			t.Fatal(err)
		}
		pids = append(pids, p...)
	}
	// A session left running on a host, as a failed test would leave it.
	sleeper := exec.Command("ssh", "-F", c.SSHConfig, "h2", "sleep 300")
	if err := sleeper.Start(); err != nil {
		c.Down()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if p, err := c.Pids("h2"); err == nil {
		pids = append(pids, p...)
	}
	t0 := time.Now()
	if err := c.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	t.Logf("down 2 in %v", time.Since(t0))
	sleeper.Wait() // its connection is gone with h2
	if left := leftovers(t, c, pids); len(left) > 0 {
		t.Errorf("left behind after Down: %v", left)
	}
	if err := c.Down(); err != nil {
		t.Errorf("second Down: %v", err)
	}
}

func TestTwoClusters(t *testing.T) {
	Need(t)
	var (
		wg sync.WaitGroup
		cs [2]*Cluster
	)
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := Up(ctx, Options{Hosts: 2, KexAlgorithms: "curve25519-sha256"})
			if err != nil {
				t.Errorf("Up %d: %v", i, err)
				return
			}
			cs[i] = c
		}()
	}
	wg.Wait()
	for _, c := range cs {
		if c != nil {
			t.Cleanup(func() {
				if err := c.Down(); err != nil {
					t.Errorf("Down: %v", err)
				}
			})
		}
	}
	if t.Failed() {
		return
	}
	a, b := cs[0], cs[1]
	if a.ID == b.ID || a.Subnet == b.Subnet || a.Bridge == b.Bridge || a.Dir == b.Dir || a.Hosts[0].Netns == b.Hosts[0].Netns {
		t.Fatalf("clusters collide: %s %s %s vs %s %s %s", a.ID, a.Subnet, a.Dir, b.ID, b.Subnet, b.Dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range cs {
		for _, h := range c.Hosts {
			if out, err := sshTo(ctx, c, h.Name, "hostname"); err != nil || out != h.Name {
				t.Errorf("cluster %s: ssh %s: %q, %v", c.ID, h.Name, out, err)
			}
		}
	}
	// Tearing one down leaves the other working.
	if err := a.Down(); err != nil {
		t.Fatal(err)
	}
	if out, err := sshTo(ctx, b, "h2", "hostname"); err != nil || out != "h2" {
		t.Errorf("cluster %s after the other's Down: %q, %v", b.ID, out, err)
	}
}

func TestStateDir(t *testing.T) {
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "state")
	c1, err := Up(ctx, Options{Hosts: 1, StateDir: dir, Slots: 2, KexAlgorithms: "curve25519-sha256"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c1.Down() })
	if hf, _ := os.ReadFile(filepath.Join(dir, "hostfile")); string(hf) != "h1 slots=2\n" {
		t.Errorf("hostfile: %q", hf)
	}
	// Up on the same directory replaces the cluster in it.
	c2, err := Up(ctx, Options{Hosts: 2, StateDir: dir, KexAlgorithms: "curve25519-sha256"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Down() })
	old := &Cluster{Hosts: c1.Hosts, Bridge: c1.Bridge, Subnet: c1.Subnet, Dir: "/nonexistent"}
	if c2.Subnet == c1.Subnet { // freed and chosen again
		old.Subnet = ""
	}
	if left := leftovers(t, old, nil); len(left) > 0 {
		t.Errorf("the first cluster is still there: %v", left)
	}
	// Another process (the testhosts command) tears it down from the directory.
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.Down(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, c2, nil); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	// A directory with something else in it is refused.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o600)
	if c, err := Up(ctx, Options{Hosts: 1, StateDir: other}); err == nil {
		c.Down()
		t.Error("Up into a non-empty directory: no error")
	}
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Errorf("Up removed a file it did not make: %v", err)
	}
}

func TestOptions(t *testing.T) {
	Need(t)
	for _, o := range []Options{{Hosts: 0}, {Hosts: MaxHosts + 1}, {Hosts: 1, Slots: -1}, {Hosts: 1, MaxStartups: "1 2"}} {
		if c, err := Up(context.Background(), o); err == nil {
			c.Down()
			t.Errorf("Up(%+v): no error", o)
		}
	}
}

// Down takes a device the kernel removed meanwhile for done, and any other
// failure for one.
func TestOnlyGone(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want bool
	}{
		{"testhosts: ip -batch: exit status 1: Cannot find device \"gtvbq92_2\"\nCommand failed -:2", true},
		{"testhosts: ip -batch: exit status 1: Cannot find device \"a\"\nCommand failed -:1\nCannot find device \"b\"\nCommand failed -:2", true},
		{"testhosts: ip -batch: exit status 1: RTNETLINK answers: Operation not permitted\nCommand failed -:1", false},
		{"testhosts: ip -batch: exit status 1: Cannot find device \"a\"\nCommand failed -:1\nRTNETLINK answers: Device or resource busy", false},
	} {
		if got := onlyGone(errors.New(tt.msg)); got != tt.want {
			t.Errorf("onlyGone(%q) = %v, want %v", tt.msg, got, tt.want)
		}
	}
}
