package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/testusers"
	"github.com/gorun/gorun/testhosts"
)

// perNodeToken is the tests' shared token: 128 bits, as `openssl rand
// -hex 16` makes.
const perNodeToken = "583fb551ed9ddb7abd43aa5c0d0604fa"

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// node is one gorun of a per-node launch, started by the test.
type node struct {
	cmd            *exec.Cmd
	stdout, stderr lockedWriter
	done           chan struct{}
}

// startNode starts cmd as a node.
func startNode(t *testing.T, cmd *exec.Cmd) *node {
	t.Helper()
	n := &node{cmd: cmd, done: make(chan struct{}), stdout: lockedWriter{w: new(bytes.Buffer)}, stderr: lockedWriter{w: new(bytes.Buffer)}}
	cmd.Stdout, cmd.Stderr = &n.stdout, &n.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-n.done
	})
	return n
}

// wait waits for the node's gorun to end and returns its exit status.
func (n *node) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-n.done:
		return n.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		n.cmd.Process.Kill()
		<-n.done
		t.Fatalf("a node's gorun did not end within %v\nstdout:\n%s\nstderr:\n%s", limit, n.stdout.String(), n.stderr.String())
		return -1
	}
}

// waitListening waits until something listens on addr: the node that
// serves the endpoint, started first.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	waitUntil(t, 20*time.Second, "the endpoint "+addr+" listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// waitUntil polls until f is true.
func waitUntil(t *testing.T, limit time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two gorun processes on this machine, one endpoint: the ranks get the
// world's variables, torch's and torchrun's, and each node prints its own
// ranks' output; a failure on one node ends every rank on both, and both
// exit with the rank's status.
func TestPerNodeLocal(t *testing.T) {
	t.Parallel()
	endpoint := "127.0.0.1:" + freePort(t)
	mark := newMark(t)
	prog := `echo "token=${GORUN_RDZV_TOKEN:-none} rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE group=$GROUP_RANK/$GROUP_WORLD_SIZE role=$ROLE_RANK/$ROLE_WORLD_SIZE run=$TORCHELASTIC_RUN_ID restarts=$TORCHELASTIC_RESTART_COUNT master=$MASTER_ADDR"`
	args := func(extra ...string) []string {
		return append([]string{"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", endpoint, "--rdzv-id", "job42",
			"-x", "GORUN_TEST_MARK=" + mark}, extra...)
	}
	env := []string{"GORUN_RDZV_TOKEN=" + perNodeToken}
	start := func(extra ...string) *node {
		cmd := gorunCommand(context.Background(), args(extra...)...)
		cmd.Env = append(cmd.Env, env...)
		return startNode(t, cmd)
	}
	a := start("sh", "-c", prog)
	waitListening(t, endpoint)
	b := start("sh", "-c", prog)
	if code := a.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("endpoint's node: exit %d\n%s", code, a.stderr.String())
	}
	if code := b.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("other node: exit %d\n%s", code, b.stderr.String())
	}
	want := []string{
		"token=none rank=0 world=4 local=0/2 group=0/2 role=0/4 run=job42 restarts=0 master=127.0.0.1",
		"token=none rank=1 world=4 local=1/2 group=0/2 role=1/4 run=job42 restarts=0 master=127.0.0.1",
		"token=none rank=2 world=4 local=0/2 group=1/2 role=2/4 run=job42 restarts=0 master=127.0.0.1",
		"token=none rank=3 world=4 local=1/2 group=1/2 role=3/4 run=job42 restarts=0 master=127.0.0.1",
	}
	for i, n := range []*node{a, b} {
		lines := strings.Split(strings.TrimSpace(n.stdout.String()), "\n")
		sort.Strings(lines)
		if w := want[2*i : 2*i+2]; strings.Join(lines, "\n") != strings.Join(w, "\n") {
			t.Errorf("node %d printed\n%s\nwant its own ranks'\n%s", i, strings.Join(lines, "\n"), strings.Join(w, "\n"))
		}
	}

	// Rank 3 (the other node's) fails; every rank ends.
	endpoint = "127.0.0.1:" + freePort(t)
	fail := `if [ "$RANK" = 3 ]; then sleep 0.3; exit 7; fi; exec sleep 60`
	a = start("sh", "-c", fail)
	waitListening(t, endpoint)
	b = start("sh", "-c", fail)
	if code := a.wait(t, 60*time.Second); code != 7 || !regexp.MustCompile(`rank 3 on 127\.0\.0\.1#2 .*exited with code 7`).MatchString(a.stderr.String()) {
		t.Errorf("endpoint's node: exit %d, want 7 and the summary naming rank 3\n%s", code, a.stderr.String())
	}
	if code := b.wait(t, 30*time.Second); code != 7 || !strings.Contains(b.stderr.String(), "the job ended with status 7") {
		t.Errorf("other node: exit %d, want 7 and a line that says so\n%s", code, b.stderr.String())
	}
	assertNoSurvivors(t, mark, 5*time.Second)
}

