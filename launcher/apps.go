// This file holds a job's application contexts (MPMD): several programs
// in one job, as mpirun and Hydra run "prog1 : -np 2 prog2".

package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
)

// App is one application context of a job: NP consecutive ranks that run
// one program. A job of several apps (MPMD: mpirun's and Hydra's
// "prog1 : -np 2 prog2", Open MPI's --app FILE, Hydra's -configfile FILE)
// numbers its ranks app after app, in order, and they share one
// rendezvous (one MPI_COMM_WORLD). An App says what its ranks run, never
// where: the plan places the job's ranks as it places any job's.
//
// A job without Apps runs Options.Argv on every rank: one app. A dynamic
// spawn (MPI_Comm_spawn_multiple) would be a list of Apps too, the ranks
// of a job of its own.
type App struct {
	// Argv is the program and its arguments.
	Argv []string
	// NP is the number of ranks that run it, at least 1.
	NP int
	// Exports are its own -x exports, after the job's (the same name:
	// this app's value wins).
	Exports []env.Export
	// Dir is its ranks' working directory, an absolute path; "" = the
	// job's (Options.Dir).
	Dir string
}

// AppSeparator separates the app contexts of a command line, as in
// mpirun's and Hydra's "prog1 : -np 2 prog2".
const AppSeparator = ":"

// ParseApps reads a job's command line, the program and what follows it,
// as app contexts: programs separated by ":" arguments. The first runs
// on np ranks (gorun's -np); each later one may start with its own
// options: -np N (or -n N), -x NAME[=VALUE] and --wdir DIR (one dash or
// two, VALUE also after '='). A command line without ":" is one program:
// ParseApps returns nil. An error names the app and what it lacks.
func ParseApps(argv []string, np int) ([]App, error) {
	if !slices.Contains(argv, AppSeparator) {
		return nil, nil
	}
	var segs [][]string
	from := 0
	for i, arg := range argv {
		if arg == AppSeparator {
			segs = append(segs, argv[from:i])
			from = i + 1
		}
	}
	segs = append(segs, argv[from:])
	apps := make([]App, 0, len(segs))
	for seg, part := range segs {
		a := App{NP: np}
		if seg > 0 {
			var err error
			if a, part, err = appOptions(part, seg); err != nil {
				return nil, err
			}
		}
		if len(part) == 0 {
			return nil, fmt.Errorf("%w: program %d of the job (after ':' number %d): no program", ErrUsage, seg+1, seg)
		}
		a.Argv = part
		if a.NP <= 0 {
			how := "gorun's -np N before it"
			if seg > 0 {
				how = "': -np N " + part[0] + "'"
			}
			return nil, fmt.Errorf("%w: %s (program %d of the job): give its number of ranks (%s); a job of several programs runs each on the ranks it is given", ErrUsage, part[0], seg+1, how)
		}
		apps = append(apps, a)
	}
	return apps, nil
}

