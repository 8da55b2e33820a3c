//go:build launcher_only

package main

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/launcher"
)

// child is the full build's; the launcher build starts no bench rank and
// no plugin suite (gorun-tools does).
func child() {}

// needsTools says whether args must run in the full build: gorun bench in
// mpirun's order (gorun -np 4 bench allreduce).
func needsTools(args []string) bool { return benchIndex(args) >= 0 }

// benchArgs is the full build's; the launcher build hands those arguments
// to gorun-tools as they are (needsTools).
func benchArgs(args []string) []string { return args }

// benchCommand is gorun bench, which runs in gorun-tools.
func benchCommand(io.Writer, io.Writer) *cli.Command {
	return toolsCommand("bench", benchUsage)
}

// pluginsCommand is gorun plugins, which runs in gorun-tools.
func pluginsCommand(io.Writer, io.Writer) *cli.Command {
	return toolsCommand("plugins", pluginsUsage)
}

// toolsCommand is a command of the full build: its arguments, flags and
// help included, go to gorun-tools.
func toolsCommand(name, usage string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, SkipFlagParsing: true, HideHelp: true,
		Action: func(*cli.Context) error { return execTools("gorun " + name) },
	}
}

// preflightPlugin runs the job in gorun-tools when --plugin-check asks for
// the plugin's preflight, which needs the plugin host.
func preflightPlugin(c *cli.Context, o launcher.Options, _, _ io.Writer) error {
	on, err := pluginCheckOn(c, o)
	if err != nil || !on {
		return err
	}
	return execTools("--plugin-check")
}
