package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The batch-system tests run gorun as it runs inside an LSF, PBS or Flux
// job: the job's variables say which hosts it has (this machine and
// fakehostB, a name that is no machine), and a stand-in for the batch
// system's launcher (blaunch, pbs_tmrsh, flux), first in PATH, records
// the command line it was given and then runs the rest of it here, as the
// real one runs it on the host it names. So fakehostB's agent is a
// process of this machine that believes it is fakehostB. Nothing is
// looked up in DNS: this machine is os.Hostname(), which IsLocal compares
// names with, and fakehostB is only ever a word on command lines (its one
// SSH dial, in the fallback test, goes to 127.0.0.1 by an ssh config).

// batchFakeHost is the allocation's other host.
const batchFakeHost = "fakehostB"

// batchVars are the variables by which gorun finds a batch job; every
// test clears them all, so that an outer job's (a test run inside sbatch)
// does not count.
var batchVars = []string{"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_TASKS_PER_NODE",
	"PBS_JOBID", "PBS_NODEFILE", "JOB_ID", "PE_HOSTFILE", "LSB_JOBID", "LSB_DJOB_HOSTFILE", "LSB_MCPU_HOSTS",
	"FLUX_JOB_ID", "FLUX_URI", "SSH_CONNECTION"}

// batchSystem is one batch system's job, as a test makes it.
type batchSystem struct {
	name     string // as --dry-run names it: LSF job 5
	kind     string // its --launcher name: lsf
	launcher string // the launcher's command: blaunch
	// prefix is what the launcher is given before gorun's path for
	// fakehostB's agent.
	prefix []string
	// how is the backend line's account of the launcher.
	how string
	// fallback: without its launcher the agents go over SSH; else the
	// job is refused.
	fallback bool
	// env returns the job's variables, with this host's name and a
	// directory for its files.
	env func(t *testing.T, this, dir string) []string
	// standIn is the launcher's stand-in script, after #!/bin/sh, with
	// @THIS@ for this host's name. It appends its arguments to $0.log,
	// one a line, then a line "---".
	standIn string
}

// batchRecord is the stand-ins' first line: their arguments into $0.log.
const batchRecord = `{ printf '%s\n' "$@"; echo ---; } >> "$0.log"` + "\n"

// batchRunsHost is the stand-in of a launcher whose first argument is the
// host: it records, drops the host and runs the rest here.
const batchRunsHost = batchRecord + `shift
exec "$@"
`

var batchSystems = []batchSystem{
	{
		name: "LSF job 5", kind: "lsf", launcher: "blaunch", prefix: []string{batchFakeHost}, how: "blaunch HOST", fallback: true,
		env: func(t *testing.T, this, dir string) []string {
			return []string{"LSB_JOBID=5", "LSB_MCPU_HOSTS=" + this + " 2 " + batchFakeHost + " 2"}
		},
		standIn: batchRunsHost,
	},
	{
		// LSB_DJOB_HOSTFILE, one line per slot, wins over LSB_MCPU_HOSTS.
		name: "LSF job 6", kind: "lsf", launcher: "blaunch", prefix: []string{batchFakeHost}, how: "blaunch HOST", fallback: true,
		env: func(t *testing.T, this, dir string) []string {
			return []string{"LSB_JOBID=6", "LSB_MCPU_HOSTS=" + this + " 1 elsewhere 9",
				"LSB_DJOB_HOSTFILE=" + batchWriteFile(t, dir, "djob", this+"\n"+this+"\n"+batchFakeHost+"\n"+batchFakeHost+"\n")}
		},
		standIn: batchRunsHost,
	},
	{
		name: "PBS job 7.pbs01", kind: "pbs", launcher: "pbs_tmrsh", prefix: []string{batchFakeHost}, how: "pbs_tmrsh HOST (the TM interface)", fallback: true,
		env: func(t *testing.T, this, dir string) []string {
			return []string{"PBS_JOBID=7.pbs01",
				"PBS_NODEFILE=" + batchWriteFile(t, dir, "nodefile", this+"\n"+this+"\n"+batchFakeHost+"\n"+batchFakeHost+"\n")}
		},
		standIn: batchRunsHost,
	},
	{
		// The instance's broker ranks: this host 0, fakehostB 1.
		name: "Flux job f3Kq", kind: "flux", launcher: "flux", prefix: []string{"exec", "--rank=1"}, how: "flux exec --rank=RANK",
		env: func(t *testing.T, this, dir string) []string {
			return []string{"FLUX_JOB_ID=f3Kq", "FLUX_URI=local://" + dir + "/local"}
		},
		standIn: `case "$*" in
"getattr hostlist") echo "@THIS@,fakehostB" ;;
"resource list --states=all --no-header --format={nnodes} {ncores}") echo "2 4" ;;
exec\ *) ` + batchRecord + `	shift 2
	exec "$@" ;;
*) echo "flux stand-in: unexpected: $*" >&2; exit 1 ;;
esac
`,
	},
}

