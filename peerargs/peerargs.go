// Package peerargs reads the whole command line of another launcher, by
// that launcher's own rules, and writes it as gorun's: Open MPI's mpirun,
// MPICH's Hydra mpiexec, PyTorch's torchrun, Horovod's horovodrun and
// DeepSpeed's deepspeed. It is what lets a script move to gorun by
// changing one word (gorun mpirun -np 4 ./prog), or none (a symlink named
// mpirun to gorun).
//
// Every flag of each launcher's list has one of three outcomes: it works
// (it becomes gorun's flags, or gorun does by itself what it asks), it is
// taken with a one-line note where it changes nothing under gorun, or it
// is refused with one line that names the gorun way. Several programs in
// one job (MPMD: prog1 : -np 2 prog2, Open MPI's --app FILE, Hydra's
// -configfile FILE) become gorun's own MPMD command line.
//
// The translation is pure: it starts nothing, and reads a file only
// through [Options.ReadFile]. It does not read the options of gorun's own
// main command (the caller lists them in [Options]), and it does not check
// values that gorun checks itself (a --bind-to gorun does not do is
// refused by gorun, in gorun's words).
package peerargs

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Tool is a launcher whose command line gorun takes.
type Tool string

// The tools.
const (
	MPIRun     Tool = "mpirun"     // Open MPI's mpirun (also orterun, prterun)
	MPIExec    Tool = "mpiexec"    // MPICH's Hydra mpiexec (also mpiexec.hydra)
	TorchRun   Tool = "torchrun"   // PyTorch's torchrun (also python -m torch.distributed.run)
	HorovodRun Tool = "horovodrun" // Horovod's horovodrun
	DeepSpeed  Tool = "deepspeed"  // DeepSpeed's deepspeed launcher
)

// Tools are the tools, in the order gorun names them.
var Tools = []Tool{MPIRun, MPIExec, TorchRun, HorovodRun, DeepSpeed}

// commandNames maps the names a launcher's command has to its tool.
var commandNames = map[string]Tool{
	"mpirun":        MPIRun,
	"orterun":       MPIRun,
	"prterun":       MPIRun,
	"mpiexec":       MPIExec,
	"mpiexec.hydra": MPIExec,
	"torchrun":      TorchRun,
	"horovodrun":    HorovodRun,
	"deepspeed":     DeepSpeed,
}

// Named returns the tool that a command is named for: name is a base name,
// as argv[0]'s (mpirun, orterun, prterun, mpiexec, mpiexec.hydra,
// torchrun, horovodrun, deepspeed).
func Named(name string) (Tool, bool) {
	t, ok := commandNames[name]
	return t, ok
}

// Modules are the Python modules whose `python -m MODULE` is a tool's
// command: python -m torch.distributed.run is torchrun.
var Modules = map[string]Tool{
	"torch.distributed.run":    TorchRun,
	"torch.distributed.launch": TorchRun, // torchrun's predecessor: see Options.Module
}

// Options is what a translation needs to know of gorun.
type Options struct {
	// Gorun holds the names (without dashes) of gorun's main flags, and
	// whether each takes a value. A flag that the tool does not have is
	// taken as gorun's when it is one of these, and passed on as it is
	// (gorun mpirun --summary-json f -np 4 ./prog); the tool's own flags
	// win where the names are the same.
	Gorun map[string]bool
	// Python is the interpreter that torchrun's and DeepSpeed's programs
	// run under (they run them under their own Python); "" is python3,
	// looked up in the PATH of each rank's host.
	Python string
	// Module is the Python module whose command line this is (python -m
	// MODULE), "" for the tool's own command. torch.distributed.launch
	// is torchrun's, except that it passes each rank --local_rank=N
	// after the script unless --use-env (--use_env) says not to.
	Module string
	// Environ is the environment gorun was started with (NAME=VALUE, as
	// os.Environ gives it): horovodrun exports every variable of its own
	// to the ranks of every host, and gorun horovodrun does the same.
	Environ []string
	// ReadFile reads a file the command line names for its contents:
	// Open MPI's --app FILE and Hydra's -configfile FILE. nil: such a
	// file is refused.
	ReadFile func(name string) ([]byte, error)
}

