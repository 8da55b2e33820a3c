package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/slurmtest"
)

// The Slurm tests run gorun inside batch jobs of a real Slurm cluster on
// this machine (package slurmtest: slurmctld and two slurmd in their own
// UTS namespaces, four fake GPUs each), with the gorun binary built into
// /var/tmp, which every node sees.

var (
	slurmOnce sync.Once
	slurm     *slurmtest.Cluster
	slurmErr  error
)

// sharedSlurm returns a 2-node cluster of 4 CPUs and 4 GPUs per node, up
// for the whole test binary (TestMain takes it down).
func sharedSlurm(t *testing.T) *slurmtest.Cluster {
	t.Helper()
	slurmtest.Need(t)
	slurmOnce.Do(func() {
		if slurmErr = buildShared(); slurmErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		slurm, slurmErr = slurmtest.Up(ctx, slurmtest.Options{Nodes: 2, CPUs: 4, GPUs: 4})
	})
	if slurmErr != nil {
		t.Fatal(slurmErr)
	}
	return slurm
}

// exportArgs makes a batch job find gorun and the examples.
func exportArgs(extra ...string) string {
	examples, _ := filepath.Abs("../../examples")
	v := []string{"ALL", "PATH=" + binDir + ":" + os.Getenv("PATH"), "GORUN_EXAMPLES=" + examples}
	return "--export=" + strings.Join(append(v, extra...), ",")
}

