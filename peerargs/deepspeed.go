package peerargs

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// deepspeed takes its options with two dashes (and -H, -i, -e), spelled
// with '_' (or '-'); the program (the training script) is the first
// argument that is not an option. Each rank runs the script under Python
// with -u and --local_rank=LOCAL_RANK first among its arguments, as
// DeepSpeed's launch.py does (unless --no_local_rank).

// deepspeedState is what deepspeed's options said.
type deepspeedState struct {
	noPython, module, noLocalRank bool
	hostfile, filter              string // -H FILE; --include or --exclude as typed
	numNodes                      string // --num_nodes N
}

// wayDSElastic is the refusal of DeepSpeed's elastic training.
const wayDSElastic = "gorun's elastic launch is per node: gorun --nnodes MIN:MAX --nproc-per-node P --rdzv-endpoint HOST:PORT on each node"

// deepspeedFlags are the flags of DeepSpeed's deepspeed launcher
// (deepspeed/launcher/runner.py).
var deepspeedFlags = []option{
	{names: []string{"H", "hostfile"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.ds.hostfile = v[0]
		p.emit("--hostfile", v[0])
		return nil
	}},
	{names: []string{"i", "include"}, nargs: 1, do: dsFilter("--include")},
	{names: []string{"e", "exclude"}, nargs: 1, do: dsFilter("--exclude")},
	{names: []string{"num-gpus", "num-accelerators"}, nargs: 1, do: as("--npernode")}, // local ranks 0..N-1 use GPUs 0..N-1
	{names: []string{"num-nodes"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.ds.numNodes = v[0]
		return nil
	}},
	{names: []string{"master-port"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("-x", "MASTER_PORT="+v[0])
		return nil
	}},
	{names: []string{"master-addr"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("-x", "MASTER_ADDR="+v[0])
		return nil
	}},
	{names: []string{"node-rank"}, nargs: 1, do: noted("ignored: gorun gives each host its node rank")},
	{names: []string{"launcher"}, nargs: 1, do: dsLauncher},
	{names: []string{"launcher-args"}, nargs: 1, do: noted("ignored: gorun starts the ranks itself (its own flags choose how)")},
	{names: []string{"module"}, do: func(p *parser, _ string, _ []string) error { p.ds.module = true; return nil }},
	{names: []string{"no-python"}, do: func(p *parser, _ string, _ []string) error { p.ds.noPython = true; return nil }},
	{names: []string{"no-local-rank"}, do: func(p *parser, _ string, _ []string) error { p.ds.noLocalRank = true; return nil }},
	{names: []string{"no-ssh"}, do: refused("run one gorun per node that meet at an endpoint: gorun --nnodes N --nproc-per-node P --rdzv-endpoint HOST:PORT")},
	{names: []string{"no-ssh-check"}, do: noted("ignored: gorun checks nothing before the job (gorun check does, on demand)")},
	{names: []string{"force-multi"}, do: nothing}, // gorun starts the agents of remote hosts over SSH whatever their number
	{names: []string{"save-pid"}, do: refused(wayStatus)},
	{names: []string{"enable-each-rank-log"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		if v[0] != "None" {
			p.emit("--output-filename", v[0])
		}
		return nil
	}},
	{names: []string{"autotuning"}, nargs: 1, do: refused("DeepSpeed's autotuner starts deepspeed itself: run deepspeed --autotuning")},
	{names: []string{"comment", "account"}, nargs: 1, do: noted("ignored: srun's, which gorun does not pass on")},
	{names: []string{"elastic-training"}, do: refused(wayDSElastic)},
	{names: []string{"min-elastic-nodes", "max-elastic-nodes"}, nargs: 1, do: refused(wayDSElastic)},
	{names: []string{"bind-cores-to-rank"}, do: asValue("--bind-to", "core")},
	{names: []string{"bind-core-list"}, nargs: 1, do: refused(wayTaskset)},
	{names: []string{"ssh-port"}, nargs: 1, do: as("--ssh-port")},
	{names: []string{"h", "help"}, do: as("--help")},
}

// dsFilter returns the action of --include and --exclude: gorun's.
func dsFilter(gorunFlag string) func(*parser, string, []string) error {
	return func(p *parser, typed string, v []string) error {
		p.ds.filter = typed
		p.emit(gorunFlag, v[0])
		return nil
	}
}