// Translation is a launcher's command line written as gorun's.
type Translation struct {
	// Args are gorun's main options, then the program and its arguments
	// (without gorun's own name); a job of several programs goes on with
	// gorun's ':' [-np N] [-x NAME=VALUE] [--wdir DIR] PROGRAM [ARGS] for
	// each.
	Args []string
	// Notes are lines for the user (on standard error): what gorun took
	// and does otherwise.
	Notes []string
}

// Translate reads args, tool's command line without its name (options,
// then the program and the program's arguments), by tool's rules and
// returns it as gorun's. Everything from the program on is the program's
// (up to a ':' that starts another program, for mpirun and mpiexec). An
// error is one line that starts with the tool's name (mpirun: unknown
// flag -foo): a usage error, for which nothing should start.
func Translate(tool Tool, args []string, o Options) (Translation, error) {
	table := flagTable(tool)
	if table == nil {
		return Translation{}, fmt.Errorf("peerargs: unknown tool %q", tool)
	}
	p := &parser{tool: tool, o: o, table: table}
	p.dst = &p.out
	rest, err := p.options(args)
	if err == nil {
		switch tool {
		case TorchRun:
			err = p.torchrun(rest)
		case HorovodRun:
			err = p.horovodrun(rest)
		case DeepSpeed:
			err = p.deepspeed(rest)
		default:
			err = p.mpi(rest)
		}
	}
	if err != nil {
		return Translation{}, fmt.Errorf("%s: %w", tool, err)
	}
	notes := p.notes
	if p.quiet {
		notes = nil
	}
	return Translation{Args: p.out, Notes: notes}, nil
}

// flagTable returns tool's flags; nil for a tool it does not know.
func flagTable(tool Tool) []option {
	switch tool {
	case MPIRun:
		return mpirunFlags
	case MPIExec:
		return mpiexecFlags
	case TorchRun:
		return torchrunFlags
	case HorovodRun:
		return horovodFlags
	case DeepSpeed:
		return deepspeedFlags
	}
	return nil
}

// option is one of a tool's flags.
type option struct {
	names []string // spellings without dashes
	nargs int      // values it takes
	// pair: the two values may come as one, NAME=VALUE (Hydra's -genv).
	pair bool
	// app: the flag is an app context's own (MPMD: -np, -x, -wdir): after
	// a ':' it is the next program's, where other flags are the job's.
	app bool
	// do takes the flag (typed is how it was typed, with its values).
	do func(p *parser, typed string, vals []string) error
}

// parser is one translation's state.
type parser struct {
	tool  Tool
	o     Options
	table []option
	out   []string  // gorun's main options, then the programs
	dst   *[]string // where emit writes: out, or an app context's options
	notes []string
	quiet bool            // -q: no notes
	given map[string]bool // gorun's flags taken, by name
	mpiState
	torch torchState
	hvd   horovodState
	ds    deepspeedState
}

// emit appends gorun arguments.
func (p *parser) emit(args ...string) { *p.dst = append(*p.dst, args...) }

// emitMain appends gorun arguments to the job's options, wherever the
// flag was.
func (p *parser) emitMain(args ...string) { p.out = append(p.out, args...) }

// note adds a note.
func (p *parser) note(format string, a ...any) { p.notes = append(p.notes, fmt.Sprintf(format, a...)) }

// lookup returns the flag of table spelled name.
func lookup(table []option, name string) (option, bool) {
	for _, f := range table {
		if slices.Contains(f.names, name) {
			return f, true
		}
	}
	return option{}, false
}

// options reads the options in args up to the program (the first argument
// that is not an option) or "--", and returns the rest.
func (p *parser) options(args []string) ([]string, error) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") || a == ":" {
			break
		}
		n, err := p.option(args[i:])
		if err != nil {
			return nil, err
		}
		i += n - 1
	}
	return args[i:], nil
}