// runSlurmJob submits script and waits for the job's end (polling, which is
// faster than sbatch --wait).
func runSlurmJob(t *testing.T, c *slurmtest.Cluster, script string, args ...string) *slurmtest.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	j, err := c.Sbatch(ctx, script, append([]string{exportArgs()}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitJob(ctx, j); err != nil {
		t.Fatalf("job %d: %v\n%s", j.ID, err, j.Output)
	}
	return j
}

// script writes a batch script.
func script(t *testing.T, c *slurmtest.Cluster, name, body string) string {
	t.Helper()
	p, err := c.WriteScript(name, "#!/bin/bash\n"+body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every example under examples/slurm runs as its comment says.
func TestSlurmExamples(t *testing.T) {
	c := sharedSlurm(t)
	mpi := buildMPI(t, binDir, "mpicc.mpich", "check.c")
	for _, tt := range []struct {
		file string
		want []string
	}{
		{"one-node.sbatch", []string{"rank 0 of 4 local 0 on node01 slurm_procid 0", "rank 3 of 4 local 3 on node01 slurm_procid 3"}},
		{"many-nodes.sbatch", []string{"backend: slurm", "SLURM_TASKS_PER_NODE=4(x2)",
			"rank 0 of 8 node 0 local 0 on node01 slurm 0/0/0", "rank 5 of 8 node 1 local 1 on node02 slurm 5/1/1", "rank 7 of 8 node 1 local 3 on node02 slurm 7/1/3"}},
		{"gpus.sbatch", []string{"rank 0 local 0 on node01 CUDA_VISIBLE_DEVICES=0,1", "rank 1 local 1 on node01 CUDA_VISIBLE_DEVICES=0,1",
			"rank 2 local 0 on node02 CUDA_VISIBLE_DEVICES=0,1", "rank 3 local 1 on node02 CUDA_VISIBLE_DEVICES=0,1",
			"single: rank 0 on node01 CUDA_VISIBLE_DEVICES=0", "single: rank 1 on node01 CUDA_VISIBLE_DEVICES=1",
			"single: rank 2 on node02 CUDA_VISIBLE_DEVICES=0", "single: rank 3 on node02 CUDA_VISIBLE_DEVICES=1"}},
		{"torch.sbatch", []string{"rank 0/4 weights sha256=", "rank 3/4 weights sha256="}},
		{"mpi.sbatch", []string{"PASS", "rank 0 of 4 node 2", "rank 3 of 4 node 2"}},
		{"bench.sbatch", []string{"# Ranks                : 4", "# Hosts                : 2", "# Transport            : shm+tcp",
			"allreduce", "# Out of bounds values : 0"}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("../../examples/slurm", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			p := script(t, c, tt.file, strings.Replace(string(src), "#!/bin/bash\n", "", 1))
			// sbatch --wait, as a user's script would (it polls every 2 s).
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			j, err := c.SbatchWait(ctx, p, exportArgs("MPI_CHECK="+mpi))
			if err != nil {
				t.Fatal(err)
			}
			if j.ExitCode != 0 || j.State != "COMPLETED" {
				t.Fatalf("job %d: exit %d, state %s\n%s", j.ID, j.ExitCode, j.State, j.Output)
			}
			for _, w := range tt.want {
				if !strings.Contains(j.Output, w) {
					t.Errorf("output lacks %q:\n%s", w, j.Output)
				}
			}
		})
	}
}

// A rank that fails inside sbatch ends the job at once, with its exit code
// as the job's, its rank and node named, and nothing left running.
func TestSlurmRankFailure(t *testing.T) {
	c := sharedSlurm(t)
	mark := newMark(t)
	p := script(t, c, "fail.sbatch", fmt.Sprintf(`#SBATCH -N 2 --ntasks-per-node=2
gorun -x GORUN_TEST_MARK=%s sh -c 'if [ "$RANK" = 3 ]; then sleep 0.5; exit 3; fi; sleep 60'
`, mark))
	start := time.Now()
	j := runSlurmJob(t, c, p)
	if j.ExitCode != 3 || !strings.Contains(j.Output, "rank 3 on node02") || !strings.Contains(j.Output, "exited with code 3") {
		t.Errorf("job %d: exit %d\n%s", j.ID, j.ExitCode, j.Output)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the job took %v", d)
	}
	assertNoSurvivors(t, mark, 2*time.Second)
}

// scancel --signal=USR1 (a preemption warning) reaches every rank once,
// those Slurm signals itself and those on gorun's own node alike; a
// plain scancel ends the job with no survivors, its summary naming the
// signal.
func TestSlurmSignals(t *testing.T) {
	c := sharedSlurm(t)
	for _, tt := range []struct {
		name, scancel, trap string
		want                func(rank int) string
	}{
		{"USR1", "--signal=USR1", "USR1", func(r int) string { return fmt.Sprintf("usr1-%d\n", r) }},
		{"cancel", "", "TERM", func(r int) string { return fmt.Sprintf("term-%d\n", r) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mark := newMark(t)
			// The ranks of the batch host get a cancel's SIGTERM twice,
			// from slurmstepd (they are in the batch step) and from gorun,
			// which forwards what it got: the trap ignores the signal once
			// it runs, so that each rank says it got the signal once.
			// gorun is the batch script's process (exec): a cancel's
			// SIGTERM ends a bash that waits for it at once, and Slurm
			// then kills what is left of the batch step, which on a
			// loaded machine may be gorun before its summary.
			p := script(t, c, "sig.sbatch", fmt.Sprintf(`#SBATCH -N 2 --ntasks-per-node=2
exec gorun -x GORUN_TEST_MARK=%s sh -c 'trap "trap \"\" %s; echo %s-$RANK; exit 0" %s; echo up-$RANK; while :; do sleep 0.05; done'
`, mark, tt.trap, strings.ToLower(tt.trap), tt.trap))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			j, err := c.Sbatch(ctx, p, exportArgs())
			if err != nil {
				t.Fatal(err)
			}
			waitMarked(t, mark, 4, 30*time.Second)
			time.Sleep(300 * time.Millisecond) // the traps are set
			args := []string{fmt.Sprint(j.ID)}
			if tt.scancel != "" {
				args = append([]string{tt.scancel}, args...)
			}
			if out, err := c.Command(ctx, "scancel", args...).CombinedOutput(); err != nil {
				t.Fatalf("scancel %v: %v\n%s", args, err, out)
			}
			if err := c.WaitJob(ctx, j); err != nil {
				t.Fatal(err)
			}
			for r := range 4 {
				n := strings.Count(j.Output, tt.want(r))
				// A plain scancel also sends SIGTERM to the srun that
				// started the agents, and srun answers it with SIGKILL
				// to its step (Slurm's srun_job.c, the same for any
				// srun in a cancelled batch script): on a loaded
				// machine a rank may die before its trap runs. It
				// must never hear the signal twice.
				if n > 1 || n == 0 && tt.scancel != "" {
					t.Errorf("rank %d got %q %d times\n%s", r, strings.TrimSpace(tt.want(r)), n, j.Output)
				}
			}
			if tt.scancel == "" && !strings.Contains(j.Output, "gorun got SIGTERM") {
				t.Errorf("the summary does not name the SIGTERM:\n%s", j.Output)
			}
			assertNoSurvivors(t, mark, 2*time.Second)
		})
	}
}

// Inside an allocation a host list may only choose among its nodes, and
// -np defaults to the tasks asked for, not the slots Slurm rounded up.
func TestSlurmHostChoice(t *testing.T) {
	c := sharedSlurm(t)
	p := script(t, c, "hosts.sbatch", `#SBATCH -N 2 -n 3
gorun sh -c 'echo "rank $RANK of $WORLD_SIZE on $(hostname)"'
echo "default-np-exit $?"
gorun -H node02 sh -c 'echo "only rank $RANK of $WORLD_SIZE on $(hostname)"'
echo "only-node02-exit $?"
gorun -H node01,node07 true
echo "outside-exit $?"
gorun --launcher ssh -H node01 true
echo "ssh-exit $?"
`)
	j := runSlurmJob(t, c, p)
	for _, w := range []string{"of 3 on node01", "rank 2 of 3 on node02", "default-np-exit 0",
		"only rank 0 of 1 on node02", "only-node02-exit 0",
		"host node07 is not in Slurm job", "outside-exit 2"} {
		if !strings.Contains(j.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, j.Output)
		}
	}
}

// A node that dies (its agent killed with SIGKILL, as when the node goes
// down) ends the job with gorun's own failure code, naming the node, and
// leaves no rank running anywhere.
func TestSlurmNodeLost(t *testing.T) {
	c := sharedSlurm(t)
	mark := newMark(t)
	p := script(t, c, "lost.sbatch", fmt.Sprintf(`#SBATCH -N 2 --ntasks-per-node=2
gorun -x GORUN_TEST_MARK=%s sh -c 'while :; do sleep 0.05; done'
echo "gorun-exit $?"
`, mark))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := c.Sbatch(ctx, p, exportArgs())
	if err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 4, 30*time.Second)
	killed := 0
	for _, pid := range allPIDs() {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.HasPrefix(string(b), gorunBin+"\x00agent\x00--connect") {
			syscall.Kill(pid, syscall.SIGKILL)
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("found %d srun-started agents, want 1 (node02's)", killed)
	}
	if err := c.WaitJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.Output, "lost the agent on node02") || !strings.Contains(j.Output, "gorun-exit 125") {
		t.Errorf("job %d:\n%s", j.ID, j.Output)
	}
	assertNoSurvivors(t, mark, 3*time.Second)
}

// allPIDs lists every process.
func allPIDs() []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Open MPI and mpi4py inside sbatch, through the PMIx plugin: Open MPI's
// own Slurm detection must not take gorun's ranks for srun's (it ran them
// as singletons until gorun set OMPI_MCA_schizo=ompi).
func TestSlurmOpenMPI(t *testing.T) {
	c := sharedSlurm(t)
	pmixPlugin(t, binDir) // next to gorunBin
	bin := buildMPI(t, binDir, "mpicc.openmpi", "check.c")
	py, err := filepath.Abs("testdata/mpi4py_allreduce.py")
	if err != nil {
		t.Fatal(err)
	}
	p := script(t, c, "ompi.sbatch", fmt.Sprintf(`#SBATCH -N 2 --ntasks-per-node=2
gorun --rendezvous-timeout 30s %s
echo "ompi-exit $?"
gorun --rendezvous-timeout 30s /usr/bin/python3 %s
echo "mpi4py-exit $?"
`, bin, py))
	j := runSlurmJob(t, c, p)
	for _, w := range []string{"PASS", "rank 0 of 4 node 2", "rank 3 of 4 node 2", "ompi-exit 0",
		"rank 0 of 4 sum 10", "rank 3 of 4 sum 10", "mpi4py-exit 0"} {
		if !strings.Contains(j.Output, w) {
			t.Errorf("output lacks %q:\n%s", w, j.Output)
		}
	}
}