// A node with another token is refused, and refuses: it says so and exits
// 2; the endpoint counts the refusal and, its other node missing, gives up
// at --rdzv-timeout with status 125.
func TestPerNodeWrongToken(t *testing.T) {
	t.Parallel()
	endpoint := "127.0.0.1:" + freePort(t)
	cmd := gorunCommand(context.Background(), "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "4s", "true")
	cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+perNodeToken)
	a := startNode(t, cmd)
	waitListening(t, endpoint)
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("703fa3f587f3a4f3e3eb015fed57ebff\n"), 0o600)
	r := runGorun(t, 30*time.Second, nil, "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-token-file", tok, "true")
	if r.code != 2 || !strings.Contains(r.stderr, "refused by the endpoint: this node did not prove the job's token") || r.elapsed > 10*time.Second {
		t.Errorf("node with another token: exit %d after %v, want 2 at once\n%s", r.code, r.elapsed, r.stderr)
	}
	if code := a.wait(t, 30*time.Second); code != 125 ||
		!strings.Contains(a.stderr.String(), "refused a connection to the endpoint from 127.0.0.1:") ||
		!strings.Contains(a.stderr.String(), "it does not know the job's token") ||
		!strings.Contains(a.stderr.String(), "only 1 of the 2 nodes joined") {
		t.Errorf("endpoint: exit %d\n%s", code, a.stderr.String())
	}
	// Hosts of a host list beside the endpoint: a usage error.
	r = runGorunIn(t, "", []string{"GORUN_RDZV_TOKEN=" + perNodeToken}, 30*time.Second, nil, "-H", "a,b", "--nnodes", "2", "--rdzv-endpoint", endpoint, "true")
	if r.code != 2 || !strings.Contains(r.stderr, "--host and --rdzv-endpoint") {
		t.Errorf("-H with an endpoint: exit %d\n%s", r.code, r.stderr)
	}
	// No token at all, or a weak one: a usage error before anything
	// listens, that says how to make a token.
	r = runGorun(t, 30*time.Second, nil, "--nnodes", "2", "--rdzv-endpoint", endpoint, "true")
	if r.code != 2 || !strings.Contains(r.stderr, "needs the token its nodes share") {
		t.Errorf("no token: exit %d\n%s", r.code, r.stderr)
	}
	r = runGorunIn(t, "", []string{"GORUN_RDZV_TOKEN=trustno1trustno14242"}, 30*time.Second, nil, "--nnodes", "2", "--rdzv-endpoint", endpoint, "true")
	if r.code != 2 || !strings.Contains(r.stderr, "token is too weak") || !strings.Contains(r.stderr, "openssl rand -hex 32") || strings.Contains(r.stderr, "trustno1") {
		t.Errorf("a weak token: exit %d\n%s", r.code, r.stderr)
	}
}