// appOptions reads the options that start app context seg (from 1) of a
// command line, and returns the app and its program with its arguments.
func appOptions(args []string, seg int) (App, []string, error) {
	var a App
	for len(args) > 0 {
		arg := args[0]
		if arg == "--" {
			return a, args[1:], nil
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		n := 1
		if !hasValue {
			if len(args) < 2 {
				return a, nil, fmt.Errorf("%w: %s after ':' (program %d of the job): takes a value", ErrUsage, arg, seg+1)
			}
			value, n = args[1], 2
		}
		switch name {
		case "np", "n":
			k, err := strconv.Atoi(value)
			if err != nil || k < 1 {
				return a, nil, fmt.Errorf("%w: %s %s after ':' (program %d of the job): want a number of ranks from 1", ErrUsage, arg, value, seg+1)
			}
			a.NP = k
		case "x":
			e, err := env.ParseExport(value)
			if err != nil {
				return a, nil, fmt.Errorf("%w: after ':' (program %d of the job): %w", ErrUsage, seg+1, err)
			}
			a.Exports = append(a.Exports, e)
		case "wdir":
			d, err := filepath.Abs(value)
			if err != nil {
				return a, nil, fmt.Errorf("%w: --wdir %s after ':': %w", ErrUsage, value, err)
			}
			a.Dir = d
		default:
			return a, nil, fmt.Errorf("%w: %s after ':' (program %d of the job): a program after ':' takes only -np N, -x NAME[=VALUE] and --wdir DIR; give the job's options before the first program", ErrUsage, strings.SplitN(arg, "=", 2)[0], seg+1)
		}
		args = args[n:]
	}
	return a, args, nil
}

// AppsLine writes apps as gorun's command line after its main options
// (the first app's -np, -x and --wdir are the job's, and left out): what
// a record or a status line shows.
func AppsLine(apps []App) []string {
	var out []string
	for i, a := range apps {
		if i > 0 {
			out = append(out, AppSeparator, "-np", strconv.Itoa(a.NP))
			for _, e := range a.Exports {
				x := e.Name
				if e.HasValue {
					x += "=" + e.Value
				}
				out = append(out, "-x", x)
			}
			if a.Dir != "" {
				out = append(out, "--wdir", a.Dir)
			}
		}
		out = append(out, a.Argv...)
	}
	return out
}

// setApps checks o's apps and makes the plan's rank count theirs. A job
// of several apps runs in one gorun (not a per-node launch), on exactly
// the ranks its apps ask for.
func (o *Options) setApps() error {
	if len(o.Apps) == 0 {
		return nil
	}
	if o.PerNode != nil {
		return fmt.Errorf("%w: several programs in one job (':') and a per-node launch (--rdzv-endpoint): run the job from one gorun, with its hosts in -H or --hostfile", ErrUsage)
	}
	total := 0
	for i, a := range o.Apps {
		if len(a.Argv) == 0 || a.NP < 1 {
			return fmt.Errorf("%w: program %d of the job: no program, or no ranks", ErrUsage, i+1)
		}
		if a.Dir != "" && !filepath.IsAbs(a.Dir) {
			return fmt.Errorf("%w: --wdir %s of program %d: not an absolute path", ErrUsage, a.Dir, i+1)
		}
		total += a.NP
		if total > MaxRanks {
			return fmt.Errorf("%w: the job's programs ask for more ranks than gorun runs (%d at most)", ErrUsage, MaxRanks)
		}
	}
	if o.Plan.NP != 0 && o.Plan.NP != total && o.Plan.NP != o.Apps[0].NP {
		return fmt.Errorf("%w: -np %d: the job's programs ask for %d ranks", ErrUsage, o.Plan.NP, total)
	}
	o.Plan.NP = total
	if len(o.Argv) == 0 {
		o.Argv = AppsLine(o.Apps)
	}
	return nil
}

// launchApps turns o's apps into what every agent's Launch carries, their
// exports resolved here (NAME alone takes gorun's value); nil when the job
// runs one program. warn is told of each export that gorun's environment
// lacks.
func launchApps(apps []App, warn func(app int, name string)) []control.App {
	if len(apps) == 0 {
		return nil
	}
	out := make([]control.App, len(apps))
	first := 0
	for i, a := range apps {
		exports, missing := env.Resolve(a.Exports, os.LookupEnv)
		for _, name := range missing {
			warn(i, name)
		}
		out[i] = control.App{Argv: a.Argv, Dir: a.Dir, Exports: exports, First: first, Size: a.NP}
		first += a.NP
	}
	return out
}

// appIndex returns the index in apps of the app that runs rank; 0 when
// there are none.
func appIndex(apps []control.App, rank int) int {
	i, _ := slices.BinarySearchFunc(apps, rank, func(a control.App, r int) int {
		switch {
		case r < a.First:
			return 1
		case r >= a.First+a.Size:
			return -1
		}
		return 0
	})
	return min(i, max(len(apps)-1, 0))
}

// appNumbers is each rank's app index, by rank, for a job of size ranks;
// nil when the job runs one program.
func appNumbers(apps []control.App, size int) []int {
	if len(apps) == 0 {
		return nil
	}
	out := make([]int, size)
	for k, a := range apps {
		for r := a.First; r < a.First+a.Size && r < size; r++ {
			out[r] = k
		}
	}
	return out
}
