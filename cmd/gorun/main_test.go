package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/tools"
	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/plugins/plugintest"
)

// The test binary doubles as gorun: run with GORUN_TEST_MAIN=1 it is the
// gorun command (and, through os.Executable, its own agent), so every
// end-to-end test runs the real head, agent and ranks as processes, built
// with the race detector when the tests are. It is gorun-tools too, run
// under that name: TestMain links it as gorun-tools next to itself, where
// gorun looks for its companion (launcher.Tools), and gorun bench's ranks
// are it, run as launcher.ToolsProgram; so is the child in which gorun
// plugins test runs the contract suite (plugintest.EnvPath).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == launcher.ToolsBinary || os.Args[0] == launcher.ToolsProgram || os.Getenv(plugintest.EnvPath) != "" {
		os.Exit(tools.Main(os.Args, os.Stdout, os.Stderr))
	}
	if os.Getenv("GORUN_TEST_MAIN") == "1" {
		main()
		return
	}
	if err := linkTools(); err != nil {
		panic(err)
	}
	// Jobs publish themselves for gorun ps: here, not in ~/.gorun.
	jobsDir, err := os.MkdirTemp("", "gorun-jobs-")
	if err != nil {
		panic(err)
	}
	os.Setenv("GORUN_JOBS_DIR", jobsDir)
	code := m.Run()
	os.RemoveAll(jobsDir)
	downCluster()
	os.Exit(code)
}

// linkTools links this test binary as gorun-tools next to itself, unless
// something is there already.
func linkTools() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	link := filepath.Join(filepath.Dir(exe), launcher.ToolsBinary)
	if err := os.Link(exe, link); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("link the test binary as %s: %w", link, err)
	}
	return nil
}

// gorunCommand returns a command that runs gorun with args.
func gorunCommand(ctx context.Context, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "GORUN_TEST_MAIN=1")
	return cmd
}

// result is what one gorun run did.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// runGorun runs gorun to its end (bounded by limit) with stdin from in.
func runGorun(t *testing.T, limit time.Duration, in []byte, args ...string) result {
	t.Helper()
	return runGorunIn(t, "", nil, limit, in, args...)
}

// runGorunIn is runGorun in directory dir ("" = the test's) with extra
// environment variables.
func runGorunIn(t *testing.T, dir string, environ []string, limit time.Duration, in []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := gorunCommand(ctx, args...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, environ...)
	if in != nil {
		cmd.Stdin = bytes.NewReader(in)
	}
	return runCmd(t, ctx, cmd, limit)
}

// runCmd runs a gorun command made with ctx to its end. At the deadline,
// before gorun is killed, its ranks' stacks are taken (gorun stacks), so
// that a test that fails by hanging says where the job hung.
func runCmd(t *testing.T, ctx context.Context, cmd *exec.Cmd, limit time.Duration) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	var hung string // read after Run: Wait waits for Cancel
	cmd.Cancel = func() error {
		hung = jobStacks(cmd.Process.Pid)
		return cmd.Process.Kill()
	}
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("gorun %v: %v", cmd.Args[1:], err)
	}
	if ctx.Err() != nil {
		t.Fatalf("gorun %v did not finish within %v\nstdout:\n%s\nstderr:\n%s\nthe ranks' stacks at the deadline:\n%s", cmd.Args[1:], limit, r.stdout, r.stderr, hung)
	}
	return r
}

// jobStacks returns what gorun stacks says of the job whose head is pid,
// or why it could not.
func jobStacks(pid int) string {
	dir, err := jobs.Dir()
	if err != nil {
		return err.Error()
	}
	infos, err := jobs.List(dir)
	if err != nil {
		return err.Error()
	}
	for _, info := range infos {
		if info.PID != pid {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := gorunCommand(ctx, "stacks", info.ID).CombinedOutput()
		if err != nil {
			return fmt.Sprintf("%s(gorun stacks %s: %v)", b, info.ID, err)
		}
		return string(b)
	}
	return fmt.Sprintf("(no job of head %d in %s)", pid, dir)
}
