package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/internal/testusers"
	"github.com/gorun/gorun/jobs"
)

// floodPy is package jobs' flood script, which another user runs against
// a job's socket.
var floodPy = filepath.Join("..", "..", "jobs", "testdata", "flood.py")

// jobInfo returns the job file of the job j runs.
func (j *liveJob) jobInfo() jobs.Info {
	j.t.Helper()
	for _, kv := range j.env {
		if dir, ok := strings.CutPrefix(kv, "GORUN_JOBS_DIR="); ok {
			info, err := jobs.Find(dir, "")
			if err != nil {
				j.t.Fatal(err)
			}
			return info
		}
	}
	j.t.Fatal("the job has no GORUN_JOBS_DIR")
	return jobs.Info{}
}

// Row 3e of the security review: another user of the machine holds the
// job socket's connections (more than it serves at once), reopening each
// one it closes; the owner's gorun status and gorun stacks still answer.
func TestStatusUnderFlood(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	attacker := testusers.Create(t, "gjobflood")
	py, _ := filepath.Abs("testdata/hang/hang.py")
	j := startHangJob(t, "", t.TempDir(), -1, "-np", "2", python, py)
	j.waitLines("up ", 2, time.Minute)
	host, port, err := net.SplitHostPort(j.jobInfo().Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(floodPy)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartReady(t, attacker.Command(python, "-c", string(script), host, port, "100"), "holding", 30*time.Second)
	for _, sub := range []string{"status", "stacks"} {
		r := j.sub(sub)
		if r.code != 0 || !strings.Contains(r.stdout, "rank") {
			t.Errorf("gorun %s under the flood: exit %d after %v\n%s%s", sub, r.code, r.elapsed, r.stdout, r.stderr)
		}
	}
	checkDone(t, j.wait(time.Minute), 2)
}

// ownHandlerPy takes signal 45 (the Python hook's) for itself, with a
// handler that writes the file argv[1], says "up RANK", and waits for
// HANG_RELEASE.
const ownHandlerPy = `import os, signal, sys, time
mark = sys.argv[1]
def handler(signum, frame):
    with open(mark, "w") as f:
        f.write("MY OWN handler for signal %d ran\n" % signum)
signal.signal(45, handler)
print("up %s" % os.environ["RANK"], flush=True)
while not os.path.exists(os.environ["HANG_RELEASE"]):
    time.sleep(0.05)
print("done %s" % os.environ["RANK"], flush=True)
`

// Row 4c of the security review: gorun stacks does not send its signal
// to a Python rank whose program handles that signal itself (the
// program's handler never runs), and says why the rank has no Python
// frames.
func TestStacksOwnHandler(t *testing.T) {
	python := testenv.NeedTool(t, "/usr/bin/python3", "python3")
	dir := t.TempDir()
	prog := filepath.Join(dir, "own.py")
	if err := os.WriteFile(prog, []byte(ownHandlerPy), 0o644); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "mark")
	j := startHangJob(t, "", dir, -1, "-np", "1", python, prog, mark)
	j.waitLines("up ", 1, time.Minute)
	r := j.sub("stacks")
	if r.code != 0 {
		t.Fatalf("gorun stacks: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// py-spy reads Python frames without a signal: no note is due then.
	if _, err := exec.LookPath("py-spy"); err != nil {
		want := "gorun: note: rank 0 on localhost: the program handles signal 45 itself (it called signal.signal): Python stacks not taken"
		if !strings.Contains(r.stdout, want) {
			t.Errorf("gorun stacks says nothing of the signal:\n%s\nwant the line\n%s", r.stdout, want)
		}
	}
	checkDone(t, j.wait(time.Minute), 1)
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("the program's own handler for signal 45 ran: %q", b)
	}
}
