// Package peerargs reads the whole command line of another launcher, by
// that launcher's own rules, and writes it as gorun's: Open MPI's mpirun,
// MPICH's Hydra mpiexec and PyTorch's torchrun. It is what lets a script
// move to gorun by changing one word (gorun mpirun -np 4 ./prog), or none
// (a symlink named mpirun to gorun).
//
// The translation is pure: it reads no file and starts nothing. Flags that
// mean something gorun does become gorun's flags; flags that change nothing
// under gorun are taken without a word or with a note; flags that would make
// a different job are refused with one line. It does not read the options of
// gorun's own main command (the caller lists them in [Options]), and it does
// not check values that gorun checks itself (a --bind-to gorun does not do
// is refused by gorun, in gorun's words).
package peerargs

import (
	"fmt"
	"strings"
)

// Tool is a launcher whose command line gorun takes.
type Tool string

// The tools.
const (
	MPIRun   Tool = "mpirun"   // Open MPI's mpirun (also orterun, prterun)
	MPIExec  Tool = "mpiexec"  // MPICH's Hydra mpiexec (also mpiexec.hydra)
	TorchRun Tool = "torchrun" // PyTorch's torchrun
)

// commandNames maps the names a launcher's command has to its tool.
var commandNames = map[string]Tool{
	"mpirun":        MPIRun,
	"orterun":       MPIRun,
	"prterun":       MPIRun,
	"mpiexec":       MPIExec,
	"mpiexec.hydra": MPIExec,
	"torchrun":      TorchRun,
}

// Named returns the tool that a command is named for: name is a base name,
// as argv[0]'s (mpirun, orterun, prterun, mpiexec, mpiexec.hydra, torchrun).
func Named(name string) (Tool, bool) {
	t, ok := commandNames[name]
	return t, ok
}

// Options is what a translation needs to know of gorun.
type Options struct {
	// Gorun holds the names (without dashes) of gorun's main flags, and
	// whether each takes a value. A flag that the tool does not have is
	// taken as gorun's when it is one of these, and passed on as it is
	// (gorun mpirun --summary-json f -np 4 ./prog); the tool's own flags
	// win where the names are the same.
	Gorun map[string]bool
	// Python is the interpreter that torchrun's programs run under
	// (torchrun runs them under its own Python); "" is python3, looked up
	// in the PATH of each rank's host.
	Python string
}

// Translation is a launcher's command line written as gorun's.
type Translation struct {
	// Args are gorun's main options, then the program and its arguments
	// (without gorun's own name).
	Args []string
	// Notes are lines for the user (on standard error): what gorun took
	// and does otherwise.
	Notes []string
}

// Translate reads args, tool's command line without its name (options,
// then the program and the program's arguments), by tool's rules and
// returns it as gorun's. Everything from the program on is the program's.
// An error is one line that starts with the tool's name (mpirun: unknown
// flag -foo): a usage error, for which nothing should start.
func Translate(tool Tool, args []string, o Options) (Translation, error) {
	var table []option
	switch tool {
	case MPIRun:
		table = mpirunFlags
	case MPIExec:
		table = mpiexecFlags
	case TorchRun:
		table = torchrunFlags
	default:
		return Translation{}, fmt.Errorf("peerargs: unknown tool %q", tool)
	}
	p := &parser{tool: tool, o: o}
	rest, err := p.options(table, args)
	if err == nil {
		if tool == TorchRun {
			err = p.torchrun(rest)
		} else {
			err = p.mpi(rest)
		}
	}
	if err != nil {
		return Translation{}, fmt.Errorf("%s: %w", tool, err)
	}
	return Translation{Args: p.out, Notes: p.notes}, nil
}

// option is one of a tool's flags.
type option struct {
	names []string // spellings without dashes
	nargs int      // values it takes
	// do takes the flag (typed is how it was typed, with its values).
	do func(p *parser, typed string, vals []string) error
}

// parser is one translation's state.
type parser struct {
	tool  Tool
	o     Options
	out   []string
	notes []string
	given map[string]bool // gorun's flags taken, by name
	torch torchState
}

// emit appends gorun arguments.
func (p *parser) emit(args ...string) { p.out = append(p.out, args...) }

// note adds a note.
func (p *parser) note(format string, a ...any) { p.notes = append(p.notes, fmt.Sprintf(format, a...)) }

// lookup returns the flag of table spelled name.
func lookup(table []option, name string) (option, bool) {
	for _, f := range table {
		for _, n := range f.names {
			if n == name {
				return f, true
			}
		}
	}
	return option{}, false
}

// options reads the options in args up to the program (the first argument
// that is not an option) or "--", and returns the rest.
func (p *parser) options(table []option, args []string) ([]string, error) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		typedName, value, hasValue := strings.Cut(a, "=")
		name := strings.TrimPrefix(strings.TrimPrefix(typedName, "-"), "-")
		if p.tool == TorchRun {
			name = strings.ReplaceAll(name, "_", "-") // --nproc_per_node
		}
		f, ok := lookup(table, name)
		if !ok {
			n, err := p.gorunFlag(args[i:], name, typedName, value, hasValue)
			if err != nil {
				return nil, err
			}
			i += n - 1
			continue
		}
		var vals []string
		if hasValue {
			if f.nargs == 0 {
				return nil, fmt.Errorf("%s: takes no value", a)
			}
			vals = append(vals, value)
		}
		for len(vals) < f.nargs && i+1 < len(args) {
			i++
			vals = append(vals, args[i])
		}
		if len(vals) < f.nargs {
			want := []string{"", "a value", "two values"}[f.nargs]
			return nil, fmt.Errorf("%s: takes %s", typedName, want)
		}
		if err := f.do(p, strings.Join(append([]string{typedName}, vals...), " "), vals); err != nil {
			return nil, err
		}
	}
	return args[i:], nil
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
		return 0, fmt.Errorf("unknown flag %s", typedName)
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
		p.emit(spelled + "=" + value)
		return 1, nil
	}
	p.emit(spelled)
	if takesValue && len(args) > 1 {
		p.emit(args[1])
		return 2, nil
	}
	return 1, nil
}

// as returns a flag action that writes the flag as gorun's flag with the
// same values.
func as(gorunFlag string) func(*parser, string, []string) error {
	return func(p *parser, _ string, vals []string) error {
		p.emit(append([]string{gorunFlag}, vals...)...)
		return nil
	}
}

// nothing is the action of a flag that changes nothing under gorun.
func nothing(*parser, string, []string) error { return nil }

// noted returns the action of a flag that is taken without effect, with a
// note (typed: the flag as it was typed).
func noted(why string) func(*parser, string, []string) error {
	return func(p *parser, typed string, _ []string) error {
		p.note("%s: %s", typed, why)
		return nil
	}
}

// refused returns the action of a flag that gorun does not take.
func refused(why string) func(*parser, string, []string) error {
	return func(_ *parser, typed string, _ []string) error {
		return fmt.Errorf("%s: %s", typed, why)
	}
}
