package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/plugintest"
)

// pluginsCommand is `gorun plugins list|test`.
func pluginsCommand(stdout, stderr io.Writer) *cli.Command {
	dirFlag := &cli.StringSliceFlag{Name: "plugin-dir", Usage: "look in `DIR` first (repeatable)"}
	return &cli.Command{
		Name:  "plugins",
		Usage: "list the transport and collective plugins found, or test one (see gorun-plugin(7))",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the plugins in the plugin directories: name, version, path, devices found",
				Flags: []cli.Flag{dirFlag, &cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: func(c *cli.Context) error {
					return listPlugins(c, stdout)
				},
			},
			{
				Name:      "test",
				Usage:     "run gorun's transport contract suite against a plugin, then probe its latency and bandwidth",
				ArgsUsage: "PATH|NAME",
				Flags: []cli.Flag{dirFlag,
					&cli.BoolFlag{Name: "quick", Usage: "run the short preflight subset"},
					&cli.BoolFlag{Name: "v", Usage: "print every test as it runs"},
					&cli.BoolFlag{Name: "no-probe", Usage: "skip the latency and bandwidth probe"},
					&cli.StringFlag{Name: "iface", Value: plugintest.DefaultIface, Usage: "give the plugins interface `NAME` (the suite runs on this host)"},
				},
				Action: func(c *cli.Context) error {
					return testPlugin(c, stdout, stderr)
				},
			},
		},
	}
}

func listPlugins(c *cli.Context, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Minute)
	defer cancel()
	dirs := plugins.Dirs(absDirs(c.StringSlice("plugin-dir")))
	ls := plugins.List(ctx, dirs, plugins.Options{})
	if c.Bool("json") {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Dirs    []string          `json:"dirs"`
			Plugins []plugins.Listing `json:"plugins"`
		}{dirs, ls})
	}
	return plugins.WriteListing(stdout, dirs, ls)
}

func absDirs(dirs []string) []string {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		out = append(out, d)
	}
	return out
}

func testPlugin(c *cli.Context, stdout, stderr io.Writer) error {
	if c.NArg() != 1 {
		return usage("plugins test: want one plugin, as a path or a name")
	}
	path, err := plugins.Lookup(c.Args().First(), absDirs(c.StringSlice("plugin-dir")))
	if err != nil {
		return exitError{code: exitUsage, err: err}
	}
	if path, err = filepath.Abs(path); err != nil {
		return exitError{code: exitUsage, err: err}
	}
	self, err := os.Executable()
	if err != nil {
		return exitError{code: exitFailed, err: err}
	}
	_, err = plugintest.Check(c.Context, self, path, plugintest.CheckOptions{Probe: !c.Bool("no-probe"),
		Options: plugintest.Options{Quick: c.Bool("quick"), Verbose: c.Bool("v"), Iface: c.String("iface"), Stdout: stdout, Stderr: stderr}})
	if err != nil {
		return exitError{code: exitFailed, err: err}
	}
	return nil
}

// preflightCommand is a job's --plugin-check, which gorun runs before
// it starts any rank: the quick contract suite against the job's plugin
// on this host. A plugin not found is a usage error (exit 2), one that
// fails the suite a failure (exit 1).
func preflightCommand(stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:      "preflight",
		Usage:     "run the quick transport contract against a job's plugin (gorun --plugin-check)",
		ArgsUsage: "PATH|NAME",
		Hidden:    true,
		Flags:     []cli.Flag{&cli.StringSliceFlag{Name: "plugin-dir", Usage: "look in `DIR` first (repeatable)"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage("preflight: want one plugin, as a path or a name")
			}
			path, err := plugins.Lookup(c.Args().First(), c.StringSlice("plugin-dir"))
			if err != nil {
				return usage("--plugin-check: %w", err)
			}
			self, err := os.Executable()
			if err != nil {
				return exitError{code: exitFailed, err: err}
			}
			if err := plugintest.Preflight(c.Context, self, path, stderr); err != nil {
				return exitError{code: exitFailed, err: fmt.Errorf("--plugin-check: %w: no rank was started", err)}
			}
			return nil
		},
	}
}
