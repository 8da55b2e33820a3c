package peerargs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// horovodrun takes its options with two dashes (and a few with one:
// -np, -cb, -H, -hostfile, -p, -i, -prefix-timestamp), spelled with '-';
// the program is the first argument that is not an option. gorun runs a
// Horovod job as horovodrun's MPI mode does (the mpirun it writes): the
// ranks meet through MPI, unbound, their output tagged with their rank,
// and its tuning flags become Horovod's variables.

// horovodState is what horovodrun's options said.
type horovodState struct {
	np bool // -np given
}

// horovodEnv returns the action of a horovodrun flag that sets a
// Horovod variable to its value (times scale when scale > 1).
func horovodEnv(name string, scale int) func(*parser, string, []string) error {
	return func(p *parser, typed string, v []string) error {
		val := v[0]
		if scale > 1 {
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fmt.Errorf("%s: want a number from 0", typed)
			}
			val = strconv.Itoa(n * scale)
		}
		p.emit("-x", name+"="+val)
		return nil
	}
}

// horovodSwitch returns the action of a horovodrun switch that sets a
// Horovod variable to value.
func horovodSwitch(name, value string) func(*parser, string, []string) error {
	return func(p *parser, _ string, _ []string) error {
		p.emit("-x", name+"="+value)
		return nil
	}
}

// wayHorovodElastic is the refusal of Horovod's elastic mode.
const wayHorovodElastic = "gorun serves Horovod over MPI, not its elastic mode: run a fixed -np, and --max-restarts N restarts the job after a failure"

