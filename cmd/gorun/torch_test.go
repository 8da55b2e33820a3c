package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// torchPython is the interpreter the torch example needs: Debian's, which
// has python3-torch. "python3" on PATH may be another one without torch.
const torchPython = "/usr/bin/python3"

// requireTorch skips the test when torchPython cannot import torch, or fails
// it when CI is set (the CI image must have it; package testenv decides),
// and skips it under -short.
func requireTorch(t *testing.T) {
	t.Helper()
	testenv.SkipShort(t, "it runs PyTorch")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, torchPython, "-c", "import torch, torch.distributed as d; assert d.is_available()").CombinedOutput()
	if err == nil {
		return
	}
	testenv.Missing(t, torchPython+" cannot import torch (apt-get install python3-torch): "+err.Error()+"\n"+string(out))
}

// restartLine matches gorun's report that rank 2 failed with exit code 7.
var restartLine = regexp.MustCompile(`\brank 2\b.*\b7\b`)

var ddpLine = regexp.MustCompile(`^rank (\d+)/(\d+) weights sha256=([0-9a-f]{64}) sum=(\S+)$`)

// checkDDPOutput asserts that stdout holds exactly one result line for each
// of ranks 0..np-1 and that they all report the same weights; it returns
// the common sha256.
func checkDDPOutput(t *testing.T, r result, np int) string {
	t.Helper()
	hashes := map[int]string{}
	sums := map[int]float64{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		m := ddpLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unexpected stdout line %q", line)
			continue
		}
		rank, _ := strconv.Atoi(m[1])
		world, _ := strconv.Atoi(m[2])
		sum, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			t.Errorf("line %q: bad sum: %v", line, err)
		}
		if world != np || rank < 0 || rank >= np {
			t.Errorf("line %q: want rank in 0..%d of %d", line, np-1, np)
			continue
		}
		if _, dup := hashes[rank]; dup {
			t.Errorf("rank %d reported twice", rank)
		}
		hashes[rank], sums[rank] = m[3], sum
	}
	if len(hashes) != np {
		t.Fatalf("got results from %d ranks, want %d\nstdout:\n%s\nstderr:\n%s", len(hashes), np, r.stdout, r.stderr)
	}
	for rank := 1; rank < np; rank++ {
		if hashes[rank] != hashes[0] || sums[rank] != sums[0] {
			t.Errorf("rank %d weights sha256=%s sum=%v, rank 0 sha256=%s sum=%v",
				rank, hashes[rank], sums[rank], hashes[0], sums[0])
		}
	}
	return hashes[0]
}

// TestTorchDDPGloo runs a real PyTorch DistributedDataParallel job (CPU,
// gloo, init_method env://) under gorun: it needs RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT to be right on every rank, and
// TORCHELASTIC_RESTART_COUNT to count --max-restarts. Not parallel: four
// interpreters importing torch already fill a small machine.
func TestTorchDDPGloo(t *testing.T) {
	requireTorch(t)
	script, err := filepath.Abs(filepath.Join("..", "..", "examples", "torch", "ddp_train.py"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatal(err)
	}
	const np = 4
	var cleanHash string

	t.Run("Train", func(t *testing.T) {
		r := runGorun(t, 120*time.Second, nil, "-np", strconv.Itoa(np), torchPython, script)
		t.Logf("took %v", r.elapsed.Round(time.Millisecond))
		if r.code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		cleanHash = checkDDPOutput(t, r, np)
	})

	t.Run("RestartAfterRankFailure", func(t *testing.T) {
		// Rank 2 exits 7 after its first training step on the first start
		// only, while the others wait for it in a gloo allreduce: gorun must
		// stop them and start the whole job again with a restart count of 1.
		r := runGorun(t, 180*time.Second, nil, "-np", strconv.Itoa(np), "--max-restarts", "1",
			"-x", "DDP_FAIL_ONCE_RANK=2", "-x", "DDP_FAIL_AT=step", torchPython, script)
		t.Logf("took %v", r.elapsed.Round(time.Millisecond))
		if r.code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "DDP_FAIL_ONCE_RANK=2: failing") {
			t.Errorf("rank 2 did not fail on the first start\nstderr:\n%s", r.stderr)
		}
		// Look for gorun's message anywhere in a line: without --tag-output
		// gorun copies the ranks' bytes as they come, and a rank killed in
		// the middle of writing its traceback can leave a line unfinished.
		restarted := false
		for _, line := range strings.Split(r.stderr, "\n") {
			i := strings.Index(line, "gorun: ")
			if i < 0 {
				continue
			}
			if msg := line[i:]; strings.Contains(msg, "restart") && restartLine.MatchString(msg) {
				restarted = true
				if i > 0 {
					t.Logf("gorun's restart message follows a rank's unfinished line: %q", line)
				}
			}
		}
		if !restarted {
			t.Errorf("gorun's stderr does not report restarting after rank 2 exited 7:\n%s", r.stderr)
		}
		for rank := range np {
			if want := "[ddp rank " + strconv.Itoa(rank) + "] restart=1 "; !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q: rank %d did not finish with TORCHELASTIC_RESTART_COUNT=1\n%s", want, rank, r.stderr)
			}
		}
		h := checkDDPOutput(t, r, np)
		// The job is deterministic and a restart starts from scratch, so
		// the weights must match the clean run's.
		if cleanHash != "" && h != cleanHash {
			t.Errorf("weights after the restart sha256=%s, clean run sha256=%s", h, cleanHash)
		}
	})
}