// Row 2i of the security review: another user of the machine binds the
// endpoint's port before the job's nodes start. Each node's gorun says at
// once who holds it, and proves nothing to it, rather than joining it and
// waiting for --rdzv-timeout.
func TestPerNodeSquattedEndpoint(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "perl", "perl-base")
	squatter := testusers.Create(t, "gsquat")
	port := freePort(t)
	endpoint := "127.0.0.1:" + port
	cmd := squatter.Command("perl", "-MIO::Socket::INET", "-e",
		`$s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => $ARGV[0], Listen => 5, ReuseAddr => 1) or die "bind: $!\n"; `+
			`$| = 1; print "bound\n"; while (my $c = $s->accept) { print "accepted\n"; push @held, $c }`, port)
	sq := startNode(t, cmd)
	waitUntil(t, 20*time.Second, squatter.Name+" bound to port "+port, func() bool {
		select {
		case <-sq.done:
			t.Fatalf("the squatter ended: %s", sq.stderr.String())
		default:
		}
		return strings.Contains(sq.stdout.String(), "bound")
	})
	want := fmt.Sprintf("the rendezvous endpoint %s is held by user %s (uid %d), not by a gorun of yours: choose another port with --rdzv-endpoint",
		endpoint, squatter.Name, squatter.UID)
	for _, node := range []string{"the first node", "the second node"} {
		r := runGorunIn(t, "", []string{"GORUN_RDZV_TOKEN=" + perNodeToken}, 60*time.Second, nil,
			"--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-timeout", "30s", "true")
		if r.code != 125 || !strings.Contains(r.stderr, want) || r.elapsed > 5*time.Second {
			t.Errorf("%s: exit %d after %v; want 125 within 5 s and %q\n%s", node, r.code, r.elapsed, want, r.stderr)
		}
	}
	if strings.Contains(sq.stdout.String(), "accepted") {
		t.Errorf("a node connected to %s's port", squatter.Name)
	}
}

// perNodeCluster is the shared netns cluster and the gorun binary the
// hosts can run.
func perNodeCluster(t *testing.T) *testhosts.Cluster {
	t.Helper()
	c := sharedCluster(t)
	if len(c.Hosts) < 4 {
		t.Fatalf("the shared cluster has %d hosts, want 4", len(c.Hosts))
	}
	return c
}

// onHost starts gorun on host hN (in its namespaces, without SSH) as a
// node of a per-node launch.
func onHost(t *testing.T, c *testhosts.Cluster, host string, args ...string) *node {
	t.Helper()
	cmd := c.Exec(context.Background(), host, append([]string{gorunBin}, args...)...)
	cmd.Dir = binDir
	cmd.Env = append(os.Environ(), "GORUN_RDZV_TOKEN="+perNodeToken)
	return startNode(t, cmd)
}

// Three hosts in network namespaces, each with its own gorun and no SSH:
// PyTorch DDP across them agrees on the weights.
func TestPerNodeNetnsTorchDDP(t *testing.T) {
	c := perNodeCluster(t)
	requireTorch(t)
	script := sharedDDPScript(t)
	endpoint := c.Hosts[0].IP + ":29431"
	var nodes []*node
	for _, h := range []string{"h1", "h2", "h3"} {
		nodes = append(nodes, onHost(t, c, h, "--nnodes", "3", "--nproc-per-node", "1", "--rdzv-endpoint", endpoint, torchPython, script))
	}
	for i, n := range nodes {
		if code := n.wait(t, 180*time.Second); code != 0 {
			t.Fatalf("h%d: exit %d\n%s", i+1, code, n.stderr.String())
		}
	}
	// Each node prints its own rank's line.
	var all strings.Builder
	for i, n := range nodes {
		if got := len(regexp.MustCompile(`(?m)^rank \d+/3 `).FindAllString(n.stdout.String(), -1)); got != 1 {
			t.Errorf("h%d printed %d ranks' lines, want its one rank's:\n%s", i+1, got, n.stdout.String())
		}
		all.WriteString(n.stdout.String())
	}
	checkDDPOutput(t, result{stdout: all.String(), stderr: nodes[0].stderr.String()}, 3)
}

