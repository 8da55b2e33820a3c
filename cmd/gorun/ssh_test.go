package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/testhosts"
)

// The SSH tests run gorun against real OpenSSH servers in network
// namespaces (package testhosts). The hosts share the file system except
// /tmp, /run and /dev/shm, as a cluster with an NFS home does; so these
// tests run a gorun binary built into /var/tmp (the test binary itself
// cannot be the agent there: sshd does not pass GORUN_TEST_MAIN on).

var (
	clusterOnce sync.Once
	cluster     *testhosts.Cluster
	clusterErr  error
	gorunBin    string
	binDir      string
)

// sharedCluster returns 4 hosts of 4 slots, up for the whole test binary.
func sharedCluster(t *testing.T) *testhosts.Cluster {
	t.Helper()
	testhosts.Need(t)
	clusterOnce.Do(func() {
		if clusterErr = buildShared(); clusterErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cluster, clusterErr = testhosts.Up(ctx, testhosts.Options{Hosts: 4, Slots: 4})
	})
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

// downCluster is called by TestMain after the tests.
// buildShared builds gorun, and gorun-tools next to it, into a directory
// every host (SSH or Slurm node) sees, once: gorun with cgo and
// gorun-tools without, as `make build` does, so that the tests run the
// programs that users run.
func buildShared() error {
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("/var/tmp", "gorun-test-"); binErr != nil {
			return
		}
		os.Chmod(binDir, 0o755)
		gorunBin = filepath.Join(binDir, "gorun")
		if binErr = goBuild(gorunBin, "1"); binErr == nil {
			binErr = goBuildPkg(filepath.Join(binDir, launcher.ToolsBinary), "../"+launcher.ToolsBinary, "0")
		}
	})
	return binErr
}

// goBuild builds gorun into out with CGO_ENABLED=cgo.
func goBuild(out, cgo string) error {
	return goBuildPkg(out, ".", cgo)
}

// goBuildPkg builds the main package pkg into out with CGO_ENABLED=cgo.
func goBuildPkg(out, pkg, cgo string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s (CGO_ENABLED=%s): %v\n%s", filepath.Base(out), cgo, err, b)
	}
	return nil
}

var (
	binOnce sync.Once
	binErr  error
)

