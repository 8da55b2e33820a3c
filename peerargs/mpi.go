package peerargs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Open MPI and MPICH take long options with one dash or two (-np, --np);
// the program is the first argument that is not an option, and a ':'
// argument starts the options of another program of the same job (MPMD).

// mpiState is what mpirun's and mpiexec's options said that is written
// out once they are all read.
type mpiState struct {
	appFile, appFlag string // --app FILE, -configfile FILE, and how it was typed
	defaultHostfile  string // --default-hostfile: used without -H or --hostfile
	hostsGiven       bool
	hostfiles        []string // --hostfile FILE as typed
	fork             bool     // Hydra's -launcher fork: every rank on this machine
	// app is the program whose options are being read: 0 for the first
	// (and the job's options), k for the one after the k-th ':'.
	app int
	// appHosts and appNP are each program's -H (-host) and -np, by app:
	// a program after a ':' that names its own hosts (Open MPI's -H in
	// an app context, Intel MPI's -host in an argument set) places each
	// program's ranks on its hosts (see perProgramHosts).
	appHosts map[int][]string
	appNP    map[int]string
}

// Ways that several flags' refusals name.
const (
	wayTaskset  = "gorun binds within the CPUs it may use: run it under taskset -c LIST (or in a cpuset), and --bind-to core places the ranks on them"
	wayDebugger = "run the debugger as the program (gorun -np N gdb -batch -ex run --args PROG), or see where a running job is with gorun stacks"
	wayStatus   = "gorun ps lists running jobs, gorun status JOB each rank's host and pid, and --summary-json FILE writes a record of the job"
	wayEnvNone  = "ranks inherit gorun's environment: start gorun with the one they should get (env -i PATH=\"$PATH\" gorun ...), and -x NAME for more"
	wayCopy     = "gorun copies only itself to hosts that lack it: put the files on a directory every host shares, or copy them first"
	wayAgent    = "gorun's agent is gorun itself, copied to hosts that lack it (--no-stage: never copied)"
	wayNoVM     = "gorun starts its agents for each job, on the hosts that run its ranks: run each job with gorun"
	wayMCAFile  = "give its settings on the command line (--mca NAME VALUE, -x NAME=VALUE)"
)

// Notes of flags that change nothing under gorun.
const (
	noteDebug   = "ignored: gorun's agents print what went wrong themselves (--trace shows where the job's time went)"
	noteIgnored = "ignored: nothing under gorun depends on it"
)

