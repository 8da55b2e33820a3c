package main

import (
	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/config"
)

// setting is one flag of the main command, and the config key behind it.
type setting struct {
	name    string
	aliases []string
	kind    config.Kind
	def     string
	usage   string
	arg     string // name of the value in help, e.g. N
	hidden  bool
}

// settings lists every flag of the main command. Each is also a key of
// the TOML config files and a GORUN_* environment variable.
var settings = []setting{
	{name: "np", aliases: []string{"n"}, kind: config.Int, def: "0", arg: "N", usage: "run `N` ranks (default: one per slot)"},
	{name: "host", aliases: []string{"H"}, kind: config.StringList, arg: "HOSTS", usage: "hosts as `host[:slots],...`; repeat or comma-separate"},
	{name: "hostfile", aliases: []string{"machinefile"}, kind: config.String, arg: "FILE", usage: "read hosts from `FILE` (Open MPI or MPICH syntax, see gorun-hostfile(5))"},
	{name: "include", kind: config.String, arg: "FILTER", usage: "DeepSpeed-style `FILTER` of hosts and GPU slots to use, e.g. w0@w1:0,2"},
	{name: "exclude", kind: config.String, arg: "FILTER", usage: "DeepSpeed-style `FILTER` of hosts and GPU slots to leave out"},
	{name: "oversubscribe", kind: config.Bool, def: "false", usage: "allow more ranks than slots on a host"},
	{name: "map-by", kind: config.String, def: "slot", arg: "POLICY", usage: "place ranks by `POLICY`: slot (fill each host), node (round-robin), ppr:N:node"},
	{name: "npernode", aliases: []string{"N"}, kind: config.Int, def: "0", arg: "N", usage: "run `N` ranks on every host (same as --map-by ppr:N:node)"},
	{name: "display-map", kind: config.Bool, def: "false", usage: "print where every rank will run, then run the job"},
	{name: "dry-run", kind: config.Bool, def: "false", usage: "print the map and stop"},
	{name: "x", kind: config.StringList, arg: "NAME[=VALUE]", usage: "export `NAME[=VALUE]` to every rank (NAME alone takes gorun's value)"},
	{name: "print-env", kind: config.Int, def: "-1", arg: "RANK", usage: "print the environment rank `RANK` would get, and stop"},
	{name: "tag-output", kind: config.Bool, def: "false", usage: "prefix every output line with [rank] (or [host:rank])"},
	{name: "timestamp-output", kind: config.Bool, def: "false", usage: "prefix every output line with the time the rank wrote it"},
	{name: "output-filename", kind: config.String, arg: "DIR", usage: "write each rank's output to `DIR`/rank.N/{stdout,stderr} instead"},
	{name: "stdin", kind: config.String, def: "0", arg: "RANK", usage: "send gorun's stdin to `RANK`, or none"},
	{name: "grace-period", kind: config.Duration, def: "3s", arg: "DURATION", usage: "time between SIGTERM and SIGKILL when the job is stopped"},
	{name: "timeout", kind: config.Duration, def: "0s", arg: "SECONDS", usage: "stop the job after `SECONDS` (or a duration such as 10m); 0 = never"},
	{name: "max-restarts", kind: config.Int, def: "0", arg: "N", usage: "restart the whole job up to `N` times after a failure"},
	{name: "summary-json", kind: config.String, arg: "FILE", usage: "write a JSON record of every rank and the first failure to `FILE`"},
}

// schema is the config schema of the settings.
func schema() config.Schema {
	s := make(config.Schema, len(settings))
	for i, f := range settings {
		s[i] = config.Key{Name: f.name, Kind: f.kind, Default: f.def, Usage: f.usage}
	}
	return s
}

// cliFlags turns the settings into flags. They carry no defaults or
// environment variables of their own: the config package merges those, so
// that `gorun config` can say where each value came from.
func cliFlags() []cli.Flag {
	var out []cli.Flag
	for _, s := range settings {
		switch s.kind {
		case config.Bool:
			out = append(out, &cli.BoolFlag{Name: s.name, Aliases: s.aliases, Usage: s.usage, Hidden: s.hidden})
		case config.StringList:
			out = append(out, &cli.StringSliceFlag{Name: s.name, Aliases: s.aliases, Usage: s.usage, Hidden: s.hidden})
		default:
			out = append(out, &cli.StringFlag{Name: s.name, Aliases: s.aliases, Usage: s.usage, Hidden: s.hidden, DefaultText: s.def})
		}
	}
	return out
}

// setOnCommandLine returns the settings the user gave as flags.
func setOnCommandLine(c *cli.Context) map[string][]string {
	out := map[string][]string{}
	for _, s := range settings {
		if !c.IsSet(s.name) {
			continue
		}
		switch s.kind {
		case config.Bool:
			if c.Bool(s.name) {
				out[s.name] = []string{"true"}
			} else {
				out[s.name] = []string{"false"}
			}
		case config.StringList:
			out[s.name] = c.StringSlice(s.name)
		default:
			out[s.name] = []string{c.String(s.name)}
		}
	}
	return out
}
