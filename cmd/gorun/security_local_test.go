package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/testusers"
	"github.com/gorun/gorun/launcher"
)

// sharedDir makes a directory that every user may read and enter (for
// binaries that other users run), removed when t ends.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gorun-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// job is a gorun run started in the background, for tests that act
// while it runs.
type job struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr *lockedWriter
	exited         chan error
}

// startJob starts cmd, collecting its output, and kills it when t ends.
func startJob(t *testing.T, cmd *exec.Cmd) *job {
	t.Helper()
	j := &job{t: t, cmd: cmd, stdout: &lockedWriter{w: &bytes.Buffer{}}, stderr: &lockedWriter{w: &bytes.Buffer{}}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = j.stdout, j.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() }) // a test that failed early: its agent and ranks follow the head
	return j
}

func (j *job) output() string { return j.stdout.String() + j.stderr.String() }

// waitFile waits for a rank to make path, and returns its contents.
func (j *job) waitFile(path string) []byte {
	j.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		select {
		case err := <-j.exited:
			j.t.Fatalf("gorun ended (%v) before %s appeared\n%s", err, path, j.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("%s did not appear within 30 s\n%s", path, j.output())
		}
	}
}

// wait lets the ranks go on (they wait for the file go) and returns how
// gorun ended.
func (j *job) wait(goFile string) error {
	j.t.Helper()
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		j.t.Fatal(err)
	}
	select {
	case err := <-j.exited:
		return err
	case <-time.After(60 * time.Second):
		j.t.Fatalf("gorun did not finish\n%s", j.output())
	}
	return nil
}

// localAgent is the pid of the agent that gorun (cmd, running) started on
// this host.
func localAgent(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	for _, pid := range childPIDs(cmd.Process.Pid) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); bytes.HasPrefix(b, []byte(cmd.Path+"\x00agent\x00")) {
			return pid
		}
	}
	t.Fatalf("no agent below gorun %d", cmd.Process.Pid)
	return 0
}

// proc is a process seen in /proc.
type proc struct {
	pid, ppid        int
	exe              string
	cmdline, environ []byte
}