// mpirunFlags are the flags of Open MPI 4.1's mpirun (mpirun --help all).
var mpirunFlags = []option{
	{names: []string{"np", "n", "c"}, nargs: 1, app: true, do: npFlag},
	{names: []string{"npernode", "N"}, nargs: 1, do: as("--npernode")},
	{names: []string{"pernode"}, do: asValue("--npernode", "1")},
	{names: []string{"npersocket"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("--map-by", "ppr:"+v[0]+":package")
		return nil
	}},
	{names: []string{"ppr"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("--map-by", "ppr:"+socketAsPackage(v[0]))
		return nil
	}},
	{names: []string{"host", "H"}, nargs: 1, app: true, do: hosts},
	{names: []string{"hostfile", "machinefile"}, nargs: 1, do: hostfileFlag},
	{names: []string{"default-hostfile"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.defaultHostfile = v[0]
		return nil
	}},
	{names: []string{"rf", "rankfile"}, nargs: 1, do: as("--rankfile")},
	{names: []string{"app"}, nargs: 1, do: appFile},
	{names: []string{"x"}, nargs: 1, app: true, do: as("-x")},
	{names: []string{"wdir", "wd"}, nargs: 1, app: true, do: as("--wdir")},
	{names: []string{"set-cwd-to-session-dir"}, do: refused("gorun's ranks start in gorun's working directory, or in --wdir DIR")},
	{names: []string{"path"}, nargs: 1, do: refused("give the program's full path, or -x PATH=DIR:$PATH")},
	{names: []string{"mca", "gmca"}, nargs: 2, do: mca},
	{names: []string{"am"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("-x", "OMPI_MCA_mca_base_param_file_prefix="+v[0]) // what -am sets: each rank's Open MPI reads the files
		return nil
	}},
	{names: []string{"tune"}, nargs: 1, do: refused(wayMCAFile)},
	{names: []string{"bind-to"}, nargs: 1, do: bindTo},
	{names: []string{"bind-to-core"}, do: asValue("--bind-to", "core")},
	{names: []string{"bind-to-socket"}, do: asValue("--bind-to", "package")},
	{names: []string{"cpu-list", "cpu-set"}, nargs: 1, do: refused(wayTaskset)},
	{names: []string{"cpus-per-proc", "cpus-per-rank"}, nargs: 1, do: as("--cpus-per-rank")},
	{names: []string{"use-hwthread-cpus"}, do: noted("gorun counts this host's hardware threads as its slots already (-np's default), " +
		"and binds whole cores: a rank bound to a core gets all of its hardware threads")},
	{names: []string{"map-by"}, nargs: 1, do: mapBy},
	{names: []string{"rank-by"}, nargs: 1, do: rankBy},
	{names: []string{"bynode"}, do: as("--map-by=node")},
	{names: []string{"byslot"}, do: as("--map-by=slot")},
	{names: []string{"bycore"}, do: as("--map-by=core")},
	{names: []string{"oversubscribe"}, do: as("--oversubscribe")},
	{names: []string{"nooversubscribe"}, do: as("--oversubscribe=false")},
	{names: []string{"nolocal"}, do: as("--nolocal")},
	{names: []string{"novm"}, do: nothing}, // gorun starts agents only where ranks run
	{names: []string{"max-vm-size"}, nargs: 1, do: refused("gorun starts agents on the hosts that run ranks only: choose them with -H or --hostfile")},
	{names: []string{"report-bindings"}, do: as("--report-bindings")},
	{names: []string{"display-map", "display-devel-map", "display-diffable-map"}, do: as("--display-map")},
	{names: []string{"display-allocation", "display-devel-allocation"}, do: as("--display-allocation")},
	{names: []string{"display-topo"}, do: noted("ignored: gorun topo prints a host's topology, and --display-map the map")},
	{names: []string{"do-not-launch"}, do: as("--dry-run")},
	{names: []string{"tag-output"}, do: as("--tag-output")},
	{names: []string{"timestamp-output"}, do: as("--timestamp-output")},
	{names: []string{"output-filename"}, nargs: 1, do: as("--output-filename")},
	{names: []string{"merge-stderr-to-stdout"}, do: refused("gorun relays each rank's stderr to its own stderr: merge gorun's (gorun mpirun ... 2>&1)")},
	{names: []string{"xml"}, do: refused("--summary-json FILE writes a JSON record of the job")},
	{names: []string{"xml-file"}, nargs: 1, do: refused("--summary-json FILE writes a JSON record of the job")},
	{names: []string{"xterm"}, nargs: 1, do: refused("gorun relays every rank's output to this terminal, and its input to one rank (--stdin RANK)")},
	{names: []string{"stdin"}, nargs: 1, do: as("--stdin")},
	{names: []string{"timeout"}, nargs: 1, do: as("--timeout")},
	{names: []string{"get-stack-traces", "report-state-on-timeout"}, do: nothing}, // gorun prints every rank's stacks when --timeout expires
	{names: []string{"max-restarts"}, nargs: 1, do: as("--max-restarts")},
	{names: []string{"enable-recovery"}, do: noted("ignored: gorun stops the whole job when a rank fails, and --max-restarts N restarts all of it")},
	{names: []string{"disable-recovery"}, do: nothing},
	{names: []string{"continuous"}, do: refused("a gorun job ends when its ranks do: --max-restarts N restarts it after a failure")},
	{names: []string{"allow-run-as-root"}, do: nothing}, // gorun runs ranks as whoever runs it, root included
	{names: []string{"q", "quiet"}, do: func(p *parser, _ string, _ []string) error {
		p.quiet = true
		return nil
	}},
	{names: []string{"v", "verbose"}, do: noted(noteDebug)},
	{names: []string{"V", "version"}, do: as("--version")},
	{names: []string{"h", "help"}, do: as("--help")},
	{names: []string{"prefix"}, nargs: 1, do: noted(notePrefix)},
	{names: []string{"noprefix"}, do: noted(notePrefix)},
	{names: []string{"launch-agent"}, nargs: 1, do: refused(wayAgent)},
	{names: []string{"hnp"}, nargs: 1, do: refused(wayNoVM)},
	{names: []string{"dvm"}, do: refused(wayNoVM)},
	{names: []string{"ompi-server"}, nargs: 1, do: refused("gorun's ranks meet at gorun's own rendezvous: drop it")},
	{names: []string{"report-uri", "report-pid", "report-events"}, nargs: 1, do: refused(wayStatus)},
	{names: []string{"output-proctable"}, do: refused(wayStatus)},
	{names: []string{"personality"}, nargs: 1, do: noted(noteIgnored)},
	{names: []string{"preload-files"}, nargs: 1, do: refused(wayCopy)},
	{names: []string{"s", "preload-binary"}, do: refused(wayCopy)},
	{names: []string{"index-argv-by-rank"}, do: refused("a rank finds its number in its environment ($OMPI_COMM_WORLD_RANK, $RANK)")},
	{names: []string{"show-progress", "use-regexp", "do-not-resolve", "fwd-mpirun-port", "enable-instant-on-support",
		"leave-session-attached", "report-child-jobs-separately"}, do: noted(noteIgnored)},
	{names: []string{"d", "debug-devel", "debug-daemons", "debug-daemons-file"}, do: noted(noteDebug)},
	{names: []string{"debug", "tv"}, do: refused(wayDebugger)},
	{names: []string{"debugger"}, nargs: 1, do: refused(wayDebugger)},
	{names: []string{"cf", "cartofile"}, nargs: 1, do: refused("gorun measures each host's topology itself (gorun topo)")},
}