// option takes the option args[0] (and its values) and returns how many
// arguments it took.
func (p *parser) option(args []string) (int, error) {
	a := args[0]
	typedName, value, hasValue := strings.Cut(a, "=")
	name := strings.TrimPrefix(strings.TrimPrefix(typedName, "-"), "-")
	f, ok := lookup(p.table, p.spelling(name))
	if !ok && p.tool == TorchRun && !p.isGorun(name) {
		var err error
		if f, typedName, value, hasValue, ok, err = p.torchAbbrev(a); err != nil {
			return 0, err
		}
	}
	if !ok {
		return p.gorunFlag(args, name, typedName, value, hasValue)
	}
	var vals []string
	if hasValue {
		if f.nargs == 0 {
			return 0, fmt.Errorf("%s: takes no value", a)
		}
		vals = append(vals, value)
	}
	nargs := f.nargs
	i := 0
	for len(vals) < nargs && i+1 < len(args) {
		i++
		vals = append(vals, args[i])
		if f.pair && len(vals) == 1 && strings.Contains(vals[0], "=") {
			nargs = 1 // -genv NAME=VALUE
		}
	}
	if len(vals) < nargs {
		want := []string{"", "a value", "two values"}[nargs]
		return 0, fmt.Errorf("%s: takes %s", typedName, want)
	}
	dst := p.dst
	if !f.app {
		p.dst = &p.out // the job's, whichever program it came before
	}
	err := f.do(p, strings.Join(append([]string{typedName}, vals...), " "), vals)
	p.dst = dst
	return i + 1, err
}

// spelling is how table spells a flag typed as name: torchrun's and
// DeepSpeed's '_' are '-' (--nproc_per_node).
func (p *parser) spelling(name string) string {
	switch p.tool {
	case TorchRun, DeepSpeed, HorovodRun:
		return strings.ReplaceAll(name, "_", "-")
	}
	return name
}

// isGorun reports whether name (without dashes) is one of gorun's flags.
func (p *parser) isGorun(name string) bool {
	_, ok := p.o.Gorun[name]
	_, dashed := p.o.Gorun[strings.ReplaceAll(name, "_", "-")]
	return ok || dashed
}

// gorunFlag takes args[0], an option that is not the tool's, as gorun's
// when it is one, and returns how many arguments it took.
func (p *parser) gorunFlag(args []string, name, typedName, value string, hasValue bool) (int, error) {
	if dashed := strings.ReplaceAll(name, "_", "-"); dashed != name {
		if _, ok := p.o.Gorun[dashed]; ok {
			name = dashed
		}
	}
	takesValue, ok := p.o.Gorun[name]
	if !ok {
		return 0, p.unknown(typedName, name)
	}
	if p.given == nil {
		p.given = map[string]bool{}
	}
	p.given[name] = true
	spelled := "--" + name
	if len(name) == 1 {
		spelled = "-" + name
	}
	if hasValue {
		p.emitMain(spelled + "=" + value)
		return 1, nil
	}
	p.emitMain(spelled)
	if takesValue && len(args) > 1 {
		p.emitMain(args[1])
		return 2, nil
	}
	return 1, nil
}

// unknown is the error for a flag that neither the tool nor gorun has,
// with the closest of the tool's flags and gorun's.
func (p *parser) unknown(typed, name string) error {
	var names []string
	for _, f := range p.table {
		names = append(names, f.names...)
	}
	for n := range p.o.Gorun {
		names = append(names, n)
	}
	slices.Sort(names)
	if s := Closest(p.spelling(name), names); s != "" {
		return fmt.Errorf("unknown flag %s (did you mean %s?)", typed, p.dashed(s))
	}
	return fmt.Errorf("unknown flag %s", typed)
}

// dashed writes a flag's name as the tool's users type it.
func (p *parser) dashed(name string) string {
	switch {
	case len(name) == 1:
		return "-" + name
	case p.tool == MPIExec:
		return "-" + name
	}
	return "--" + name
}

