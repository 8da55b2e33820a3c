// Package tools is gorun-tools, gorun's companion program
// (cmd/gorun-tools): what needs Go's collective runtime or the plugin host,
// which gorun itself leaves out so that none of its processes (head,
// agents, bind steps) pays for their initialisation (see
// launcher.ToolsBinary). gorun runs it, from next to itself; users do not.
// Its commands:
//
//	gorun-tools bench-rank                  a rank of `gorun bench`, which gorun launches as the job's program
//	gorun-tools net-rank                    a rank of `gorun check --net`, one per host, likewise
//	gorun-tools thresholds [SPEC]           `gorun bench --print-thresholds`
//	gorun-tools plugins list|test ...       `gorun plugins`, which gorun hands over whole
//	gorun-tools preflight [--plugin-dir DIR]... PLUGIN
//	                                        a job's --plugin-check, before gorun starts any rank
//
// With plugintest.EnvPath set it is the child process in which `plugins
// test` runs the transport contract suite. Its messages start with
// "gorun:", as they are gorun's to its user; it exits 0, 1 (a failure) or
// 2 (a usage error, or a plugin not found).
package tools

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/collbench/benchrank"
	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/netcheck"
	"github.com/gorun/gorun/netcheck/netrank"
	"github.com/gorun/gorun/plugins/plugintest"
)

// The exit statuses of gorun-tools.
const (
	exitFailed = 1
	exitUsage  = 2
)

// Main runs gorun-tools with args (the program's name first) and returns
// its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if path := os.Getenv(plugintest.EnvPath); path != "" {
		plugintest.Main(path) // the contract suite's child (it exits)
	}
	if len(args) > 1 && args[1] == collbench.RankCommand {
		return benchrank.Main()
	}
	if len(args) > 1 && args[1] == netcheck.RankCommand {
		return netrank.Main()
	}
	err := newApp(stdout, stderr).Run(args)
	if err == nil {
		return 0
	}
	code := exitUsage // urfave/cli's own errors: bad flags
	var ee exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(stderr, "gorun: %v\n", err)
	return code
}

// exitError carries an exit status out of urfave/cli.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func usage(format string, a ...any) error {
	return exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:            "gorun", // what its user ran
		Usage:           "gorun's companion: Go's collective runtime and the plugin host, which gorun runs",
		HideHelpCommand: true,
		HideVersion:     true,
		Writer:          stdout,
		ErrWriter:       stderr,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return exitError{code: exitUsage, err: err}
		},
		ExitErrHandler: func(*cli.Context, error) {}, // Main says it and exits
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				cli.ShowAppHelp(c)
				return usage("want a command")
			}
			return usage("%s: no such command (gorun runs gorun-tools; see gorun --help)", c.Args().First())
		},
		Commands: []*cli.Command{
			pluginsCommand(stdout, stderr),
			preflightCommand(stderr),
			{
				Name:      "thresholds",
				Usage:     "print the algorithm table that gorun bench's ranks would use: the defaults, $" + collectives.EnvThresholds + ", then SPEC",
				ArgsUsage: "[SPEC]",
				Hidden:    true,
				Action: func(c *cli.Context) error {
					return printThresholds(stdout, c.Args().First())
				},
			},
		},
	}
}

// printThresholds prints the collectives' algorithm table: the defaults,
// with the entries of $GORUN_COLL_THRESHOLDS, then spec's, set.
func printThresholds(w io.Writer, spec string) error {
	thr := collectives.DefaultThresholds()
	for _, s := range []string{os.Getenv(collectives.EnvThresholds), spec} {
		if err := thr.Set(s); s != "" && err != nil {
			return usage("bench: %v", err)
		}
	}
	fmt.Fprint(w, thr.String())
	return nil
}
