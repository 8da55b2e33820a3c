package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/launcher"
)

// Dynamic processes, as mpirun has them (issue 30, point 5): MPI_Comm_spawn,
// MPI_Comm_spawn_multiple and name publishing, under gorun and, for the
// comparison, under the MPI's own launcher.

// runPeer runs an MPI's own launcher (mpirun.openmpi, mpiexec.hydra) to
// its end. One that does not end within limit is killed, and its result
// has code -1: the comparisons then say so and go on (mpirun's spawns
// have been seen to hang now and then on a loaded machine; gorun is what
// the tests test).
func runPeer(t *testing.T, limit time.Duration, tool string, args ...string) result {
	t.Helper()
	testenv.NeedTool(t, tool, "openmpi-bin mpich")
	if tool == "mpirun.openmpi" {
		// As root (a container), and with more ranks than this machine's
		// cores, as gorun's implicit localhost allows.
		args = append([]string{"--allow-run-as-root", "--oversubscribe"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Logf("%s %v did not finish within %v: not compared\n%s%s", tool, args, limit, r.stdout, r.stderr)
		r.code = -1
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", tool, err)
	}
	return r
}

// sameAsPeer asserts that gorun's run printed what the peer's did, and
// both passed.
func sameAsPeer(t *testing.T, name string, got, peer result) {
	t.Helper()
	if got.code != 0 || !strings.Contains(got.stdout, "PASS\n") {
		t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", name, got.code, got.stdout, got.stderr)
		return
	}
	switch peer.code {
	case 0:
	case -1:
		return // it hung (runPeer said so)
	default:
		t.Errorf("%s: the peer launcher failed (exit %d):\n%s%s", name, peer.code, peer.stdout, peer.stderr)
		return
	}
	if g, p := sortedLines(got.stdout), sortedLines(rankRecords(peer.stdout)); g != p {
		t.Errorf("%s: gorun printed\n%swhere the peer printed\n%s", name, g, p)
	}
	t.Logf("%s: %v under gorun, %v under the peer", name, got.elapsed.Round(time.Millisecond), peer.elapsed.Round(time.Millisecond))
}

// rankRecords is out with each "rank N:" record on a line of its own and
// no empty line: mpirun's output relay sometimes runs two ranks' lines
// together ("rank 0: ... okrank 1: ... ok"), which says nothing of what
// the ranks printed.
func rankRecords(out string) string {
	out = regexp.MustCompile(`([^\n])(rank \d+:)`).ReplaceAllString(out, "$1\n$2")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// An Open MPI program spawns under gorun as under mpirun: two children
// that reply through the intercommunicator, MPI_Comm_spawn_multiple (each
// child with its MPI_APPNUM), a port published by one rank and looked up
// by another, host= naming the job's host. A child's MPI_Abort or exit
// ends the job naming it with its namespace, with mpirun's code; the
// parent's death stops its children; nothing survives. A spawn gorun
// cannot serve (an info key it refuses, more ranks than free slots) fails
// at once in the program, with the reason on gorun's stderr.
//
// It is not parallel, as TestMPI.
func TestSpawnOpenMPI(t *testing.T) {
	dir := t.TempDir()
	plugin := []string{launcher.PMIxPluginEnv + "=" + pmixPlugin(t, dir)}
	bin := buildMPI(t, dir, "mpicc.openmpi", "spawn.c")
	for _, tt := range []struct {
		np   string
		args []string
	}{
		{"1", nil},
		{"2", nil},
		{"1", []string{"multiple"}},
		{"2", []string{"publish"}},
		{"2", []string{"names"}},
		{"1", []string{"info", "host", "localhost"}},
	} {
		name := strings.Join(append([]string{"-np", tt.np}, tt.args...), " ")
		r := runGorunIn(t, "", plugin, 120*time.Second, nil, append([]string{"-np", tt.np, bin}, tt.args...)...)
		peer := runPeer(t, 60*time.Second, "mpirun.openmpi", append([]string{"-np", tt.np, bin}, tt.args...)...)
		sameAsPeer(t, name, r, peer)
	}

	for _, tt := range []struct {
		mode string
		code int
		want string
	}{
		{"child-abort", 5, "rank 1 of spawned job 1 (gorun.%s.0.1) on localhost called MPI_Abort(5)"},
		{"child-exit", 3, "rank 0 of spawned job 1 (gorun.%s.0.1) on localhost (pid "},
		{"parent-dies", 137, "rank 0 on localhost (pid "},
	} {
		mark := newMark(t)
		r := runGorunIn(t, "", plugin, 120*time.Second, nil, "-np", "1", "-x", "GORUN_TEST_MARK="+mark, bin, tt.mode)
		peer := runPeer(t, 60*time.Second, "mpirun.openmpi", "-np", "1", bin, tt.mode)
		want := tt.want
		if strings.Contains(want, "%s") {
			want = fmt.Sprintf(want, jobIDOf(r.stderr))
		}
		if r.code != tt.code || peer.code != tt.code && peer.code != -1 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d (mpirun's %d, want %d) and %q\n%s%s", tt.mode, r.code, peer.code, tt.code, want, r.stdout, r.stderr)
		}
		if r.elapsed > 30*time.Second {
			t.Errorf("%s: took %v", tt.mode, r.elapsed)
		}
		assertNoSurvivors(t, mark, time.Second)
		t.Logf("%s: %v under gorun, %v under mpirun", tt.mode, r.elapsed.Round(time.Millisecond), peer.elapsed.Round(time.Millisecond))
	}

	r := runGorunIn(t, "", plugin, 60*time.Second, nil, "-np", "1", bin, "info", "map_by", "ppr:1:node")
	if want := "gorun does not serve the info key pmix.mapby=ppr:1:node"; r.code != 0 || !strings.Contains(r.stdout, "spawn with map_by=ppr:1:node failed: MPI_ERR_SPAWN") ||
		!strings.Contains(r.stderr, want) || r.elapsed > 20*time.Second {
		t.Errorf("a refused info key: exit %d in %v, want 0, the program told and %q on stderr\n%s%s", r.code, r.elapsed, want, r.stdout, r.stderr)
	}
	r = runGorunIn(t, "", plugin, 60*time.Second, nil, "-np", "1", bin, "non-mpi")
	if want := "spawned job 1 (gorun." + jobIDFromNspace(r.stderr) + ".0.1) ended before it connected to rank 0"; r.code != 0 ||
		!strings.Contains(r.stdout, "spawn of /bin/true failed\n") || !strings.Contains(r.stderr, want) || r.elapsed > 20*time.Second {
		t.Errorf("a spawned program that never connects: exit %d in %v, want 0, the program told and %q\n%s%s", r.code, r.elapsed, want, r.stdout, r.stderr)
	}
	r = runGorunIn(t, "", plugin, 60*time.Second, nil, "-H", "localhost:1", "-np", "1", bin)
	if want := "MPI_Comm_spawn: 2 processes do not fit: their hosts have 1 slot, 1 of them in use"; r.code == 0 || !strings.Contains(r.stderr, want) || r.elapsed > 20*time.Second {
		t.Errorf("no free slot: exit %d in %v, want a failure and %q\n%s%s", r.code, r.elapsed, want, r.stdout, r.stderr)
	}
}

// jobIDOf reads the job's id from gorun's summary ("gorun: job ID ...").
func jobIDOf(stderr string) string {
	_, rest, ok := strings.Cut(stderr, "gorun: job ")
	if !ok {
		return "?"
	}
	id, _, _ := strings.Cut(rest, " ")
	return id
}

// Debian's MPICH 4.0.2 (ch4:ucx) serves no dynamic processes itself:
// MPI_Comm_spawn fails inside MPICH, under Hydra as under gorun, at once
// and with Hydra's code. Its name publishing goes through PMI-1, which
// gorun serves.
func TestSpawnMPICH(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := buildMPI(t, dir, "mpicc.mpich", "spawn.c")
	r := runGorun(t, 60*time.Second, nil, "-np", "2", bin, "names")
	peer := runPeer(t, 60*time.Second, "mpiexec.hydra", "-n", "2", bin, "names")
	sameAsPeer(t, "names", r, peer)

	r = runGorun(t, 60*time.Second, nil, "-np", "2", bin)
	peer = runPeer(t, 60*time.Second, "mpiexec.hydra", "-n", "2", bin)
	if r.code == 0 || r.code != peer.code && peer.code != -1 || !strings.Contains(r.stderr, "MPID_Comm_spawn_multiple") || r.elapsed > 20*time.Second {
		t.Errorf("spawn: exit %d in %v (Hydra's %d), want MPICH's error at once\n%s%s", r.code, r.elapsed, peer.code, r.stdout, r.stderr)
	}
}

// mpi4py (Open MPI) spawns under gorun as under mpirun, in the cases of
// mpi4py's own test_spawn.py, and publishes names.
func TestMPI4PySpawn(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/mpi4py"); err != nil {
		testenv.Missing(t, "python3-mpi4py is missing (apt-get install python3-mpi4py)")
	}
	plugin := []string{launcher.PMIxPluginEnv + "=" + pmixPlugin(t, t.TempDir())}
	args := []string{"-np", "2", "/usr/bin/python3", "testdata/mpi4py_spawn.py"}
	r := runGorunIn(t, "", plugin, 120*time.Second, nil, args...)
	peer := runPeer(t, 60*time.Second, "mpirun.openmpi", args...)
	sameAsPeer(t, "mpi4py_spawn.py", r, peer)
}

// mpi4py.futures' MPIPoolExecutor maps over a few items, with workers it
// spawns (as many as MPI_UNIVERSE_SIZE, the hosts' slots, less the job's
// ranks; or MPI4PY_FUTURES_MAX_WORKERS) or, under python3 -m
// mpi4py.futures, the job's other ranks.
func TestMPI4PyFutures(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/mpi4py"); err != nil {
		testenv.Missing(t, "python3-mpi4py is missing (apt-get install python3-mpi4py)")
	}
	plugin := []string{launcher.PMIxPluginEnv + "=" + pmixPlugin(t, t.TempDir())}
	for _, tt := range []struct {
		gorun, peer []string
		workers     string
	}{
		{[]string{"-np", "1"}, []string{"-np", "1"}, "[1]"},
		{[]string{"-H", "localhost:4", "-np", "1"}, []string{"-H", "localhost:4", "-np", "1"}, "[3]"},
		{[]string{"-np", "1", "-x", "MPI4PY_FUTURES_MAX_WORKERS=2"}, []string{"-np", "1", "-x", "MPI4PY_FUTURES_MAX_WORKERS=2"}, "[2]"},
		{[]string{"-np", "3", "/usr/bin/python3", "-m", "mpi4py.futures"}, []string{"-np", "3", "/usr/bin/python3", "-m", "mpi4py.futures"}, "[3]"},
	} {
		name := strings.Join(tt.gorun, " ")
		prog := []string{"/usr/bin/python3", "testdata/mpi4py_futures.py"}
		if slices.Contains(tt.gorun, "-m") {
			prog = prog[1:]
		}
		r := runGorunIn(t, "", plugin, 120*time.Second, nil, append(tt.gorun, prog...)...)
		if want := "squares [0, 1, 4, 9, 16, 25, 36, 49]\nworkers' world " + tt.workers + "\n"; r.code != 0 || r.stdout != want {
			t.Errorf("%s: exit %d, stdout %q, want %q\n%s", name, r.code, r.stdout, want, r.stderr)
			continue
		}
		peer := runPeer(t, 60*time.Second, "mpirun.openmpi", append(tt.peer, prog...)...)
		if peer.code != -1 && peer.stdout != r.stdout {
			t.Errorf("%s: mpirun printed %q, gorun %q", name, peer.stdout, r.stdout)
		}
		t.Logf("%s: %v under gorun, %v under mpirun", name, r.elapsed.Round(time.Millisecond), peer.elapsed.Round(time.Millisecond))
	}
}

// MPICH's PMI-1 spawn (mcmd=spawn), which Debian's MPICH never sends,
// spoken by a script: the children start as one job of their own, with
// PMI_SPAWNED=1, their arguments and app numbers, and the spawner's
// PARENT_ROOT_PORT_NAME in their KVS; a spawn with an info key gorun
// refuses gets rc=-1 with the reason at once.
func TestPMI1Spawn(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 60*time.Second, nil, "-np", "1", "/usr/bin/python3", "testdata/pmi1_spawn.py")
	want := "child 0 of 3 appnum 0 args ['first arg'] port port-of-kvs_ID_0\n" +
		"child 1 of 3 appnum 1 args ['second'] port port-of-kvs_ID_0\n" +
		"child 2 of 3 appnum 1 args ['second'] port port-of-kvs_ID_0\n" +
		"parent: cmd=spawn_result rc=0\n"
	got := sortedLines(strings.ReplaceAll(r.stdout, "kvs_"+jobIDOfKVS(r.stdout)+"_0", "kvs_ID_0"))
	if r.code != 0 || got != want {
		t.Errorf("exit %d, stdout\n%swant\n%s%s", r.code, got, want, r.stderr)
	}
	r = runGorun(t, 60*time.Second, nil, "-np", "1", "/usr/bin/python3", "testdata/pmi1_spawn.py", "fail")
	if want := "gorun does not serve the info key arch=sparc"; r.code != 0 || !strings.Contains(r.stdout, "parent: cmd=spawn_result rc=-1 msg=MPI_Comm_spawn:") ||
		!strings.Contains(r.stderr, want) {
		t.Errorf("a refused spawn: exit %d, want 0, rc=-1 and %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// jobIDOfKVS reads the job id from a KVS name printed in s.
func jobIDOfKVS(s string) string {
	_, rest, ok := strings.Cut(s, "port-of-kvs_")
	if !ok {
		return "?"
	}
	id, _, _ := strings.Cut(rest, "_")
	return id
}

// Spawns across SSH hosts: the children land on the other host's free
// slots, where the parent's PMIx server reaches their data through the
// head (a direct modex), and the jobs connect across the hosts.
func TestSSHSpawn(t *testing.T) {
	c := sharedCluster(t)
	pmixPlugin(t, binDir) // next to gorunBin, where remote agents look
	bin := buildMPI(t, binDir, "mpicc.openmpi", "spawn.c")
	for _, tt := range []struct {
		hosts string
		args  []string
		want  string
	}{
		{"h1:1,h2:3", nil, "parent got 101 from child 1 of 2\n"},
		{"h1:1,h2:3", []string{"multiple"}, "parent got 201 from child 1 of 2\n"},
		{"h1:2,h2:2", []string{"publish"}, "rank 0 got 7 through the published port\n"},
		{"h1:2,h2:2", []string{"info", "map_by", "node"}, "parent got 100 from child 0 of 1\n"},
	} {
		// -np 2: a rank on each host (the hosts that run ranks are those
		// gorun spawns on), the other host's free slots for the children.
		name := tt.hosts + " " + strings.Join(tt.args, " ")
		mark := newMark(t)
		args := append([]string{"--ssh-config", c.SSHConfig, "-H", tt.hosts, "--map-by", "node", "-np", "2", "-x", "GORUN_TEST_MARK=" + mark, bin}, tt.args...)
		r := runBin(t, gorunBin, 120*time.Second, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "PASS\n") || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("%s: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
		assertNoSurvivors(t, mark, 2*time.Second)
		t.Logf("%s: %v", name, r.elapsed.Round(time.Millisecond))
	}
	// mpi4py's cases across the hosts: a rank spawns from COMM_SELF onto
	// both hosts, where the other host's rank takes no part in the
	// spawned job's fences and disconnects.
	script := filepath.Join(binDir, "mpi4py_spawn.py")
	b, err := os.ReadFile("testdata/mpi4py_spawn.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBin(t, gorunBin, 120*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:2,h2:2", "--map-by", "node", "--oversubscribe", "-np", "2", "/usr/bin/python3", script)
	if r.code != 0 || !strings.Contains(r.stdout, "PASS\n") {
		t.Errorf("mpi4py_spawn.py: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("mpi4py_spawn.py: %v", r.elapsed.Round(time.Millisecond))

	// A child's failure on the other host ends the job, naming it.
	mark := newMark(t)
	r = runBin(t, gorunBin, 120*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:1,h2:4", "--map-by", "node", "-np", "2", "-x", "GORUN_TEST_MARK="+mark, bin, "child-abort")
	if want := "rank 1 of spawned job 1 (gorun." + jobIDOf(r.stderr) + ".0.1) on h2 called MPI_Abort(5)"; r.code != 5 || !strings.Contains(r.stderr, want) {
		t.Errorf("child-abort: exit %d, want 5 and %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	assertNoSurvivors(t, mark, 2*time.Second)
}

// A spawn that does not fit the hosts that run the job's ranks says that
// a host of the job without ranks runs no agent to spawn on.
func TestSSHSpawnIdleHost(t *testing.T) {
	c := sharedCluster(t)
	pmixPlugin(t, binDir)
	bin := buildMPI(t, binDir, "mpicc.openmpi", "spawn.c")
	r := runBin(t, gorunBin, 120*time.Second, "--ssh-config", c.SSHConfig, "-H", "h1:1,h2:2", "-np", "1", bin)
	if want := "gorun spawns only on the hosts that run the job's ranks, and h2 runs none"; r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, want a failure and %q\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// jobIDFromNspace reads the job id from a namespace printed in s
// ("(gorun.ID.0.1)").
func jobIDFromNspace(s string) string {
	_, rest, ok := strings.Cut(s, "(gorun.")
	if !ok {
		return "?"
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}
