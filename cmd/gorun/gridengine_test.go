package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/gridenginetest"
	"github.com/gorun/gorun/internal/testenv"
)

// The Grid Engine tests run gorun inside batch jobs of a real Grid Engine
// cluster on this machine (package gridenginetest: sge_qmaster and two
// sge_execd, node01 and node02, each in namespaces of its own, with the
// parallel environment "gorun"), with the gorun binary built into /var/tmp
// (buildShared), which every host sees. Every job is `qsub -pe gorun 4` on
// two slots per host: gorun reads $PE_HOSTFILE and starts node02's agent
// through `qrsh -inherit node02`.

// geSlots is the number of slots of each exec host, so that a job of
// 2*geSlots slots gets all of both.
const geSlots = 2

// TestGridEngine runs its subtests in one cluster (started and taken down
// by gridenginetest.Start): a cluster takes seconds to start.
func TestGridEngine(t *testing.T) {
	c := gridenginetest.Start(t, gridenginetest.Options{Nodes: 2, Slots: geSlots})
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	t.Run("DryRun", func(t *testing.T) { testGridEngineDryRun(t, c) })
	t.Run("MPICH", func(t *testing.T) { testGridEngineMPICH(t, c) })
	t.Run("TorchGloo", func(t *testing.T) { testGridEngineTorch(t, c) })
	t.Run("Qdel", func(t *testing.T) { testGridEngineQdel(t, c) })
}

// geScript writes a job script that finds gorun first in PATH.
func geScript(t *testing.T, c *gridenginetest.Cluster, name, body string) string {
	t.Helper()
	p, err := c.WriteScript(name, "#!/bin/bash\nexport PATH="+binDir+":$PATH\ncd "+binDir+"\n"+body)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runGEJob runs script as `qsub -sync y -pe gorun 4` and returns the ended
// job, failing unless it exited 0.
func runGEJob(t *testing.T, c *gridenginetest.Cluster, script string) *gridenginetest.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	j, err := c.RunPE(ctx, 2*geSlots, script)
	if err != nil {
		if j != nil {
			// Out of time: say what the job printed, and end it, so that
			// the next test's job finds the slots free.
			out, _ := os.ReadFile(j.OutputFile)
			qctx, qcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer qcancel()
			if qerr := c.Qdel(qctx, j.ID); qerr == nil {
				c.WaitGone(qctx, j.ID)
			}
			t.Fatalf("%v\njob %d's output so far:\n%s", err, j.ID, out)
		}
		t.Fatal(err)
	}
	t.Logf("job %d took %v", j.ID, time.Since(start).Round(time.Millisecond))
	if j.ExitCode != 0 {
		t.Fatalf("job %d: exit %d (%s)\n%s", j.ID, j.ExitCode, j.Message, j.Output)
	}
	return j
}

// wantLines fails t for every string of want that out lacks.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// --dry-run and --display-map inside the job name Grid Engine, its job and
// qrsh -inherit, and map two ranks to each exec host.
func testGridEngineDryRun(t *testing.T, c *gridenginetest.Cluster) {
	p := geScript(t, c, "dryrun.sh", `gorun --dry-run -np 4 hostname
echo "dry-run-exit $?"
gorun --display-map -np 4 hostname | sort
echo "display-map-exit $?"
`)
	j := runGEJob(t, c, p)
	wantLines(t, j.Output, "dry-run-exit 0", "display-map-exit 0",
		fmt.Sprintf("gorun: backend: sge: Grid Engine job %d; agents on other hosts through qrsh -inherit HOST (tight integration)", j.ID),
		"node01", "node02")
	// The real run printed two host names per exec host.
	var names []string
	for _, l := range strings.Split(j.Output, "\n") {
		if l == "node01" || l == "node02" {
			names = append(names, l)
		}
	}
	if got := strings.Join(names, " "); got != "node01 node01 node02 node02" {
		t.Errorf("the ranks ran on %q, want two on each of node01 and node02:\n%s", got, j.Output)
	}
}

// mpiHostC is an MPICH program that prints each rank's host and checks an
// all-reduce across the hosts.
const mpiHostC = `#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
	int rank, size, len, sum = 0;
	char host[MPI_MAX_PROCESSOR_NAME];
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &len);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	printf("mpi rank %d of %d on %s sum %d\n", rank, size, host, sum);
	MPI_Finalize();
	return 0;
}
`

