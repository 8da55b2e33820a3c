package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/internal/testenv"
)

// Every rank sees the same MASTER_PORT, as under torchrun, and rank 0
// binds it itself (a second late, as torch's store once rank 0 has
// imported torch) while the others, refused until then, try again as a
// store client does.
func TestMasterPortSameOnEveryRank(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "/usr/bin/python3", "python3")
	r := runGorun(t, 60*time.Second, nil, "-np", "3", "/usr/bin/python3", "testdata/masterport/late.py")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	ports := map[string]bool{}
	var hellos []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[2] == "MASTER_PORT" {
			ports[f[3]] = true
		} else {
			hellos = append(hellos, line)
		}
	}
	sort.Strings(hellos)
	if len(ports) != 1 || strings.Join(hellos, "\n") != "rank 0 got hello from rank 1\nrank 0 got hello from rank 2" {
		t.Errorf("MASTER_PORT by rank: %v (want one port for all)\nstdout:\n%s\nstderr:\n%s", ports, r.stdout, r.stderr)
	}
}

// The migrant review's P7: a torch job that opens a second store at
// MASTER_PORT+1 (Megatron-LM's in-process restart does) runs, since every
// rank's MASTER_PORT is rank 0's.
func TestMasterPortPlusOne(t *testing.T) {
	t.Parallel()
	requireTorch(t)
	r := runGorun(t, 120*time.Second, nil, "-np", "2", torchPython, "testdata/masterport/port1.py")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(lines)
	if r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "rank 0 saw MASTER_PORT ") ||
		strings.Contains(lines[0], ",") || strings.TrimPrefix(lines[0], "rank 0") != strings.TrimPrefix(lines[1], "rank 1") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// Attacks 5c and 5d of the security review: connections to MASTER_PORT on
// a job that never uses it. Nothing of gorun's listens there (the agent
// only holds the port for rank 0 until the ranks start), so every
// connection is refused by the kernel and costs the agent nothing, and
// there are no waiting slots to fill. Before, a gate in the agent took
// each one and redialled rank 0 every 20 ms for up to 10 minutes: 300
// connections cost 42% of a core.
func TestMasterPortNoGate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	cmd := gorunCommand(context.Background(), "-np", "2", "sh", "-c",
		`f="$0.$RANK"; echo "$MASTER_PORT" > "$f.tmp" && mv "$f.tmp" "$f"; while [ ! -e "$0.go" ]; do sleep 0.05; done`, portFile)
	j := startJob(t, cmd)
	j.waitFile(portFile + ".0")
	// Rank 1's: where every rank but 0 connects.
	port, err := strconv.Atoi(strings.TrimSpace(string(j.waitFile(portFile + ".1"))))
	if err != nil {
		t.Fatal(err)
	}
	agent := localAgent(t, cmd)
	// The agent listens on no TCP port at all (a one-host job).
	listening, _ := netSockets(t)
	for _, in := range socketsOf(agent) {
		if l, ok := listening[in]; ok && strings.HasPrefix(l, "tcp ") {
			t.Errorf("the agent of a one-host job listens on %s", l)
		}
	}
	before := cpuTicks(t, agent)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var taken []net.Conn
	for range 300 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			taken = append(taken, c)
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("connecting to MASTER_PORT %d: %v, want refused", port, err)
		}
	}
	if len(taken) > 0 {
		t.Errorf("%d of 300 connections to MASTER_PORT %d were taken by something of gorun's before rank 0 listened", len(taken), port)
	}
	time.Sleep(2 * time.Second)
	for _, c := range taken {
		c.Close()
	}
	// 20 ticks: 0.2 s of CPU in about 2 s, where the old gate spent ~0.8.
	if used := cpuTicks(t, agent) - before; used > 20 {
		t.Errorf("the agent spent %d ticks of CPU while 300 connections to MASTER_PORT came and waited", used)
	}
	if err := j.wait(portFile + ".go"); err != nil {
		t.Fatalf("gorun: %v\n%s", err, j.output())
	}
}

// cpuTicks is the CPU time (user and kernel, in clock ticks) that process
// pid has spent.
func cpuTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := procfs.ParseStat(b)
	if err != nil {
		t.Fatal(err)
	}
	return st.UTime + st.STime
}
