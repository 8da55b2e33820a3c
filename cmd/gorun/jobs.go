package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/jobs"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/stacks"
)

// jobsDirFlag names the job directory for ps, status and stacks.
var jobsDirFlag = &cli.StringFlag{Name: "jobs-dir", Usage: "read job files from `DIR` (default $GORUN_JOBS_DIR, else ~/.gorun/jobs)"}

// jobsDir is the job directory the command reads.
func jobsDir(c *cli.Context) (string, error) {
	if d := c.String("jobs-dir"); d != "" {
		return d, nil
	}
	return jobs.Dir()
}

// findJob finds the job the command's first argument names (or the only
// running one).
func findJob(c *cli.Context) (jobs.Info, error) {
	dir, err := jobsDir(c)
	if err != nil {
		return jobs.Info{}, err
	}
	if c.NArg() > 1 {
		return jobs.Info{}, errExit{code: launcher.ExitUsage, err: fmt.Errorf("one job at a time (got %d)", c.NArg())}
	}
	return jobs.Find(dir, c.Args().First())
}

func psCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list your running jobs: id, state, ranks, hosts, age, head, command",
		Flags: []cli.Flag{jobsDirFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(c *cli.Context) error {
			dir, err := jobsDir(c)
			if err != nil {
				return err
			}
			all, lerr := jobs.List(dir)
			var live []jobs.Info
			for _, j := range all {
				if !jobs.Stale(j) {
					j.Key = "" // never printed
					live = append(live, j)
				}
			}
			if lerr != nil {
				fmt.Fprintf(os.Stderr, "gorun ps: %v\n", lerr)
			}
			if c.Bool("json") {
				if live == nil {
					live = []jobs.Info{}
				}
				return json.NewEncoder(stdout).Encode(live)
			}
			return jobs.WriteList(stdout, live, time.Now())
		},
	}
}

func statusCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show every rank of a running job: host, pid, state, CPU%, RSS, time since its last output, calls, restarts",
		ArgsUsage: "[JOB]",
		Flags: []cli.Flag{jobsDirFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "print it again every second until the job ends"}},
		Action: func(c *cli.Context) error {
			info, err := findJob(c)
			if err != nil {
				return err
			}
			for {
				var st launcher.JobStatus
				ctx, cancel := context.WithTimeout(c.Context, 15*time.Second)
				err := jobs.Call(ctx, info, jobs.Request{Op: launcher.OpStatus}, &st)
				cancel()
				if err != nil {
					if c.Bool("watch") && jobs.Stale(info) {
						fmt.Fprintf(stdout, "job %s ended\n", info.ID)
						return nil
					}
					return err
				}
				if c.Bool("json") {
					if err := json.NewEncoder(stdout).Encode(st); err != nil {
						return err
					}
				} else {
					if c.Bool("watch") {
						io.WriteString(stdout, "\x1b[H\x1b[2J")
					}
					st.WriteText(stdout, time.Now())
				}
				if !c.Bool("watch") {
					return nil
				}
				select {
				case <-time.After(time.Second):
				case <-c.Context.Done():
					return nil
				}
			}
		},
	}
}

func stacksCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "stacks",
		Usage:     "print every rank's stacks of a running job, grouped, naming the odd rank out (the job goes on unchanged)",
		ArgsUsage: "[JOB]",
		Flags: []cli.Flag{jobsDirFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "also print every thread of one rank of each group, with files and lines"}},
		Action: func(c *cli.Context) error {
			info, err := findJob(c)
			if err != nil {
				return err
			}
			var v stacks.Verdict
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
			defer cancel()
			if err := jobs.Call(ctx, info, jobs.Request{Op: launcher.OpStacks, Verbose: c.Bool("verbose")}, &v); err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(stdout).Encode(v)
			}
			v.WriteText(stdout, c.Bool("verbose"))
			return nil
		},
	}
}
