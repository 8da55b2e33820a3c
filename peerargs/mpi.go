package peerargs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Open MPI and MPICH take long options with one dash or two (-np, --np);
// the program is the first argument that is not an option.

// mpirunFlags are Open MPI's mpirun's flags that gorun takes.
var mpirunFlags = []option{
	{names: []string{"np", "n", "c"}, nargs: 1, do: as("-np")},
	{names: []string{"npernode", "N"}, nargs: 1, do: as("--npernode")},
	{names: []string{"host", "H"}, nargs: 1, do: as("-H")},
	{names: []string{"hostfile", "machinefile"}, nargs: 1, do: as("--hostfile")},
	{names: []string{"x"}, nargs: 1, do: as("-x")},
	{names: []string{"wdir", "wd"}, nargs: 1, do: as("--wdir")},
	{names: []string{"mca", "gmca"}, nargs: 2, do: mca},
	{names: []string{"bind-to"}, nargs: 1, do: as("--bind-to")},
	{names: []string{"map-by"}, nargs: 1, do: as("--map-by")},
	{names: []string{"bynode"}, do: as("--map-by=node")},
	{names: []string{"byslot"}, do: as("--map-by=slot")},
	{names: []string{"report-bindings"}, do: as("--report-bindings")},
	{names: []string{"display-map"}, do: as("--display-map")},
	{names: []string{"tag-output"}, do: as("--tag-output")},
	{names: []string{"timestamp-output"}, do: as("--timestamp-output")},
	{names: []string{"output-filename"}, nargs: 1, do: as("--output-filename")},
	{names: []string{"oversubscribe"}, do: as("--oversubscribe")},
	{names: []string{"allow-run-as-root"}, do: nothing}, // gorun runs ranks as whoever runs it, root included
	{names: []string{"q", "quiet"}, do: nothing},
	{names: []string{"prefix"}, nargs: 1, do: noted("ignored: gorun starts no Open MPI daemons; " +
		"a rank finds its program on its host's PATH (give the program's full path, or -x PATH and -x LD_LIBRARY_PATH)")},
}

// mpiexecFlags are MPICH's Hydra mpiexec's flags that gorun takes. Hydra's
// per-program options (-n, -env, -wdir) are the job's: gorun runs one
// program.
var mpiexecFlags = []option{
	{names: []string{"n", "np"}, nargs: 1, do: as("-np")},
	{names: []string{"ppn"}, nargs: 1, do: as("--npernode")},
	{names: []string{"f", "hostfile", "machinefile"}, nargs: 1, do: as("--hostfile")},
	{names: []string{"hosts", "host"}, nargs: 1, do: as("-H")},
	{names: []string{"genv", "env"}, nargs: 2, do: func(p *parser, _ string, v []string) error {
		p.emit("-x", v[0]+"="+v[1])
		return nil
	}},
	{names: []string{"genvlist", "envlist"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		for _, n := range strings.Split(v[0], ",") {
			if n != "" {
				p.emit("-x", n)
			}
		}
		return nil
	}},
	{names: []string{"genvall", "envall"}, do: noted(GenvallNote)},
	{names: []string{"l", "prepend-rank"}, do: as("--tag-output")},
	{names: []string{"wdir"}, nargs: 1, do: as("--wdir")},
	{names: []string{"bind-to"}, nargs: 1, do: as("--bind-to")},
	{names: []string{"launcher", "bootstrap"}, nargs: 1, do: hydraLauncher},
	{names: []string{"iface"}, nargs: 1, do: as("--iface")},
	{names: []string{"configfile"}, nargs: 1, do: refused("gorun runs one program, given on its command line: give it there")},
}

// GenvallNote is the note for Hydra's -genvall and -envall, which gorun
// takes without effect.
const GenvallNote = "ranks on this machine inherit gorun's environment already; " +
	"remote ranks get sshd's environment plus -x exports (name the variables: -x NAME or -genvlist A,B)"

// mca turns --mca KEY VALUE into Open MPI's environment variable.
func mca(p *parser, _ string, v []string) error {
	p.emit("-x", "OMPI_MCA_"+v[0]+"="+v[1])
	return nil
}

// hydraLaunchers maps Hydra's launchers to gorun's --launcher.
var hydraLaunchers = map[string]string{"ssh": "ssh", "rsh": "ssh", "fork": "local", "slurm": "slurm", "pbs": "pbs"}

// hydraLauncher takes -launcher ssh|rsh|fork|slurm|pbs.
func hydraLauncher(p *parser, typed string, v []string) error {
	l, ok := hydraLaunchers[v[0]]
	if !ok {
		return fmt.Errorf("%s: gorun starts ranks through ssh, fork (this machine), slurm or pbs", typed)
	}
	p.emit("--launcher", l)
	return nil
}

// errMPMD refuses a colon-separated list of programs.
var errMPMD = errors.New("':' (several programs in one job, MPMD): gorun runs one program; " +
	"run one that picks what to do by its rank ($OMPI_COMM_WORLD_RANK, $PMI_RANK or $RANK)")

// mpi takes the program and its arguments of mpirun or mpiexec. Hydra
// places as many ranks as it is asked for, however many slots its hosts
// have (-n 4 -hosts a,b: a gets ranks 0 and 2), where gorun, as Open MPI,
// refuses unless --oversubscribe: mpiexec's jobs run with it.
func (p *parser) mpi(rest []string) error {
	if slices.Contains(rest, ":") {
		return errMPMD
	}
	if p.tool == MPIExec {
		p.out = append([]string{"--oversubscribe"}, p.out...)
	}
	p.emit(rest...)
	return nil
}