// batchWriteFile writes body to dir/name and returns its path.
func batchWriteFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// batchThisHost is this machine's name, as IsLocal knows it.
func batchThisHost(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// batchJob is one test's job: its environment and its launcher's
// stand-in.
type batchJob struct {
	sys  batchSystem
	this string
	bin  string // the stand-in's directory
	env  []string
}

// newBatchJob makes sys's job on this host and fakehostB, its stand-in
// launcher first in PATH, or none at all when withLauncher is false.
func newBatchJob(t *testing.T, sys batchSystem, withLauncher bool) *batchJob {
	t.Helper()
	if p, err := exec.LookPath(sys.launcher); err == nil {
		t.Skipf("a real %s is in PATH (%s): the stand-in tests would not be alone", sys.launcher, p)
	}
	j := &batchJob{sys: sys, this: batchThisHost(t), bin: t.TempDir()}
	if withLauncher {
		batchWriteScript(t, filepath.Join(j.bin, sys.launcher), strings.ReplaceAll(sys.standIn, "@THIS@", j.this))
	}
	for _, v := range batchVars {
		j.env = append(j.env, v+"=")
	}
	j.env = append(j.env, "GORUN_LAUNCHER=auto", "PATH="+j.bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	j.env = append(j.env, sys.env(t, j.this, t.TempDir())...)
	return j
}

// batchWriteScript writes an executable shell script.
func batchWriteScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// calls returns the command lines the stand-in launcher was given, one
// argument a string.
func (j *batchJob) calls(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(j.bin, j.sys.launcher+".log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, c := range strings.Split(strings.TrimSuffix(string(b), "---\n"), "---\n") {
		out = append(out, strings.Split(strings.TrimSuffix(c, "\n"), "\n"))
	}
	return out
}

// wantAgentCall checks that the launcher started one agent, fakehostB's,
// with exactly the batch system's prefix and then gorun agent --host
// fakehostB at gorun's own path.
func (j *batchJob) wantAgentCall(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(j.sys.prefix), exe, "agent", "--host", batchFakeHost)
	calls := j.calls(t)
	if len(calls) != 1 || !slices.Equal(calls[0], want) {
		t.Errorf("%s was called with %q, want once with %q", j.sys.launcher, calls, want)
	}
}

// batchRoutableAddr says whether this machine has an IPv4 address but
// loopback's, which MASTER_ADDR must then be for a job of two hosts.
func batchRoutableAddr() bool {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return true
		}
	}
	return false
}

var batchRankLine = regexp.MustCompile(`(?m)^rank (\d) local (\d) node (\d) on (\S+) master (\S+)$`)

// A job inside an LSF, PBS or Flux allocation runs its ranks on both of
// its hosts: this machine's through a local agent, fakehostB's through
// an agent that the batch system's launcher started, given exactly its
// own prefix (blaunch HOST, pbs_tmrsh HOST, flux exec --rank=1) and then
// gorun's path, agent, --host, fakehostB. Every rank gets the same
// MASTER_ADDR: rank 0's host's address, not loopback, since no connection
// told the head the hosts' addresses. No name is looked up in DNS.
func TestBatchJob(t *testing.T) {
	t.Parallel()
	for _, sys := range batchSystems {
		t.Run(sys.name, func(t *testing.T) {
			t.Parallel()
			j := newBatchJob(t, sys, true)
			// Go's resolver says on stderr what it looks up, in the head
			// and in both agents: nothing, here.
			env := append(slices.Clone(j.env), "GODEBUG=netdns=go+2")
			r := runGorunIn(t, "", env, 90*time.Second, nil, "-np", "4", "sh", "-c",
				`echo "rank $RANK local $LOCAL_RANK node $NODE_RANK on $GORUN_HOSTNAME master $MASTER_ADDR"`)
			if r.code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr, "go package net:") {
				t.Errorf("gorun used the resolver:\n%s", r.stderr)
			}
			got := map[string]string{}
			masters := map[string]bool{}
			for _, m := range batchRankLine.FindAllStringSubmatch(r.stdout, -1) {
				got[m[1]] = m[2] + " " + m[3] + " " + m[4]
				masters[m[5]] = true
			}
			want := map[string]string{"0": "0 0 " + j.this, "1": "1 0 " + j.this, "2": "0 1 " + batchFakeHost, "3": "1 1 " + batchFakeHost}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("ranks (local, node, host) = %v, want %v\nstdout:\n%s\nstderr:\n%s", got, want, r.stdout, r.stderr)
			}
			if len(masters) != 1 || batchRoutableAddr() && masters["127.0.0.1"] {
				t.Errorf("MASTER_ADDR of the ranks: %v, want one address, not loopback's", masters)
			}
			if strings.Contains(r.stderr, "note: ") && strings.Contains(r.stderr, "not in PATH") {
				t.Errorf("a note of a missing launcher:\n%s", r.stderr)
			}
			j.wantAgentCall(t)
		})
	}
}

