package gridenginetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	t.Logf("up %d exec hosts in %v: subnet %s, state %s", len(c.nodes), time.Since(t0).Round(time.Millisecond), c.Subnet, c.Dir)
	return c
}

// leftovers lists what a cluster that is down still has: live processes
// naming its state directory (in their command line or environment), its
// processes by namespace, mounts under its directory, the directory, and
// its unreachable route.
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
	if _, err := os.Stat(c.Dir); err == nil {
		left = append(left, "directory "+c.Dir)
	}
	out, _ := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, c.Subnet.String()) {
			left = append(left, "route "+line)
		}
	}
	return left
}

func checkGone(t *testing.T, c *Cluster) {
	t.Helper()
	if left := leftovers(c); len(left) > 0 {
		t.Errorf("after Down, the cluster left:\n%s", strings.Join(left, "\n"))
	}
}

// run runs cmd and returns its stdout, failing t on error.
func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s%s", strings.Join(cmd.Args, " "), err, stderr.String(), out)
	}
	return string(out)
}

// fields returns the value of each "KEY=value" line of out.
func fields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.Contains(k, " ") {
			m[k] = v
		}
	}
	return m
}

// peScript prints the job's context, its $PE_HOSTFILE between markers, and
// the name that `qrsh -inherit OTHER hostname` prints, OTHER being the
// first host of $PE_HOSTFILE that is not this one.
const peScript = `#!/bin/sh
echo "HOST=$(hostname)"
echo "JOB_ID=$JOB_ID"
echo "NSLOTS=$NSLOTS"
echo "NHOSTS=$NHOSTS"
echo "PE=$PE"
echo "--- PE_HOSTFILE"
cat "$PE_HOSTFILE"
echo "---"
other=$(awk -v me="$(hostname)" '$1 != me { print $1; exit }' "$PE_HOSTFILE")
echo "OTHER=$other"
echo "QRSH=$(qrsh -inherit "$other" hostname)"
`

// sleepScript starts a sleep on another host with qrsh -inherit and one
// here, and waits for both.
const sleepScript = `#!/bin/sh
other=$(awk -v me="$(hostname)" '$1 != me { print $1; exit }' "$PE_HOSTFILE")
qrsh -inherit "$other" sleep 1001 &
sleep 1000 &
wait
`

