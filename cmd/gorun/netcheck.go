package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/jobrecord"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/netcheck"
	"github.com/gorun/gorun/transport"
)

// checkFlags are `gorun check`'s own flags, those of `gorun check --net`;
// the job's (-H, --hostfile, --plugin, ...) go before "check", as for
// `gorun check PROGRAM`.
func checkFlags() []cli.Flag {
	return append([]cli.Flag{},
		&cli.BoolFlag{Name: "net", Usage: "measure every host pair's bandwidth, both ways, and round trip over the job's transport, and name the slow host or link (exit 1 when one is slow)"},
		&cli.StringFlag{Name: "expect", Usage: "with --net: flag every link below `RATE` too (100Gbit, 25Gb, 800Mbit; a bare number is Gbit/s)"},
		&cli.Float64Flag{Name: "slow-fraction", Value: netcheck.DefaultSlowFraction, Usage: "with --net: a link below `F` times the cluster's median is slow"},
		&cli.BoolFlag{Name: "json", Usage: "with --net: print one JSON object (links, slow, hosts, skew, verdict) instead of the matrix"},
		&cli.StringFlag{Name: "svg", Usage: "with --net: also draw the matrix as a heat map, as SVG, into `FILE`"},
		&cli.StringFlag{Name: "transport", Usage: "with --net: `KIND`, as gorun bench's: auto, tcp, or plugin (the --plugin transport)"},
		&cli.IntFlag{Name: "streams", Usage: "with --net: `N` TCP streams per connection (sets " + env.CollStreams + ")"},
	)
}

// netUsage is a usage error of gorun check --net.
func netUsage(format string, a ...any) error {
	return errExit{code: launcher.ExitUsage, err: fmt.Errorf("check --net: "+format, a...)}
}

// netSettings are gorun check --net's own flags, read and checked.
type netSettings struct {
	expect, fraction float64
	json             bool
	svg              string
}

func readNetSettings(c *cli.Context) (netSettings, error) {
	ns := netSettings{fraction: c.Float64("slow-fraction"), json: c.Bool("json"), svg: c.String("svg")}
	if c.NArg() > 0 {
		return ns, netUsage("runs no program (%s): it launches its own", c.Args().First())
	}
	if s := c.String("expect"); s != "" {
		var err error
		if ns.expect, err = netcheck.ParseRate(s); err != nil {
			return ns, netUsage("--expect: %v", err)
		}
	}
	if ns.fraction <= 0 || ns.fraction > 1 {
		return ns, netUsage("--slow-fraction %v: want a number above 0, at most 1", ns.fraction)
	}
	mode, err := transport.ParseMode(c.String("transport"))
	if err != nil {
		return ns, netUsage("--transport %v", err)
	}
	if mode == transport.ModePlugin && c.String("plugin") == "" {
		return ns, netUsage("--transport plugin: which one? (--plugin NAME)")
	}
	if c.Int("streams") < 0 {
		return ns, netUsage("--streams %d: must not be negative", c.Int("streams"))
	}
	return ns, nil
}

// netJob returns the check's job: one rank of gorun-tools net-rank per
// host, its output untagged, its record into dir.
func netJob(c *cli.Context, stdout, stderr io.Writer, ns netSettings, dir string) (launcher.Options, error) {
	o, err := jobOptions(c, stdout, stderr)
	if err != nil {
		return o, err
	}
	js, _ := json.Marshal(netcheck.Config{Expect: ns.expect, Fraction: ns.fraction})
	set := func(name, value string) {
		o.Exports = append(o.Exports, env.Export{Name: name, Value: value, HasValue: true})
	}
	set(netcheck.EnvConfig, string(js))
	if t := c.String("transport"); t != "" {
		set(env.CollTransport, t)
	}
	if n := c.Int("streams"); n != 0 {
		set(env.CollStreams, fmt.Sprint(n))
	}
	if _, err := launcher.Tools(); err != nil {
		return o, netUsage("%v", err)
	}
	o.Argv = []string{launcher.ToolsProgram, netcheck.RankCommand}
	o.Plan = launcher.PlanOptions{NPerNode: 1, Source: o.Plan.Source} // one rank per host, whatever -np says
	o.Tag, o.Timestamp, o.OutputDir, o.MergeOutput = false, false, "", false
	if o.RecordDir == "" {
		o.RecordDir = dir
	}
	return o, nil
}

// runCheckNet runs `gorun check --net`: the link matrix between the
// job's hosts, the hosts' own reports, what differs between them, and a
// verdict. It exits 1 when a link is slow.
func runCheckNet(c *cli.Context, stdout, stderr io.Writer) error {
	start := time.Now()
	ns, err := readNetSettings(c)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gorun-netcheck-")
	if err != nil {
		return errExit{code: 1, err: fmt.Errorf("check --net: %w", err)}
	}
	defer os.RemoveAll(dir)
	o, err := netJob(c, stdout, stderr, ns, dir)
	if err != nil {
		return err
	}
	var pass io.Writer = stdout
	if ns.json {
		pass = stderr // standard output is the one object
	}
	col := netcheck.NewCollector(pass)
	o.Stdout = col
	code, runErr := launcher.Run(context.Background(), o)
	colErr := col.Close()
	if runErr != nil || code != 0 {
		return errExit{code: code, err: runErr}
	}
	info := col.Info()
	a := netcheck.Analyze(col.Links(), info.Hosts, ns.expect, ns.fraction)
	var skew []jobrecord.SkewItem
	if rec, err := jobrecord.Read(o.RecordDir); err == nil {
		skew = jobrecord.FindSkew(rec.Hosts)
	} else {
		fmt.Fprintf(stderr, "gorun: check --net: what differs between the hosts is unknown: %v\n", err)
	}
	took := time.Since(start)
	if err := writeNetReport(stdout, ns, a, info, col, skew, took); err != nil {
		return errExit{code: 1, err: fmt.Errorf("check --net: %w", err)}
	}
	if ns.svg != "" {
		if err := collbench.Save(ns.svg, stdout, func(w io.Writer) error { return netcheck.WriteSVG(w, a) }); err != nil {
			return errExit{code: 1, err: fmt.Errorf("check --net: %w", err)}
		}
	}
	switch {
	case colErr != nil:
		return errExit{code: 1, err: fmt.Errorf("check --net: %w", colErr)}
	case len(a.Links) == 0 && len(info.Hosts) > 1:
		return errExit{code: 1, err: errors.New("check --net: rank 0 reported no links")}
	case len(a.Slow) > 0:
		return errExit{code: 1, err: fmt.Errorf("check --net: %d slow links", len(a.Slow))}
	}
	return nil
}

// writeNetReport prints the check's result: the JSON object, or the
// matrix, the hosts' own reports, the skew and the time taken.
func writeNetReport(w io.Writer, ns netSettings, a netcheck.Analysis, info netcheck.Info, col *netcheck.Collector, skew []jobrecord.SkewItem, took time.Duration) error {
	if !ns.json {
		return netcheck.WriteText(w, a, info, col.NodeText(), skew, took)
	}
	r := netcheck.NewReport(a, info, col.Nodes(), skew)
	r.ElapsedS = took.Seconds()
	return netcheck.WriteJSON(w, r)
}
