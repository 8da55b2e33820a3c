package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/plugins"
	"github.com/gorun/gorun/plugins/plugintest"
)

// pluginSettings reads the plugin flags (env.NewPlugin checks them).
func pluginSettings(get func(string) string, list func(string) []string) (env.Plugin, error) {
	return env.NewPlugin(get("plugin"), list("plugin-dir"), list("plugin-opt"), get("fabric-provider"), get("transport-fallback"))
}

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
	if len(ls) == 0 {
		fmt.Fprintf(stdout, "no plugins (gorun-plugin-*) in %s\n", strings.Join(dirs, ", "))
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tKIND\tPATH\tDEVICES")
	for _, l := range ls {
		switch {
		case l.Problem != "":
			fmt.Fprintf(w, "%s\t-\t-\t%s\t(%s)\n", l.Name, l.Path, l.Problem)
			continue
		case l.Shadowed:
			fmt.Fprintf(w, "%s\t-\t-\t%s\t(shadowed by an earlier directory)\n", l.Name, l.Path)
			continue
		case l.Err != "":
			msg, _, _ := strings.Cut(l.Err, "\n")
			fmt.Fprintf(w, "%s\t-\t-\t%s\t(error: %s)\n", l.Name, l.Path, msg)
			continue
		}
		var kind []string
		if l.Info.Transport {
			kind = append(kind, "transport")
		}
		if l.Info.Collective {
			kind = append(kind, "collective")
		}
		var devs []string
		for _, d := range l.Devices {
			s := d.Name
			if d.Provider != "" {
				s += " (" + d.Provider + ")"
			}
			if d.Note != "" {
				s += " [" + d.Note + "]"
			}
			devs = append(devs, s)
		}
		if len(devs) == 0 {
			devs = []string{"-"}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", l.Info.Name, l.Info.Version, strings.Join(kind, "+"), l.Path, strings.Join(devs, ", "))
	}
	return w.Flush()
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
		return errExit{code: 2, err: errors.New("plugins test: want one plugin, as a path or a name")}
	}
	path, err := plugins.Lookup(c.Args().First(), absDirs(c.StringSlice("plugin-dir")))
	if err != nil {
		return errExit{code: 2, err: err}
	}
	if path, err = filepath.Abs(path); err != nil {
		return errExit{code: 2, err: err}
	}
	self, err := os.Executable()
	if err != nil {
		return errExit{code: 1, err: err}
	}
	ctx := c.Context
	info, devs, err := plugins.Inspect(ctx, path, plugins.Options{Iface: c.String("iface")})
	if err != nil {
		return errExit{code: 1, err: err}
	}
	fmt.Fprintf(stdout, "plugin %s %s (%s)\n", info.Name, info.Version, path)
	for _, d := range devs {
		fmt.Fprintf(stdout, "  device %s %s %s\n", d.Name, d.Provider, d.Note)
	}
	if !info.Transport {
		fmt.Fprintf(stdout, "it provides no transport: nothing to test here (its collectives are tested through a job)\n")
		return nil
	}
	start := time.Now()
	if err := plugintest.Run(ctx, self, path, plugintest.Options{Quick: c.Bool("quick"), Verbose: c.Bool("v"), Iface: c.String("iface"), Stdout: stdout, Stderr: stderr}); err != nil {
		return errExit{code: 1, err: err}
	}
	fmt.Fprintf(stdout, "transport contract: passed (%s)\n", time.Since(start).Round(time.Millisecond))
	if c.Bool("no-probe") {
		return nil
	}
	res, err := plugintest.Probe(ctx, path, c.String("iface"))
	if err != nil {
		return errExit{code: 1, err: fmt.Errorf("probe: %w", err)}
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "probe (2 plugin processes on this host)\tsize\tus\tGB/s\t")
	for _, r := range res {
		gb := "-"
		if r.What == "bandwidth" {
			gb = fmt.Sprintf("%.2f", r.GBps)
		}
		fmt.Fprintf(w, "%s\t%s\t%.1f\t%s\t\n", r.What, collbench.FormatSize(int64(r.Size)), r.Micros, gb)
	}
	return w.Flush()
}

// preflightPlugin runs the quick contract suite against the job's plugin
// on this host when --plugin-check asks for it, before anything starts.
func preflightPlugin(c *cli.Context, o launcher.Options, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if !read(cfg).on("plugin-check") || o.Plugin.Name == "" || o.DryRun {
		return nil
	}
	path, err := plugins.Lookup(o.Plugin.Name, o.Plugin.Dirs)
	if err != nil {
		return errExit{code: launcher.ExitUsage, err: fmt.Errorf("--plugin-check: %w", err)}
	}
	self, err := os.Executable()
	if err != nil {
		return errExit{code: launcher.ExitLaunch, err: err}
	}
	start := time.Now()
	info, _, err := plugins.Inspect(c.Context, path, plugins.Options{Iface: "lo"})
	if err != nil {
		return errExit{code: launcher.ExitLaunch, err: fmt.Errorf("--plugin-check: %w: no rank was started", err)}
	}
	if !info.Transport {
		fmt.Fprintf(stderr, "gorun: --plugin-check: %s starts (it has no transport to test)\n", path)
		return nil
	}
	var out strings.Builder
	err = plugintest.Run(c.Context, self, path, plugintest.Options{Quick: true, Iface: "lo", Stdout: &out, Stderr: &out})
	if err != nil {
		fmt.Fprint(stderr, out.String())
		return errExit{code: launcher.ExitLaunch, err: fmt.Errorf("--plugin-check: %w: no rank was started", err)}
	}
	fmt.Fprintf(stderr, "gorun: --plugin-check: %s passed the quick transport contract (%s)\n", path, time.Since(start).Round(time.Millisecond))
	return nil
}