// notePrefix is the note for Open MPI's --prefix and --noprefix.
const notePrefix = "ignored: gorun starts no Open MPI daemons; " +
	"a rank finds its program on its host's PATH (give the program's full path, or -x PATH and -x LD_LIBRARY_PATH)"

// mpiexecFlags are the flags of MPICH 4.0's Hydra mpiexec (mpiexec -h,
// and each flag's own -FLAG -h). Its local options (-n, -env, -envlist,
// -envall, -wdir) are each program's; the others the job's.
var mpiexecFlags = []option{
	{names: []string{"n", "np"}, nargs: 1, app: true, do: npFlag},
	{names: []string{"ppn"}, nargs: 1, do: as("--npernode")},
	{names: []string{"f", "hostfile", "machinefile", "machine", "machines", "machinelist"}, nargs: 1, do: hostfileFlag},
	{names: []string{"hosts", "host", "hostlist"}, nargs: 1, do: hosts},
	{names: []string{"genv"}, nargs: 2, pair: true, do: hydraEnv},
	{names: []string{"env"}, nargs: 2, pair: true, app: true, do: hydraEnv},
	{names: []string{"genvlist"}, nargs: 1, do: hydraEnvList},
	{names: []string{"envlist"}, nargs: 1, app: true, do: hydraEnvList},
	{names: []string{"genvall"}, do: noted(GenvallNote)},
	{names: []string{"envall"}, app: true, do: noted(GenvallNote)},
	{names: []string{"genvnone"}, do: refused(wayEnvNone)},
	{names: []string{"envnone"}, app: true, do: refused(wayEnvNone)},
	{names: []string{"wdir"}, nargs: 1, app: true, do: as("--wdir")},
	{names: []string{"configfile"}, nargs: 1, do: appFile},
	{names: []string{"launcher", "bootstrap"}, nargs: 1, do: hydraLauncher},
	{names: []string{"launcher-exec", "bootstrap-exec"}, nargs: 1, do: refused("gorun reaches hosts through its own SSH client, " +
		"which reads ~/.ssh/config (--ssh-config FILE, --ssh-port PORT, -i KEY)")},
	{names: []string{"enable-x"}, do: refused("gorun forwards no X display: export one (-genv DISPLAY host:0)")},
	{names: []string{"disable-x"}, do: nothing},
	{names: []string{"rmk"}, nargs: 1, do: rmk},
	{names: []string{"topolib"}, nargs: 1, do: noted("ignored: gorun reads each host's topology itself")},
	{names: []string{"bind-to", "binding"}, nargs: 1, do: bindTo},
	{names: []string{"map-by"}, nargs: 1, do: as("--map-by")},
	{names: []string{"membind"}, nargs: 1, do: noted("ignored: gorun binds a bound rank's memory to the NUMA nodes of its CPUs (--bind-to)")},
	{names: []string{"demux"}, nargs: 1, do: noted(noteIgnored)},
	{names: []string{"verbose", "v", "debug"}, do: noted(noteDebug)},
	{names: []string{"info", "version"}, do: as("--version")},
	{names: []string{"print-all-exitcodes"}, do: as("--print-exit-codes")},
	{names: []string{"iface"}, nargs: 1, do: as("--iface")},
	{names: []string{"profile"}, do: noted("ignored: --trace prints where the job's time went")},
	{names: []string{"l", "prepend-rank"}, do: as("--tag-output")},
	{names: []string{"prepend-pattern"}, nargs: 1, do: refused("--tag-output prefixes each line with [rank] ([host:rank] over several hosts)")},
	{names: []string{"outfile-pattern", "outfile"}, nargs: 1, do: as("--outfile-pattern")},
	{names: []string{"errfile-pattern", "errfile"}, nargs: 1, do: as("--errfile-pattern")},
	{names: []string{"output-from"}, nargs: 1, do: refused("gorun prints every rank's output: --tag-output tags each line with its rank, --outfile-pattern PATTERN writes each rank's to a file")},
	{names: []string{"nameserver"}, nargs: 1, do: refused("gorun's ranks meet at gorun's own rendezvous: drop it")},
	{names: []string{"disable-auto-cleanup", "dac"}, do: refused("gorun stops the whole job when a rank fails: --max-restarts N restarts it instead")},
	{names: []string{"enable-auto-cleanup"}, do: nothing},
	{names: []string{"disable-hostname-propagation", "enable-hostname-propagation"}, do: noted(noteIgnored)},
	{names: []string{"order-nodes"}, nargs: 1, do: refused("gorun fills the hosts in the order -hosts or -f lists them: list them in the order you want")},
	{names: []string{"localhost"}, nargs: 1, do: noted("ignored: gorun finds the address the other hosts reach it at (--iface NAME chooses)")},
	{names: []string{"usize"}, nargs: 1, do: noted("ignored: gorun's universe is the job's ranks")},
	{names: []string{"pmi-port"}, do: noted("ignored: gorun serves PMI to each rank on a socket of its own (PMI_FD)")},
	{names: []string{"skip-launch-node"}, do: as("--nolocal")},
	{names: []string{"gpus-per-proc", "g"}, nargs: 1, do: gpusPerProc},
	{names: []string{"h", "help"}, do: as("--help")},
}