// Elastic, --nnodes 2:3 on hosts in network namespaces: h3's gorun is
// killed mid-job, and the job restarts on h1 and h2; h4 joins while that
// runs and waits; h2's link is cut, and the job restarts on h1 and h4 and
// finishes there, while h2's gorun gives up on the endpoint. The summary
// names both changes, and no rank is left anywhere.
func TestPerNodeNetnsElastic(t *testing.T) {
	c := perNodeCluster(t)
	mark := newMark(t)
	endpoint := c.Hosts[0].IP + ":29432"
	prog := `echo "gen=$TORCHELASTIC_RESTART_COUNT/$GORUN_RESTART_COUNT rank=$RANK world=$WORLD_SIZE host=$(hostname)"; ` +
		`[ "$TORCHELASTIC_RESTART_COUNT" -ge 2 ] || exec sleep 60`
	args := []string{"--nnodes", "2:3", "--nproc-per-node", "1", "--max-restarts", "3", "--rdzv-endpoint", endpoint,
		"--rdzv-last-call", "1s", "--heartbeat-timeout", "2s", "-x", "GORUN_TEST_MARK=" + mark, "sh", "-c", prog}
	h1 := onHost(t, c, "h1", args...)
	h2 := onHost(t, c, "h2", args...)
	h3 := onHost(t, c, "h3", args...)
	var h4 *node
	// Each node prints its own rank's lines.
	stdout := func() string {
		s := h1.stdout.String() + h2.stdout.String() + h3.stdout.String()
		if h4 != nil {
			s += h4.stdout.String()
		}
		return s
	}
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(stdout(), -1)) }
	waitUntil(t, 60*time.Second, "3 ranks in generation 0", func() bool { return count(`gen=0/0 rank=\d world=3`) == 3 })
	waitMarked(t, mark, 3, 20*time.Second)

	h3.cmd.Process.Kill()
	waitUntil(t, 60*time.Second, "2 ranks in generation 1", func() bool { return count(`gen=1/1 rank=\d world=2`) == 2 })
	if count(`gen=1/1 .*host=h3`) != 0 {
		t.Errorf("h3 is in generation 1:\n%s", stdout())
	}
	h4 = onHost(t, c, "h4", args...)
	time.Sleep(2 * time.Second) // h4 joins and waits
	if count(`host=h4`) != 0 {
		t.Fatalf("h4 joined the running generation:\n%s", stdout())
	}
	// h2 is cut off the network: the head hears no heartbeat from its
	// agent, and h2's gorun hears none from the endpoint.
	if err := c.SetLink("h2", false); err != nil {
		t.Fatal(err)
	}
	defer c.SetLink("h2", true)
	if code := h1.wait(t, 90*time.Second); code != 0 {
		t.Fatalf("endpoint: exit %d\nstdout:\n%s\nstderr:\n%s", code, h1.stdout.String(), h1.stderr.String())
	}
	if code := h4.wait(t, 30*time.Second); code != 0 {
		t.Errorf("h4: exit %d\n%s", code, h4.stderr.String())
	}
	if code := h2.wait(t, 30*time.Second); code != 125 || !strings.Contains(h2.stderr.String(), "endpoint "+endpoint+" went away") {
		t.Errorf("h2, cut off: exit %d, want 125 and a line that names the endpoint\n%s", code, h2.stderr.String())
	}
	errs := h1.stderr.String()
	for _, want := range []struct {
		n    *node
		line string
	}{{h1, `gen=2/2 rank=0 world=2 host=h1`}, {h4, `gen=2/2 rank=1 world=2 host=h4`}} {
		if !strings.Contains(want.n.stdout.String(), want.line) {
			t.Errorf("no %q in its node's output:\n%s", want.line, want.n.stdout.String())
		}
	}
	for _, want := range []string{
		`membership: restart 1: lost the agent on ` + c.Hosts[2].IP,
		`3 nodes -> 2`,
		`membership: restart 2: lost the agent on ` + c.Hosts[1].IP,
		`2 nodes -> 2 (` + c.Hosts[0].IP + `, ` + c.Hosts[3].IP + `)`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("no %q in the endpoint's summary:\n%s", want, errs)
		}
	}
	assertNoSurvivors(t, mark, 15*time.Second)
}