// dsHostfile is DeepSpeed's hostfile where -H gives none.
const dsHostfile = "/job/hostfile"

// numNodes takes --num_nodes N: the first N hosts of the hostfile, as
// DeepSpeed's runner takes them (--include h1@h2).
func (p *parser) numNodes() error {
	s := &p.ds
	n, err := strconv.Atoi(s.numNodes)
	if err != nil || n < 1 {
		return fmt.Errorf("--num_nodes %s: want a number of hosts from 1", s.numNodes)
	}
	if s.filter != "" {
		return fmt.Errorf("--num_nodes %s with %s: give one (--include h1@h2 names the hosts)", s.numNodes, s.filter)
	}
	file := s.hostfile
	if file == "" {
		file = dsHostfile
	}
	var b []byte
	if p.o.ReadFile != nil {
		b, err = p.o.ReadFile(file)
	}
	if p.o.ReadFile == nil || err != nil {
		if s.hostfile == "" && n == 1 {
			return nil // this machine alone, as DeepSpeed runs without a hostfile
		}
		return fmt.Errorf("--num_nodes %s: the first hosts of the hostfile, and %s cannot be read: give --hostfile FILE, or name the hosts (--include h1@h2)", s.numNodes, file)
	}
	var hosts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || slices.Contains(hosts, f[0]) {
			continue
		}
		hosts = append(hosts, f[0])
	}
	if n > len(hosts) {
		return fmt.Errorf("--num_nodes %d: %s lists %d host(s): give at most that many, or list more", n, file, len(hosts))
	}
	p.emit("--include", strings.Join(hosts[:n], "@"))
	return nil
}

// dsLauncher takes deepspeed's --launcher: gorun starts the ranks of
// other hosts itself, over SSH (pdsh, openmpi, mpich, mvapich, impi), or
// through srun inside Slurm.
func dsLauncher(p *parser, typed string, v []string) error {
	switch v[0] {
	case "pdsh", "openmpi", "mpich", "mvapich", "impi":
		p.note("%s: ignored: gorun starts the ranks of other hosts over SSH itself", typed)
		return nil
	case "slurm":
		p.emit("--launcher", "slurm")
		return nil
	}
	return fmt.Errorf("%s: gorun starts the ranks of other hosts over SSH (pdsh, openmpi, mpich, mvapich, impi) or through srun (slurm)", typed)
}

// deepspeed writes out DeepSpeed's program: under Python with -u and
// --local_rank=LOCAL_RANK, as launch.py runs it; each rank's own local
// rank comes from its environment, through sh.
func (p *parser) deepspeed(rest []string) error {
	s := &p.ds
	if s.noPython && s.module {
		return errors.New("--no_python and --module: give one")
	}
	if s.numNodes != "" {
		if err := p.numNodes(); err != nil {
			return err
		}
	}
	if len(rest) == 0 {
		return nil // gorun says what is missing
	}
	if err := nested(rest); err != nil {
		return err
	}
	var prog []string
	if !s.noPython {
		python := p.o.Python
		if python == "" {
			python = "python3"
		}
		prog = append(prog, python, "-u")
		if s.module {
			prog = append(prog, "-m")
		}
	}
	prog = append(prog, rest[0])
	if s.noLocalRank {
		p.emit(append(prog, rest[1:]...)...)
		return nil
	}
	// Each rank's own --local_rank, after the script and before its
	// arguments, from its environment: sh -c DSWrapper sh K PROG... ARGS...
	p.emit("sh", "-c", DSWrapper, "sh", strconv.Itoa(len(prog)))
	p.emit(prog...)
	p.emit(rest[1:]...)
	return nil
}

// DSWrapper is the POSIX sh script through which gorun deepspeed runs a
// rank: called with K and the command line, it runs the command line with
// --local_rank=$LOCAL_RANK inserted after its first K words (the
// interpreter, its flags and the script), as DeepSpeed's launch.py passes
// it.
const DSWrapper = `k=$1; shift; n=$#; i=0; for a; do i=$((i+1)); set -- "$@" "$a"; ` +
	`[ "$i" -eq "$k" ] && set -- "$@" "--local_rank=$LOCAL_RANK"; done; shift "$n"; exec "$@"`