// --dry-run names the batch system, its job and the launcher that would
// start the agents, and starts nothing; without the launcher in PATH it
// says that the agents would go over SSH, and why (LSF, PBS), or refuses
// the job, naming the missing command (Flux, which has no SSH fallback).
func TestBatchDryRun(t *testing.T) {
	t.Parallel()
	for _, sys := range batchSystems {
		t.Run(sys.name, func(t *testing.T) {
			t.Parallel()
			j := newBatchJob(t, sys, true)
			r := runGorunIn(t, "", j.env, 30*time.Second, nil, "--dry-run", "-np", "4", "true")
			want := fmt.Sprintf("gorun: backend: %s: %s; agents on other hosts through %s; ", sys.kind, sys.name, sys.how)
			if r.code != 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, batchFakeHost) {
				t.Errorf("exit %d, stderr lacks %q or %s:\n%s", r.code, want, batchFakeHost, r.stderr)
			}
			if c := j.calls(t); c != nil {
				t.Errorf("--dry-run called %s: %q", sys.launcher, c)
			}

			j = newBatchJob(t, sys, false)
			r = runGorunIn(t, "", j.env, 30*time.Second, nil, "--dry-run", "-np", "4", "true")
			if !sys.fallback {
				want := fmt.Sprintf("gorun: usage: %s: %s is not in PATH", sys.name, sys.launcher)
				if r.code != 2 || !strings.Contains(r.stderr, want) {
					t.Errorf("without %s: exit %d, want 2 and %q:\n%s", sys.launcher, r.code, want, r.stderr)
				}
				return
			}
			want = fmt.Sprintf("gorun: backend: %s: %s; agents on other hosts through SSH; ", sys.kind, sys.name)
			note := fmt.Sprintf("(%s is not in PATH: agents on other hosts over SSH, outside %s's accounting)", sys.launcher, sys.name)
			if r.code != 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, note) {
				t.Errorf("without %s: exit %d, stderr lacks %q or %q:\n%s", sys.launcher, r.code, want, note, r.stderr)
			}
		})
	}
}

// Without blaunch or pbs_tmrsh a job says, as its agents start, that they
// go over SSH, outside the batch system's accounting, and then does so:
// here to a port of 127.0.0.1 where nothing listens (an ssh config sends
// fakehostB there), so the job fails naming fakehostB.
func TestBatchSSHFallback(t *testing.T) {
	t.Parallel()
	for _, sys := range batchSystems {
		if !sys.fallback {
			continue
		}
		t.Run(sys.name, func(t *testing.T) {
			t.Parallel()
			j := newBatchJob(t, sys, false)
			cfg := batchWriteFile(t, t.TempDir(), "ssh_config", "Host "+batchFakeHost+"\n  HostName 127.0.0.1\n  Port 1\n")
			r := runGorunIn(t, "", j.env, 60*time.Second, nil, "--ssh-config", cfg, "--connect-timeout", "5s", "-np", "4", "true")
			note := fmt.Sprintf("gorun: note: %s is not in PATH: agents on other hosts over SSH, outside %s's accounting\n", sys.launcher, sys.name)
			if r.code == 0 || !strings.Contains(r.stderr, note) || !strings.Contains(r.stderr, batchFakeHost+": connection refused: connect to 127.0.0.1 port 1") {
				t.Errorf("exit %d, stderr lacks the note %q or the refused connection:\n%s", r.code, note, r.stderr)
			}
		})
	}
}

