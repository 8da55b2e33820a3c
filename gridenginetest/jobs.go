package gridenginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/testcluster"
)

// Job is a batch job submitted by Qsub, QsubSync or RunPE.
type Job struct {
	// ID is the job's id (JOB_ID).
	ID int
	// Script is the absolute path of the job script.
	Script string
	// OutputFile is the job's output file, JobsDir/ge-ID.out, holding the
	// job script's stdout and stderr (qsub -o ... -j y).
	OutputFile string
	// ExitCode is `qsub -sync y`'s exit status: the job script's exit
	// status, or 1 if a signal ended it or it was deleted. Set by QsubSync.
	ExitCode int
	// Signal is the signal that ended the job script, as qsub names it
	// (SIGKILL), "" if none. Set by QsubSync.
	Signal string
	// Message is what `qsub -sync y` said about the job's end ("Job 3
	// exited with exit code 0."), set by QsubSync.
	Message string
	// Output is OutputFile's contents when the job ended (QsubSync).
	Output string
}

// WriteScript writes an executable job script (mode 0755) named name into
// JobsDir and returns its path. body should start with "#!" (the queue's
// shell_start_mode is unix_behavior).
func (c *Cluster) WriteScript(name, body string) (string, error) {
	return testcluster.WriteScript("gridenginetest", c.JobsDir, name, body)
}

// RunPE runs `qsub -sync y -pe gorun SLOTS ARGS... SCRIPT` (see QsubSync):
// a job of slots slots spread by $round_robin over the exec hosts.
func (c *Cluster) RunPE(ctx context.Context, slots int, script string, args ...string) (*Job, error) {
	return c.QsubSync(ctx, script, append([]string{"-pe", PE, strconv.Itoa(slots)}, args...)...)
}

// QsubSync runs `qsub -sync y -wd JobsDir -o JobsDir/ge-$JOB_ID.out
// -j y ARGS... SCRIPT` on the qmaster host, which returns when the job has
// ended, and returns the job with its ExitCode, Signal, Message and Output
// filled in. args must not set -o, -e, -j, -sync or -terse. A job that
// fails is no error: err is non-nil only when qsub did not submit the job
// (with its message), or ctx ended first (the job is then returned, maybe
// still running).
func (c *Cluster) QsubSync(ctx context.Context, script string, args ...string) (*Job, error) {
	j, said, runErr, err := c.qsub(ctx, true, script, args)
	if err != nil {
		return j, err
	}
	var ee *exec.ExitError
	switch {
	case runErr == nil:
	case errors.As(runErr, &ee) && ee.Exited():
		j.ExitCode = ee.ExitCode()
	default:
		return j, fmt.Errorf("gridenginetest: qsub -sync y of job %d: %w: %s", j.ID, runErr, said)
	}
	for _, line := range strings.Split(said, "\n") {
		if strings.HasPrefix(line, "Job "+strconv.Itoa(j.ID)+" ") {
			j.Message = strings.TrimSpace(line)
		}
	}
	if m := signalRE.FindStringSubmatch(j.Message); m != nil {
		j.Signal = m[1]
	}
	if ctx.Err() != nil {
		return j, fmt.Errorf("gridenginetest: qsub -sync y of job %d: %w", j.ID, ctx.Err())
	}
	j.Output = readOutput(j.OutputFile)
	return j, nil
}

// submittedRE finds the job id in what qsub prints.
var submittedRE = regexp.MustCompile(`^Your job (\d+) .*has been submitted`)

// errNoID says qsub printed no job id.
var errNoID = errors.New("no job id")

// signalRE finds the signal in qsub's "Job N exited because of signal
// SIGKILL".
var signalRE = regexp.MustCompile(`because of signal (SIG[A-Z0-9]+)`)

// Qsub runs `qsub -wd JobsDir -o JobsDir/ge-$JOB_ID.out -j y
// ARGS... SCRIPT` on the qmaster host and returns the submitted job without
// waiting for it (see WaitRunning, WaitGone and Qdel). args must not set
// -o, -e, -j, -sync or -terse.
func (c *Cluster) Qsub(ctx context.Context, script string, args ...string) (*Job, error) {
	j, said, runErr, err := c.qsub(ctx, false, script, args)
	if err != nil {
		return j, err
	}
	if runErr != nil {
		return j, fmt.Errorf("gridenginetest: qsub of job %d: %w: %s", j.ID, runErr, said)
	}
	return j, nil
}

