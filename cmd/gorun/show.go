package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/jobrecord"
)

// showCommand is `gorun show DIR`: the record that gorun --record DIR
// kept of a job, for a reader, or as JSON.
func showCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "print the record of a job that gorun --record DIR kept: why it failed, where, on what versions",
		ArgsUsage: "DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the record as JSON"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "print every host, rank, binding and variable, and the kernels' builds"},
		},
		Action: func(c *cli.Context) error {
			// Flags after DIR count too (gorun show runs/7 -v): urfave/cli
			// stops at the first argument.
			asJSON, verbose := c.Bool("json"), c.Bool("verbose")
			var dirs []string
			for _, a := range c.Args().Slice() {
				switch a {
				case "--json", "-json":
					asJSON = true
				case "-v", "--v", "--verbose", "-verbose":
					verbose = true
				default:
					dirs = append(dirs, a)
				}
			}
			if len(dirs) != 1 {
				return errExit{code: 2, err: fmt.Errorf("show: want one DIR (a job's --record directory), got %q", dirs)}
			}
			r, err := jobrecord.Read(dirs[0])
			if err != nil {
				return errExit{code: 1, err: err}
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return r.Format(stdout, verbose)
		},
	}
}