func downCluster() {
	if cluster != nil {
		cluster.Down()
	}
	if slurm != nil {
		slurm.Down()
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// runBin runs the built gorun binary bin with args.
func runBin(t *testing.T, bin string, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return runCmd(t, ctx, sharedCommand(ctx, bin, args...), limit)
}

// sharedCommand is a command that runs in a directory every host has: the
// ranks start in gorun's working directory, and the checkout may be under
// /tmp, which is per host.
func sharedCommand(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = binDir
	return cmd
}

// onCluster runs gorun with the cluster's ssh config and hostfile.
func onCluster(t *testing.T, c *testhosts.Cluster, limit time.Duration, args ...string) result {
	t.Helper()
	return runBin(t, gorunBin, limit, append([]string{"--ssh-config", c.SSHConfig, "--hostfile", c.Hostfile}, args...)...)
}

func TestSSHJob(t *testing.T) {
	c := sharedCluster(t)
	for _, fanout := range []string{"0", "2"} {
		t.Run("fanout "+fanout, func(t *testing.T) {
			r := onCluster(t, c, 60*time.Second, "--launch-fanout", fanout, "-np", "16", "--tag-output", "sh", "-c",
				`echo "host=$(hostname) rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR"`)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			for rank := range 16 {
				h := rank / 4
				want := fmt.Sprintf("[h%d:%d] host=h%d rank=%d local=%d node=%d world=16 master=%s", h+1, rank, h+1, rank, rank%4, h, c.Hosts[0].IP)
				if !strings.Contains(r.stdout, want+"\n") {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
		})
	}
}

// Remote output arrives byte for byte, in order.
func TestSSHOutputLossless(t *testing.T) {
	c := sharedCluster(t)
	blob := make([]byte, 20<<20)
	rand.Read(blob)
	f := filepath.Join(binDir, "blob")
	if err := os.WriteFile(f, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, gorunBin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h2", "cat", f)
	if r.code != 0 || sha256.Sum256([]byte(r.stdout)) != sha256.Sum256(blob) {
		t.Fatalf("exit %d, %d bytes (want %d identical)\n%s", r.code, len(r.stdout), len(blob), r.stderr)
	}
}

// A rank killed on the third host ends the job at once, naming it, and
// nothing of the job survives on any host.
func TestSSHRankKilled(t *testing.T) {
	c := sharedCluster(t)
	mark := newMark(t)
	r := onCluster(t, c, 30*time.Second, "-np", "16", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
		`if [ "$RANK" = 9 ]; then sleep 0.5; kill -9 $$; fi; sleep 60 & wait`)
	if r.code != 128+9 {
		t.Errorf("exit %d, want 137\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"rank 9 on h3", "SIGKILL"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if r.elapsed > 2500*time.Millisecond {
		t.Errorf("the job took %v; want it over within 2 s of the kill", r.elapsed)
	}
	assertNoSurvivors(t, mark, time.Second)
}

// gorun killed with SIGKILL: every agent and rank on every host is gone
// within 5 seconds.
func TestSSHHeadKilled(t *testing.T) {
	c := sharedCluster(t)
	mark := newMark(t)
	cmd := sharedCommand(context.Background(), gorunBin, "--ssh-config", c.SSHConfig, "--hostfile", c.Hostfile, "-np", "8", "-N", "2",
		"-x", "GORUN_TEST_MARK="+mark, "sh", "-c", `sleep 100 & setsid sleep 101 & sleep 102`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 8*4, 20*time.Second)
	cmd.Process.Kill()
	cmd.Wait()
	assertNoSurvivors(t, mark, 5*time.Second)
}

// Ctrl-C reaches ranks on every host; a second Ctrl-C kills them.
func TestSSHInterrupts(t *testing.T) {
	c := sharedCluster(t)
	mark := newMark(t)
	cmd := sharedCommand(context.Background(), gorunBin, "--ssh-config", c.SSHConfig, "--hostfile", c.Hostfile, "-np", "8", "-N", "2",
		"-x", "GORUN_TEST_MARK="+mark, "sh", "-c", `trap 'echo int-$RANK' INT; while :; do sleep 0.05; done`)
	out := &lockedWriter{w: new(bytes.Buffer)}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 8, 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(out.String(), "int-") < 8 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(out.String(), "int-"); n != 8 {
		t.Errorf("%d of 8 ranks saw the first SIGINT:\n%s", n, out.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d, want 130", code)
	}
	assertNoSurvivors(t, mark, time.Second)
}

// Hosts that cannot be used are named, with the cause, within the connect
// timeout, and no rank runs anywhere.
func TestSSHHostErrors(t *testing.T) {
	c := sharedCluster(t)
	dir := t.TempDir()
	conf, err := os.ReadFile(c.SSHConfig)
	if err != nil {
		t.Fatal(err)
	}
	// A config whose known_hosts is empty, and one whose key is not authorised.
	emptyKH := filepath.Join(dir, "known_hosts")
	os.WriteFile(emptyKH, nil, 0o600)
	unknownConf := filepath.Join(dir, "unknown.conf")
	os.WriteFile(unknownConf, bytes.ReplaceAll(conf, []byte(c.KnownHosts), []byte(emptyKH)), 0o600)
	otherKey := filepath.Join(dir, "id_other")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", otherKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	wrongKeyConf := filepath.Join(dir, "wrongkey.conf")
	os.WriteFile(wrongKeyConf, bytes.ReplaceAll(conf, []byte(c.Key), []byte(otherKey)), 0o600)
	prefix := strings.TrimSuffix(c.Subnet, ".0/24")
	hostsMissing := filepath.Join(dir, "hosts")
	os.WriteFile(hostsMissing, []byte("h1 slots=1\nh2 slots=1\n"+prefix+".200 slots=1\n"), 0o644)

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unreachable", []string{"--ssh-config", c.SSHConfig, "--hostfile", hostsMissing, "--connect-timeout", "2s"},
			[]string{prefix + ".200", "unreachable"}},
		{"unknown host key", []string{"--ssh-config", unknownConf, "-H", "h1,h2"},
			[]string{"h1: host key unknown", "--ssh-accept-new"}},
		{"wrong key", []string{"--ssh-config", wrongKeyConf, "-H", "h3"},
			[]string{"h3", "auth"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mark := newMark(t)
			args := append(tt.args, "-x", "GORUN_TEST_MARK="+mark, "sleep", "30")
			r := runBin(t, gorunBin, 30*time.Second, args...)
			if r.code != 125 {
				t.Errorf("exit %d, want 125\n%s", r.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if r.elapsed > 8*time.Second {
				t.Errorf("took %v", r.elapsed)
			}
			assertNoSurvivors(t, mark, time.Second)
		})
	}
	t.Run("accept new, refuse changed", func(t *testing.T) {
		r := runBin(t, gorunBin, 30*time.Second, "--ssh-config", unknownConf, "-H", "h1,h2", "--ssh-accept-new", "hostname")
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		kh, _ := os.ReadFile(emptyKH)
		if !bytes.Contains(kh, []byte("h1")) || !bytes.Contains(kh, []byte("h2")) {
			t.Fatalf("known_hosts after --ssh-accept-new:\n%s", kh)
		}
		if r := runBin(t, gorunBin, 30*time.Second, "--ssh-config", unknownConf, "-H", "h1", "hostname"); r.code != 0 {
			t.Fatalf("second run, keys known: exit %d\n%s", r.code, r.stderr)
		}
		// Record h3's key under h1's names: h1's key has "changed".
		all, _ := os.ReadFile(c.KnownHosts)
		var h3 string
		for _, l := range strings.Split(string(all), "\n") {
			if strings.HasPrefix(l, "h3") {
				h3 = l[strings.IndexByte(l, ' '):]
			}
		}
		os.WriteFile(emptyKH, []byte("h1"+h3+"\n"), 0o600)
		r = runBin(t, gorunBin, 30*time.Second, "--ssh-config", unknownConf, "-H", "h1", "--ssh-accept-new", "hostname")
		if r.code != 125 || !strings.Contains(r.stderr, "h1") || !strings.Contains(strings.ToLower(r.stderr), "changed") {
			t.Fatalf("changed key: exit %d\n%s", r.code, r.stderr)
		}
	})
}

// A program missing on one host fails the job before anything runs long,
// naming the host.
func TestSSHProgramMissingOnOneHost(t *testing.T) {
	c := sharedCluster(t)
	ctx := context.Background()
	// /tmp is node-local: the script exists on h1 only.
	if out, err := c.Exec(ctx, "h1", "sh", "-c", `printf '#!/bin/sh\nsleep 30\n' > /tmp/gorun-only-on-h1 && chmod +x /tmp/gorun-only-on-h1`).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	mark := newMark(t)
	r := onCluster(t, c, 30*time.Second, "-np", "4", "-N", "1", "-x", "GORUN_TEST_MARK="+mark, "/tmp/gorun-only-on-h1")
	if r.code != 127 || !regexp.MustCompile(`rank [123] on h[234] could not start: /tmp/gorun-only-on-h1: no such file`).MatchString(r.stderr) {
		t.Errorf("exit %d\n%s", r.code, r.stderr)
	}
	assertNoSurvivors(t, mark, time.Second)
}

// gorun copies itself to hosts where it is not at the same path, unless
// --no-stage, and says so once per host, when it copies: a run that finds
// its copy in the cache says nothing.
func TestSSHStaging(t *testing.T) {
	c := sharedCluster(t)
	forgetStaged(t, gorunBin)
	// The head's /tmp is not the hosts' /tmp.
	dir, err := os.MkdirTemp("/tmp", "gorun-stage-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "gorun")
	data, _ := os.ReadFile(gorunBin)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	note := regexp.MustCompile(`(?m)^gorun: (h[12]): ` + regexp.QuoteMeta(bin) + ` is not there; using a copy in /\S+` + regexp.QuoteMeta(cacheDir(t, bin)) + `$`)
	r := runBin(t, bin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1,h2", "hostname")
	if r.code != 0 || !strings.Contains(r.stdout, "h1") || !strings.Contains(r.stdout, "h2") {
		t.Fatalf("staged run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The hosts share root's home, and so the cache: each host that
	// copied says so once; the second may have found the first's copy.
	notes := note.FindAllStringSubmatch(r.stderr, -1)
	if len(notes) == 0 || len(notes) > 2 || len(notes) == 2 && notes[0][1] == notes[1][1] || strings.Count(r.stderr, "a copy in") != len(notes) {
		t.Errorf("want one note per host that copied gorun, at least one:\n%s", r.stderr)
	}
	r = runBin(t, bin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1,h2", "hostname")
	if r.code != 0 || !strings.Contains(r.stdout, "h1") || !strings.Contains(r.stdout, "h2") || strings.Contains(r.stderr, "a copy in") {
		t.Errorf("second run: exit %d, want 0 and no note (the copy is in the cache)\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Another build at the same path (h3's /tmp is its own): its build id,
	// announced in the preamble, differs, and gorun uses its own copy.
	fake := fmt.Sprintf(`mkdir -p %s && printf '#!/bin/sh\nprintf "\\000GORUN-CONTROL fake-build\\n"\nexec cat >/dev/null\n' > %s && chmod +x %s`, dir, bin, bin)
	if out, err := c.Exec(context.Background(), "h3", "sh", "-c", fake).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	forgetStaged(t, gorunBin)
	r = runBin(t, bin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h3", "hostname")
	if r.code != 0 || r.stdout != "h3\n" || !strings.Contains(r.stderr, "another build (fake-build") {
		t.Errorf("another build at the path: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, bin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1", "--no-stage", "hostname")
	if r.code != 125 || !strings.Contains(r.stderr, "h1") || !strings.Contains(r.stderr, "gorun missing") {
		t.Errorf("--no-stage: exit %d\n%s", r.code, r.stderr)
	}
}

func TestSSHCheck(t *testing.T) {
	c := sharedCluster(t)
	r := onCluster(t, c, 60*time.Second, "check", "hostname")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, h := range c.Hosts {
		line := regexp.MustCompile(`(?m)^` + h.Name + `\s+ok\s+\d+ms\s+\S+\s+\d+\s+\d+\s+/usr/bin/hostname\s+(.*)$`).FindStringSubmatch(r.stdout)
		if line == nil || strings.Count(line[1], "via eth0") != 3 {
			t.Errorf("%s: no good line in:\n%s", h.Name, r.stdout)
		}
	}
	ctx := context.Background()
	c.Exec(ctx, "h4", "sh", "-c", `printf '#!/bin/sh\n' > /tmp/gorun-check-prog && chmod +x /tmp/gorun-check-prog`).Run()
	r = onCluster(t, c, 60*time.Second, "check", "/tmp/gorun-check-prog")
	if r.code == 0 || !strings.Contains(r.stderr, "h1, h2, h3") {
		t.Errorf("a program missing on h1-h3: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// A host whose link is cut mid-job is named as lost and the job ends;
// nothing survives on the others, nor on it once its agent notices.
func TestSSHLinkCut(t *testing.T) {
	if err := testhosts.Check(); err == nil {
		sharedCluster(t) // builds gorunBin
	}
	c := testhosts.Start(t, testhosts.Options{Hosts: 3, Slots: 2})
	mark := newMark(t)
	cmd := sharedCommand(context.Background(), gorunBin, "--ssh-config", c.SSHConfig, "--hostfile", c.Hostfile, "--heartbeat-timeout", "2s",
		"-x", "GORUN_TEST_MARK="+mark, "sleep", "60")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 6, 20*time.Second)
	if err := c.SetLink("h2", false); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("gorun did not end after h2's link was cut")
	}
	t.Logf("gorun ended %v after the cut", time.Since(cut))
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errb.String(), "h2") || !strings.Contains(errb.String(), "link cut") {
		t.Errorf("exit %d\n%s", code, errb.String())
	}
	// h2's agent hears no heartbeat either and stops its ranks.
	assertNoSurvivors(t, mark, 6*time.Second)
	c.SetLink("h2", true)
}

// sharedDDPScript copies examples/torch/ddp_train.py where every host
// sees it: the checkout may be in /tmp, which each host has of its own.
func sharedDDPScript(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../examples/torch/ddp_train.py")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(binDir, "ddp_train.py")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return script
}

func TestSSHTorchDDP(t *testing.T) {
	c := sharedCluster(t)
	requireTorch(t)
	script := sharedDDPScript(t)
	r := runBin(t, gorunBin, 180*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:2,h2:2", "/usr/bin/python3", script)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	hashes := regexp.MustCompile(`rank (\d)/4 weights sha256=([0-9a-f]+)`).FindAllStringSubmatch(r.stdout, -1)
	if len(hashes) != 4 {
		t.Fatalf("want 4 result lines:\n%s", r.stdout)
	}
	for _, h := range hashes[1:] {
		if h[2] != hashes[0][2] {
			t.Fatalf("ranks disagree on the weights:\n%s", r.stdout)
		}
	}
}

// MASTER_ADDR is rank 0's address toward the other hosts; --iface picks
// an interface instead.
func TestSSHMasterAddr(t *testing.T) {
	c := sharedCluster(t)
	for _, tt := range []struct {
		iface, want string
	}{{"", c.Hosts[0].IP}, {"lo", "127.0.0.1"}, {"eth0", c.Hosts[0].IP}} {
		args := []string{"--print-env", "5", "-np", "8"}
		if tt.iface != "" {
			args = append(args, "--iface", tt.iface)
		}
		r := onCluster(t, c, 30*time.Second, append(args, "true")...)
		if out := "\n" + r.stdout; r.code != 0 || !strings.Contains(out, "\nMASTER_ADDR="+tt.want+"\n") || !strings.Contains(out, "\nGORUN_HOSTNAME=h2\n") {
			t.Errorf("--iface %q: exit %d, want MASTER_ADDR=%s for rank 5 on h2\n%s%s", tt.iface, r.code, tt.want, r.stdout, r.stderr)
		}
	}
}

// In a launch tree, lower agents authenticate with the user's ssh-agent,
// forwarded by gorun: no key file is named anywhere.
func TestSSHFanoutAgentForwarding(t *testing.T) {
	c := sharedCluster(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	env := append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	add := exec.Command("ssh-add", c.Key)
	add.Env = env
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v %s", err, out)
	}
	conf, _ := os.ReadFile(c.SSHConfig)
	var kept []string
	for _, l := range strings.Split(string(conf), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (strings.EqualFold(f[0], "IdentityFile") || strings.EqualFold(f[0], "IdentitiesOnly")) {
			continue
		}
		kept = append(kept, l)
	}
	// Lower agents read the ssh config at the same path: it must be on the
	// shared file system (the cluster's state dir is visible on every host).
	noKeys := filepath.Join(c.Dir, "ssh_config.nokeys")
	os.WriteFile(noKeys, []byte(strings.Join(kept, "\n")), 0o600)
	defer os.Remove(noKeys)
	// The hosts' HOME is shared: make sure no default key there could
	// stand in for the agent.
	for _, k := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		if _, err := os.Stat(filepath.Join(os.Getenv("HOME"), ".ssh", k)); err == nil {
			t.Skipf("~/.ssh/%s exists: this test needs the agent to be the only key", k)
		}
	}
	cmd := sharedCommand(context.Background(), gorunBin, "--ssh-config", noKeys, "--hostfile", c.Hostfile, "--launch-fanout", "1", "-np", "4", "-N", "1", "hostname")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, h := range c.Hosts {
		if !strings.Contains(string(out), h.Name+"\n") {
			t.Errorf("no output from %s:\n%s", h.Name, out)
		}
	}
}

// Binding happens on every host, by the agent there; the report names
// each host.
func TestSSHBindings(t *testing.T) {
	c := sharedCluster(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	r := onCluster(t, c, 30*time.Second, "-np", "4", "-N", "2", "--bind-to", "core", "--report-bindings", "sh", "-c",
		`echo "$(hostname) rank=$RANK $(grep Cpus_allowed_list /proc/self/status | tr '\t' ' ')"`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"h1 rank=0 Cpus_allowed_list: 0", "h1 rank=1 Cpus_allowed_list: 1", "h2 rank=2 Cpus_allowed_list: 0", "h2 rank=3 Cpus_allowed_list: 1"} {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	for _, w := range []string{"h1 rank 0: CPUs 0", "h2 rank 3: CPUs 1"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("--report-bindings lacks %q:\n%s", w, r.stderr)
		}
	}
}

// Inside a PBS job gorun takes the hosts and slots from PBS_NODEFILE and
// reaches them over SSH; --display-map says why.
func TestSSHPBSNodefile(t *testing.T) {
	c := sharedCluster(t)
	nodefile := filepath.Join(binDir, "pbs-nodes")
	if err := os.WriteFile(nodefile, []byte("h1\nh1\nh2\nh2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := sharedCommand(ctx, gorunBin, "--ssh-config", c.SSHConfig, "--display-map", "sh", "-c", `echo "rank $RANK of $WORLD_SIZE on $(hostname)"`)
	cmd.Env = append(os.Environ(), "PBS_JOBID=17.pbs", "PBS_NODEFILE="+nodefile)
	r := runCmd(t, ctx, cmd, 60*time.Second)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"rank 0 of 4 on h1", "rank 1 of 4 on h1", "rank 2 of 4 on h2", "rank 3 of 4 on h2"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "backend: pbs") || !strings.Contains(r.stderr, "PBS_JOBID=17.pbs is set") {
		t.Errorf("--display-map does not name the backend:\n%s", r.stderr)
	}
	// A host outside the node file is refused, naming it.
	cmd = sharedCommand(ctx, gorunBin, "--ssh-config", c.SSHConfig, "-H", "h1,h3", "true")
	cmd.Env = append(os.Environ(), "PBS_JOBID=17.pbs", "PBS_NODEFILE="+nodefile)
	r = runCmd(t, ctx, cmd, 60*time.Second)
	if r.code != 2 || !strings.Contains(r.stderr, "host h3 is not in PBS job 17.pbs") {
		t.Errorf("-H with a host outside the job: exit %d\n%s", r.code, r.stderr)
	}
}
