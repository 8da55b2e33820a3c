// Command gorun launches and supervises parallel jobs: the ranks of an MPI,
// PyTorch or Go program on this machine, across hosts over SSH, and inside
// the allocations of Slurm, PBS, Grid Engine, LSF and Flux. It is the
// launcher: the head, the agent and the bind step; gorun-tools (cmd/gorun-tools), its companion next to it,
// runs what needs Go's collective runtime or the plugin host (see
// launcher.Tools). docs/tour.md is the tour; man/gorun.1 the manual.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/gorun/gorun/launcher"
)

// mainStart is when gorun's main package was initialised: after the
// runtime's and every dependency's initialisation (GODEBUG=inittrace=1
// shows theirs), before main. --trace counts from it.
var mainStart = time.Now()

func main() {
	if len(os.Args) > 1 && os.Args[1] == launcher.BindExecCommand {
		// A rank's binding step: bind, then become the rank's program.
		err := launcher.BindExecMain(os.Args[2:])
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
		os.Exit(127)
	}
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agentMain(os.Args[2:]))
	}
	var early *launcher.EarlyAgent
	if wantsEarlyAgent(os.Args) {
		// This machine's agent starts now, beside the head's own work
		// (flags, configuration, plan), not after it.
		early = launcher.StartEarlyAgent()
	}
	code, err := run(os.Args, early)
	early.Discard()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorun: %v\n", err)
	}
	os.Exit(code)
}
