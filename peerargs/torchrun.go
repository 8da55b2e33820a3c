package peerargs

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// torchrun takes its options with two dashes, spelled with '-' or '_'
// (--nproc-per-node, --nproc_per_node), and --name=value; the program (the
// training script) is the first argument that is not an option.

// torchState is what torchrun's options said, written out once they are
// all read.
type torchState struct {
	nproc, nnodes           string
	endpoint, id            string
	masterAddr, masterPort  string
	standalone              bool
	noPython, module        bool
	runPath, useEnv         bool
	joinTimeout, lastCall   string // gorun durations
	ignoredConf, nodeRankAt []string
	logs                    []string // --log-dir, --redirects, --tee, --local-ranks-filter: gorun's, as given
}

// Defaults of torchrun's.
const (
	torchMasterPort = "29500" // --master-port
	torchRdzvPort   = "29400" // the port of an --rdzv-endpoint given without one
)

// set returns the action of a torchrun option that sets a field.
func set(field func(*torchState) *string) func(*parser, string, []string) error {
	return func(p *parser, _ string, v []string) error {
		*field(&p.torch) = v[0]
		return nil
	}
}

// on returns the action of a torchrun switch.
func on(field func(*torchState) *bool) func(*parser, string, []string) error {
	return func(p *parser, _ string, _ []string) error {
		*field(&p.torch) = true
		return nil
	}
}

// logFlag returns the action of torchrun's output flags, which gorun has
// too (torchrun's files, per local rank, as torchrun writes them).
func logFlag(gorunFlag string) func(*parser, string, []string) error {
	return func(p *parser, _ string, v []string) error {
		p.torch.logs = append(p.torch.logs, gorunFlag, v[0])
		return nil
	}
}

// torchrunFlags are the flags of torchrun, 1.13's and 2.x's
// (torch/distributed/run.py), and torch.distributed.launch's --use-env.
var torchrunFlags = []option{
	{names: []string{"nproc-per-node"}, nargs: 1, do: set(func(s *torchState) *string { return &s.nproc })},
	{names: []string{"nnodes"}, nargs: 1, do: set(func(s *torchState) *string { return &s.nnodes })},
	{names: []string{"rdzv-endpoint"}, nargs: 1, do: set(func(s *torchState) *string { return &s.endpoint })},
	{names: []string{"rdzv-id"}, nargs: 1, do: set(func(s *torchState) *string { return &s.id })},
	{names: []string{"rdzv-backend"}, nargs: 1, do: rdzvBackend},
	{names: []string{"rdzv-conf"}, nargs: 1, do: rdzvConf},
	{names: []string{"standalone"}, do: on(func(s *torchState) *bool { return &s.standalone })},
	{names: []string{"master-addr"}, nargs: 1, do: set(func(s *torchState) *string { return &s.masterAddr })},
	{names: []string{"master-port"}, nargs: 1, do: set(func(s *torchState) *string { return &s.masterPort })},
	{names: []string{"node-rank"}, nargs: 1, do: func(p *parser, typed string, _ []string) error {
		p.torch.nodeRankAt = append(p.torch.nodeRankAt, typed)
		return nil
	}},
	{names: []string{"max-restarts"}, nargs: 1, do: as("--max-restarts")},
	{names: []string{"monitor-interval"}, nargs: 1, do: noted("ignored: gorun hears of a rank's exit at once")},
	{names: []string{"start-method"}, nargs: 1, do: noted("ignored: every rank is a process of its own, started by exec")},
	{names: []string{"role"}, nargs: 1, do: func(p *parser, _ string, v []string) error {
		p.emit("-x", "ROLE_NAME="+v[0])
		return nil
	}},
	{names: []string{"log-dir"}, nargs: 1, do: logFlag("--log-dir")},
	{names: []string{"r", "redirects"}, nargs: 1, do: logFlag("--redirects")},
	{names: []string{"t", "tee"}, nargs: 1, do: logFlag("--tee")},
	{names: []string{"local-ranks-filter"}, nargs: 1, do: logFlag("--local-ranks-filter")},
	{names: []string{"no-python"}, do: on(func(s *torchState) *bool { return &s.noPython })},
	{names: []string{"m", "module"}, do: on(func(s *torchState) *bool { return &s.module })},
	{names: []string{"run-path"}, do: on(func(s *torchState) *bool { return &s.runPath })},
	{names: []string{"use-env"}, do: on(func(s *torchState) *bool { return &s.useEnv })}, // every rank finds LOCAL_RANK in its environment
	{names: []string{"local-addr"}, nargs: 1, do: noted("ignored: gorun finds the address the other nodes reach this one at (--iface NAME chooses)")},
	{names: []string{"logs-specs"}, nargs: 1, do: refused("gorun writes torchrun's default logs: --log-dir DIR with --redirects and --tee")},
	{names: []string{"numa-binding"}, nargs: 1, do: numaBinding},
	{names: []string{"signals-to-handle"}, nargs: 1, do: noted("ignored: gorun passes SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 on to every rank")},
	{names: []string{"event-log-handler"}, nargs: 1, do: noted(noteIgnored)},
	{names: []string{"h", "help"}, do: as("--help")},
}