// SIGTERM to gorun ends the job on both hosts: the ranks, the local
// agent, fakehostB's agent and its launcher are all gone soon after, and
// gorun says what ended it. Every process of the job carries the mark
// (it is in gorun's environment, which the stand-in launcher passes on
// to fakehostB's agent).
func TestBatchSignal(t *testing.T) {
	t.Parallel()
	for _, sys := range batchSystems {
		t.Run(sys.name, func(t *testing.T) {
			t.Parallel()
			j := newBatchJob(t, sys, true)
			mark := newMark(t)
			cmd := gorunCommand(t.Context(), "-np", "4", "sh", "-c", `echo up-$RANK; exec sleep 60`)
			cmd.Env = append(append(cmd.Env, j.env...), "GORUN_TEST_MARK="+mark)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			deadline := time.Now().Add(60 * time.Second)
			for batchSleeping(mark) < 4 {
				if time.Now().After(deadline) {
					t.Fatalf("the ranks did not start: %q\nstderr:\n%s", marked(mark), errb.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !slices.ContainsFunc(marked(mark), func(p string) bool { return strings.Contains(p, "agent --host "+batchFakeHost) }) {
				t.Errorf("no agent of %s among the job's processes: %q", batchFakeHost, marked(mark))
			}
			cmd.Process.Signal(syscall.SIGTERM)
			err := cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) || !strings.Contains(errb.String(), "got SIGTERM") {
				t.Errorf("exit %d (%v), want %d and a summary naming SIGTERM:\n%s", code, err, 128+int(syscall.SIGTERM), errb.String())
			}
			assertNoSurvivors(t, mark, 5*time.Second)
			j.wantAgentCall(t)
		})
	}
}

// batchSleeping counts the marked processes that are the ranks' sleep.
func batchSleeping(mark string) int {
	n := 0
	for _, p := range marked(mark) {
		if _, cmd, _ := strings.Cut(p, ": "); strings.HasPrefix(cmd, "sleep ") {
			n++
		}
	}
	return n
}

// gorun mpiexec -launcher lsf is Hydra's way to ask for LSF's blaunch:
// inside an LSF job it runs the ranks through it; outside, it is refused
// as gorun --launcher lsf is.
func TestBatchMpiexecLauncherLSF(t *testing.T) {
	t.Parallel()
	j := newBatchJob(t, batchSystems[0], true)
	r := runGorunIn(t, "", j.env, 90*time.Second, nil, "mpiexec", "-launcher", "lsf", "-n", "4", "sh", "-c", `echo "rank $RANK on $GORUN_HOSTNAME"`)
	for _, w := range []string{"rank 0 on " + j.this, "rank 3 on " + batchFakeHost} {
		if r.code != 0 || !strings.Contains(r.stdout, w) {
			t.Errorf("exit %d, stdout lacks %q:\n%s\nstderr:\n%s", r.code, w, r.stdout, r.stderr)
		}
	}
	j.wantAgentCall(t)

	var env []string
	for _, v := range batchVars {
		env = append(env, v+"=")
	}
	r = runGorunIn(t, "", env, 30*time.Second, nil, "mpiexec", "-launcher", "lsf", "-n", "1", "true")
	if want := "--launcher lsf: not inside an LSF job"; r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("outside LSF: exit %d, want 2 and %q:\n%s", r.code, want, r.stderr)
	}
}

// A host where gorun is not at the head's path (the launchers copy
// nothing) fails the job with status 125, naming the host and giving the
// launcher's last line of diagnostics, whatever it printed before it.
func TestBatchGorunMissing(t *testing.T) {
	t.Parallel()
	sys := batchSystems[0]
	sys.standIn = batchRecord + `echo "blaunch: connecting to $1" >&2
shift
echo "blaunch: $1: No such file or directory" >&2
exit 127
`
	j := newBatchJob(t, sys, true)
	r := runGorunIn(t, "", j.env, 60*time.Second, nil, "-np", "4", "true")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("agent on %s did not start: blaunch to %s ended: blaunch: %s: No such file or directory", batchFakeHost, batchFakeHost, exe)
	if r.code != 125 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, want 125 and %q:\n%s", r.code, want, r.stderr)
	}
	j.wantAgentCall(t)
}
