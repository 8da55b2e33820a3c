package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/transport"
)

// benchUsage is gorun bench's line in gorun's help.
const benchUsage = "measure a collective as nccl-tests does: time, algbw and busbw per size (gorun bench allreduce -np 4 -b 8 -e 256M -f 2)"

// benchCommand is `gorun bench COLLECTIVE`: the job's flags (-np,
// --hostfile, ...) and nccl-tests' (-b, -e, -f, -w, -c, -o, -d, -r).
func benchCommand(stdout, stderr io.Writer) *cli.Command {
	flags := append(cliFlags(),
		&cli.StringFlag{Name: "minbytes", Aliases: []string{"b"}, Value: "8", Usage: "smallest message `SIZE` (8, 1K, 256M)"},
		&cli.StringFlag{Name: "maxbytes", Aliases: []string{"e"}, Value: "32M", Usage: "largest message `SIZE`"},
		&cli.IntFlag{Name: "stepfactor", Aliases: []string{"f"}, Value: 2, Usage: "multiply the size by `N` each step"},
		&cli.StringFlag{Name: "stepbytes", Usage: "add `SIZE` each step instead of multiplying"},
		&cli.IntFlag{Name: "iters", Value: 20, Usage: "`N` timed iterations per size (-n is gorun's -np)"},
		&cli.DurationFlag{Name: "min-time", Usage: "instead of --iters: as many iterations as fill `DURATION` per block"},
		&cli.IntFlag{Name: "blocks", Value: 1, Usage: "`N` timed blocks per size; the median block is reported"},
		&cli.IntFlag{Name: "warmup", Aliases: []string{"w"}, Value: 5, Usage: "`N` untimed iterations before them"},
		&cli.IntFlag{Name: "check", Aliases: []string{"c"}, Value: 1, Usage: "`0|1`: check each size's result against a serial computation"},
		&cli.StringFlag{Name: "op", Aliases: []string{"o"}, Value: "sum", Usage: "the reduction `OP`: " + strings.Join(collbench.Ops, ", ")},
		&cli.StringFlag{Name: "datatype", Aliases: []string{"d"}, Value: "float32", Usage: "the element `TYPE`: " + strings.Join(collbench.DTypes, ", ")},
		&cli.IntFlag{Name: "root", Aliases: []string{"r"}, Usage: "root `RANK` of broadcast and reduce"},
		&cli.BoolFlag{Name: "all-types", Usage: "every element type, and every reduction operator, instead of -d and -o"},
		&cli.StringFlag{Name: "csv", Usage: "also write the results as CSV to `FILE` (- for standard output, instead of the table)"},
		&cli.StringFlag{Name: "json", Usage: "also write the results as JSON to `FILE` (- for standard output, instead of the table)"},
		&cli.StringFlag{Name: "svg", Usage: "also plot bus bandwidth against size, as SVG, to `FILE`"},
		&cli.StringFlag{Name: "transport", Usage: "`KIND`: auto (shared memory inside a host, TCP or the --plugin transport across), tcp, shm, or plugin (the --plugin transport between every pair) (sets " + env.CollTransport + ")"},
		&cli.StringFlag{Name: "thresholds", Usage: "algorithm table `ENTRIES`, as " + env.CollThresholds + " (e.g. allreduce=ring)"},
		&cli.BoolFlag{Name: "print-thresholds", Usage: "print the algorithm table the ranks would use (defaults, " + env.CollThresholds + ", --thresholds) and exit"},
		&cli.IntFlag{Name: "streams", Usage: "`N` TCP streams per connection (sets " + env.CollStreams + ")"},
	)
	return &cli.Command{
		Name:      "bench",
		Usage:     benchUsage,
		ArgsUsage: "COLLECTIVE (" + strings.Join(collbench.Collectives, ", ") + ", or all)",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			return runBench(c, stdout, stderr)
		},
	}
}

// benchArgs lets `gorun bench allreduce -np 4` be written with the
// collective first, as nccl-tests' users expect, and gorun's flags before
// "bench" too: the command-line parser stops at the first argument that is
// not a flag, and a subcommand reads its own flags, so the command becomes
// `gorun bench FLAGS... COLLECTIVE`.
func benchArgs(args []string) []string {
	if i := benchIndex(args); i >= 0 {
		out := append([]string{args[0], "bench"}, args[1:i]...)
		out = append(out, args[i+2:]...)
		return append(out, args[i+1])
	}
	return args
}

