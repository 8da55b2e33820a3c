package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/procfs"
	"github.com/gorun/gorun/launcher"
	"golang.org/x/sys/unix"
)

// newMark returns a unique value for GORUN_TEST_MARK, which the tests export
// to every rank (-x) so that survivors can be found in /proc afterwards.
func newMark(t *testing.T) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	return "m" + hex.EncodeToString(b[:])
}

// marked lists processes whose environment carries the mark, with their
// command lines.
func marked(mark string) []string {
	var out []string
	needle := []byte("GORUN_TEST_MARK=" + mark + "\x00")
	for _, pid := range procfs.Proc.PIDs() {
		dir := "/proc/" + strconv.Itoa(pid)
		b, err := os.ReadFile(dir + "/environ")
		if err != nil || !bytes.Contains(b, needle) {
			continue
		}
		if st, err := procfs.Proc.Stat(pid); err == nil && st.State == 'Z' {
			continue // a zombie is already dead; its parent reaps it
		}
		cmd, _ := os.ReadFile(dir + "/cmdline")
		out = append(out, strconv.Itoa(pid)+": "+strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// assertNoSurvivors fails if any marked process is still alive after a
// short settling time (the kernel needs a moment to tear processes down).
func assertNoSurvivors(t *testing.T, mark string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := marked(mark)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the job survived:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMarked waits until n marked processes run.
func waitMarked(t *testing.T, mark string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for len(marked(mark)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d processes started: %v", len(marked(mark)), n, marked(mark))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFailures(t *testing.T) {
	t.Parallel()
	py := "/usr/bin/python3"
	tests := []struct {
		name     string
		args     []string // after -np 4 -x GORUN_TEST_MARK
		script   string   // run by sh -c in every rank; $RANK tells which
		wantCode int
		want     []string // in stderr
		maxTime  time.Duration
	}{
		{
			name:     "exit 3",
			script:   `if [ "$RANK" = 2 ]; then echo "bad input in shard 2" >&2; exit 3; fi; sleep 30`,
			wantCode: 3,
			want:     []string{"rank 2 on localhost", "exited with code 3", "first failure", "bad input in shard 2", "stopped by gorun"},
			maxTime:  4 * time.Second,
		},
		{
			name:     "killed by SIGKILL",
			script:   `if [ "$RANK" = 1 ]; then kill -9 $$; fi; sleep 30`,
			wantCode: 128 + 9,
			want:     []string{"rank 1 on localhost", "SIGKILL (signal 9)", "OOM killer"},
			maxTime:  4 * time.Second,
		},
		{
			name:     "segfault",
			script:   `if [ "$RANK" = 3 ]; then exec ` + py + ` -c 'import ctypes; ctypes.string_at(0)'; fi; sleep 30`,
			wantCode: 128 + 11,
			want:     []string{"rank 3 on localhost", "SIGSEGV (signal 11)"},
			maxTime:  6 * time.Second,
		},
		{
			name:     "never exits",
			args:     []string{"--timeout", "1"},
			script:   `sleep 30`,
			wantCode: launcher.ExitTimeout,
			want:     []string{"--timeout 1s expired", "timed out"},
			maxTime:  8 * time.Second,
		},
		{
			name:     "ignores SIGTERM",
			args:     []string{"--grace-period", "1s"},
			script:   `if [ "$RANK" = 0 ]; then sleep 0.3; exit 5; fi; trap '' TERM; sleep 30`,
			wantCode: 5,
			want:     []string{"rank 0 on localhost", "exited with code 5", "SIGKILL after 1s"},
			maxTime:  5 * time.Second,
		},
		{
			name:     "program not found",
			script:   "",
			wantCode: launcher.ExitNotFound,
			want:     []string{"could not start", "no-such-program-gorun-test: command not found"},
			maxTime:  4 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mark := newMark(t)
			args := append([]string{"-np", "4", "-x", "GORUN_TEST_MARK=" + mark}, tt.args...)
			if tt.script == "" {
				args = append(args, "no-such-program-gorun-test")
			} else {
				args = append(args, "sh", "-c", tt.script)
			}
			r := runGorun(t, 30*time.Second, nil, args...)
			if r.code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstderr:\n%s", r.code, tt.wantCode, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if r.elapsed > tt.maxTime {
				t.Errorf("took %v, want under %v", r.elapsed, tt.maxTime)
			}
			assertNoSurvivors(t, mark, 500*time.Millisecond)
		})
	}
}

// A rank's grandchildren, including one that left the process group with
// setsid, do not outlive the job.
func TestNoOrphanedGrandchildren(t *testing.T) {
	t.Parallel()
	mark := newMark(t)
	r := runGorun(t, 30*time.Second, nil, "-np", "2", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
		`sleep 100 & setsid sleep 101 & sleep 0.3; if [ "$RANK" = 1 ]; then exit 1; fi; wait`)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	assertNoSurvivors(t, mark, 500*time.Millisecond)
}

// gorun killed with SIGKILL leaves nothing behind: its agents see EOF on
// the control channel and kill every rank's process group and orphan.
func TestHeadKilled(t *testing.T) {
	t.Parallel()
	mark := newMark(t)
	cmd := gorunCommand(t.Context(), "-np", "3", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c", `sleep 100 & setsid sleep 102 & sleep 101`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 9, 10*time.Second)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n := strings.Count(strings.Join(marked(mark), "\n"), ": sleep 102"); n == 3 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d of 3 setsid children run", n)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	assertNoSurvivors(t, mark, 5*time.Second)
	t.Logf("everything gone %v after SIGKILL of gorun", time.Since(killed))
}

// Signals sent to gorun reach every rank's whole process group; a second
// SIGINT kills ranks that ignore the first.
func TestSignals(t *testing.T) {
	t.Parallel()
	t.Run("USR1 and TERM reach every rank", func(t *testing.T) {
		t.Parallel()
		mark := newMark(t)
		cmd := gorunCommand(t.Context(), "-np", "3", "--tag-output", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
			// The trap runs in the rank's shell; the child sh also gets the
			// signal because gorun signals the whole group.
			`trap 'echo usr1-$RANK' USR1; trap 'echo term-$RANK; exit 0' TERM; sh -c 'trap "echo child-usr1" USR1; sleep 20 & wait; sleep 20 & wait' & while :; do sleep 0.05; done`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitMarked(t, mark, 3*2, 10*time.Second)
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGUSR1)
		time.Sleep(500 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if code != 128+15 {
			t.Errorf("exit code %d (%v), want %d\n%s", code, err, 128+15, errb.String())
		}
		for r := range 3 {
			for _, w := range []string{fmt.Sprintf("[%d] usr1-%d", r, r), fmt.Sprintf("[%d] term-%d", r, r), fmt.Sprintf("[%d] child-usr1", r)} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
		}
		if !strings.Contains(errb.String(), "got SIGTERM") {
			t.Errorf("stderr does not say gorun got SIGTERM:\n%s", errb.String())
		}
		assertNoSurvivors(t, mark, 500*time.Millisecond)
	})
	t.Run("USR1 to an agent reaches its ranks", func(t *testing.T) {
		// A resource manager signals its steps' processes, agents among
		// them: an agent passes USR1 on (it used to die of it) and says so.
		t.Parallel()
		mark := newMark(t)
		cmd := gorunCommand(t.Context(), "-np", "2", "--tag-output", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
			`trap 'echo usr1-$RANK; exit 0' USR1; while :; do sleep 0.05; done`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitMarked(t, mark, 2, 10*time.Second)
		time.Sleep(200 * time.Millisecond)
		agents := childPIDs(cmd.Process.Pid)
		if len(agents) != 1 {
			t.Fatalf("gorun has %d children, want its one agent", len(agents))
		}
		syscall.Kill(agents[0], syscall.SIGUSR1)
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d, want 0\n%s", code, errb.String())
		}
		if !strings.Contains(out.String(), "[0] usr1-0") || !strings.Contains(out.String(), "[1] usr1-1") {
			t.Errorf("USR1 did not reach both ranks:\n%s", out.String())
		}
		if !strings.Contains(errb.String(), "localhost got SIGUSR1 from outside") {
			t.Errorf("gorun does not say the agent got USR1:\n%s", errb.String())
		}
		assertNoSurvivors(t, mark, 500*time.Millisecond)
	})
	t.Run("second SIGINT kills", func(t *testing.T) {
		t.Parallel()
		mark := newMark(t)
		cmd := gorunCommand(t.Context(), "-np", "2", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
			`trap 'echo int-$RANK' INT; while :; do sleep 0.05; done`)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitMarked(t, mark, 2, 10*time.Second)
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		time.Sleep(500 * time.Millisecond)
		if len(marked(mark)) == 0 {
			t.Fatal("the ranks ended on the first SIGINT, though they trap it")
		}
		cmd.Process.Signal(syscall.SIGINT)
		start := time.Now()
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 128+2 {
			t.Errorf("exit code %d, want 130\n%s", code, errb.String())
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the second SIGINT took %v to end the job", d)
		}
		if !strings.Contains(out.String(), "int-0") || !strings.Contains(out.String(), "int-1") {
			t.Errorf("the first SIGINT did not reach both ranks:\n%s", out.String())
		}
		assertNoSurvivors(t, mark, 500*time.Millisecond)
	})
}

func TestRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sum := filepath.Join(dir, "summary.json")
	r := runGorun(t, 30*time.Second, nil, "-np", "3", "--max-restarts", "2", "--summary-json", sum, "sh", "-c",
		`if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ]; then exit 4; fi; echo "ok $RANK restart $TORCHELASTIC_RESTART_COUNT"`)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 after two restarts\n%s", r.code, r.stderr)
	}
	for _, w := range []string{"restart 1 of 2", "restart 2 of 2"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if strings.Count(r.stdout, "restart 2") != 3 {
		t.Errorf("want 3 ranks to finish in restart 2:\n%s", r.stdout)
	}
	var s launcher.Summary
	b, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.ExitCode != 0 || s.Restarts != 2 || len(s.Ranks) != 3 || s.Reason != "success" {
		t.Errorf("summary = %+v", s)
	}
	for _, rr := range s.Ranks {
		if rr.PID == 0 || rr.Start.IsZero() || rr.End.Before(rr.Start) || rr.Code != 0 || rr.Restarts != 2 {
			t.Errorf("rank record %+v", rr)
		}
	}
}

func TestSummaryJSONFailure(t *testing.T) {
	t.Parallel()
	sum := filepath.Join(t.TempDir(), "s.json")
	r := runGorun(t, 30*time.Second, nil, "-np", "2", "--summary-json", sum, "sh", "-c", `[ "$RANK" = 1 ] && exit 9; sleep 20`)
	if r.code != 9 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var s launcher.Summary
	b, _ := os.ReadFile(sum)
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if s.FirstFailure == nil || s.FirstFailure.Rank != 1 || s.FirstFailure.Code != 9 || s.Reason != "rank-failed" {
		t.Errorf("first failure = %+v, reason %q", s.FirstFailure, s.Reason)
	}
	if !s.Ranks[0].Stopped || s.Ranks[0].Signal != "SIGTERM" {
		t.Errorf("rank 0 = %+v, want stopped by SIGTERM", s.Ranks[0])
	}
	if s.HeadMaxRSS == 0 || len(s.Agents) != 1 || s.Agents[0].MaxRSS == 0 {
		t.Errorf("memory figures missing: head %d, agents %+v", s.HeadMaxRSS, s.Agents)
	}
}

// childPIDs lists the children of pid, from /proc.
func childPIDs(pid int) []int { return procfs.Proc.Children(pid) }

// A script whose #! interpreter is missing, or cannot be executed, is
// reported as such (not as a missing script) with the shells' status:
// 127 for a missing interpreter, 126 for one that cannot run.
func TestBadInterpreter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-exec")
	if err := os.WriteFile(notExec, []byte("data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		script string // the #! line
		code   int
		want   string
	}{
		{"missing", "#!/nonexistent/gorun-test-interp -x", launcher.ExitNotFound, "bad interpreter: /nonexistent/gorun-test-interp: no such file"},
		{"missing, relative", "#! ./no-interp-here", launcher.ExitNotFound, "bad interpreter: ./no-interp-here: no such file"},
		{"not executable", "#!" + notExec, launcher.ExitNotExec, "bad interpreter: " + notExec + ": permission denied"},
		{"a directory", "#!" + dir, launcher.ExitNotExec, "bad interpreter: " + dir + ": permission denied"},
		{"fine", "#!/bin/sh", 0, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			script := filepath.Join(dir, fmt.Sprintf("script%d.sh", i))
			if err := os.WriteFile(script, []byte(tt.script+"\necho ran\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r := runGorunIn(t, dir, nil, 30*time.Second, nil, "-np", "2", script)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d\n%s", r.code, tt.code, r.stderr)
			}
			if tt.want == "" {
				if r.stdout != "ran\nran\n" {
					t.Errorf("stdout %q", r.stdout)
				}
				return
			}
			if w := "could not start: " + script + ": " + tt.want; !strings.Contains(r.stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
			}
		})
	}
}

// gorun dying of SIGPIPE (`gorun ... | head -1`) leaves no survivors and
// nothing that reaches its stderr after it exited: its local agent, which
// shares that stderr, used to print "got terminated: stopping every rank"
// there, on the terminal after the shell's prompt.
func TestBrokenPipeQuiet(t *testing.T) {
	t.Parallel()
	for i := range 3 { // the agent's line came 11 times in 15
		mark := newMark(t)
		cmd := gorunCommand(t.Context(), "-np", "2", "-H", "localhost:2", "-x", "GORUN_TEST_MARK="+mark, "sh", "-c",
			`echo line-$RANK; sleep 0.$((RANK*3)); echo again-$RANK; sleep 100`)
		outR, outW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		outW.Close()
		errW.Close()
		// head -1: one line, then the read end closes.
		line, _ := bufio.NewReader(outR).ReadString('\n')
		outR.Close()
		if !strings.HasPrefix(line, "line-") {
			t.Fatalf("round %d: first line %q", i, line)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: gorun still runs 20 s after its stdout closed", i)
		}
		if ws := cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGPIPE {
			t.Errorf("round %d: gorun ended with %v, want death by SIGPIPE (141 in a shell)", i, cmd.ProcessState)
		}
		// stderr is not read until gorun has exited (its few lines fit
		// the pipe): what the pipe holds now was written before the exit,
		// by gorun or its agent, and anything read past it came after.
		atExit, err := unix.IoctlGetInt(int(errR.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			t.Fatal(err)
		}
		eof := make(chan []byte)
		go func() { b, _ := io.ReadAll(errR); eof <- b }()
		var stderr []byte
		select {
		case stderr = <-eof: // the agent ended too
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: gorun's stderr still open (its agent alive?) 10 s after gorun exited", i)
		}
		errR.Close()
		if late := stderr[atExit:]; len(late) > 0 {
			t.Errorf("round %d: after gorun exited, its stderr got:\n%s", i, late)
		}
		assertNoSurvivors(t, mark, 5*time.Second)
	}
}

// An agent that something outside gorun terminates (its host shutting
// down, a user's kill) ends the job as one that got the signal, naming
// the host, and not as a success of the ranks it stopped.
func TestAgentTerminated(t *testing.T) {
	mark := newMark(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := gorunCommand(ctx, "-np", "2", "-x", "GORUN_TEST_MARK="+mark, "sleep", "30")
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, mark, 2, 30*time.Second)
	agents := procfs.Proc.Children(cmd.Process.Pid)
	if len(agents) != 1 {
		t.Fatalf("gorun has %d children, want its one agent: %v", len(agents), agents)
	}
	syscall.Kill(agents[0], syscall.SIGTERM)
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(errb.String(), "localhost got SIGTERM from outside") {
		t.Errorf("exit %d (%v)\n%s", code, err, errb.String())
	}
	assertNoSurvivors(t, mark, 5*time.Second)
}