// procsOf lists the processes whose real uid is uid, read as root.
func procsOf(uid uint32) []proc {
	var out []proc
	for _, pid := range allPIDs() {
		dir := "/proc/" + strconv.Itoa(pid)
		var st syscall.Stat_t
		if syscall.Stat(dir, &st) != nil || st.Uid != uid {
			continue
		}
		p := proc{pid: pid}
		p.exe, _ = os.Readlink(dir + "/exe")
		p.cmdline, _ = os.ReadFile(dir + "/cmdline")
		p.environ, _ = os.ReadFile(dir + "/environ")
		if stat, err := os.ReadFile(dir + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					p.ppid, _ = strconv.Atoi(f[1])
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// Attacks 1a and 1c of the security review, with the real binary and two
// users: while a victim's job runs, another user of the machine tries to
// reach the agent's KV socket (list its directory, connect to it) and to
// find the job's secret (in any of the job's command lines, in the
// environments of its processes); then a rank presents a near miss of the
// secret, and neither gorun's output nor --summary-json may show the
// secret or the guess.
func TestKVSocketAndSecretAsAnotherUser(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "/usr/bin/python3", "python3")
	victim, attacker := testusers.Create(t, "gkv"), testusers.Create(t, "gkvx")
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	example := buildExample(t, sharedDir(t), "rendezvous")

	// Rank 0 hands the test its socket and secret, in a file only the
	// victim (and root) may read; both ranks wait for the go-ahead; then
	// rank 1 dials with the secret's last digit changed.
	script := `umask 077
if [ "$GORUN_RANK" = 0 ]; then
	printf '%s\n%s\n' "$GORUN_AGENT_SOCKET" "$GORUN_JOB_SECRET" > "$HOME/job.tmp" && mv "$HOME/job.tmp" "$HOME/job"
fi
while [ ! -e "$HOME/go" ]; do sleep 0.05; done
[ "$GORUN_RANK" = 0 ] && exit 0
GORUN_JOB_SECRET="${GORUN_JOB_SECRET%?}x" exec "$0"`
	summary := filepath.Join(victim.Home, "summary.json")
	cmd := exec.Command(gorunBin, "-np", "2", "--summary-json", summary, "sh", "-c", script, example)
	cmd.SysProcAttr, cmd.Env, cmd.Dir = victim.Credential(), victim.Env(), victim.Home
	j := startJob(t, cmd)
	b := j.waitFile(filepath.Join(victim.Home, "job"))
	sock, secret, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(secret) != 48 || !filepath.IsAbs(sock) {
		t.Fatalf("rank 0 saw socket %q and secret %q", sock, secret)
	}
	dir := filepath.Dir(sock)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != victim.UID || st.Mode&0o777 != 0o700 {
		t.Errorf("the socket's directory %s: mode %o, owner %d (%v); want 0700, %s's", dir, st.Mode&0o777, st.Uid, err, victim.Name)
	}

	// 1a: the other user can neither list the directory nor connect.
	if out, err := attacker.Command("ls", "-a", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("%s listed %s: %v\n%s", attacker.Name, dir, err, out)
	}
	const connect = `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(type(e).__name__, e.errno)
    sys.exit(1)
print("connected")`
	if out, err := attacker.Command("/usr/bin/python3", "-c", connect, sock).CombinedOutput(); err == nil || !strings.Contains(string(out), "PermissionError 13") {
		t.Errorf("%s connecting to %s: %v\n%s", attacker.Name, sock, err, out)
	}
	if out, err := victim.Command("/usr/bin/python3", "-c", connect, sock).CombinedOutput(); err != nil {
		t.Errorf("the victim cannot connect to its own socket (so the check above proves nothing): %v\n%s", err, out)
	}

	// 1c: the secret is in no command line of the job, and in the
	// environment of its ranks alone, which the other user cannot read.
	var gorunPIDs, rankPIDs []string
	procs := procsOf(victim.UID)
	shells := map[int]bool{}
	for _, p := range procs {
		if bytes.HasPrefix(p.cmdline, []byte("sh\x00-c\x00")) {
			shells[p.pid] = true
		}
	}
	for _, p := range procs {
		if bytes.Contains(p.cmdline, []byte(secret)) {
			t.Errorf("the secret is in the command line of %d: %q", p.pid, p.cmdline)
		}
		switch {
		case p.exe == gorunBin:
			gorunPIDs = append(gorunPIDs, strconv.Itoa(p.pid))
			if bytes.Contains(p.environ, []byte(secret)) {
				t.Errorf("the secret is in the environment of gorun %d (%q)", p.pid, p.cmdline)
			}
		case shells[p.pid] && !shells[p.ppid]: // a rank, not its passing sleeps (a shell's child, before its exec of sleep, is "sh -c" too)
			rankPIDs = append(rankPIDs, strconv.Itoa(p.pid))
			if !bytes.Contains(append([]byte{0}, p.environ...), []byte("\x00GORUN_JOB_SECRET="+secret+"\x00")) {
				t.Errorf("rank %d's environment lacks the secret (so the check below proves nothing)", p.pid)
			}
		}
	}
	if len(gorunPIDs) != 2 || len(rankPIDs) != 2 {
		t.Fatalf("want the head, the agent and 2 ranks among %s's processes, found gorun %v and ranks %v", victim.Name, gorunPIDs, rankPIDs)
	}
	probe := `for p in "$@"; do
	cat /proc/$p/cmdline > /dev/null || echo "cannot read the command line of $p"
	cat /proc/$p/environ > /dev/null 2>&1 && echo "read the environment of $p"
done; true`
	if out, err := attacker.Command("sh", append([]string{"-c", probe, "sh"}, append(gorunPIDs, rankPIDs...)...)...).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("%s reading the job's /proc: %v\n%s", attacker.Name, err, out)
	}

	// The near miss: refused, and echoed nowhere.
	err := j.wait(filepath.Join(victim.Home, "go"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(j.stderr.String(), "authentication failed") {
		t.Fatalf("want exit 1 with rank 1's authentication failure, got %v\n%s", err, j.output())
	}
	sum, err := os.ReadFile(summary)
	if err != nil || !json.Valid(sum) || !bytes.Contains(sum, []byte("authentication failed")) {
		t.Fatalf("--summary-json: %v\n%s", err, sum)
	}
	for what, text := range map[string]string{"stdout": j.stdout.String(), "stderr": j.stderr.String(), "--summary-json": string(sum)} {
		if strings.Contains(text, secret[:47]) {
			t.Errorf("%s shows the secret or the guess:\n%s", what, text)
		}
	}
}

// netSockets returns the inodes of the listening sockets in /proc/net
// (unix, tcp, tcp6) with their address, and the unix sockets with their
// state and path.
func netSockets(t *testing.T) (listening map[string]string, unix map[string][2]string) {
	t.Helper()
	listening, unix = map[string]string{}, map[string][2]string{}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode [Path]
		f := strings.Fields(l)
		if len(f) < 7 {
			continue
		}
		path := ""
		if len(f) > 7 {
			path = f[7]
		}
		unix[f[6]] = [2]string{f[5], path}
		if f[3] == "00010000" { // __SO_ACCEPTCON: listening
			listening[f[6]] = "unix " + path
		}
	}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			// sl local rem st tx:rx tr:tm retrnsmt uid timeout inode
			f := strings.Fields(l)
			if len(f) > 9 && f[3] == "0A" {
				listening[f[9]] = "tcp " + f[1]
			}
		}
	}
	return listening, unix
}

