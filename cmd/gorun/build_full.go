//go:build !launcher_only

package main

import (
	"os"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/plugins/plugintest"
)

// child runs what this process was started for when it is a `gorun bench`
// rank or `gorun plugins test`'s suite, and does not return then.
func child() {
	if len(os.Args) > 1 && os.Args[1] == benchWorker {
		os.Exit(collbench.RankMain())
	}
	if path := os.Getenv(plugintest.EnvPath); path != "" {
		// gorun plugins test's child: the contract suite (it exits).
		plugintest.Main(path)
	}
}

// needsTools says whether args must run in the full build; this is it.
func needsTools([]string) bool { return false }