// as returns a flag action that writes the flag as gorun's flag with the
// same values.
func as(gorunFlag string) func(*parser, string, []string) error {
	return func(p *parser, _ string, vals []string) error {
		p.emit(append([]string{gorunFlag}, vals...)...)
		return nil
	}
}

// asValue returns a flag action that writes gorun's flag and value,
// whatever the flag's own values.
func asValue(gorunFlag, value string) func(*parser, string, []string) error {
	return func(p *parser, _ string, _ []string) error {
		p.emit(gorunFlag, value)
		return nil
	}
}

// nothing is the action of a flag whose meaning is gorun's own behaviour:
// it works, and needs no gorun flag.
func nothing(*parser, string, []string) error { return nil }

// noted returns the action of a flag that is taken without effect, with a
// note (typed: the flag as it was typed).
func noted(why string) func(*parser, string, []string) error {
	return func(p *parser, typed string, _ []string) error {
		p.note("%s: %s", typed, why)
		return nil
	}
}

// refused returns the action of a flag that gorun does not take; why
// names the gorun way.
func refused(why string) func(*parser, string, []string) error {
	return func(_ *parser, typed string, _ []string) error {
		return fmt.Errorf("%s: %s", typed, why)
	}
}

// Owners returns the tools that have a flag spelled name (without its
// dashes; torchrun's '_' or '-'), for a command line that lacks the
// tool's name: gorun --allow-run-as-root is mpirun's.
// torchrun's abbreviations count (--nproc_per is torchrun's).
func Owners(name string) []Tool {
	var out []Tool
	for _, t := range Tools {
		p := &parser{tool: t, table: flagTable(t)}
		if _, ok := lookup(p.table, p.spelling(name)); ok {
			out = append(out, t)
		} else if t == TorchRun && len(name) > 1 {
			if _, _, _, _, ok, _ := p.torchAbbrev("--" + name); ok {
				out = append(out, t)
			}
		}
	}
	return out
}

// programNames maps the names of launchers' commands that are no
// personality's name (Debian's alternatives of each MPI) to their tool.
var programNames = map[string]Tool{
	"mpirun.openmpi":  MPIRun,
	"mpiexec.openmpi": MPIRun,
	"mpirun.mpich":    MPIExec,
	"mpiexec.mpich":   MPIExec,
}

// LauncherProgram reports whether argv, a job's program and its
// arguments, runs another launcher (mpirun, mpiexec.hydra,
// mpirun.openmpi, torchrun, python3 -m torch.distributed.run, ...), and
// which: under gorun every rank would start a job of its own.
func LauncherProgram(argv []string) (Tool, bool) {
	if len(argv) == 0 {
		return "", false
	}
	base := filepath.Base(argv[0])
	if t, ok := commandNames[base]; ok {
		return t, true
	}
	if t, ok := programNames[base]; ok {
		return t, true
	}
	if len(argv) >= 3 && isPython(base) && argv[1] == "-m" {
		t, ok := Modules[argv[2]]
		return t, ok
	}
	return "", false
}

// isPython reports whether name is a Python interpreter's: python,
// python3, python3.11.
func isPython(name string) bool {
	rest, ok := strings.CutPrefix(name, "python")
	return ok && strings.Trim(rest, "0123456789.") == ""
}

// nested refuses a program that is a launcher itself (gorun mpirun
// mpirun -np 2 ./prog): every rank would start a job of its own.
func nested(prog []string) error {
	t, ok := LauncherProgram(prog)
	if !ok {
		return nil
	}
	way := "gorun " + string(t) + " " + strings.Join(prog[1:], " ")
	if len(prog) >= 3 && isPython(filepath.Base(prog[0])) && prog[1] == "-m" {
		way = "gorun " + string(t) + " " + strings.Join(prog[3:], " ")
		if prog[2] != "torch.distributed.run" { // torch.distributed.launch: its own contract
			way = "gorun " + strings.Join(prog, " ")
		}
	}
	return fmt.Errorf("the program %s is a launcher itself, and every rank would start a job of its own: give its command line to gorun (%s)",
		prog[0], way)
}
