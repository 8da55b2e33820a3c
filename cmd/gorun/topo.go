package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/topology"
)

// topoCommand is `gorun topo`: the node's topology matrix, as
// `nvidia-smi topo -m` prints it, or JSON.
func topoCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "topo",
		Usage: "print this node's GPU/NIC/CPU topology matrix (as nvidia-smi topo -m), or --json",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the node model as JSON"},
			&cli.IntFlag{Name: "plan", Usage: "print the bindings `N` ranks would get on this node, and why"},
			&cli.StringFlag{Name: "bind-to", Usage: "with --plan: the binding mode (as gorun --bind-to)"},
			&cli.IntFlag{Name: "cpus-per-rank", Usage: "with --plan: as gorun --cpus-per-rank"},
			&cli.StringFlag{Name: "root", Usage: "read sysfs from the tree under `DIR` (a recorded fixture) instead of /", Hidden: true},
			&cli.StringFlag{Name: "nvml", Usage: "answer NVML questions from a recorded `FILE` (with --root)", Hidden: true},
		},
		Action: func(c *cli.Context) error {
			n, err := discover(c.String("root"), c.String("nvml"))
			if err != nil {
				return errExit{code: 1, err: err}
			}
			if r := c.Int("plan"); r > 0 {
				to, err := topology.ParseBindTo(c.String("bind-to"))
				if err != nil {
					return errExit{code: 2, err: err}
				}
				plan, err := topology.PlanBindings(n, topology.BindOptions{LocalRanks: r, BindTo: to, CPUsPerRank: c.Int("cpus-per-rank")})
				if err != nil {
					return errExit{code: 2, err: err}
				}
				host, _ := os.Hostname()
				if root := c.String("root"); root != "" {
					host = filepath.Base(root) // a recorded machine
				}
				return topology.FormatBindings(stdout, host, plan)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(n)
			}
			return topology.FormatMatrix(stdout, n)
		},
	}
}

// discover reads this node, or a recorded one.
func discover(root, nvmlFile string) (*topology.Node, error) {
	if root == "" {
		return topology.DiscoverLocal()
	}
	// A recorded machine without NVML answers: the library is "absent".
	var lib topology.NVML = &topology.FakeNVML{InitError: "library not found"}
	if nvmlFile != "" {
		f, err := topology.LoadFakeNVML(os.DirFS(filepath.Dir(nvmlFile)), filepath.Base(nvmlFile))
		if err != nil {
			return nil, fmt.Errorf("--nvml %s: %w", nvmlFile, err)
		}
		lib = f
	}
	return topology.Discover(os.DirFS(root), lib)
}