// numaBinding takes torchrun's --numa-binding: node and exclusive are
// gorun's --bind-to gpu (local rank i on the cores and memory of GPU i's
// NUMA node, each rank its own share).
func numaBinding(p *parser, typed string, v []string) error {
	switch v[0] {
	case "node", "exclusive":
		p.emit("--bind-to", "gpu")
		return nil
	}
	return fmt.Errorf("%s: gorun binds local rank i to the cores and memory of GPU i's NUMA node: --bind-to gpu (torchrun's node)", typed)
}

// torchAbbrev takes an abbreviation of one of torchrun's long flags, as
// argparse does (--nproc 2, --nproc_per=2: a prefix of exactly one flag's
// names), or a one-letter flag with its value attached (-r3). ok is false
// when a is none.
func (p *parser) torchAbbrev(a string) (f option, typedName, value string, hasValue, ok bool, err error) {
	typedName, value, hasValue = strings.Cut(a, "=")
	if !strings.HasPrefix(a, "--") {
		if len(a) > 2 && a[1] != '-' {
			if f, found := lookup(p.table, a[1:2]); found && f.nargs == 1 {
				return f, a[:2], a[2:], true, true, nil
			}
		}
		return option{}, typedName, value, hasValue, false, nil
	}
	prefix := p.spelling(strings.TrimPrefix(typedName, "--"))
	var matches []option
	var spelled []string
	for _, f := range p.table {
		hit := false
		for _, n := range f.names {
			if len(n) > 1 && strings.HasPrefix(n, prefix) {
				hit = true
			}
		}
		if hit {
			matches = append(matches, f)
			spelled = append(spelled, "--"+f.names[0])
		}
	}
	switch len(matches) {
	case 0:
		return option{}, typedName, value, hasValue, false, nil
	case 1:
		return matches[0], typedName, value, hasValue, true, nil
	}
	return option{}, typedName, value, hasValue, false, fmt.Errorf("ambiguous option: %s could match %s", typedName, strings.Join(spelled, ", "))
}

// rdzvBackend takes --rdzv-backend: gorun serves the rendezvous itself, in
// the place of c10d's store (and of static's rank-0 store).
func rdzvBackend(_ *parser, typed string, v []string) error {
	switch v[0] {
	case "c10d", "static":
		return nil
	}
	return fmt.Errorf("%s: the nodes meet at the gorun that serves --rdzv-endpoint: use c10d (or drop it)", typed)
}

// rdzvConf takes --rdzv-conf key=value,...: its timeouts become gorun's.
func rdzvConf(p *parser, typed string, v []string) error {
	for _, kv := range strings.Split(v[0], ",") {
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%s: %q is not key=value", typed, kv)
		}
		switch k {
		case "join_timeout", "last_call_timeout":
			secs, err := strconv.ParseFloat(val, 64)
			if err != nil || secs < 0 {
				return fmt.Errorf("%s: %s: want seconds", typed, kv)
			}
			d := time.Duration(secs * float64(time.Second)).String()
			if k == "join_timeout" {
				p.torch.joinTimeout = d
			} else {
				p.torch.lastCall = d
			}
		default:
			p.torch.ignoredConf = append(p.torch.ignoredConf, kv)
		}
	}
	return nil
}

// nodeCount reads --nnodes N or MIN:MAX and returns MAX.
func nodeCount(s string) (int, error) {
	lo, hi, elastic := strings.Cut(s, ":")
	if !elastic {
		hi = lo
	}
	least, err1 := strconv.Atoi(lo)
	most, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || least < 1 || most < least {
		return 0, fmt.Errorf("--nnodes %s: want N or MIN:MAX, node counts from 1", s)
	}
	return most, nil
}

