package slurmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// ErrNoJob is returned (wrapped) by JobInfo and WaitState when the
// controller does not know the job: it was never submitted, or it ended
// more than MinJobAge (5 s) to 65 s ago and was purged.
var ErrNoJob = errors.New("slurmtest: no such job")

// Job is a batch job submitted by Sbatch or SbatchWait.
type Job struct {
	// ID is the job's id (SLURM_JOB_ID).
	ID int
	// Script is the absolute path of the batch script.
	Script string
	// OutputFile is the job's output file, JobsDir/slurm-ID.out, holding
	// the batch script's stdout and stderr (sbatch's default).
	OutputFile string
	// State is the job's final JobState (COMPLETED, FAILED, CANCELLED,
	// TIMEOUT, ...), set by SbatchWait and WaitJob; "" while unknown, or
	// if the controller had purged the job when SbatchWait asked.
	State string
	// ExitCode is the job's exit code as `sbatch --wait` reports it: the
	// batch script's exit status, or 1 if a signal ended it. Set by
	// SbatchWait and WaitJob.
	ExitCode int
	// Signal is the signal that ended the batch script (the S of
	// scontrol's ExitCode=X:S), 0 if none or unknown.
	Signal int
	// Output is OutputFile's contents when the job ended (SbatchWait,
	// WaitJob).
	Output string
}

// finalStates are the JobStates of a job that has ended.
var finalStates = []string{"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
	"PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}

// WriteScript writes an executable batch script (mode 0755) named name
// into JobsDir and returns its path. body should start with "#!".
func (c *Cluster) WriteScript(name, body string) (string, error) {
	return testcluster.WriteScript("slurmtest", c.JobsDir, name, body)
}

// SbatchWait runs `sbatch --wait --parsable --output=JobsDir/slurm-%j.out
// ARGS... SCRIPT` in JobsDir, which returns when the job has ended, and
// returns the job with its ExitCode (sbatch's exit status), State and
// Output filled in. args must not set --output, --wait or --parsable.
// A job that fails is no error: err is non-nil only when sbatch did not
// submit the job (with its message), or ctx ended first (the job is then
// returned, still running).
//
// sbatch polls the job every 2 s, so this takes 2 s at least; Sbatch and
// WaitJob poll every 20 ms instead.
func (c *Cluster) SbatchWait(ctx context.Context, script string, args ...string) (*Job, error) {
	j, runErr, err := c.sbatch(ctx, true, script, args)
	if err != nil {
		return j, err
	}
	var ee *exec.ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &ee) && ee.Exited():
		j.ExitCode = ee.ExitCode()
	default:
		return j, fmt.Errorf("slurmtest: sbatch --wait of job %d: %w", j.ID, runErr)
	}
	// The final state, once the job is no longer COMPLETING; the exit code
	// stays sbatch's (the same, unless the job was purged already).
	code := j.ExitCode
	if err := c.waitEnd(ctx, j); err != nil && !errors.Is(err, ErrNoJob) {
		return j, err
	}
	j.ExitCode = code
	j.Output = readOutput(j.OutputFile)
	return j, nil
}

// Sbatch runs `sbatch --parsable --output=JobsDir/slurm-%j.out ARGS...
// SCRIPT` in JobsDir and returns the submitted job without waiting for it
// (see WaitState and WaitJob). args must not set --output, --wait or
// --parsable. A relative script path is taken from the caller's working
// directory.
func (c *Cluster) Sbatch(ctx context.Context, script string, args ...string) (*Job, error) {
	j, runErr, err := c.sbatch(ctx, false, script, args)
	if err != nil {
		return j, err
	}
	if runErr != nil {
		return j, fmt.Errorf("slurmtest: sbatch of job %d: %w", j.ID, runErr)
	}
	return j, nil
}

