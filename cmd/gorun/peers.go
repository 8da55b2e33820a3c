package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gorun/gorun/config"
	"github.com/gorun/gorun/peerargs"
)

// The flags a migrant from mpirun, mpiexec or torchrun types, without
// the launcher's name. Spellings
// whose meaning gorun has become gorun's flags before urfave/cli parses
// (it takes one value per flag; --mca and -genv take two); the others are
// refused with one line that names the gorun way.

// peerFlag is a peer launcher's flag, looked up by its name without dashes.
type peerFlag struct {
	names []string // spellings, without dashes ('_' is looked up as '-')
	nargs int      // values it takes
	// optional, for a flag of nargs 0, are the values it may take as
	// the next argument (srun --mpi pmi2); --flag=VALUE takes any.
	optional []string
	// gorun returns the gorun arguments it becomes; nil means refused.
	gorun func(vals []string) []string
	// do, where set in gorun's place, returns the gorun arguments, a
	// note, or the refusal that names the way.
	do func(vals []string) (args []string, note string, err error)
	// hint is the refusal's text: the gorun way ({} is the value).
	hint string
	// note, if any, is printed on stderr when the flag is accepted.
	note string
}

// as returns a gorun that rewrites the flag into flag and its values.
func as(flag string) func([]string) []string {
	return func(v []string) []string { return append([]string{flag}, v...) }
}

// exports returns a gorun that turns a NAME VALUE pair into -x prefix+NAME=VALUE.
func exports(prefix string) func([]string) []string {
	return func(v []string) []string { return []string{"-x", prefix + v[0] + "=" + v[1]} }
}

// exportList turns A,B,C into -x A -x B -x C.
func exportList(v []string) []string {
	var out []string
	for _, n := range strings.Split(v[0], ",") {
		if n != "" {
			out = append(out, "-x", n)
		}
	}
	return out
}

const genvallNote = "-genvall: " + peerargs.GenvallNote

// peerFlags is the table of peer spellings (man/gorun.1 lists each next to
// the gorun option it means).
var peerFlags = []peerFlag{
	// Open MPI's mpirun.
	{names: []string{"wd", "cwd"}, nargs: 1, gorun: as("--wdir")},
	{names: []string{"mca"}, nargs: 2, do: func(v []string) ([]string, string, error) { return peerargs.MCA(v[0], v[1]) }},
	// MPICH's Hydra mpiexec.
	{names: []string{"f"}, nargs: 1, gorun: as("--hostfile")},
	{names: []string{"ppn"}, nargs: 1, gorun: as("--npernode")},
	{names: []string{"hosts"}, nargs: 1, gorun: as("--host")},
	{names: []string{"genv", "env"}, nargs: 2, gorun: exports("")},
	{names: []string{"genvlist", "envlist"}, nargs: 1, gorun: exportList},
	{names: []string{"genvall", "envall"}, gorun: func([]string) []string { return nil }, note: genvallNote},
	{names: []string{"l", "prepend-rank"}, gorun: as("--tag-output")},
	// torchrun: one gorun runs the whole job, on every host.
	{names: []string{"node-rank"}, nargs: 1, hint: "the endpoint gives each node its rank (--rdzv-endpoint): drop it"},
	{names: []string{"rdzv-backend", "rdzv-conf"}, nargs: 1, hint: "gorun's per-node launch needs no backend: give --rdzv-endpoint HOST:PORT (and --rdzv-last-call, --rdzv-timeout for the timeouts); drop it"},
	{names: []string{"standalone"}, hint: "a job on one host needs no rendezvous: drop it"},
	{names: []string{"master-addr"}, nargs: 1, hint: "gorun sets MASTER_ADDR to rank 0's host (--iface picks the interface; -x MASTER_ADDR={} forces it)"},
	{names: []string{"master-port"}, nargs: 1, hint: "gorun picks a free MASTER_PORT (-x MASTER_PORT={} forces it)"},
	// Slurm's srun, for gorun in a batch script where srun was.
	{names: []string{"mpi"}, optional: []string{"none", "pmi1", "pmi2", "pmix", "pmix_v2", "pmix_v3", "pmix_v4", "pmix_v5", "cray_shasta"},
		do: func([]string) ([]string, string, error) {
			return nil, "ignored: gorun serves PMI-1, PMI-2 and PMIx to the ranks itself, as each program needs", nil
		}},
	{names: []string{"cpu-bind"}, nargs: 1, do: srunCPUBind},
	{names: []string{"ntasks-per-node"}, nargs: 1, gorun: as("--npernode")},
	{names: []string{"ntasks"}, nargs: 1, gorun: as("-np")},
	{names: []string{"cpus-per-task"}, nargs: 1, gorun: as("--cpus-per-rank")},
	{names: []string{"label"}, gorun: as("--tag-output")},
}

// srunCPUBind reads srun's --cpu-bind=[verbose,]TYPE as gorun's
// --bind-to (and --report-bindings for verbose).
func srunCPUBind(v []string) ([]string, string, error) {
	var out []string
	for _, t := range strings.Split(v[0], ",") {
		switch t {
		case "verbose", "v":
			out = append(out, "--report-bindings")
		case "quiet", "q":
		case "none", "no":
			out = append(out, "--bind-to", "none")
		case "cores", "core", "threads", "thread":
			out = append(out, "--bind-to", "core")
		case "sockets", "socket":
			out = append(out, "--bind-to", "package")
		case "ldoms", "ldom", "rank_ldom":
			out = append(out, "--bind-to", "numa")
		default:
			return nil, "", fmt.Errorf("%s: gorun binds each rank to cores, NUMA nodes or packages (--bind-to core, numa or package); to place every rank on CPUs of your choosing, give a --rankfile FILE", t)
		}
	}
	return out, "", nil
}

