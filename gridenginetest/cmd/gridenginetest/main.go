// Command gridenginetest stands up a real Grid Engine cluster on this
// machine for gorun's scripts and for humans (see package
// github.com/gorun/gorun/gridenginetest). It needs root.
//
// Usage:
//
//	gridenginetest [--state DIR] up [--slots S] [N]
//	gridenginetest [--state DIR] down
//	gridenginetest [--state DIR] status
//	gridenginetest [--state DIR] env     print shell exports (eval "$(gridenginetest env)")
//
// N is the number of exec hosts (default 2), S the slots per exec host
// (default 4). The state directory is --state, else
// $GORUN_GRIDENGINETEST_STATE, else gorun-gridenginetest under the temporary
// directory. `up` tears down a cluster already in it first; the daemons keep
// running after gridenginetest exits, until `down`. With the exports of
// `env`, qsub, qstat, qdel, ... run on the cluster's qmaster host.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/gridenginetest"
	"github.com/gorun/gorun/internal/testcluster"
)

const usage = `usage: gridenginetest [--state DIR] COMMAND
  up [--slots S] [N]
          stand up a qmaster and exec hosts node01..nodeN (default 2) with S
          slots (default 4) each; tears down a cluster already in DIR
  down    tear the cluster down
  status  list the daemons and the queue instances
  env     print shell exports for the cluster (SGE_ROOT, PATH, ...)
DIR is --state, else $GORUN_GRIDENGINETEST_STATE, else %s.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return testcluster.CLI{Name: "gridenginetest", StateEnv: "GORUN_GRIDENGINETEST_STATE", Usage: usage, Up: up, Down: down, Status: status, Env: env}.Run(args, stdout, stderr)
}

func up(state string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	slots := fs.Int("slots", gridenginetest.DefaultSlots, "slots per exec host")
	if err := fs.Parse(args); err != nil {
		return testcluster.UsageError("up: " + err.Error())
	}
	n := gridenginetest.DefaultNodes
	switch fs.NArg() {
	case 0:
	case 1:
		var err error
		if n, err = strconv.Atoi(fs.Arg(0)); err != nil || n < 1 {
			return testcluster.UsageError("up: N must be a number of exec hosts, not " + fs.Arg(0))
		}
	default:
		return testcluster.UsageError("usage: up [--slots S] [N]")
	}
	if *slots < 1 {
		return testcluster.UsageError("up: --slots must be 1 or more")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	c, err := gridenginetest.Up(ctx, gridenginetest.Options{Nodes: n, Slots: *slots, StateDir: state})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "up qmaster %s and %d exec hosts %s (%d slots each) on %s, in %d ms; state %s\n",
		c.Master().Addr, len(c.Nodes()), strings.Join(c.NodeNames(), ","), c.Slots, c.Subnet, time.Since(t0).Milliseconds(), c.Dir)
	return nil
}

func down(state string, args []string, stdout, _ io.Writer) error {
	return testcluster.DownCommand(state, args, stdout, gridenginetest.Load, func(c *gridenginetest.Cluster) string { return fmt.Sprintf("%d exec hosts", len(c.Nodes())) })
}

func status(state string, args []string, stdout, _ io.Writer) error {
	if err := testcluster.NoArgs("status", args); err != nil {
		return err
	}
	c, err := gridenginetest.Load(state)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s: qmaster %s, exec hosts", gridenginetest.ClusterName, c.Master().Addr)
	for _, n := range c.Nodes() {
		fmt.Fprintf(stdout, " %s=%s (gid_range %s)", n.Name, n.Addr, n.GIDs)
	}
	fmt.Fprintf(stdout, ", %d slots each, state %s\n", c.Slots, c.Dir)
	bad := 0
	for _, d := range c.Daemons() {
		alive := "running"
		if !d.Running {
			alive, bad = "not running", bad+1
		}
		fmt.Fprintf(stdout, "%-18s pid %d on %s %s\n", d.Name, d.Pid, d.Host, alive)
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d processes are not running", bad, len(c.Daemons()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "qstat", "-f").CombinedOutput()
	stdout.Write(out)
	if err != nil {
		return fmt.Errorf("qstat -f: %w", err)
	}
	return nil
}

func env(state string, args []string, stdout, _ io.Writer) error {
	if err := testcluster.NoArgs("env", args); err != nil {
		return err
	}
	c, err := gridenginetest.Load(state)
	if err != nil {
		return err
	}
	testcluster.PrintExports(stdout, c.Env(), [][2]string{
		{"GORUN_GRIDENGINETEST_STATE", c.Dir},
		{"GRIDENGINETEST_NODES", strings.Join(c.NodeNames(), " ")},
		{"GRIDENGINETEST_JOBS_DIR", c.JobsDir},
	})
	return nil
}