// GenvallNote is the note for Hydra's -genvall and -envall, which gorun
// takes without effect.
const GenvallNote = "ranks on this machine inherit gorun's environment already; " +
	"remote ranks get sshd's environment plus -x exports (name the variables: -x NAME or -genvlist A,B)"

// hosts takes -H and -hosts: the job's hosts before the first program,
// that program's own after a ':' (perProgramHosts places them).
func hosts(p *parser, _ string, v []string) error {
	if p.appHosts == nil {
		p.appHosts = map[int][]string{}
	}
	p.appHosts[p.app] = append(p.appHosts[p.app], v[0])
	if p.app > 0 {
		return nil
	}
	p.hostsGiven = true
	p.emitMain("-H", v[0])
	return nil
}

// npFlag takes -np (-n, -c): the ranks of the program it is given for.
func npFlag(p *parser, _ string, v []string) error {
	if p.appNP == nil {
		p.appNP = map[int]string{}
	}
	p.appNP[p.app] = v[0]
	p.emit("-np", v[0])
	return nil
}

// hostfileFlag takes --hostfile and -f.
func hostfileFlag(p *parser, typed string, v []string) error {
	p.hostsGiven = true
	p.hostfiles = append(p.hostfiles, typed)
	p.emit("--hostfile", v[0])
	return nil
}