// torchrun writes out what torchrun's options said, then the program:
// under the Python interpreter, as torchrun runs it.
func (p *parser) torchrun(rest []string) error {
	s := &p.torch
	nnodes := s.nnodes
	if nnodes == "" {
		nnodes = "1"
	}
	maxNodes, err := nodeCount(nnodes)
	if err != nil {
		return err
	}
	if s.standalone && maxNodes > 1 {
		return fmt.Errorf("--standalone with --nnodes %s: a standalone job runs on one node", nnodes)
	}
	nproc := s.nproc
	switch {
	case nproc == "" && (p.given["np"] || p.given["n"]):
		// gorun's -np, given in the personality, says how many.
	case nproc == "":
		nproc = "1" // torchrun's default
	case nproc == "auto":
		nproc = "" // gorun's default: one rank per GPU, else one per core, as torchrun's auto
	case nproc == "gpu" || nproc == "cpu" || nproc == "xpu":
		return fmt.Errorf("--nproc-per-node %s: give the number of ranks per node, or auto (one per GPU, else one per core)", nproc)
	default:
		if n, err := strconv.Atoi(nproc); err != nil || n < 1 {
			return fmt.Errorf("--nproc-per-node %s: want a number of ranks from 1, or auto", nproc)
		}
	}
	p.emit(s.logs...)
	if maxNodes == 1 {
		// One node: a local job; its rendezvous needs no endpoint, and
		// gorun picks MASTER_ADDR and MASTER_PORT.
		if nproc != "" {
			p.emit("-np", nproc)
		}
		if s.id != "" && !s.standalone {
			p.emit("--rdzv-id", s.id) // TORCHELASTIC_RUN_ID, as torchrun's
		}
	} else {
		if nproc == "" {
			return fmt.Errorf("--nnodes %s: give --nproc-per-node, the number of ranks on each node (not auto)", nnodes)
		}
		endpoint, err := s.rendezvousEndpoint()
		if err != nil {
			return fmt.Errorf("--nnodes %s: %w", nnodes, err)
		}
		p.emit("--nnodes", nnodes, "--nproc-per-node", nproc, "--rdzv-endpoint", endpoint)
		if s.id != "" {
			p.emit("--rdzv-id", s.id)
		}
		if s.joinTimeout != "" {
			p.emit("--rdzv-timeout", s.joinTimeout)
		}
		if s.lastCall != "" {
			p.emit("--rdzv-last-call", s.lastCall)
		}
		for _, kv := range s.ignoredConf {
			p.note("--rdzv-conf %s: ignored (gorun's rendezvous takes join_timeout and last_call_timeout)", kv)
		}
		for _, typed := range s.nodeRankAt {
			p.note("%s: ignored: the endpoint gives each node its rank", typed)
		}
	}
	return p.torchProgram(rest)
}

// rendezvousEndpoint returns where the nodes meet: --rdzv-endpoint, else
// (torchrun's static rendezvous) --master-addr and --master-port.
func (s *torchState) rendezvousEndpoint() (string, error) {
	if s.endpoint != "" {
		if _, _, err := net.SplitHostPort(s.endpoint); err != nil {
			return net.JoinHostPort(strings.Trim(s.endpoint, "[]"), torchRdzvPort), nil
		}
		return s.endpoint, nil
	}
	if s.masterAddr == "" {
		return "", errors.New("give the node that serves the rendezvous: --rdzv-endpoint HOST:PORT (or --master-addr HOST)")
	}
	port := s.masterPort
	if port == "" {
		port = torchMasterPort
	}
	return net.JoinHostPort(s.masterAddr, port), nil
}

// torchProgram writes the program as torchrun runs it: a script or a
// module (-m) under Python with -u, or the program itself (--no-python).
func (p *parser) torchProgram(rest []string) error {
	s := &p.torch
	switch {
	case s.noPython && s.module:
		return errors.New("--no-python and --module (-m): give one")
	case s.noPython && s.runPath:
		return errors.New("--no-python and --run-path: give one")
	}
	if len(rest) == 0 {
		return nil // gorun says what is missing (or --dry-run needs none)
	}
	if err := nested(rest); err != nil {
		return err
	}
	if s.noPython {
		p.emit(rest...)
		return nil
	}
	python := p.o.Python
	if python == "" {
		python = "python3"
	}
	prog := []string{python, "-u"}
	if s.module {
		prog = append(prog, "-m")
	}
	if p.o.Module == "torch.distributed.launch" && !s.useEnv {
		// launch.py's contract: --local_rank=N after the script, from
		// each rank's environment (DeepSpeed's wrapper).
		prog = append(prog, rest[0])
		p.emit("sh", "-c", DSWrapper, "sh", strconv.Itoa(len(prog)))
		p.emit(prog...)
		p.emit(rest[1:]...)
		return nil
	}
	p.emit(prog...)
	p.emit(rest...)
	return nil
}
