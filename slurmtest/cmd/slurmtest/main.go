// Command slurmtest stands up a real multi-node Slurm cluster on this
// machine for gorun's scripts and for humans (see package
// github.com/gorun/gorun/slurmtest). It needs root.
//
// Usage:
//
//	slurmtest [--state DIR] up [--cpus C] [--gpus G] [--extra LINES] [N]
//	slurmtest [--state DIR] down
//	slurmtest [--state DIR] status
//	slurmtest [--state DIR] env     print shell exports (eval "$(slurmtest env)")
//
// N is the number of nodes (default 2), C the CPUs per node (default 4), G
// the fake GPUs per node (default 4, 0 for none). The state directory is
// --state, else $GORUN_SLURMTEST_STATE, else gorun-slurmtest under the
// temporary directory. `up` tears down a cluster already in it first; the
// daemons keep running after slurmtest exits, until `down`.
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

	"github.com/gorun/gorun/internal/testcluster"
	"github.com/gorun/gorun/slurmtest"
)

const usage = `usage: slurmtest [--state DIR] COMMAND
  up [--cpus C] [--gpus G] [--extra LINES] [N]
          stand up nodes node01..nodeN (default 2) with C CPUs (default 4) and
          G fake GPUs (default 4, 0: none) each; tears down a cluster already in DIR
  down    tear the cluster down
  status  list the daemons and the nodes' states
  env     print shell exports for the cluster (SLURM_CONF, ...)
DIR is --state, else $GORUN_SLURMTEST_STATE, else %s.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return testcluster.CLI{Name: "slurmtest", StateEnv: "GORUN_SLURMTEST_STATE", Usage: usage, Up: up, Down: down, Status: status, Env: env}.Run(args, stdout, stderr)
}

func up(state string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cpus := fs.Int("cpus", slurmtest.DefaultCPUs, "CPUs per node")
	gpus := fs.Int("gpus", slurmtest.DefaultGPUs, "fake GPUs per node (0: none)")
	extra := fs.String("extra", "", "lines appended to slurm.conf")
	if err := fs.Parse(args); err != nil {
		return testcluster.UsageError("up: " + err.Error())
	}
	n := slurmtest.DefaultNodes
	switch fs.NArg() {
	case 0:
	case 1:
		var err error
		if n, err = strconv.Atoi(fs.Arg(0)); err != nil || n < 1 {
			return testcluster.UsageError("up: N must be a number of nodes, not " + fs.Arg(0))
		}
	default:
		return testcluster.UsageError("usage: up [--cpus C] [--gpus G] [--extra LINES] [N]")
	}
	if *cpus < 1 || *gpus < 0 {
		return testcluster.UsageError("up: --cpus must be 1 or more and --gpus 0 or more")
	}
	o := slurmtest.Options{Nodes: n, CPUs: *cpus, GPUs: *gpus, StateDir: state, Extra: *extra}
	if *gpus == 0 {
		o.GPUs = -1 // Options: 0 is the default, negative none
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	c, err := slurmtest.Up(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "up %d nodes %s (%d CPUs, %d GPUs each), controller 127.0.0.1:%d, in %d ms; state %s\n",
		len(c.Nodes()), c.NodeList(), c.CPUs, c.GPUs, c.ControllerPort, time.Since(t0).Milliseconds(), c.Dir)
	return nil
}

func down(state string, args []string, stdout, _ io.Writer) error {
	return testcluster.DownCommand(state, args, stdout, slurmtest.Load, func(c *slurmtest.Cluster) string { return fmt.Sprintf("%d nodes", len(c.Nodes())) })
}

func status(state string, args []string, stdout, _ io.Writer) error {
	if err := testcluster.NoArgs("status", args); err != nil {
		return err
	}
	c, err := slurmtest.Load(state)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %s: %d nodes %s, %d CPUs and %d GPUs each, controller 127.0.0.1:%d, state %s\n",
		slurmtest.ClusterName, len(c.Nodes()), c.NodeList(), c.CPUs, c.GPUs, c.ControllerPort, c.Dir)
	ports := map[string]int{}
	for _, n := range c.Nodes() {
		ports["slurmd-"+n.Name] = n.Port
	}
	bad := 0
	for _, d := range c.Daemons() {
		alive := "running"
		if !d.Running {
			alive, bad = "not running", bad+1
		}
		port := ""
		if p, ok := ports[d.Name]; ok {
			port = fmt.Sprintf(" port %d", p)
		}
		fmt.Fprintf(stdout, "%-14s pid %d%s %s\n", d.Name, d.Pid, port, alive)
	}
	if bad == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := c.Command(ctx, "sinfo", "-N", "-o", "%N %T %c %G").CombinedOutput()
		stdout.Write(out)
		if err != nil {
			return fmt.Errorf("sinfo: %w", err)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d daemons are not running", bad, len(c.Daemons()))
	}
	return nil
}

func env(state string, args []string, stdout, _ io.Writer) error {
	if err := testcluster.NoArgs("env", args); err != nil {
		return err
	}
	c, err := slurmtest.Load(state)
	if err != nil {
		return err
	}
	testcluster.PrintExports(stdout, c.Env(), [][2]string{
		{"GORUN_SLURMTEST_STATE", c.Dir},
		{"SLURMTEST_NODES", strings.Join(c.NodeNames(), " ")},
		{"SLURMTEST_NODELIST", c.NodeList()},
		{"SLURMTEST_JOBS_DIR", c.JobsDir},
	})
	return nil
}