func TestCluster(t *testing.T) {
	c := start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("Hosts", func(t *testing.T) {
		for _, h := range append([]Host{c.Master()}, c.Nodes()...) {
			if got := strings.TrimSpace(run(t, c.HostCommand(ctx, h.Name, "hostname"))); got != h.Name {
				t.Errorf("hostname on %s printed %q", h.Name, got)
			}
		}
		// Names resolve inside, from the private /etc/hosts.
		n1, n2 := c.Nodes()[0], c.Nodes()[1]
		got := strings.Fields(run(t, c.HostCommand(ctx, n1.Name, "getent", "hosts", n2.Name)))
		if len(got) < 2 || got[0] != n2.Addr.String() || got[1] != n2.Name {
			t.Errorf("getent hosts %s on %s printed %q, want %s %s", n2.Name, n1.Name, got, n2.Addr, n2.Name)
		}
		// This machine's /etc/hosts is not changed.
		if b, err := os.ReadFile("/etc/hosts"); err != nil || bytes.Contains(b, []byte(c.Master().Addr.String())) {
			t.Errorf("/etc/hosts names the cluster (or cannot be read: %v):\n%s", err, b)
		}
	})

	t.Run("Env", func(t *testing.T) {
		// The wrappers in PATH run the clients on the qmaster host.
		cmd := exec.CommandContext(ctx, filepath.Join(c.ClientsDir, "qstat"), "-f")
		cmd.Env = c.Environ()
		out := run(t, cmd)
		for _, n := range c.NodeNames() {
			if !strings.Contains(out, Queue+"@"+n) {
				t.Errorf("qstat -f through the wrapper does not list %s@%s:\n%s", Queue, n, out)
			}
		}
		// A client run outside the cluster finds no cell (and so looks
		// up no name).
		cmd = exec.CommandContext(ctx, BinDir+"/qstat", "-f")
		cmd.Env = c.Environ()
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "bootstrap") {
			t.Errorf("qstat outside the cluster: %v: %s; want a failure to read the bootstrap file", err, out)
		}
	})

	t.Run("PEJob", func(t *testing.T) {
		script, err := c.WriteScript("pe.sh", peScript)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		j, err := c.RunPE(ctx, 4, script)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("qsub -sync y -pe %s 4: job %d in %v: %s", PE, j.ID, time.Since(t0).Round(time.Millisecond), j.Message)
		if j.ExitCode != 0 || j.Message != fmt.Sprintf("Job %d exited with exit code 0.", j.ID) {
			t.Fatalf("job %d: exit code %d, %q; output:\n%s", j.ID, j.ExitCode, j.Message, j.Output)
		}
		f := fields(j.Output)
		if f["JOB_ID"] != strconv.Itoa(j.ID) || f["NSLOTS"] != "4" || f["NHOSTS"] != "2" || f["PE"] != PE {
			t.Errorf("job %d: JOB_ID=%s NSLOTS=%s NHOSTS=%s PE=%s, want %d 4 2 %s", j.ID, f["JOB_ID"], f["NSLOTS"], f["NHOSTS"], f["PE"], j.ID, PE)
		}
		_, rest, _ := strings.Cut(j.Output, "--- PE_HOSTFILE\n")
		hf, _, _ := strings.Cut(rest, "---\n")
		lines, err := ParsePEHostfile(hf)
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, l := range lines {
			hosts = append(hosts, l.Host)
			if l.Slots != 2 || l.Queue != Queue+"@"+l.Host || l.Processors != "UNDEFINED" {
				t.Errorf("PE_HOSTFILE line %+v: want 2 slots (round robin), queue %s@%s, processors UNDEFINED", l, Queue, l.Host)
			}
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, c.NodeNames()) {
			t.Errorf("PE_HOSTFILE names %v, want %v:\n%s", hosts, c.NodeNames(), hf)
		}
		if !slices.Contains(c.NodeNames(), f["HOST"]) || f["OTHER"] == f["HOST"] || !slices.Contains(c.NodeNames(), f["OTHER"]) {
			t.Errorf("job ran on %q, other host %q", f["HOST"], f["OTHER"])
		}
		if f["QRSH"] != f["OTHER"] {
			t.Errorf("qrsh -inherit %s hostname printed %q; output:\n%s", f["OTHER"], f["QRSH"], j.Output)
		}
	})

	t.Run("ExitCode", func(t *testing.T) {
		script, err := c.WriteScript("exit3.sh", "#!/bin/sh\necho bye\nexit 3\n")
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.QsubSync(ctx, script)
		if err != nil {
			t.Fatal(err)
		}
		if j.ExitCode != 3 || j.Output != "bye\n" || j.Signal != "" {
			t.Errorf("job %d: exit code %d, signal %q, output %q (%s); want 3, none, \"bye\\n\"", j.ID, j.ExitCode, j.Signal, j.Output, j.Message)
		}
	})

	t.Run("Qdel", func(t *testing.T) {
		script, err := c.WriteScript("sleep.sh", sleepScript)
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Qsub(ctx, script, "-pe", PE, "4")
		if err != nil {
			t.Fatal(err)
		}
		// Wait for both sleeps, the one that qrsh -inherit started too.
		var procs []Proc
		var gids []int
		for {
			procs = c.JobProcesses(j.ID)
			gids = c.JobGIDs(j.ID)
			var sleeps []string
			for _, p := range procs {
				if strings.HasPrefix(p.Cmdline, "sleep 100") {
					sleeps = append(sleeps, p.Host)
				}
			}
			slices.Sort(sleeps)
			if slices.Equal(sleeps, c.NodeNames()) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("job %d: no sleep on each host: %v", j.ID, procs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("job %d's processes (additional group ids %v):\n%s", j.ID, gids, procList(procs))
		if len(gids) != len(c.nodes) {
			t.Errorf("job %d: additional group ids %v, want one per exec host", j.ID, gids)
		}
		t0 := time.Now()
		if err := c.Qdel(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		for len(c.JobProcesses(j.ID, gids...)) > 0 {
			if time.Since(t0) > 20*time.Second {
				t.Fatalf("20 s after qdel, job %d still has:\n%s", j.ID, procList(c.JobProcesses(j.ID, gids...)))
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("qdel: every process of job %d gone after %v", j.ID, time.Since(t0).Round(time.Millisecond))
		if err := c.WaitGone(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if info, ok := readProc(p.Pid); ok && !info.Zombie {
				t.Errorf("process %v outlived qdel", p)
			}
		}
	})

	t.Run("Verify", func(t *testing.T) {
		if err := c.Verify(ctx); err != nil {
			t.Fatal(err)
		}
	})

	// Down from another process's view (Load), with a job running.
	script, err := c.WriteScript("sleep2.sh", sleepScript)
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Qsub(ctx, script, "-pe", PE, "2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitRunning(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	d, err := Load(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := d.Down(); err != nil {
		t.Fatal(err)
	}
	t.Logf("down (loaded) in %v", time.Since(t0).Round(time.Millisecond))
	checkGone(t, c)
}

func procList(ps []Proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %v\n", p)
	}
	return b.String()
}

func TestOptions(t *testing.T) {
	ctx := context.Background()
	for _, o := range []Options{{Nodes: -1}, {Nodes: MaxNodes + 1}, {Slots: -1}, {Slots: MaxSlots + 1}} {
		if Check() != nil {
			t.Skip(Check())
		}
		if c, err := Up(ctx, o); err == nil {
			c.Down()
			t.Errorf("Up(%+v) succeeded", o)
		}
	}
}

func TestParsePEHostfile(t *testing.T) {
	lines, err := ParsePEHostfile("node01 2 all.q@node01 UNDEFINED\nnode02 2 all.q@node02 UNDEFINED\n")
	if err != nil || len(lines) != 2 || lines[1] != (PEHostfileLine{"node02", 2, "all.q@node02", "UNDEFINED"}) {
		t.Errorf("ParsePEHostfile: %+v, %v", lines, err)
	}
	if _, err := ParsePEHostfile("node01 two all.q@node01 UNDEFINED\n"); err == nil {
		t.Error("ParsePEHostfile accepted a bad slot count")
	}
}