// qsub runs qsub. err says the job was not submitted; runErr is qsub's own
// end (the job's exit status with -sync y); said is what qsub printed but
// the job id (stdout's other lines, then stderr).
func (c *Cluster) qsub(ctx context.Context, wait bool, script string, args []string) (j *Job, said string, runErr, err error) {
	for _, a := range args {
		switch a {
		case "-o", "-e", "-j", "-sync", "-terse":
			return nil, "", nil, fmt.Errorf("gridenginetest: qsub argument %q: the helper sets -o, -j, -sync and -terse itself", a)
		}
	}
	abs, err := filepath.Abs(script)
	if err != nil {
		return nil, "", nil, fmt.Errorf("gridenginetest: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, "", nil, fmt.Errorf("gridenginetest: job script: %w", err)
	}
	argv := []string{"-wd", c.JobsDir, "-o", filepath.Join(c.JobsDir, "ge-$JOB_ID.out"), "-j", "y"}
	if wait {
		argv = append(argv, "-sync", "y")
	}
	argv = append(append(argv, args...), abs)
	var out, errb bytes.Buffer
	cmd := c.Command(ctx, "qsub", argv...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr = cmd.Run()
	// qsub prints "Your job ID ("NAME") has been submitted" once the job is
	// submitted; -sync y then says how it ended ("Job ID exited with exit
	// code 0.", which -terse would leave out for a job that succeeded).
	var id int
	var perr error = errNoID
	var saidLines []string
	for _, line := range strings.Split(out.String()+"\n"+errb.String(), "\n") {
		if m := submittedRE.FindStringSubmatch(line); m != nil && perr != nil {
			id, perr = strconv.Atoi(m[1])
		} else if line = strings.TrimSpace(line); line != "" {
			saidLines = append(saidLines, line)
		}
	}
	said = strings.Join(saidLines, "\n")
	if perr != nil || id <= 0 {
		if runErr == nil {
			runErr = fmt.Errorf("printed no job id: %q", out.String())
		}
		return nil, said, nil, fmt.Errorf("gridenginetest: qsub %s: %w: %s", strings.Join(argv, " "), runErr, said)
	}
	return &Job{ID: id, Script: abs, OutputFile: filepath.Join(c.JobsDir, "ge-"+strconv.Itoa(id)+".out")}, said, runErr, nil
}

// readOutput returns a job's output file, "" if there is none.
func readOutput(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// ErrNoJob is returned (wrapped) by JobState when qstat does not list the
// job: it has ended, or was never submitted.
var ErrNoJob = errors.New("gridenginetest: no such job")

// JobState returns the job's state as qstat lists it (qw, t, r, dr, Eqw,
// ...). It returns an error wrapping ErrNoJob once the job has ended.
func (c *Cluster) JobState(ctx context.Context, id int) (string, error) {
	out, err := c.Command(ctx, "qstat", "-u", "*").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("gridenginetest: qstat: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		// job-ID prior name user state submit/start-at queue slots ja-task-ID
		f := strings.Fields(line)
		if len(f) >= 5 && f[0] == strconv.Itoa(id) {
			return f[4], nil
		}
	}
	return "", fmt.Errorf("%w: %d", ErrNoJob, id)
}

// WaitRunning polls the job every 50 ms until its state is r (running) and
// its script's process runs, and returns the job's processes then (see
// JobProcesses). A job that ends first is an error wrapping ErrNoJob.
func (c *Cluster) WaitRunning(ctx context.Context, id int) ([]Proc, error) {
	for {
		st, err := c.JobState(ctx, id)
		if err != nil {
			return nil, err
		}
		if st == "r" {
			if ps := c.JobProcesses(id); len(ps) > 0 {
				return ps, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gridenginetest: job %d is %s, waiting for it to run: %w", id, st, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitGone polls every 50 ms until qstat no longer lists the job.
func (c *Cluster) WaitGone(ctx context.Context, id int) error {
	for {
		st, err := c.JobState(ctx, id)
		if errors.Is(err, ErrNoJob) {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gridenginetest: job %d is still %s: %w", id, st, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Qdel runs `qdel ID` on the qmaster host.
func (c *Cluster) Qdel(ctx context.Context, id int) error {
	out, err := c.Command(ctx, "qdel", strconv.Itoa(id)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gridenginetest: qdel %d: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// PEHostfileLine is one line of a job's $PE_HOSTFILE.
type PEHostfileLine struct {
	// Host is the exec host.
	Host string
	// Slots is the number of the job's slots on it.
	Slots int
	// Queue is the queue instance, queue@host.
	Queue string
	// Processors is the processor range, UNDEFINED without binding.
	Processors string
}

// ParsePEHostfile parses $PE_HOSTFILE's lines, "host slots queue
// processors".
func ParsePEHostfile(s string) ([]PEHostfileLine, error) {
	var lines []PEHostfileLine
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("gridenginetest: PE_HOSTFILE line %q: want host slots queue processors", l)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("gridenginetest: PE_HOSTFILE line %q: bad slot count", l)
		}
		lines = append(lines, PEHostfileLine{Host: f[0], Slots: n, Queue: f[2], Processors: f[3]})
	}
	return lines, nil
}

// verifyScript runs `qrsh -inherit HOST hostname` for every host of its
// $PE_HOSTFILE, its own included.
const verifyScript = `#!/bin/sh
while read host slots queue procs; do
  qrsh -inherit "$host" hostname </dev/null || exit 1
done < "$PE_HOSTFILE"
`

// Verify runs a job of one slot per exec host (qsub -sync y -pe gorun N)
// that runs `qrsh -inherit HOST hostname` for every host of its
// $PE_HOSTFILE, and checks that every exec host printed its name once: the
// qmaster, the scheduler, every execd, the parallel environment and tight
// integration work. It takes about 3 s.
func (c *Cluster) Verify(ctx context.Context) error {
	script, err := c.WriteScript("verify.sh", verifyScript)
	if err != nil {
		return err
	}
	j, err := c.RunPE(ctx, len(c.nodes), script)
	if err != nil {
		return err
	}
	if j.ExitCode != 0 {
		return fmt.Errorf("gridenginetest: verify job %d: %s: %s%s", j.ID, j.Message, strings.TrimSpace(j.Output), c.logTails())
	}
	got := strings.Fields(j.Output)
	slices.Sort(got)
	if want := c.NodeNames(); strings.Join(got, " ") != strings.Join(want, " ") {
		return fmt.Errorf("gridenginetest: verify job %d printed %q, want each of %v once", j.ID, j.Output, want)
	}
	return nil
}
