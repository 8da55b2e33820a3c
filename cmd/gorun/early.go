package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/launcher"
)

// earlyAgentKey is where run leaves, in the app's Metadata, the agent main
// started before the flags were read (a *launcher.EarlyAgent, or nil).
const earlyAgentKey = "early-agent"

// commands are the names of gorun's subcommands and their aliases, and
// urfave/cli's help: a command line that reaches one runs no job, so main
// starts no early agent for it. TestCommandsKnown holds it to newApp's.
var commands = map[string]bool{
	"agent": true, "check": true, "show": true, "topo": true, "ps": true, "status": true,
	"stacks": true, "bench": true, "plugins": true, "config": true, "completion": true,
	"help": true, "h": true,
}

// wantsEarlyAgent reports whether args (os.Args) look like a job's command
// line, whose local agent main starts at once (launcher.EarlyAgent): some
// flags, then a program that is no subcommand's name. Help, version and
// dry runs start none. A guess is cheap either way: a job without a local
// host, or a command line that turns out wrong, discards the agent unused.
func wantsEarlyAgent(args []string) bool {
	known := mainFlags()
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return i+1 < len(args)
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			return !commands[a]
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "help", "h", "version", "v", "dry-run":
			return false
		}
		if takesValue, ok := known[name]; ok && takesValue && !hasValue {
			i++
		}
	}
	return false
}

// earlyAgentOf is the agent main started early for c's job, if any.
func earlyAgentOf(c *cli.Context) *launcher.EarlyAgent {
	e, _ := c.App.Metadata[earlyAgentKey].(*launcher.EarlyAgent)
	return e
}