// appFile takes Open MPI's --app FILE and Hydra's -configfile FILE: the
// job's programs, one a line.
func appFile(p *parser, typed string, v []string) error {
	if p.appFile != "" {
		return fmt.Errorf("%s: give one (and %s before it)", typed, p.appFlag)
	}
	p.appFile, p.appFlag = v[0], typed
	return nil
}

// hydraEnv takes -genv and -env: NAME VALUE, or NAME=VALUE.
func hydraEnv(p *parser, _ string, v []string) error {
	if len(v) == 1 {
		p.emit("-x", v[0])
		return nil
	}
	p.emit("-x", v[0]+"="+v[1])
	return nil
}

// hydraEnvList takes -genvlist and -envlist: A,B,C.
func hydraEnvList(p *parser, _ string, v []string) error {
	for _, n := range strings.Split(v[0], ",") {
		if n != "" {
			p.emit("-x", n)
		}
	}
	return nil
}

// mca takes --mca NAME VALUE (see MCA): the ranks' parameters become
// Open MPI's environment variable, the launcher's gorun's flags.
func mca(p *parser, typed string, v []string) error {
	args, note, err := MCA(v[0], v[1])
	if err != nil {
		return fmt.Errorf("%s: %w", typed, err)
	}
	p.emit(args...)
	if note != "" {
		p.note("%s: %s", typed, note)
	}
	return nil
}

// hydraLaunchers maps Hydra's launchers (its bootstrap servers) to
// gorun's --launcher: the same batch system's launcher.
var hydraLaunchers = map[string]string{"ssh": "ssh", "rsh": "ssh", "slurm": "slurm", "pbs": "pbs", "sge": "sge", "lsf": "lsf"}

// hydraLauncher takes -launcher ssh|rsh|fork|slurm|pbs|sge|lsf. fork
// starts every rank on this machine, whatever hosts -f or -hosts name.
func hydraLauncher(p *parser, typed string, v []string) error {
	if v[0] == "fork" {
		p.fork = true
		return nil
	}
	l, ok := hydraLaunchers[v[0]]
	if !ok {
		return fmt.Errorf("%s: gorun starts ranks through ssh, fork (this machine), slurm, pbs, sge or lsf (and flux: gorun --launcher flux)", typed)
	}
	p.emit("--launcher", l)
	return nil
}

// rmk takes Hydra's -rmk: where the hosts come from.
func rmk(p *parser, typed string, v []string) error {
	switch v[0] {
	case "user":
		return nil // -f, -hosts
	case "slurm", "pbs", "sge", "lsf":
		p.note("%s: ignored: gorun reads the hosts of a Slurm, PBS, Grid Engine, LSF or Flux allocation by itself (--launcher %s to insist)", typed, v[0])
		return nil
	}
	return fmt.Errorf("%s: gorun reads the hosts of Slurm, PBS, Grid Engine, LSF and Flux allocations, or -f FILE and -hosts LIST", typed)
}

// gpusPerProc takes Hydra's -gpus-per-proc N: N=1 is gorun's one GPU per
// rank, seen as its device 0.
func gpusPerProc(p *parser, typed string, v []string) error {
	switch v[0] {
	case "1":
		p.emit("--bind-to", "gpu", "--gpu-bind", "single")
		return nil
	case "auto":
		return nil // every GPU to every rank, gorun's --gpu-bind all
	}
	return fmt.Errorf("%s: gorun gives each rank one GPU (--gpu-bind single) or lets every rank see all (the default)", typed)
}

// bindTo takes --bind-to POLICY[:QUALIFIER,...]: Open MPI's qualifiers
// if-supported and ordered change nothing, report is --report-bindings,
// overload-allowed is a note.
func bindTo(p *parser, typed string, v []string) error {
	policy, quals, _ := strings.Cut(v[0], ":")
	p.emit("--bind-to", policy)
	for _, q := range strings.Split(quals, ",") {
		switch strings.ToLower(q) {
		case "", "if-supported", "ordered":
		case "report":
			p.emit("--report-bindings")
		case "overload-allowed":
			p.note("%s: overload-allowed: ignored: gorun leaves oversubscribed ranks unbound unless --bind-to says so", typed)
		default:
			return fmt.Errorf("%s: %q: gorun takes the qualifiers if-supported, ordered, report and overload-allowed", typed, q)
		}
	}
	return nil
}