// horovodFlags are the flags of Horovod's horovodrun
// (horovod/runner/launch.py).
var horovodFlags = []option{
	{names: []string{"np", "num-proc"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.hvd.np = true
		p.emit("-np", v[0])
		return nil
	}},
	{names: []string{"H", "hosts"}, nargs: 1, do: as("-H")},
	{names: []string{"hostfile"}, nargs: 1, do: as("--hostfile")},
	{names: []string{"p", "ssh-port"}, nargs: 1, do: as("--ssh-port")},
	{names: []string{"i", "ssh-identity-file"}, nargs: 1, do: as("-i")},
	{names: []string{"start-timeout"}, nargs: 1, do: func(p *parser, typed string, v []string) error {
		if n, err := strconv.Atoi(v[0]); err != nil || n < 1 {
			return fmt.Errorf("%s: want seconds from 1", typed)
		}
		p.emit("--connect-timeout", v[0]+"s")
		return nil
	}},
	{names: []string{"network-interfaces", "network-interface"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		first, _, _ := strings.Cut(v[0], ",")
		p.emit("--iface", first, "-x", "NCCL_SOCKET_IFNAME="+v[0])
		return nil
	}},
	{names: []string{"output-filename"}, nargs: 1, do: as("--output-filename")},
	{names: []string{"prefix-timestamp", "prefix-output-with-timestamp"}, do: as("--timestamp-output")},
	{names: []string{"verbose"}, do: noted(noteDebug)},
	{names: []string{"disable-cache"}, do: noted("ignored: gorun keeps no cache of its checks")},
	{names: []string{"v", "version"}, do: refused("horovodrun's own: python3 -c 'import horovod; print(horovod.__version__)'")},
	{names: []string{"cb", "check-build"}, do: refused("horovodrun's own: run horovodrun --check-build")},
	{names: []string{"config-file"}, nargs: 1, do: refused("give its settings as flags")},
	{names: []string{"h", "help"}, do: as("--help")},
	// Tuning: Horovod's variables, as horovodrun sets them.
	{names: []string{"fusion-threshold-mb"}, nargs: 1, do: horovodEnv("HOROVOD_FUSION_THRESHOLD", 1024*1024)},
	{names: []string{"cycle-time-ms"}, nargs: 1, do: horovodEnv("HOROVOD_CYCLE_TIME", 0)},
	{names: []string{"cache-capacity"}, nargs: 1, do: horovodEnv("HOROVOD_CACHE_CAPACITY", 0)},
	{names: []string{"hierarchical-allreduce"}, do: horovodSwitch("HOROVOD_HIERARCHICAL_ALLREDUCE", "1")},
	{names: []string{"no-hierarchical-allreduce"}, do: horovodSwitch("HOROVOD_HIERARCHICAL_ALLREDUCE", "0")},
	{names: []string{"hierarchical-allgather"}, do: horovodSwitch("HOROVOD_HIERARCHICAL_ALLGATHER", "1")},
	{names: []string{"no-hierarchical-allgather"}, do: horovodSwitch("HOROVOD_HIERARCHICAL_ALLGATHER", "0")},
	{names: []string{"autotune"}, do: horovodSwitch("HOROVOD_AUTOTUNE", "1")},
	{names: []string{"no-autotune"}, do: nothing},
	{names: []string{"autotune-log-file"}, nargs: 1, do: horovodEnv("HOROVOD_AUTOTUNE_LOG", 0)},
	{names: []string{"autotune-warmup-samples"}, nargs: 1, do: horovodEnv("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 0)},
	{names: []string{"autotune-steps-per-sample"}, nargs: 1, do: horovodEnv("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 0)},
	{names: []string{"autotune-bayes-opt-max-samples"}, nargs: 1, do: horovodEnv("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 0)},
	{names: []string{"autotune-gaussian-process-noise"}, nargs: 1, do: horovodEnv("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0)},
	{names: []string{"timeline-filename"}, nargs: 1, do: horovodEnv("HOROVOD_TIMELINE", 0)},
	{names: []string{"timeline-mark-cycles"}, do: horovodSwitch("HOROVOD_TIMELINE_MARK_CYCLES", "1")},
	{names: []string{"no-timeline-mark-cycles"}, do: horovodSwitch("HOROVOD_TIMELINE_MARK_CYCLES", "0")},
	{names: []string{"no-stall-check"}, do: horovodSwitch("HOROVOD_STALL_CHECK_DISABLE", "1")},
	{names: []string{"stall-check"}, do: horovodSwitch("HOROVOD_STALL_CHECK_DISABLE", "0")},
	{names: []string{"stall-check-warning-time-seconds"}, nargs: 1, do: horovodEnv("HOROVOD_STALL_CHECK_TIME_SECONDS", 0)},
	{names: []string{"stall-check-shutdown-time-seconds"}, nargs: 1, do: horovodEnv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0)},
	{names: []string{"mpi-threads-disable"}, do: horovodSwitch("HOROVOD_MPI_THREADS_DISABLE", "1")},
	{names: []string{"no-mpi-threads-disable"}, do: horovodSwitch("HOROVOD_MPI_THREADS_DISABLE", "0")},
	{names: []string{"num-nccl-streams"}, nargs: 1, do: horovodEnv("HOROVOD_NUM_NCCL_STREAMS", 0)},
	{names: []string{"thread-affinity"}, nargs: 1, do: horovodEnv("HOROVOD_THREAD_AFFINITY", 0)},
	{names: []string{"ccl-bgt-affinity"}, nargs: 1, do: horovodEnv("HOROVOD_CCL_BGT_AFFINITY", 0)},
	{names: []string{"gloo-timeout-seconds"}, nargs: 1, do: horovodEnv("HOROVOD_GLOO_TIMEOUT_SECONDS", 0)},
	{names: []string{"log-level"}, nargs: 1, do: horovodEnv("HOROVOD_LOG_LEVEL", 0)},
	{names: []string{"log-without-timestamp", "log-hide-timestamp"}, do: horovodSwitch("HOROVOD_LOG_HIDE_TIME", "1")},
	{names: []string{"log-with-timestamp", "no-log-hide-timestamp"}, do: horovodSwitch("HOROVOD_LOG_HIDE_TIME", "0")},
	{names: []string{"tcp"}, do: horovodSwitch("NCCL_IB_DISABLE", "1")},
	{names: []string{"mpi-args", "binding-args"}, nargs: 1, do: mpiArgs},
	// Controllers: gorun's ranks meet through MPI.
	{names: []string{"mpi"}, do: nothing},
	{names: []string{"gloo"}, do: refused("gorun runs Horovod over MPI (its PMI and PMIx servers), not Gloo's rendezvous: drop it (Horovod built with MPI)")},
	{names: []string{"jsrun"}, do: refused("gorun starts the ranks itself, over SSH or Slurm: drop it")},
	// Elastic mode.
	{names: []string{"min-np", "min-num-proc", "max-np", "max-num-proc", "slots-per-host", "elastic-timeout", "reset-limit",
		"host-discovery-script"}, nargs: 1, do: refused(wayHorovodElastic)},
	{names: []string{"blacklist-cooldown-range"}, nargs: 2, do: refused(wayHorovodElastic)},
}

// mpiArgs takes horovodrun's --mpi-args and --binding-args: mpirun's
// flags in one argument, read as gorun mpirun reads them.
func mpiArgs(p *parser, typed string, v []string) error {
	sub := &parser{tool: MPIRun, o: p.o, table: mpirunFlags}
	sub.dst = &sub.out
	rest, err := sub.options(strings.Fields(v[0]))
	if err != nil {
		return fmt.Errorf("%s: %w", typed, err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%s: %q is no mpirun flag", typed, rest[0])
	}
	p.emit(sub.out...)
	p.notes = append(p.notes, sub.notes...)
	return nil
}

// horovodrun writes out horovodrun's program, as its MPI mode's mpirun
// runs it: every rank's output tagged, no rank bound, and every variable
// of the launching environment exported to every rank (horovodExports).
func (p *parser) horovodrun(rest []string) error {
	if !p.hvd.np && !p.isGiven("np", "n") {
		return fmt.Errorf("-np: give the number of processes (as horovodrun needs)")
	}
	if err := nested(rest); err != nil {
		return err
	}
	p.out = append(append([]string{"--tag-output", "--bind-to", "none"}, horovodExports(p.o.Environ)...), p.out...)
	p.emit(rest...)
	return nil
}

// horovodExports are the -x NAME flags that export environ's variables
// to every rank, as horovodrun passes mpirun -x for each of its own
// (Horovod's is_exportable leaves out BASH_FUNC_*, OLDPWD and its secret
// key). gorun also leaves out what is the rank's own or gorun's: PWD (the
// rank's working directory), SHLVL and _ (the shell's), and GORUN_*
// (gorun's settings and secrets). Sorted by name; a name given twice
// counts once.
func horovodExports(environ []string) []string {
	var names []string
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.HasPrefix(name, "BASH_FUNC_") || strings.HasPrefix(name, "GORUN_") {
			continue
		}
		switch name {
		case "OLDPWD", "PWD", "SHLVL", "_", "HOROVOD_SECRET_KEY":
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, "-x", n)
	}
	return out
}

// isGiven reports whether one of gorun's flags named names was taken.
func (p *parser) isGiven(names ...string) bool {
	for _, n := range names {
		if p.given[n] {
			return true
		}
	}
	return false
}