// socketsOf lists the inodes of the sockets process pid holds.
func socketsOf(pid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, e := range ents {
		l, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name())
		if in, ok := strings.CutPrefix(l, "socket:["); ok {
			out = append(out, strings.TrimSuffix(in, "]"))
		}
	}
	return out
}

// Attack 3f of the security review, the reach of the PMI servers: PMI-1
// is served only on each rank's own socketpair (PMI_FD, an unnamed
// connected socket; no PMI_PORT; the agent listens on nothing but its KV
// socket; MASTER_PORT is rank 0's own to bind), and PMIx keeps its files in a directory of the job's user
// alone (0700), which another user cannot list.
func TestPMIReach(t *testing.T) {
	t.Parallel()
	attacker := testusers.Create(t, "gpmi")
	plugin := launcher.PMIxPluginEnv + "=" + pmixPlugin(t, t.TempDir())
	dir := t.TempDir()
	script := `f="$0/rank$GORUN_RANK"
{ echo "${PMI_FD-unset}"; echo "${PMI_PORT-unset}"; readlink "/proc/self/fd/$PMI_FD"; echo "$GORUN_AGENT_SOCKET"; echo "${PMIX_SERVER_TMPDIR-unset}"; echo "$MASTER_PORT"; } > "$f.tmp" && mv "$f.tmp" "$f"
while [ ! -e "$0/go" ]; do sleep 0.05; done`
	cmd := gorunCommand(context.Background(), "-np", "2", "--pmix", "on", "sh", "-c", script, dir)
	cmd.Env = append(cmd.Env, plugin)
	j := startJob(t, cmd)
	var ranks [2][]string // PMI_FD, PMI_PORT, the socket, the KV socket, PMIx's directory, MASTER_PORT
	for r := range ranks {
		b := j.waitFile(filepath.Join(dir, "rank"+strconv.Itoa(r)))
		if ranks[r] = strings.Split(strings.TrimSpace(string(b)), "\n"); len(ranks[r]) != 6 {
			t.Fatalf("rank %d said %q", r, b)
		}
	}
	agent := localAgent(t, cmd)
	listening, unixSocks := netSockets(t)
	var agentListens []string
	for _, in := range socketsOf(agent) {
		if l, ok := listening[in]; ok {
			agentListens = append(agentListens, l)
		}
	}
	slices.Sort(agentListens)
	if want := []string{"unix " + ranks[0][3]}; !slices.Equal(agentListens, want) {
		t.Errorf("the agent listens on %q; want only its KV socket, %q", agentListens, want)
	}
	if ranks[0][5] != ranks[1][5] {
		t.Errorf("MASTER_PORT: rank 0 %s, rank 1 %s; want the same", ranks[0][5], ranks[1][5])
	}
	for r, rk := range ranks {
		in := strings.TrimSuffix(strings.TrimPrefix(rk[2], "socket:["), "]")
		if rk[0] == "unset" || rk[1] != "unset" || in == rk[2] {
			t.Errorf("rank %d: PMI_FD %s (%s), PMI_PORT %s; want a socket and no port", r, rk[0], rk[2], rk[1])
			continue
		}
		if u, ok := unixSocks[in]; !ok || u[0] != "03" || u[1] != "" {
			t.Errorf("rank %d's PMI_FD is socket %s: %q (state, path), want an unnamed connected unix socket", r, in, u)
		}
		if r == 1 && rk[2] == ranks[0][2] {
			t.Errorf("ranks 0 and 1 share PMI socket %s", rk[2])
		}
	}
	pmix := ranks[0][4]
	var st syscall.Stat_t
	if err := syscall.Stat(pmix, &st); err != nil || st.Mode&0o777 != 0o700 || st.Uid != uint32(os.Getuid()) || !strings.Contains(pmix, "gorun-pmix-") {
		t.Errorf("PMIx's directory %q: mode %o, owner %d, %v; want gorun's, 0700, the job user's", pmix, st.Mode&0o777, st.Uid, err)
	}
	if out, err := attacker.Command("ls", "-a", pmix).CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("%s listed PMIx's directory %s: %v\n%s", attacker.Name, pmix, err, out)
	}
	if err := j.wait(filepath.Join(dir, "go")); err != nil {
		t.Fatalf("gorun: %v\n%s", err, j.output())
	}
}