// sbatch runs sbatch. err says the job was not submitted; runErr is sbatch's
// own end (its exit status with --wait).
func (c *Cluster) sbatch(ctx context.Context, wait bool, script string, args []string) (j *Job, runErr, err error) {
	for _, a := range args {
		if a == "-W" || a == "--wait" || strings.HasPrefix(a, "--output") || strings.HasPrefix(a, "--parsable") ||
			(strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--")) {
			return nil, nil, fmt.Errorf("slurmtest: sbatch argument %q: the helper sets --output, --wait and --parsable itself", a)
		}
	}
	abs, err := filepath.Abs(script)
	if err != nil {
		return nil, nil, fmt.Errorf("slurmtest: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, nil, fmt.Errorf("slurmtest: batch script: %w", err)
	}
	argv := []string{"--parsable", "--output=" + filepath.Join(c.JobsDir, "slurm-%j.out")}
	if wait {
		argv = append(argv, "--wait")
	}
	argv = append(append(argv, args...), abs)
	var stdout, stderr bytes.Buffer
	cmd := c.Command(ctx, "sbatch", argv...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr = cmd.Run()
	// --parsable prints "ID" or "ID;CLUSTER" once the job is submitted.
	first, _, _ := strings.Cut(stdout.String(), "\n")
	first, _, _ = strings.Cut(first, ";")
	id, perr := strconv.Atoi(strings.TrimSpace(first))
	if perr != nil || id <= 0 {
		if runErr == nil {
			runErr = fmt.Errorf("printed no job id: %q", stdout.String())
		}
		return nil, nil, fmt.Errorf("slurmtest: sbatch %s: %w: %s", strings.Join(argv, " "), runErr, strings.TrimSpace(stderr.String()))
	}
	return &Job{ID: id, Script: abs, OutputFile: filepath.Join(c.JobsDir, "slurm-"+strconv.Itoa(id)+".out")}, runErr, nil
}

// readOutput returns a job's output file, "" if there is none.
func readOutput(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// JobInfo returns `scontrol -o show job ID` as a map (JobState, ExitCode,
// NodeList, NumNodes, NumTasks, ...). It returns an error wrapping ErrNoJob
// if the controller does not know the job.
func (c *Cluster) JobInfo(ctx context.Context, id int) (map[string]string, error) {
	out, err := c.Command(ctx, "scontrol", "-o", "show", "job", strconv.Itoa(id)).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Invalid job id") {
			return nil, fmt.Errorf("%w: %d", ErrNoJob, id)
		}
		return nil, fmt.Errorf("slurmtest: scontrol show job %d: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	info := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, dup := info[k]; !dup {
				info[k] = v
			}
		}
	}
	if info["JobState"] == "" {
		return nil, fmt.Errorf("slurmtest: scontrol show job %d printed no JobState: %s", id, strings.TrimSpace(string(out)))
	}
	return info, nil
}

// WaitState polls the job every 20 ms until its JobState is one of states
// and returns that state. If the job ends in a state not among states, it
// returns that state and an error; an unknown job is an error wrapping
// ErrNoJob.
func (c *Cluster) WaitState(ctx context.Context, id int, states ...string) (string, error) {
	for {
		info, err := c.JobInfo(ctx, id)
		if err != nil {
			return "", err
		}
		st := info["JobState"]
		if slices.Contains(states, st) {
			return st, nil
		}
		if slices.Contains(finalStates, st) {
			return st, fmt.Errorf("slurmtest: job %d ended %s, not %s", id, st, strings.Join(states, " or "))
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("slurmtest: job %d is %s, waiting for %s: %w", id, st, strings.Join(states, " or "), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitJob waits (polling every 20 ms) until the job has ended and is no
// longer COMPLETING (its processes are gone), and fills in its State,
// ExitCode, Signal and Output.
func (c *Cluster) WaitJob(ctx context.Context, j *Job) error {
	if err := c.waitEnd(ctx, j); err != nil {
		return err
	}
	j.Output = readOutput(j.OutputFile)
	return nil
}

// waitEnd waits for a final state and sets State, ExitCode and Signal.
func (c *Cluster) waitEnd(ctx context.Context, j *Job) error {
	for {
		info, err := c.JobInfo(ctx, j.ID)
		if err != nil {
			return err
		}
		if st := info["JobState"]; slices.Contains(finalStates, st) {
			j.State = st
			x, s, _ := strings.Cut(info["ExitCode"], ":")
			code, _ := strconv.Atoi(x)
			j.Signal, _ = strconv.Atoi(s)
			if j.ExitCode = code; j.Signal != 0 {
				j.ExitCode = 1
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slurmtest: waiting for job %d to end: %w", j.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
