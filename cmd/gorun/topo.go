package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/topology"
	"github.com/gorun/gorun/topology/nvmllib"
)

// topoCommand is `gorun topo`: the node's topology matrix, as
// `nvidia-smi topo -m` prints it, or JSON; the bindings N ranks would
// get; and recording the node as a fixture.
func topoCommand(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "topo",
		Usage: "print this node's GPU/NIC/CPU topology matrix (as nvidia-smi topo -m), the bindings N ranks would get (--plan N), an NCCL topology file (--nccl-topo FILE), or record it (--record DIR)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the node model as JSON"},
			&cli.StringFlag{Name: "nccl-topo", Usage: "write the node as an NCCL topology file (for NCCL_TOPO_FILE) to `FILE` (- for stdout)"},
			&cli.StringFlag{Name: "machine", Usage: "read a machine recorded with --record from `DIR` instead of this one"},
			&cli.StringFlag{Name: "record", Usage: "record this machine (the sysfs files gorun reads, and NVML's answers) into `DIR`, for --machine"},
			&cli.IntFlag{Name: "plan", Usage: "print the bindings `N` ranks would get on the node, and why"},
			&cli.StringFlag{Name: "bind-to", Usage: "with --plan: the binding mode (as gorun --bind-to)"},
			&cli.StringFlag{Name: "gpu-bind", Usage: "with --plan: which GPUs each rank sees (as gorun --gpu-bind)"},
			&cli.IntFlag{Name: "cpus-per-rank", Usage: "with --plan: as gorun --cpus-per-rank"},
			&cli.GenericFlag{Name: "x", Value: &listValue{}, Usage: "with --plan: the ranks' environment has `NAME=VALUE` (CUDA_VISIBLE_DEVICES=2,3 as an allocation's, a variable of your own); repeatable"},
			&cli.BoolFlag{Name: "env", Usage: "with --plan: also print the variables each rank gets from its binding"},
			&cli.StringFlag{Name: "root", Usage: "read sysfs from the tree under `DIR` (a recorded fixture) instead of /", Hidden: true},
			&cli.StringFlag{Name: "nvml", Usage: "answer NVML questions from a recorded `FILE` (with --root)", Hidden: true},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return errExit{code: 2, err: fmt.Errorf("topo: unexpected argument %q", c.Args().First())}
			}
			if dir := c.String("record"); dir != "" {
				files, err := topology.Record("/", dir, nvmllib.New())
				if err != nil {
					return errExit{code: 1, err: err}
				}
				fmt.Fprintf(stdout, "recorded %d files into %s; read it back with gorun topo --machine %s\n", files, dir, dir)
				return nil
			}
			root, nvmlFile := c.String("root"), c.String("nvml")
			if m := c.String("machine"); m != "" {
				root, nvmlFile = m, filepath.Join(m, "nvml.json")
				if _, err := os.Stat(nvmlFile); err != nil {
					nvmlFile = ""
				}
			}
			n, err := discover(root, nvmlFile)
			if err != nil {
				return errExit{code: 1, err: err}
			}
			if r := c.Int("plan"); r > 0 {
				return printPlan(c, stdout, n, root, r)
			}
			if f := c.String("nccl-topo"); f != "" {
				return writeNCCLTopo(stdout, n, f)
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

// writeNCCLTopo writes n as an NCCL topology file to file, or to stdout
// for "-".
func writeNCCLTopo(stdout io.Writer, n *topology.Node, file string) error {
	if file == "-" {
		return n.WriteNCCLTopo(stdout)
	}
	var b strings.Builder
	if err := n.WriteNCCLTopo(&b); err != nil {
		return errExit{code: 1, err: err}
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return errExit{code: 1, err: fmt.Errorf("topo --nccl-topo: %w", err)}
	}
	gpus := 0
	for _, g := range n.GPUs {
		if g.Vendor == topology.VendorNVIDIA {
			gpus++
		}
	}
	fmt.Fprintf(stdout, "wrote the NCCL topology of %d NVIDIA GPU(s) and %d NIC(s) to %s; give it to NCCL with NCCL_TOPO_FILE=%s\n", gpus, len(n.NICs), file, file)
	return nil
}

// printPlan prints the bindings, and with --env the variables, that r
// ranks would get on n (recorded under root, or this node).
func printPlan(c *cli.Context, stdout io.Writer, n *topology.Node, root string, r int) error {
	host, _ := os.Hostname()
	if root != "" {
		host = filepath.Base(filepath.Clean(root)) // a recorded machine
	}
	var environ []string
	for _, kv := range c.Generic("x").(*listValue).values {
		if !strings.Contains(kv, "=") {
			return errExit{code: 2, err: fmt.Errorf("topo -x %q: want NAME=VALUE", kv)}
		}
		environ = append(environ, kv)
	}
	ranks := make([]int, r)
	for i := range ranks {
		ranks[i] = i
	}
	b := control.Bind{To: c.String("bind-to"), GPUBind: c.String("gpu-bind"), CPUsPerRank: c.Int("cpus-per-rank"), Report: true}
	nb, err := launcher.BindNode(n, host, ranks, len(ranks), b, env.Gorun, environ)
	if err != nil {
		return errExit{code: 2, err: err}
	}
	if !c.Bool("env") {
		_, err := io.WriteString(stdout, nb.Report)
		return err
	}
	_, err = io.WriteString(stdout, nb.ReportWithEnv(host))
	return err
}

// discover reads this node, or a recorded one.
func discover(root, nvmlFile string) (*topology.Node, error) {
	if root == "" {
		return topology.DiscoverLocal(nvmllib.New())
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
