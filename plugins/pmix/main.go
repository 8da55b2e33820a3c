//go:build cgo

// Command gorun-pmix is gorun's PMIx plugin: a subprocess of the gorun
// agent that runs a PMIx server (libpmix) for the agent's ranks, so that
// Open MPI programs and mpi4py start under gorun. The agent starts it only
// for programs that need PMIx and talks to it over package pmixbridge's
// wire; it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/gorun/gorun/plugins/pmixbridge"
)

func main() {
	if os.Getenv(pmixbridge.CookieKey) != pmixbridge.CookieValue {
		// Run by hand: say so, without starting libpmix.
		fmt.Fprintf(os.Stderr, "%s: %v\n", pmixbridge.Binary, pmixbridge.ErrByHand)
		os.Exit(1)
	}
	srv.startInit()
	defer srv.finalize()
	if err := pmixbridge.Serve(srv); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", pmixbridge.Binary, err)
	}
}