// socketAsPackage writes Open MPI's "socket" as gorun's "package" in a
// ppr spec (N:socket).
func socketAsPackage(spec string) string {
	n, obj, ok := strings.Cut(spec, ":")
	if ok && strings.EqualFold(obj, "socket") {
		return n + ":package"
	}
	return spec
}

// mapBy takes Open MPI's --map-by POLICY[:MODIFIER,...]: the policy is
// gorun's --map-by (ppr:N:socket its ppr:N:package), and the modifiers
// PE=N (--cpus-per-rank N), OVERSUBSCRIBE, NOOVERSUBSCRIBE and DISPLAY
// (--display-map) gorun's flags.
func mapBy(p *parser, typed string, v []string) error {
	parts := strings.Split(v[0], ":")
	n := 1
	if strings.EqualFold(parts[0], "ppr") {
		n = min(3, len(parts))
	}
	policy := strings.Join(parts[:n], ":")
	if n == 3 {
		policy = "ppr:" + socketAsPackage(parts[1]+":"+parts[2])
	}
	p.emit("--map-by", policy)
	for _, mods := range parts[n:] {
		for _, m := range strings.Split(mods, ",") {
			key, val, _ := strings.Cut(m, "=")
			switch strings.ToUpper(key) {
			case "":
			case "PE":
				if k, err := strconv.Atoi(val); err != nil || k < 1 {
					return fmt.Errorf("%s: PE=%s: want a number of cores per rank from 1", typed, val)
				}
				p.emit("--cpus-per-rank", val)
			case "OVERSUBSCRIBE":
				p.emit("--oversubscribe")
			case "NOOVERSUBSCRIBE":
				p.emit("--oversubscribe=false")
			case "DISPLAY":
				p.emit("--display-map")
			case "SPAN":
				return fmt.Errorf("%s: SPAN: gorun maps each host on its own: give the count per host (--map-by ppr:N:node)", typed)
			case "NOLOCAL":
				p.emit("--nolocal")
			default:
				return fmt.Errorf("%s: %s: gorun takes the modifiers PE=N (--cpus-per-rank N), OVERSUBSCRIBE, NOOVERSUBSCRIBE, NOLOCAL and DISPLAY", typed, m)
			}
		}
	}
	return nil
}

// rankBy takes Open MPI's --rank-by: gorun numbers ranks in the order it
// maps them (slot); by node is --map-by node.
func rankBy(p *parser, typed string, v []string) error {
	switch strings.ToLower(v[0]) {
	case "slot", "core", "fill":
		return nil
	case "node":
		return fmt.Errorf("%s: gorun numbers ranks as it maps them: --map-by node deals them round-robin over the hosts", typed)
	}
	return fmt.Errorf("%s: gorun numbers ranks as it maps them (by slot): choose the mapping with --map-by", typed)
}

// errNoReadFile refuses --app and -configfile where the caller reads no
// files.
var errNoReadFile = errors.New("gorun reads no files here")