// PMIx's reach (row 3f of the security review, beyond what it tried):
// libpmix 4 serves its clients over TCP on loopback, where its "native"
// security believes the uid a client says it has. Another user of the
// node, who can learn the server's address (/proc/net/tcp, ps) and the
// job's namespace (its directory's name in /tmp), claims the victim's
// uid and asks to join the job as one of its ranks: let in, it could read
// what the ranks exchange, publish addresses of its own, or abort the
// job. gorun-pmix must refuse it, and still let the victim's own client in.
func TestPMIxAsAnotherUser(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "gcc", "gcc")
	victim, attacker := testusers.Create(t, "gpx"), testusers.Create(t, "gpxa")
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	shared := sharedDir(t)
	plugin := pmixPlugin(t, shared)
	client, fakeid := filepath.Join(shared, "pmix-client"), filepath.Join(shared, "fakeid.so")
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", "pmix").Output()
	if err != nil {
		t.Fatalf("pkg-config pmix: %v", err)
	}
	for _, args := range [][]string{
		append([]string{"-o", client, "testdata/pmixattack/client.c"}, strings.Fields(string(flags))...),
		{"-shared", "-fPIC", "-o", fakeid, "testdata/pmixattack/fakeid.c"},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}

	script := `env > "$HOME/env-$GORUN_RANK.tmp" && mv "$HOME/env-$GORUN_RANK.tmp" "$HOME/env-$GORUN_RANK"
while [ ! -e "$HOME/go" ]; do sleep 0.05; done`
	cmd := exec.Command(gorunBin, "-np", "2", "--pmix", "on", "sh", "-c", script)
	cmd.SysProcAttr, cmd.Dir = victim.Credential(), victim.Home
	cmd.Env = append(victim.Env(), launcher.PMIxPluginEnv+"="+plugin)
	j := startJob(t, cmd)
	pmixEnv := func(rank string) []string {
		b := j.waitFile(filepath.Join(victim.Home, "env-"+rank))
		env := []string{"PATH=/usr/bin:/bin"}
		for _, kv := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(kv, "PMIX_") {
				env = append(env, kv)
			}
		}
		if len(env) < 4 {
			t.Fatalf("rank %s has no PMIx environment:\n%s", rank, b)
		}
		return env
	}

	// The impostor, as rank 1 with the victim's uid.
	imp := attacker.Command(client)
	imp.Env = append(pmixEnv("1"), "LD_PRELOAD="+fakeid,
		"FAKE_UID="+strconv.Itoa(int(victim.UID)), "FAKE_GID="+strconv.Itoa(int(victim.GID)))
	out, err := runWithin(imp, 30*time.Second)
	if strings.Contains(out, "init: SUCCESS") {
		t.Errorf("%s joined the victim's job as rank 1 (%v):\n%s", attacker.Name, err, out)
	}
	t.Logf("the impostor: %v\n%s", err, out)
	// The victim's own client, as rank 0: let in.
	own := victim.Command(client)
	own.Env = pmixEnv("0")
	if out, err := runWithin(own, 30*time.Second); err != nil || !strings.Contains(out, "init: SUCCESS") {
		t.Errorf("the victim's own client was refused (so the check above proves nothing): %v\n%s", err, out)
	}

	if err := j.wait(filepath.Join(victim.Home, "go")); err != nil {
		t.Errorf("gorun: %v\n%s", err, j.output())
	}
	t.Logf("gorun said:\n%s", j.output())
}