// Elastic: a SIGTERM to a node's gorun makes that node leave (its ranks
// stopped), and the others restart without it, rather than the whole job
// ending as it does without MIN:MAX.
func TestPerNodeElasticLeave(t *testing.T) {
	t.Parallel()
	endpoint := "127.0.0.1:" + freePort(t)
	mark := newMark(t)
	prog := `echo "gen=$TORCHELASTIC_RESTART_COUNT rank=$RANK world=$WORLD_SIZE"; [ "$TORCHELASTIC_RESTART_COUNT" -ge 1 ] || exec sleep 60`
	var nodes []*node
	for i := 0; i < 3; i++ {
		cmd := gorunCommand(context.Background(), "--nnodes", "2:3", "--nproc-per-node", "1", "--max-restarts", "1",
			"--rdzv-endpoint", endpoint, "-x", "GORUN_TEST_MARK="+mark, "sh", "-c", prog)
		cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+perNodeToken)
		nodes = append(nodes, startNode(t, cmd))
		if i == 0 {
			waitListening(t, endpoint) // the first serves the endpoint
		}
	}
	waitMarked(t, mark, 3, 60*time.Second)
	nodes[2].cmd.Process.Signal(os.Interrupt)
	if code := nodes[0].wait(t, 60*time.Second); code != 0 {
		t.Fatalf("endpoint: exit %d\n%s", code, nodes[0].stderr.String())
	}
	out := nodes[0].stdout.String() + nodes[1].stdout.String() // each node prints its own rank's lines
	if n := strings.Count(out, "gen=1 rank="); n != 2 || strings.Count(out, "world=2") != 2 || strings.Contains(nodes[2].stdout.String(), "gen=1") {
		t.Errorf("want 2 ranks of world 2 in generation 1, on the nodes that stayed:\n%s", out)
	}
	if code := nodes[2].wait(t, 30*time.Second); code != 130 {
		t.Errorf("the node that got SIGINT: exit %d, want 130\n%s", code, nodes[2].stderr.String())
	}
	if code := nodes[1].wait(t, 30*time.Second); code != 0 {
		t.Errorf("the node that stayed: exit %d\n%s", code, nodes[1].stderr.String())
	}
	assertNoSurvivors(t, mark, 5*time.Second)
}

// An MPICH program in a per-node launch on two netns hosts: PMI through
// each node's agent, the fences through the endpoint's head.
func TestPerNodeNetnsMPICH(t *testing.T) {
	c := perNodeCluster(t)
	bin := buildMPI(t, binDir, "mpicc.mpich", "check.c")
	endpoint := c.Hosts[0].IP + ":29433"
	var nodes []*node
	for _, h := range []string{"h1", "h2"} {
		nodes = append(nodes, onHost(t, c, h, "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", endpoint, bin))
	}
	for i, n := range nodes {
		if code := n.wait(t, 120*time.Second); code != 0 {
			t.Fatalf("h%d: exit %d\nstdout:\n%s\nstderr:\n%s", i+1, code, n.stdout.String(), n.stderr.String())
		}
	}
	// Each node prints its own ranks' lines.
	checkPassed(t, result{stdout: nodes[0].stdout.String() + nodes[1].stdout.String(), stderr: nodes[0].stderr.String()}, 4, 2)
}
