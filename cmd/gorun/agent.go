package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/launcher"
)

// agentFlags are `gorun agent`'s options.
type agentFlags struct {
	host    string // the host's name in the plan ("" = from the head's hello, or Slurm's)
	hostSet bool   // --host was given
	connect string // connect back to the head at these addresses
	leave   bool   // --leave-on-signal
}

// agentCommand is `gorun agent`, the per-host agent that gorun starts on
// every host (hidden: users never type it). main runs it without the app
// (agentMain); the command is here for a command line that reaches it
// through the app, and hands its arguments to agentMain, which reads them.
func agentCommand() *cli.Command {
	return &cli.Command{
		Name:            "agent",
		Usage:           "run gorun's per-host agent (started by gorun itself)",
		Hidden:          true,
		SkipFlagParsing: true,
		HideHelp:        true,
		Action: func(c *cli.Context) error {
			if code := agentMain(c.Args().Slice()); code != 0 {
				return errExit{code: code}
			}
			return nil
		},
	}
}

// agentMain runs `gorun agent ARGS` as main's first step, without the
// app: the agent is on the path of every job's start, and the app's
// flags, configuration and personalities (some 0.4 ms) are none of its
// business. Its flags (the standard library's syntax: -host H, --host=H)
// are --host, --connect and --leave-on-signal; it returns the exit status.
func agentMain(args []string) int {
	fs := flag.NewFlagSet("gorun agent", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	var f agentFlags
	fs.StringVar(&f.host, "host", "", "the host's name in the plan")
	fs.StringVar(&f.connect, "connect", "", "connect back to the head at these host:port addresses")
	fs.BoolVar(&f.leave, "leave-on-signal", false, "on SIGTERM, SIGINT or SIGHUP stop this node's ranks and leave")
	if err := fs.Parse(args); err != nil {
		return launcher.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gorun agent: unexpected argument %q\n", fs.Arg(0))
		return launcher.ExitUsage
	}
	fs.Visit(func(fl *flag.Flag) { f.hostSet = f.hostSet || fl.Name == "host" })
	if err := runAgent(f, os.Stderr); err != nil {
		var ee errExit
		if errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "gorun: %v\n", ee.err)
			return ee.code
		}
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
		return 1
	}
	return 0
}

// runAgent runs the agent with flags f: on its standard input and
// output, or connected back to the head (--connect).
func runAgent(f agentFlags, stderr io.Writer) error {
	var in io.Reader = os.Stdin
	var out io.Writer = os.Stdout
	host := f.host
	var connAddr, clientAddr string
	if f.connect != "" {
		if host == "" {
			host = launcher.SlurmNodeName()
		}
		conn, err := launcher.DialHead(f.connect, host)
		if err != nil {
			return errExit{code: 1, err: fmt.Errorf("agent on %s: %w", host, err)}
		}
		defer conn.Close()
		in, out = conn, conn
		connAddr, clientAddr = launcher.HostOf(conn.LocalAddr()), launcher.HostOf(conn.RemoteAddr())
	}
	ao := launcher.AgentOptions{
		In: in, Out: out, Log: stderr, Host: host, Version: gorunVersion(),
		// srun's agents name no host; a per-node launch's do, and are no step's tasks.
		Step: f.connect != "" && !f.hostSet, Leave: f.leave,
		ConnAddr: connAddr, ClientAddr: clientAddr,
	}
	if f.connect != "" {
		// Its stdout is no control channel: a per-node
		// launch's node prints its ranks' output there.
		ao.Stdout, ao.Stderr = os.Stdout, stderr
	}
	err := launcher.RunAgent(context.Background(), ao)
	if err != nil && !errors.Is(err, io.EOF) {
		return errExit{code: 1, err: fmt.Errorf("agent: %w", err)}
	}
	return nil
}
