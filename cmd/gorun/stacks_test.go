package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/stacks"
)

// syncBuffer is a bytes.Buffer that a command writes while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// liveJob is a gorun job that a test runs in the background, holding
// its ranks where they hang until released.
type liveJob struct {
	t       *testing.T
	bin     string   // the gorun binary ("" = this test binary)
	env     []string // GORUN_JOBS_DIR, HANG_*
	cmd     *exec.Cmd
	out     syncBuffer
	errb    syncBuffer
	done    chan struct{}
	res     result
	release string // the file whose creation releases the ranks
	fifo    string // the FIFO the C program's odd rank reads
}

// startHangJob runs gorun args with rank odd held in its own function
// (HANG_RANK) until release. dir is where the release files go (a
// directory every host sees for jobs on the SSH hosts).
func startHangJob(t *testing.T, bin, dir string, odd int, args ...string) *liveJob {
	t.Helper()
	j := &liveJob{t: t, bin: bin, done: make(chan struct{}),
		release: filepath.Join(dir, "release"), fifo: filepath.Join(dir, "fifo")}
	if err := syscall.Mkfifo(j.fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	j.env = []string{"GORUN_JOBS_DIR=" + filepath.Join(dir, "jobs"), "HANG_RANK=" + fmt.Sprint(odd),
		"HANG_RELEASE=" + j.release, "HANG_FIFO=" + j.fifo}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	full := append([]string{"-x", "HANG_RANK", "-x", "HANG_RELEASE", "-x", "HANG_FIFO"}, args...)
	j.cmd = j.command(ctx, full...)
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.errb
	if err := j.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	start := time.Now()
	go func() {
		defer cancel()
		defer close(j.done)
		err := j.cmd.Wait()
		j.res = result{stdout: j.out.String(), stderr: j.errb.String(), elapsed: time.Since(start)}
		if ee, ok := err.(*exec.ExitError); ok {
			j.res.code = ee.ExitCode()
		} else if err != nil {
			j.res.code = -1
		}
	}()
	t.Cleanup(func() {
		j.releaseRanks()
		select {
		case <-j.done:
		case <-time.After(30 * time.Second):
			j.cmd.Process.Kill()
			<-j.done
		}
	})
	return j
}

// command runs gorun (the job, or a subcommand) with the job's
// environment.
func (j *liveJob) command(ctx context.Context, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if j.bin == "" {
		cmd = gorunCommand(ctx, args...)
	} else {
		cmd = sharedCommand(ctx, j.bin, args...)
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, j.env...)
	return cmd
}

// waitLines waits until stdout holds n lines starting with prefix.
func (j *liveJob) waitLines(prefix string, n int, limit time.Duration) {
	j.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := 0
		for _, l := range strings.Split(j.out.String(), "\n") {
			if strings.HasPrefix(l, prefix) {
				got++
			}
		}
		if got >= n {
			j.waitPublished(time.Until(deadline) + 10*time.Second)
			return
		}
		select {
		case <-j.done:
			j.t.Fatalf("the job ended before %d %q lines: exit %d\nstdout:\n%s\nstderr:\n%s", n, prefix, j.res.code, j.res.stdout, j.res.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("%d of %d %q lines within %v\nstdout:\n%s\nstderr:\n%s", got, n, prefix, limit, j.out.String(), j.errb.String())
		}
	}
}

// waitPublished waits until gorun ps can see the job (a job is published
// once it has run 50 ms).
func (j *liveJob) waitPublished(limit time.Duration) {
	j.t.Helper()
	var dir string
	for _, kv := range j.env {
		if v, ok := strings.CutPrefix(kv, "GORUN_JOBS_DIR="); ok {
			dir = v
		}
	}
	deadline := time.Now().Add(limit)
	for {
		_, err := jobs.Find(dir, "")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("the job was not published within %v: %v\nstderr:\n%s", limit, err, j.errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sub runs a gorun subcommand (ps, status, stacks) against the job.
func (j *liveJob) sub(args ...string) result {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runCmd(j.t, ctx, j.command(ctx, args...), time.Minute)
}

// verdict runs gorun stacks --json.
func (j *liveJob) verdict() (*stacks.Verdict, time.Duration) {
	j.t.Helper()
	r := j.sub("stacks", "--json")
	if r.code != 0 {
		j.t.Fatalf("gorun stacks: exit %d\n%s", r.code, r.stderr)
	}
	var v stacks.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		j.t.Fatalf("gorun stacks --json: %v\n%s", err, r.stdout)
	}
	return &v, r.elapsed
}

func (j *liveJob) releaseRanks() {
	os.WriteFile(j.release, nil, 0o644)
	if f, err := os.OpenFile(j.fifo, os.O_RDWR|syscall.O_NONBLOCK, 0); err == nil {
		f.Write([]byte{1})
		f.Close()
	}
}

// wait releases the ranks and waits for the job's end.
func (j *liveJob) wait(limit time.Duration) result {
	j.t.Helper()
	j.releaseRanks()
	select {
	case <-j.done:
	case <-time.After(limit):
		j.cmd.Process.Kill()
		<-j.done
		j.t.Fatalf("the job did not end within %v of its release\nstdout:\n%s\nstderr:\n%s", limit, j.res.stdout, j.res.stderr)
	}
	return j.res
}

// groupOf returns the group that holds rank r.
func groupOf(v *stacks.Verdict, r int) *stacks.Group {
	for i := range v.Groups {
		if slices.Contains(v.Groups[i].Ranks, r) {
			return &v.Groups[i]
		}
	}
	return nil
}

// checkVerdict asserts that v names rank odd alone as the odd one out,
// in a place that mentions oddWant, and the others together in a place
// that mentions restWant.
func checkVerdict(t *testing.T, v *stacks.Verdict, np, odd int, oddWant, restWant string) {
	t.Helper()
	text := new(strings.Builder)
	v.WriteText(text, true)
	if !slices.Equal(v.Odd, []int{odd}) {
		t.Errorf("odd ranks %v, want [%d]\n%s", v.Odd, odd, text)
	}
	og, rg := groupOf(v, odd), groupOf(v, (odd+1)%np)
	if og == nil || rg == nil {
		t.Fatalf("no group for rank %d or %d\n%s", odd, (odd+1)%np, text)
	}
	if len(og.Ranks) != 1 || !strings.Contains(og.Summary, oddWant) {
		t.Errorf("rank %d's group %v: %q, want one rank in %q\n%s", odd, og.Ranks, og.Summary, oddWant, text)
	}
	if len(rg.Ranks) != np-1 || !strings.Contains(rg.Summary, restWant) {
		t.Errorf("the others' group %v: %q, want %d ranks in %q\n%s", rg.Ranks, rg.Summary, np-1, restWant, text)
	}
}

// checkDone asserts that the released job succeeded, every rank saying
// up and done once.
func checkDone(t *testing.T, r result, np int) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(r.stdout, "\n")
	for rank := range np {
		for _, w := range []string{"up", "done"} {
			want, n := fmt.Sprintf("%s %d", w, rank), 0
			for _, l := range lines {
				if l == want || strings.HasPrefix(l, want+" ") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%q %d times in stdout:\n%s", want, n, r.stdout)
			}
		}
	}
}

// hangPrograms are the test programs, one per language, each with rank
// HANG_RANK stuck somewhere else than the others.
func hangPrograms(t *testing.T, dir string) []struct {
	name              string
	argv              []string
	oddWant, restWant string
} {
	t.Helper()
	gcc := testenv.NeedTool(t, "gcc", "gcc")
	cbin := filepath.Join(dir, "blockread")
	if out, err := exec.Command(gcc, "-g", "-O1", "-o", cbin, "testdata/hang/blockread.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	mpicc := testenv.NeedTool(t, "mpicc.mpich", "mpich libmpich-dev")
	mbin := filepath.Join(dir, "barrier")
	if out, err := exec.Command(mpicc, "-g", "-O1", "-o", mbin, "testdata/hang/barrier.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	gobin := filepath.Join(dir, "gohang")
	if out, err := exec.Command("go", "build", "-o", gobin, "./testdata/hang/gohang").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	py, _ := filepath.Abs("testdata/hang/hang.py")
	ddp, _ := filepath.Abs("testdata/hang/ddp_hang.py")
	return []struct {
		name              string
		argv              []string
		oddWant, restWant string
	}{
		{"python", []string{"/usr/bin/python3", py}, "read_batch", "wait_for_peers"},
		{"c", []string{cbin}, "read <- read_input", "wait_for_peers"},
		{"mpich", []string{mbin}, "slow_step", "MPI_Barrier"},
		{"torch", []string{"/usr/bin/python3", ddp}, "slow_batch", "all_reduce"},
		{"go", []string{gobin}, "napping", "AllReduce"},
	}
}

// gorun stacks names the rank that is stuck elsewhere, in every language,
// and the job goes on to succeed once released.
func TestStacksVerdict(t *testing.T) {
	testenv.NeedTool(t, "eu-stack", "elfutils")
	bins := t.TempDir()
	for _, p := range hangPrograms(t, bins) {
		t.Run(p.name, func(t *testing.T) {
			if p.name == "torch" {
				requireTorch(t)
			}
			j := startHangJob(t, "", t.TempDir(), 2, append([]string{"-np", "4"}, p.argv...)...)
			j.waitLines("up ", 4, time.Minute)
			time.Sleep(300 * time.Millisecond) // into their waits
			v, took := j.verdict()
			t.Logf("%s: verdict in %v", p.name, took)
			checkVerdict(t, v, 4, 2, p.oddWant, p.restWant)
			checkDone(t, j.wait(time.Minute), 4)
		})
	}
}

// Asking for stacks changes nothing in a healthy job: its output and exit
// status are as without.
func TestStacksHarmless(t *testing.T) {
	py, _ := filepath.Abs("testdata/hang/hang.py")
	j := startHangJob(t, "", t.TempDir(), -1, "-np", "4", "/usr/bin/python3", py)
	j.waitLines("up ", 4, time.Minute)
	for range 3 {
		v, _ := j.verdict()
		if len(v.Groups) != 1 || len(v.Odd) != 0 || !strings.Contains(v.Groups[0].Summary, "wait_for_peers") {
			t.Errorf("a healthy job's verdict: %+v", v.Groups)
		}
	}
	r := j.wait(time.Minute)
	checkDone(t, r, 4)
	// gorun's notes on oversubscription and OMP_NUM_THREADS depend on
	// the machine, not on stacks.
	var rest []string
	for _, l := range strings.SplitAfter(r.stderr, "\n") {
		if !strings.HasPrefix(l, "gorun: note: 4 ranks on localhost's") && !strings.HasPrefix(l, "gorun: note: OMP_NUM_THREADS=1 ") {
			rest = append(rest, l)
		}
	}
	if other := strings.Join(rest, ""); strings.Contains(other, "gorun:") || strings.Count(other, "\n") > 1 {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// gorun ps lists a running job, and gorun status shows each rank's
// process and, for Go ranks, their collective calls and the straggler.
func TestPsStatus(t *testing.T) {
	bins := t.TempDir()
	gobin := filepath.Join(bins, "gohang")
	if out, err := exec.Command("go", "build", "-o", gobin, "./testdata/hang/gohang").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	j := startHangJob(t, "", t.TempDir(), 3, "-np", "4", gobin)
	j.waitLines("up ", 4, time.Minute)
	ps := j.sub("ps")
	if ps.code != 0 || !strings.Contains(ps.stdout, "running") || !strings.Contains(ps.stdout, gobin) {
		t.Errorf("gorun ps: exit %d\n%s%s", ps.code, ps.stdout, ps.stderr)
	}
	r := j.sub("status", "--json")
	var st launcher.JobStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("gorun status --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(st.Ranks) != 4 {
		t.Fatalf("%d ranks in status", len(st.Ranks))
	}
	for _, rs := range st.Ranks {
		if rs.PID <= 0 || rs.State == "" || rs.State == "exited" || rs.RSSKB <= 0 || rs.Calls < 5 || rs.SinceOutput < 0 {
			t.Errorf("rank %d: %+v", rs.Rank, rs)
		}
	}
	if st.Stragglers == nil || st.Stragglers.Rank != 3 {
		t.Errorf("stragglers: %+v, want rank 3", st.Stragglers)
	}
	text := j.sub("status")
	if text.code != 0 || !strings.Contains(text.stdout, "stragglers: rank 3") {
		t.Errorf("gorun status:\n%s%s", text.stdout, text.stderr)
	}
	j.wait(time.Minute)
	if ps := j.sub("ps"); strings.Contains(ps.stdout, gobin) {
		t.Errorf("gorun ps still lists the ended job:\n%s", ps.stdout)
	}
}

// --hang-timeout ends a job in which nothing moves with status 123, the
// verdict on stderr and in --summary-json, both for ranks that sleep and
// for MPI ranks that spin in MPI_Barrier; --on-hang report lets it run.
func TestHangTimeout(t *testing.T) {
	testenv.NeedTool(t, "eu-stack", "elfutils")
	bins := t.TempDir()
	progs := hangPrograms(t, bins)
	for _, p := range []int{0, 2} { // python (asleep), mpich (spinning)
		p := progs[p]
		t.Run(p.name, func(t *testing.T) {
			dir := t.TempDir()
			sum := filepath.Join(dir, "summary.json")
			j := startHangJob(t, "", dir, 1, append([]string{"-np", "3", "--hang-timeout", "2s", "--summary-json", sum}, p.argv...)...)
			select {
			case <-j.done:
			case <-time.After(time.Minute):
				t.Fatalf("not ended as hung within a minute\n%s", j.errb.String())
			}
			r := j.res
			if r.code != launcher.ExitHang || !strings.Contains(r.stderr, "is hung") || !strings.Contains(r.stderr, p.oddWant) {
				t.Fatalf("exit %d after %v\n%s", r.code, r.elapsed, r.stderr)
			}
			var s launcher.Summary
			b, _ := os.ReadFile(sum)
			if err := json.Unmarshal(b, &s); err != nil || s.Reason != "hang" || s.Hang == nil || !slices.Equal(s.Hang.Odd, []int{1}) {
				t.Errorf("summary: %v\n%s", err, b)
			}
			t.Logf("%s: hung after %v", p.name, r.elapsed)
		})
	}
	t.Run("report", func(t *testing.T) {
		py, _ := filepath.Abs("testdata/hang/hang.py")
		j := startHangJob(t, "", t.TempDir(), 1, "-np", "2", "--hang-timeout", "1s", "--on-hang", "report", "/usr/bin/python3", py)
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(j.errb.String(), "is hung") {
			if time.Now().After(deadline) {
				t.Fatalf("no report within a minute:\n%s", j.errb.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		checkDone(t, j.wait(time.Minute), 2)
	})
	t.Run("timeout", func(t *testing.T) {
		py, _ := filepath.Abs("testdata/hang/hang.py")
		j := startHangJob(t, "", t.TempDir(), 1, "-np", "2", "--timeout", "3s", "/usr/bin/python3", py)
		<-j.done
		if j.res.code != launcher.ExitTimeout || !strings.Contains(j.res.stderr, "when --timeout 3s expired") || !strings.Contains(j.res.stderr, "read_batch") {
			t.Errorf("exit %d\n%s", j.res.code, j.res.stderr)
		}
	})
}

// On the SSH hosts: 16 ranks on 4 hosts, one stuck; gorun stacks, run on
// this machine and on another host, names it and its host.
func TestSSHStacks(t *testing.T) {
	c := sharedCluster(t)
	testenv.NeedTool(t, "eu-stack", "elfutils")
	dir, err := os.MkdirTemp(binDir, "stacks-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	py := filepath.Join(dir, "hang.py")
	b, _ := os.ReadFile("testdata/hang/hang.py")
	os.WriteFile(py, b, 0o644)
	j := startHangJob(t, gorunBin, dir, 6, "--ssh-config", c.SSHConfig, "--hostfile", c.Hostfile, "-np", "16", "/usr/bin/python3", py)
	j.waitLines("up ", 16, time.Minute)
	time.Sleep(300 * time.Millisecond)
	v, took := j.verdict()
	t.Logf("16 ranks on 4 hosts: verdict in %v", took)
	checkVerdict(t, v, 16, 6, "read_batch", "wait_for_peers")
	if g := groupOf(v, 6); g == nil || !slices.Equal(g.Hosts, []string{"h2"}) {
		t.Errorf("rank 6's group: %+v, want host h2", g)
	}
	// From another host: the job file is in a directory every host sees.
	out, err := c.Exec(context.Background(), "h3", "env", "GORUN_JOBS_DIR="+filepath.Join(dir, "jobs"), gorunBin, "stacks").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "rank 6 on h2") {
		t.Errorf("gorun stacks on h3: %v\n%s", err, out)
	}
	checkDone(t, j.wait(time.Minute), 16)
}

// --record keeps the record of a failed job: every host's versions and
// environment difference, the phases, how each rank ended; gorun show
// prints it. A hung job's record holds its verdict.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec")
	r := runGorunIn(t, dir, []string{"MY_API_TOKEN=hunter2hunter2"}, time.Minute, nil, "--record", rec, "-np", "2", "-x", "MY_API_TOKEN",
		"sh", "-c", `if [ "$RANK" = 1 ]; then echo "bad batch" >&2; exit 3; fi; sleep 30`)
	if r.code != 3 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(rec, "record.json"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("hunter2")) {
		t.Errorf("the record holds a secret's value")
	}
	var got struct {
		Hosts []struct {
			Host   string `json:"host"`
			Kernel string `json:"kernel"`
		} `json:"hosts"`
		Phases []struct{ Name string } `json:"phases"`
		Ranks  []struct {
			Rank      int
			Cause     string
			LastLines []string `json:"last_lines"`
		} `json:"ranks"`
		ExitCode int `json:"exit_code"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Hosts) != 1 || got.Hosts[0].Host != "localhost" || got.Hosts[0].Kernel == "" || len(got.Phases) < 3 || len(got.Ranks) != 2 || got.ExitCode != 3 ||
		!strings.Contains(got.Ranks[1].Cause, "code 3") || !slices.Contains(got.Ranks[1].LastLines, "bad batch") {
		t.Errorf("record:\n%s", b)
	}
	show := runGorun(t, time.Minute, nil, "show", rec)
	for _, w := range []string{"exited with code 3", "bad batch", "kernel", "localhost"} {
		if show.code != 0 || !strings.Contains(strings.ToLower(show.stdout), strings.ToLower(w)) {
			t.Errorf("gorun show lacks %q (exit %d):\n%s%s", w, show.code, show.stdout, show.stderr)
		}
	}
	t.Run("hang", func(t *testing.T) {
		dir := t.TempDir()
		py, _ := filepath.Abs("testdata/hang/hang.py")
		j := startHangJob(t, "", dir, 1, "--record", filepath.Join(dir, "rec"), "-np", "2", "--hang-timeout", "1s", "/usr/bin/python3", py)
		<-j.done
		b, err := os.ReadFile(filepath.Join(dir, "rec", "record.json"))
		if err != nil || j.res.code != launcher.ExitHang || !bytes.Contains(b, []byte(`"hang"`)) || !bytes.Contains(b, []byte("read_batch")) {
			t.Errorf("exit %d, %v\n%s", j.res.code, err, b)
		}
	})
}
