package slurmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// start is Start, plus a check, after Down, that the cluster left nothing
// behind.
func start(t *testing.T, o Options) *Cluster {
	t.Helper()
	var c *Cluster
	// Cleanups run last-registered first: this one after Start's Down.
	t.Cleanup(func() {
		if c != nil {
			checkGone(t, c)
		}
	})
	t0 := time.Now()
	c = Start(t, o)
	t.Logf("up %d nodes in %v: ports %d+%v, state %s", len(c.nodes), time.Since(t0).Round(time.Millisecond), c.ControllerPort, ports(c), c.Dir)
	return c
}

func ports(c *Cluster) []int {
	var ps []int
	for _, n := range c.Nodes() {
		ps = append(ps, n.Port)
	}
	return ps
}

// leftovers lists what a cluster that is down still has: live processes
// naming its state directory (in their command line or environment, as the
// daemons, slurmstepd's and tasks do), its processes by namespace, mounts
// under its directory, the directory, and listeners on its ports.
func leftovers(c *Cluster) []string {
	var left []string
	for _, p := range allProcs() {
		if p.Zombie {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/cmdline")
		if bytes.Contains(cmdline, []byte(c.Dir)) || c.hasMarker(p.Pid) {
			left = append(left, fmt.Sprintf("process %d %q", p.Pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	for _, pid := range c.Processes() {
		left = append(left, fmt.Sprintf("process %d in the cluster's namespaces", pid))
	}
	if mps, err := testcluster.Mounts(c.Dir); err != nil || len(mps) > 0 {
		left = append(left, fmt.Sprintf("mounts %v (%v)", mps, err))
	}
	if _, err := os.Lstat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	for _, p := range append(ports(c), c.ControllerPort) {
		if !portFree(p) {
			left = append(left, fmt.Sprintf("a listener on port %d", p))
		}
	}
	return left
}

// checkGone fails the test if the cluster left something behind.
func checkGone(t *testing.T, c *Cluster) {
	t.Helper()
	if left := leftovers(c); len(left) > 0 {
		t.Errorf("after Down, left behind: %s", strings.Join(left, "; "))
	}
}

// lines returns out's lines with the given prefix, prefix removed.
func lines(out, prefix string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			got = append(got, v)
		}
	}
	return got
}

// value returns the value of the first line "key=value" of out.
func value(out, key string) string {
	if v := lines(out, key+"="); len(v) > 0 {
		return v[0]
	}
	return "<missing>"
}

// cmdlines returns the command lines of the cluster's live processes.
func cmdlines(c *Cluster) map[int]string {
	m := map[int]string{}
	for _, pid := range c.Processes() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil {
			m[pid] = strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return m
}

// waitProcs waits until exactly n of the cluster's processes run the
// command line cmdline (its program by base name: srun runs sleep as
// /usr/bin/sleep), and returns their pids.
func waitProcs(t *testing.T, c *Cluster, cmdline string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pids []int
		for pid, cl := range cmdlines(c) {
			if prog, args, _ := strings.Cut(cl, " "); filepath.Base(prog)+" "+args == cmdline {
				pids = append(pids, pid)
			}
		}
		if len(pids) == n {
			sort.Ints(pids)
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d processes %q in the cluster, have %d: %v", n, cmdline, len(pids), cmdlines(c))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCluster runs its batch jobs at once (sbatch --wait takes 2 s at
// least, and the subtests would run only GOMAXPROCS at a time), then checks
// each in a subtest.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := start(t, Options{CPUs: 8})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	type result struct {
		j    *Job
		err  error
		took time.Duration
	}
	sbatchWait := func(name, body string, args ...string) <-chan result {
		script, err := c.WriteScript(name, body)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan result, 1)
		go func() {
			t0 := time.Now()
			j, err := c.SbatchWait(ctx, script, args...)
			ch <- result{j, err, time.Since(t0)}
		}()
		return ch
	}
	hostnameJob := sbatchWait("hostname.sh", `#!/bin/sh
echo "SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST"
echo "SLURM_TASKS_PER_NODE=$SLURM_TASKS_PER_NODE"
echo "SLURM_NTASKS=$SLURM_NTASKS"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
echo "BATCH_HOST=$(hostname)"
srun hostname | sed 's/^/TASK=/'
`, "-N", "2", "--ntasks-per-node=2")
	gpusJob := sbatchWait("gpus.sh", `#!/bin/sh
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
echo "SLURM_JOB_GPUS=$SLURM_JOB_GPUS"
srun sh -c 'echo "STEP=$(hostname) $CUDA_VISIBLE_DEVICES"'
`, "-N", "2", "--ntasks-per-node=1", "--gpus-per-node=2")
	exitJob := sbatchWait("exit.sh", "#!/bin/sh\necho bye\nexit 7\n")

	t.Run("config", func(t *testing.T) {
		if got := c.NodeNames(); !slices.Equal(got, []string{"node01", "node02"}) {
			t.Errorf("NodeNames: %v", got)
		}
		if got := c.NodeList(); got != "node[01-02]" {
			t.Errorf("NodeList: %q", got)
		}
		if got := c.Env(); !slices.Equal(got, []string{"SLURM_CONF=" + c.Conf}) {
			t.Errorf("Env: %v", got)
		}
		seen := map[int]bool{c.ControllerPort: true}
		for _, n := range c.Nodes() {
			if seen[n.Port] || n.Port < 1024 || n.Pid <= 0 {
				t.Errorf("node %+v (controller port %d)", n, c.ControllerPort)
			}
			seen[n.Port] = true
		}
		out, err := c.Command(ctx, "sinfo", "-h", "-N", "-o", "%N %c %G").CombinedOutput()
		if want := "node01 8 gpu:4\nnode02 8 gpu:4\n"; err != nil || string(out) != want {
			t.Errorf("sinfo: %q, %v; want %q", out, err, want)
		}
		// Every daemon runs, in the cluster's namespaces.
		procs := cmdlines(c)
		for _, want := range []string{Munged + " -F --socket=" + c.MungeSocket, Slurmctld + " -D -f " + c.Conf,
			Slurmd + " -D -N node01 -f " + c.Conf, Slurmd + " -D -N node02 -f " + c.Conf} {
			found := false
			for _, cl := range procs {
				found = found || strings.HasPrefix(cl, want)
			}
			if !found {
				t.Errorf("no process %q among %v", want, procs)
			}
		}
		loaded, err := Load(c.Dir)
		if err != nil || loaded.Conf != c.Conf || !slices.Equal(loaded.Nodes(), c.Nodes()) || len(loaded.daemons) != 4 {
			t.Errorf("Load: %+v, %v", loaded, err)
		}
		if fi, err := os.Stat(c.MungeKey); err != nil || fi.Mode().Perm() != 0o400 || fi.Size() != 1024 {
			t.Errorf("%s: %v, %v", c.MungeKey, fi, err)
		}
	})

	t.Run("scancel", func(t *testing.T) {
		script, err := c.WriteScript("sleep.sh", "#!/bin/sh\necho started\nsrun sleep 300\n")
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Sbatch(ctx, script, "-N", "2", "--ntasks-per-node=1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitState(ctx, j.ID, "RUNNING"); err != nil {
			t.Fatal(err)
		}
		// The step runs on both nodes: one sleep in each node's namespace.
		sleeps := waitProcs(t, c, "sleep 300", 2)
		t0 := time.Now()
		if out, err := c.Command(ctx, "scancel", strconv.Itoa(j.ID)).CombinedOutput(); err != nil {
			t.Fatalf("scancel %d: %v: %s", j.ID, err, out)
		}
		if err := c.WaitJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		t.Logf("scancel: job %d %s in %v", j.ID, j.State, time.Since(t0).Round(time.Millisecond))
		if j.State != "CANCELLED" || !strings.HasPrefix(j.Output, "started\n") {
			t.Errorf("job %d after scancel: state %s, output %q", j.ID, j.State, j.Output)
		}
		for _, pid := range sleeps {
			if p, ok := readProc(pid); ok && !p.Zombie {
				t.Errorf("sleep %d still runs after scancel", pid)
			}
		}
		waitProcs(t, c, "sleep 300", 0)
	})

	t.Run("sbatch-srun-hostname-and-env", func(t *testing.T) {
		r := <-hostnameJob
		if r.err != nil {
			t.Fatal(r.err)
		}
		j := r.j
		t.Logf("sbatch --wait: job %d %s in %v", j.ID, j.State, r.took.Round(time.Millisecond))
		if j.ExitCode != 0 || j.State != "COMPLETED" {
			t.Errorf("job %d: exit code %d, state %s; output:\n%s", j.ID, j.ExitCode, j.State, j.Output)
		}
		tasks := lines(j.Output, "TASK=")
		sort.Strings(tasks)
		if want := []string{"node01", "node01", "node02", "node02"}; !slices.Equal(tasks, want) {
			t.Errorf("srun hostname printed %q, want %q; output:\n%s", tasks, want, j.Output)
		}
		for k, want := range map[string]string{
			"SLURM_JOB_NODELIST":   "node[01-02]",
			"SLURM_TASKS_PER_NODE": "2(x2)",
			"SLURM_NTASKS":         "4",
			"CUDA_VISIBLE_DEVICES": "unset", // no GPUs asked for, none given
			"BATCH_HOST":           "node01",
		} {
			if got := value(j.Output, k); got != want {
				t.Errorf("%s=%s in the batch script, want %s", k, got, want)
			}
		}
	})

	t.Run("gpus", func(t *testing.T) {
		r := <-gpusJob
		if r.err != nil {
			t.Fatal(r.err)
		}
		j := r.j
		if j.ExitCode != 0 {
			t.Fatalf("job %d: exit code %d, state %s; output:\n%s", j.ID, j.ExitCode, j.State, j.Output)
		}
		twoGPUs := func(what, list string) {
			ids := strings.Split(list, ",")
			if len(ids) != 2 || ids[0] == ids[1] {
				t.Errorf("%s=%q, want 2 GPUs", what, list)
			}
			for _, id := range ids {
				if n, err := strconv.Atoi(id); err != nil || n < 0 || n >= c.GPUs {
					t.Errorf("%s=%q: GPU %q is not one of 0..%d", what, list, id, c.GPUs-1)
				}
			}
		}
		twoGPUs("CUDA_VISIBLE_DEVICES", value(j.Output, "CUDA_VISIBLE_DEVICES"))
		twoGPUs("SLURM_JOB_GPUS", value(j.Output, "SLURM_JOB_GPUS"))
		steps := lines(j.Output, "STEP=")
		sort.Strings(steps)
		if len(steps) != 2 || !strings.HasPrefix(steps[0], "node01 ") || !strings.HasPrefix(steps[1], "node02 ") {
			t.Fatalf("steps printed %q; output:\n%s", steps, j.Output)
		}
		for _, s := range steps {
			name, gpus, _ := strings.Cut(s, " ")
			twoGPUs("CUDA_VISIBLE_DEVICES on "+name, gpus)
		}
	})

	t.Run("exit-code", func(t *testing.T) {
		r := <-exitJob
		if r.err != nil {
			t.Fatal(r.err)
		}
		if j := r.j; j.ExitCode != 7 || j.State != "FAILED" || j.Output != "bye\n" {
			t.Errorf("job %d: exit code %d, state %s, output %q; want 7, FAILED, \"bye\\n\"", j.ID, j.ExitCode, j.State, j.Output)
		}
	})
}

// Two clusters at once, of other shapes: each has its own ports, its own
// nodes and, for one, no GPUs.
func TestTwoClusters(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{{Nodes: 1, CPUs: 2, GPUs: -1}, {Nodes: 3, CPUs: 1, GPUs: 1}} {
		t.Run(fmt.Sprintf("nodes=%d", o.Nodes), func(t *testing.T) {
			t.Parallel()
			c := start(t, o)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := c.Command(ctx, "sinfo", "-h", "-N", "-o", "%N %c %G").CombinedOutput()
			var want strings.Builder
			for _, n := range c.NodeNames() {
				gres := "(null)"
				if o.GPUs > 0 {
					gres = "gpu:" + strconv.Itoa(o.GPUs)
				}
				fmt.Fprintf(&want, "%s %d %s\n", n, o.CPUs, gres)
			}
			if err != nil || string(out) != want.String() {
				t.Errorf("sinfo: %q, %v; want %q", out, err, want.String())
			}
			n := strconv.Itoa(o.Nodes)
			// Up leaves every node idle: a job of the whole cluster starts at
			// once (srun would say "queued and waiting for resources" else).
			out, err = c.Command(ctx, "srun", "-N"+n, "-n"+n, "sh", "-c", `echo "$(hostname) $SLURM_JOB_NODELIST"`).CombinedOutput()
			got := strings.Split(strings.TrimSpace(string(out)), "\n")
			sort.Strings(got)
			var wantLines []string
			for _, name := range c.NodeNames() {
				wantLines = append(wantLines, name+" "+c.NodeList())
			}
			if err != nil || !slices.Equal(got, wantLines) {
				t.Errorf("srun: %q, %v; want %q", out, err, wantLines)
			}
			if o.GPUs < 0 {
				out, err := c.Command(ctx, "srun", "--gpus=1", "true").CombinedOutput()
				if err == nil || !strings.Contains(string(out), "Invalid generic resource (gres) specification") {
					t.Errorf("srun --gpus=1 on a cluster without GPUs: %v: %s", err, out)
				}
			}
		})
	}
}

// Down kills a running job's steps and tasks on every node, not only the
// daemons, and leaves nothing; a cluster from Load (another process, which
// holds no namespace) can tear it down too.
func TestDown(t *testing.T) {
	t.Parallel()
	for _, fromLoad := range []bool{false, true} {
		t.Run(fmt.Sprintf("load=%v", fromLoad), func(t *testing.T) {
			t.Parallel()
			c := start(t, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			script, err := c.WriteScript("sleep.sh", "#!/bin/sh\nsrun sleep 301\n")
			if err != nil {
				t.Fatal(err)
			}
			j, err := c.Sbatch(ctx, script, "-N2")
			if err != nil {
				t.Fatal(err)
			}
			sleeps := waitProcs(t, c, "sleep 301", 2)
			before := c.Processes()
			// daemons (5 with slurmscriptd), 2 step slurmstepd's, the batch
			// slurmstepd, the script, 2 sleeps at least.
			if len(before) < 11 {
				t.Errorf("job %d running: cluster processes %v", j.ID, cmdlines(c))
			}
			down := c
			if fromLoad {
				if down, err = Load(c.Dir); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			if err := down.Down(); err != nil {
				t.Fatal(err)
			}
			t.Logf("down in %v, killing %d processes", time.Since(t0).Round(time.Millisecond), len(before))
			for _, pid := range append(before, sleeps...) {
				if p, ok := readProc(pid); ok && !p.Zombie {
					t.Errorf("process %d outlived Down", pid)
				}
			}
			checkGone(t, c)
			if err := down.Down(); err != nil {
				t.Errorf("second Down: %v", err)
			}
			// Start's cleanup calls c.Down too: it reaps the daemons.
		})
	}
}

func TestUpErrors(t *testing.T) {
	t.Parallel()
	if err := Check(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	if _, err := Up(ctx, Options{Nodes: MaxNodes + 1}); err == nil || !strings.Contains(err.Error(), "nodes") {
		t.Errorf("Up with %d nodes: %v", MaxNodes+1, err)
	}
	if _, err := Up(ctx, Options{GPUs: MaxGPUs + 1}); err == nil || !strings.Contains(err.Error(), "GPUs") {
		t.Errorf("Up with %d GPUs: %v", MaxGPUs+1, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Up(ctx, Options{StateDir: dir}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Up in a non-empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Errorf("Up touched a directory it refused: %v", err)
	}
	c := &Cluster{JobsDir: dir}
	if _, err := c.Sbatch(ctx, filepath.Join(dir, "x"), "-o", "out"); err == nil {
		t.Error("Sbatch accepted -o")
	}
	if _, err := c.SbatchWait(ctx, filepath.Join(dir, "missing")); err == nil {
		t.Error("SbatchWait accepted a missing script")
	}
	if _, err := c.WriteScript("../x", ""); err == nil {
		t.Error("WriteScript accepted a path")
	}
}

func TestEnviron(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "99")
	t.Setenv("SBATCH_PARTITION", "other")
	t.Setenv("SRUN_CPUS_PER_TASK", "3")
	t.Setenv("SLURM_CONF", "/elsewhere/slurm.conf")
	t.Setenv("GORUN_SLURMTEST_PROBE", "kept")
	c := &Cluster{Conf: "/x/etc/slurm.conf"}
	env := c.Environ()
	for _, kv := range env {
		if strings.HasPrefix(kv, "SLURM_JOB_ID=") || strings.HasPrefix(kv, "SBATCH_") || strings.HasPrefix(kv, "SRUN_") || kv == "SLURM_CONF=/elsewhere/slurm.conf" {
			t.Errorf("Environ kept %s", kv)
		}
	}
	if !slices.Contains(env, "SLURM_CONF=/x/etc/slurm.conf") || !slices.Contains(env, "GORUN_SLURMTEST_PROBE=kept") {
		t.Errorf("Environ: %v", env)
	}
	for n, want := range map[int]string{1: "node01", 2: "node[01-02]", 12: "node[01-12]"} {
		c.nodes = make([]Node, n)
		for i := range c.nodes {
			c.nodes[i].Name = fmt.Sprintf("node%02d", i+1)
		}
		if got := c.NodeList(); got != want {
			t.Errorf("NodeList of %d nodes: %q, want %q", n, got, want)
		}
	}
}

func TestPorts(t *testing.T) {
	lo, hi := portRange()
	if lo < 1024 || hi > 65535 || lo > hi {
		t.Fatalf("portRange: %d-%d", lo, hi)
	}
	ps, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if p < lo || p > hi || seen[p] {
			t.Errorf("freePorts: %v not distinct in %d-%d", ps, lo, hi)
		}
		seen[p] = true
	}
}

// BenchmarkUpDown measures a cluster's start (Up, to every node idle after
// the srun check) and stop (Down); -benchtime=10x is plenty.
func BenchmarkUpDown(b *testing.B) {
	if err := Check(); err != nil {
		b.Skip(err)
	}
	var up, down time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := Up(context.Background(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := c.Down(); err != nil {
			b.Fatal(err)
		}
		up, down = up+t1.Sub(t0), down+time.Since(t1)
	}
	b.ReportMetric(float64(up.Milliseconds())/float64(b.N), "up-ms/op")
	b.ReportMetric(float64(down.Milliseconds())/float64(b.N), "down-ms/op")
}