// mpi takes the programs of mpirun or mpiexec and their arguments: one, or
// several separated by ':' (or listed in --app or -configfile), each
// with its own options. Hydra places as many ranks as it is asked for,
// however many slots its hosts have (-n 4 -hosts a,b: a gets ranks 0 and
// 2), where gorun, as Open MPI, refuses unless --oversubscribe: mpiexec's
// jobs run with it.
func (p *parser) mpi(rest []string) error {
	if p.appFile != "" {
		if len(rest) > 0 {
			return fmt.Errorf("%s and the program %s: give one", p.appFlag, rest[0])
		}
		var err error
		if rest, err = p.readAppFile(); err != nil {
			return err
		}
	}
	if p.defaultHostfile != "" && !p.hostsGiven {
		p.emitMain("--hostfile", p.defaultHostfile)
	}
	if p.tool == MPIExec {
		p.out = append([]string{"--oversubscribe"}, p.out...)
	}
	segs := splitApps(rest)
	if p.appFile != "" {
		// The file's first line starts with its options: the job's.
		var err error
		if segs[0], err = p.options(segs[0]); err != nil {
			return err
		}
	}
	progs := [][]string{segs[0]}
	var opts [][]string
	for k, seg := range segs[1:] {
		var local []string
		p.dst, p.app = &local, k+1
		prog, err := p.options(seg)
		p.dst, p.app = &p.out, 0
		if err != nil {
			return err
		}
		opts = append(opts, local)
		progs = append(progs, prog)
	}
	if len(segs) > 1 && len(segs[0]) == 0 {
		return errors.New("':' before the first program: give a program before it")
	}
	if err := p.placeHosts(opts); err != nil {
		return err
	}
	for _, prog := range progs {
		if err := nested(prog); err != nil {
			return err
		}
	}
	p.emitMain(progs[0]...)
	for k, prog := range progs[1:] {
		if len(prog) == 0 {
			return fmt.Errorf("':' number %d is followed by no program", k+1)
		}
		p.emitMain(":")
		p.emitMain(opts[k]...)
		if strings.HasPrefix(prog[0], "-") {
			p.emitMain("--")
		}
		p.emitMain(prog...)
	}
	return nil
}

// placeHosts settles where the ranks go once every program's options
// are read: Hydra's -launcher fork runs them all here; programs that each
// name their hosts get them (perProgramHosts); and Open MPI 4.1's mpirun
// given both -H and --hostfile runs on -H's hosts alone (one slot for each
// name without :N), as gorun mpirun does.
func (p *parser) placeHosts(opts [][]string) error {
	if p.fork {
		var dropped []string
		p.out, dropped = dropFlags(p.out, "-H", "--hostfile")
		if len(dropped) > 0 {
			p.note("-launcher fork: every rank runs on this machine, as Hydra's fork launcher starts them: %s not used", strings.Join(dropped, " "))
		}
		return nil
	}
	if err := p.perProgramHosts(opts); err != nil {
		return err
	}
	if p.tool == MPIRun && len(p.appHosts[0]) > 0 && len(p.hostfiles) > 0 {
		p.out, _ = dropFlags(p.out, "--hostfile")
		p.note("%s: ignored: -H names the hosts, as Open MPI 4.1 takes them (one slot for each name without :N)", strings.Join(p.hostfiles, ", "))
	}
	return nil
}

// dropFlags removes from args every flag of names with its value (NAME
// VALUE or NAME=VALUE) and returns them, as NAME VALUE, apart.
func dropFlags(args []string, names ...string) (kept, dropped []string) {
	for i := 0; i < len(args); i++ {
		name, value, eq := strings.Cut(args[i], "=")
		if !slices.Contains(names, name) {
			kept = append(kept, args[i])
			continue
		}
		if !eq && i+1 < len(args) {
			i++
			value = args[i]
		}
		dropped = append(dropped, name+" "+value)
	}
	return kept, dropped
}

// appHost is a host of one program's -H, and how many of its ranks it
// takes.
type appHost struct {
	name string
	n    int
}