func runBench(c *cli.Context, stdout, stderr io.Writer) error {
	usage := func(format string, a ...any) error {
		return errExit{code: launcher.ExitUsage, err: fmt.Errorf("bench: "+format, a...)}
	}
	if c.Bool("print-thresholds") {
		// The ranks' table: gorun-tools links the collectives.
		code, err := runTools(c.Context, stdout, stderr, "thresholds", c.String("thresholds"))
		if err != nil {
			return usage("%v", err)
		}
		if code != 0 {
			return errExit{code: code}
		}
		return nil
	}
	if a := c.Args().First(); a != "" && !slices.Contains(collbench.Collectives, a) && a != collbench.All {
		return usage("collective %q: want one of %s, or %s", a, strings.Join(collbench.Collectives, ", "), collbench.All)
	}
	if c.NArg() != 1 {
		return usage("want one collective (%s), got %d arguments", strings.Join(collbench.Collectives, ", "), c.NArg())
	}
	cfg := collbench.Config{Collective: c.Args().First(), Op: c.String("op"), DType: c.String("datatype"),
		Iters: c.Int("iters"), Warmup: c.Int("warmup"), MinTime: c.Duration("min-time"), Blocks: c.Int("blocks"), AllTypes: c.Bool("all-types"), Check: c.Int("check") != 0, Root: c.Int("root"), Device: c.String("device")}
	if cfg.Warmup == 0 {
		cfg.Warmup = -1 // none asked for
	}
	if err := cfg.Validate(); err != nil {
		return usage("%v", err)
	}
	if cfg.Iters < 1 {
		return usage("--iters %d: must be at least 1", cfg.Iters)
	}
	lo, err := collbench.ParseSize(c.String("minbytes"))
	if err != nil {
		return usage("-b: %v", err)
	}
	hi, err := collbench.ParseSize(c.String("maxbytes"))
	if err != nil {
		return usage("-e: %v", err)
	}
	var step int64
	if s := c.String("stepbytes"); s != "" {
		if step, err = collbench.ParseSize(s); err != nil {
			return usage("--stepbytes: %v", err)
		}
	}
	if cfg.Sizes, err = collbench.Sizes(lo, hi, c.Int("stepfactor"), step, int64(collbench.ElemSize(cfg.DType))); err != nil {
		return usage("%v", err)
	}
	mode, err := transport.ParseMode(c.String("transport"))
	if err != nil {
		return usage("--transport %v", err)
	}
	if mode == transport.ModePlugin && c.String("plugin") == "" {
		return usage("--transport plugin: which one? (--plugin NAME)")
	}

	o, err := jobOptions(c, stdout, stderr)
	if err != nil {
		return err
	}
	js, _ := json.Marshal(cfg)
	set := func(name, value string) {
		o.Exports = append(o.Exports, env.Export{Name: name, Value: value, HasValue: true})
	}
	set(collbench.EnvConfig, string(js))
	if t := c.String("transport"); t != "" {
		set(env.CollTransport, t)
	}
	if t := c.String("thresholds"); t != "" {
		set(env.CollThresholds, t)
	}
	if n := c.Int("streams"); n != 0 {
		set(env.CollStreams, fmt.Sprint(n))
	}
	// The ranks run in gorun-tools, as nccl-tests' binaries under mpirun:
	// found next to each host's gorun, staged with it.
	if _, err := launcher.Tools(); err != nil {
		return usage("%v", err)
	}
	o.Argv = []string{launcher.ToolsProgram, collbench.RankCommand}
	o.Tag, o.Timestamp, o.OutputDir, o.MergeOutput = false, false, "", false // rank 0's result lines must reach the collector whole and untagged

	var table io.Writer = stdout
	if c.String("csv") == "-" || c.String("json") == "-" {
		table = nil
	}
	col := collbench.NewCollector(table, stdout, collbench.Header{Collective: cfg.Collective, DType: cfg.DType,
		Command: strings.Join(os.Args, " ")})
	o.Stdout = col
	code, runErr := launcher.Run(context.Background(), o)
	colErr := col.Close()
	rs, h := col.Results(), col.Header()
	outErr := errors.Join(
		collbench.Save(c.String("csv"), stdout, func(w io.Writer) error { return collbench.WriteCSV(w, rs) }),
		collbench.Save(c.String("json"), stdout, func(w io.Writer) error { return collbench.WriteJSON(w, h, rs) }),
		collbench.Save(c.String("svg"), stdout, func(w io.Writer) error { return collbench.WriteSVG(w, h, rs) }))
	if runErr != nil || code != 0 {
		return errExit{code: code, err: runErr}
	}
	if err := errors.Join(colErr, outErr); err != nil {
		return errExit{code: 1, err: fmt.Errorf("bench: %w", err)}
	}
	wrong := 0
	for _, r := range rs {
		wrong += max(r.Errors, 0)
	}
	if wrong > 0 {
		return errExit{code: 1, err: fmt.Errorf("bench: %d wrong elements: the collective gave wrong results", wrong)}
	}
	if len(rs) == 0 {
		return errExit{code: 1, err: errors.New("bench: rank 0 reported no results")}
	}
	return nil
}