// peerFlagNamed returns the peer flag spelled name, if any.
func peerFlagNamed(name string) (peerFlag, bool) {
	name = strings.ReplaceAll(name, "_", "-")
	for _, p := range peerFlags {
		for _, n := range p.names {
			if n == name {
				return p, true
			}
		}
	}
	return peerFlag{}, false
}

// peerSpellings returns every peer spelling, for the docs test.
func peerSpellings() []string {
	var out []string
	for _, p := range peerFlags {
		out = append(out, p.names...)
	}
	return out
}

// mainFlags returns the main command's flag names (without dashes) and
// whether each takes a value.
func mainFlags() map[string]bool {
	m := map[string]bool{"h": false, "help": false, "version": false}
	for _, s := range settings {
		for _, n := range append([]string{s.name}, s.aliases...) {
			m[n] = s.kind != config.Bool
		}
	}
	return m
}

// rewriteArgs reads the main command's options in args (args[0] is the
// program's name), up to the first argument that is not an option (the
// program or a subcommand) or "--": it rewrites the peer spellings gorun
// takes into gorun's flags, and refuses an unknown flag or a peer flag
// gorun does not take with an error of one line that names the gorun
// flag (a usage error: exit status 2). Everything from the program on is
// left as it is. notes are lines to print on stderr.
func rewriteArgs(args []string) (out, notes []string, err error) {
	known := mainFlags()
	out = append(out, args[0])
	i := 1
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if dashedName := strings.ReplaceAll(name, "_", "-"); dashedName != name {
			if _, ok := known[dashedName]; ok {
				// torchrun's --nproc_per_node: gorun's names have no '_'.
				a = strings.Replace(a, name, dashedName, 1)
				name = dashedName
			}
		}
		if takesValue, ok := known[name]; ok {
			if name == "map-by" {
				// Open MPI's modifiers (--map-by slot:PE=2): gorun's flags.
				v := value
				if !hasValue && i+1 < len(args) {
					i++
					v = args[i]
				}
				if !strings.Contains(v, ":") || strings.HasPrefix(v, "ppr:") && strings.Count(v, ":") == 2 && !strings.Contains(v, "socket") {
					out = append(out, "--map-by", v)
					continue
				}
				m, err := peerargs.MapBy(v)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, m...)
				continue
			}
			out = append(out, a)
			if takesValue && !hasValue && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		p, ok := peerFlagNamed(name)
		if !ok {
			return nil, nil, unknownFlag(strings.SplitN(a, "=", 2)[0], name, known)
		}
		var vals []string
		if hasValue {
			vals = append(vals, value)
		} else if i+1 < len(args) && slices.Contains(p.optional, args[i+1]) {
			i++
			vals = append(vals, args[i])
		}
		for len(vals) < p.nargs && i+1 < len(args) {
			i++
			vals = append(vals, args[i])
		}
		typed := strings.Join(append([]string{strings.SplitN(a, "=", 2)[0]}, vals...), " ")
		if p.do != nil {
			if len(vals) < p.nargs {
				return nil, nil, fmt.Errorf("%s: takes %s", typed, []string{"no value", "a value", "two values (NAME VALUE)"}[p.nargs])
			}
			args, note, err := p.do(vals)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", typed, err)
			}
			out = append(out, args...)
			if note != "" {
				notes = append(notes, typed+": "+note)
			}
			continue
		}
		if p.gorun == nil {
			return nil, nil, fmt.Errorf("%s: %s", typed, strings.ReplaceAll(p.hint, "{}", strings.Join(vals, " ")))
		}
		if len(vals) != p.nargs {
			want := []string{"no value", "a value", "two values (NAME VALUE)"}[p.nargs]
			return nil, nil, fmt.Errorf("%s: takes %s", typed, want)
		}
		out = append(out, p.gorun(vals)...)
		if p.note != "" {
			notes = append(notes, p.note)
		}
	}
	return append(out, args[i:]...), notes, nil
}

// unknownFlag is the error for the flag typed as a: a flag of another
// launcher names the personality that takes it (--allow-run-as-root is
// mpirun's: gorun mpirun ...); another gets the closest of gorun's flags
// (names of one letter are suggested for none: any other letter is one
// edit away; a flag's opposite never: -nooversubscribe is not
// --oversubscribe).
func unknownFlag(a, name string, known map[string]bool) error {
	if owners := peerargs.Owners(name); len(owners) > 0 {
		var whose, ways []string
		for _, t := range owners {
			whose = append(whose, string(t)+"'s")
			ways = append(ways, "gorun "+string(t)+" "+a+" ...")
		}
		return fmt.Errorf("%s is %s: %s", a, strings.Join(whose, " and "), strings.Join(ways, " or "))
	}
	var names []string
	for n := range known {
		if len(n) > 1 {
			names = append(names, n)
		}
	}
	slices.Sort(names) // the same suggestion every time
	if len(name) > 2 {
		if s := peerargs.Closest(name, names); s != "" {
			return fmt.Errorf("unknown flag %s (did you mean %s?)", a, dashed(s))
		}
	}
	return fmt.Errorf("unknown flag %s (gorun --help lists them)", a)
}