// perProgramHosts places each program's ranks on its own hosts when a
// program after a ':' names them (mpirun -H h1 -np 1 a : -H h2,h3 -np 2
// b; Intel MPI's mpiexec.hydra -n 1 -host h1 a : -n 2 -host h2 b): gorun
// fills the job's slots in rank order, so each program's ranks, filling
// its hosts' slots in order (Open MPI), become the job's host list in
// rank order (-H h1:1,h2:1,h3:1). A program without -np runs one rank
// per slot of its hosts, and gets its -np written out.
func (p *parser) perProgramHosts(opts [][]string) error {
	later := false
	for k := range opts {
		later = later || len(p.appHosts[k+1]) > 0
	}
	if !later {
		return nil
	}
	flag := "-H"
	if p.tool == MPIExec {
		flag = "-host"
	}
	var all []appHost
	for k := 0; k <= len(opts); k++ {
		if len(p.appHosts[k]) == 0 {
			return fmt.Errorf("program %d has no %s of its own where others have: give each program its hosts, or give the job's hosts once, before the first program", k+1, flag)
		}
		hs, slots, err := parseAppHosts(strings.Join(p.appHosts[k], ","))
		if err != nil {
			return fmt.Errorf("%s %s: %w", flag, strings.Join(p.appHosts[k], ","), err)
		}
		np := slots
		if v, ok := p.appNP[k]; ok {
			if np, err = strconv.Atoi(v); err != nil || np < 1 {
				return fmt.Errorf("-np %s: want a number of ranks from 1", v)
			}
		} else if k == 0 {
			p.emitMain("-np", strconv.Itoa(np))
		} else {
			opts[k-1] = append([]string{"-np", strconv.Itoa(np)}, opts[k-1]...)
		}
		rest := np
		for _, h := range hs {
			if n := min(h.n, rest); n > 0 {
				all = append(all, appHost{h.name, n})
				rest -= n
			}
		}
		if rest > 0 {
			if p.tool == MPIExec && len(hs) == 1 { // Hydra places as many as it is asked for on the one host
				all[len(all)-1].n += rest
			} else {
				return fmt.Errorf("program %d: -np %d is more than the %d slots of %s %s: give its hosts their counts (%s host:N)", k+1, np, slots, flag, strings.Join(p.appHosts[k], ","), flag)
			}
		}
	}
	var list []string
	last := map[string]int{}
	for i, h := range all {
		if j, ok := last[h.name]; ok && j != i-1 {
			return fmt.Errorf("%s runs ranks of programs that are not next to each other in rank order, and gorun places a host's ranks together: list the programs so that each host's come together, or place every rank with --rankfile FILE", h.name)
		}
		last[h.name] = i
		if n := len(list); n > 0 && strings.HasPrefix(list[n-1], h.name+":") {
			k, _ := strconv.Atoi(strings.TrimPrefix(list[n-1], h.name+":"))
			list[n-1] = h.name + ":" + strconv.Itoa(k+h.n)
			continue
		}
		list = append(list, h.name+":"+strconv.Itoa(h.n))
	}
	p.out, _ = dropFlags(p.out, "-H")
	p.emitMain("-H", strings.Join(list, ","))
	p.hostsGiven = true
	return nil
}

// parseAppHosts reads a program's host list, NAME or NAME:N items (a name
// given twice counts twice, as Open MPI's -H aa,aa,bb), in the order of
// their first mention, and returns them with their slots in all.
func parseAppHosts(s string) (hs []appHost, slots int, err error) {
	at := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		name, count, hasCount := strings.Cut(item, ":")
		n := 1
		if hasCount {
			if n, err = strconv.Atoi(count); err != nil || n < 1 {
				return nil, 0, fmt.Errorf("%q: want HOST or HOST:N (a program's own hosts take no other form)", item)
			}
		}
		if name == "" || strings.ContainsAny(name, "[]:") {
			return nil, 0, fmt.Errorf("%q: want HOST or HOST:N (a program's own hosts take no other form)", item)
		}
		if i, ok := at[name]; ok {
			hs[i].n += n
		} else {
			at[name] = len(hs)
			hs = append(hs, appHost{name, n})
		}
		slots += n
	}
	return hs, slots, nil
}

// splitApps splits a command line at its ':' arguments.
func splitApps(args []string) [][]string {
	var out [][]string
	for {
		i := slices.Index(args, ":")
		if i < 0 {
			return append(out, args)
		}
		out = append(out, args[:i])
		args = args[i+1:]
	}
}

// readAppFile reads --app's or -configfile's file: a program with its
// options on each line, '#' lines and blank lines skipped; it returns them
// as one command line, separated by ':'.
func (p *parser) readAppFile() ([]string, error) {
	if p.o.ReadFile == nil {
		return nil, fmt.Errorf("%s: %w", p.appFlag, errNoReadFile)
	}
	b, err := p.o.ReadFile(p.appFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.appFlag, err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(out) > 0 {
			out = append(out, ":")
		}
		out = append(out, f...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the file names no program", p.appFlag)
	}
	return out, nil
}