// An MPICH program (PMI-1, served by gorun's agents) runs its four ranks on
// both exec hosts, and their all-reduce crosses the hosts.
func testGridEngineMPICH(t *testing.T, c *gridenginetest.Cluster) {
	testenv.NeedTool(t, "mpicc.mpich", "mpich libmpich-dev")
	src := filepath.Join(binDir, "gehost.c")
	bin := filepath.Join(binDir, "gehost-mpich")
	if err := os.WriteFile(src, []byte(mpiHostC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nice", "-n", "19", "mpicc.mpich", "-O1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("mpicc.mpich: %v\n%s", err, out)
	}
	p := geScript(t, c, "mpich.sh", fmt.Sprintf("gorun --rendezvous-timeout 60s -np 4 %s\n", bin))
	j := runGEJob(t, c, p)
	hosts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^mpi rank (\d) of 4 on (\S+) sum 6$`).FindAllStringSubmatch(j.Output, -1) {
		hosts[m[2]]++
	}
	if hosts["node01"] != 2 || hosts["node02"] != 2 {
		t.Errorf("ranks per host %v, want 2 on each of node01 and node02:\n%s", hosts, j.Output)
	}
}

// geTorchPy all-reduces each rank's rank+1 over gloo (init_method env://,
// from gorun's MASTER_ADDR and MASTER_PORT) and prints the sum. A
// MASTER_ADDR that node02 cannot reach (127.0.0.1, as gorun gave before it
// took rank 0's default-route address under a batch launcher) fails the
// rendezvous after 60 s.
const geTorchPy = `import datetime, os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("torch rank %d/%d on %s master %s sum %g" % (dist.get_rank(), dist.get_world_size(), socket.gethostname(), os.environ["MASTER_ADDR"], t.item()), flush=True)
dist.destroy_process_group()
`

// A PyTorch gloo job of four ranks on both exec hosts: MASTER_ADDR must be
// an address that node02's ranks reach, and the all-reduce gives 1+2+3+4.
func testGridEngineTorch(t *testing.T, c *gridenginetest.Cluster) {
	requireTorch(t)
	py := filepath.Join(binDir, "ge_gloo.py")
	if err := os.WriteFile(py, []byte(geTorchPy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := geScript(t, c, "torch.sh", fmt.Sprintf("gorun --rendezvous-timeout 90s -np 4 %s %s\n", torchPython, py))
	j := runGEJob(t, c, p)
	hosts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^torch rank (\d)/4 on (\S+) master (\S+) sum 10$`).FindAllStringSubmatch(j.Output, -1) {
		hosts[m[2]]++
		if strings.HasPrefix(m[3], "127.") || m[3] == "localhost" {
			t.Errorf("rank %s: MASTER_ADDR=%s, which only its own host reaches", m[1], m[3])
		}
	}
	if hosts["node01"] != 2 || hosts["node02"] != 2 {
		t.Errorf("ranks per host %v, want 2 on each of node01 and node02 with sum 10:\n%s", hosts, j.Output)
	}
}

// qdel of a running job stops every rank on both hosts, the agents and
// gorun itself: nothing of the job is left.
func testGridEngineQdel(t *testing.T, c *gridenginetest.Cluster) {
	mark := newMark(t)
	p := geScript(t, c, "qdel.sh", fmt.Sprintf(`gorun -np 4 -x GORUN_TEST_MARK=%s sh -c 'echo "up $RANK on $(hostname)"; while :; do sleep 0.05; done'
echo "gorun-exit $?"
`, mark))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j, err := c.Qsub(ctx, p, "-pe", gridenginetest.PE, fmt.Sprint(2*geSlots))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitRunning(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 4, 60*time.Second)
	gids := c.JobGIDs(j.ID)
	before := c.JobProcesses(j.ID, gids...)
	var onHosts []string
	gorunProcs := 0
	for _, pr := range before {
		onHosts = append(onHosts, pr.Host)
		if strings.HasPrefix(pr.Cmdline, gorunBin) {
			gorunProcs++
		}
	}
	slices.Sort(onHosts)
	onHosts = slices.Compact(onHosts)
	// gorun and node01's agent on node01, node02's agent on node02 (the
	// local agent may be gorun's own process).
	if len(onHosts) != 2 || gorunProcs < 2 {
		t.Fatalf("before qdel: job %d's processes (gids %v) on %v, %d of them gorun's, want gorun's on both hosts:\n%s",
			j.ID, gids, onHosts, gorunProcs, procList(before))
	}
	start := time.Now()
	if err := c.Qdel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitGone(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	assertNoSurvivors(t, mark, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := c.JobProcesses(j.ID, gids...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after qdel, job %d's processes survived:\n%s", j.ID, procList(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("qdel to nothing left: %v", time.Since(start).Round(time.Millisecond))
	// The ranks ran on both hosts (which is first, where the job script
	// and ranks 0 and 1 run, is the scheduler's choice).
	out, _ := os.ReadFile(j.OutputFile)
	hosts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^up [0-3] on (\S+)$`).FindAllStringSubmatch(string(out), -1) {
		hosts[m[1]]++
	}
	if hosts["node01"] != 2 || hosts["node02"] != 2 {
		t.Errorf("job %d: ranks per host %v, want 2 on each of node01 and node02:\n%s", j.ID, hosts, out)
	}
}

// procList is one process a line.
func procList(ps []gridenginetest.Proc) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}
