package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/config"
	"github.com/gorun/gorun/rendezvous"
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
	{name: "host", aliases: []string{"H"}, kind: config.StringList, arg: "HOSTS", usage: "hosts as host[:slots],...; repeat or comma-separate"},
	{name: "hostfile", aliases: []string{"machinefile"}, kind: config.String, arg: "FILE", usage: "read hosts from `FILE` (Open MPI or MPICH syntax, see gorun-hostfile(5))"},
	{name: "include", kind: config.String, arg: "FILTER", usage: "DeepSpeed-style `FILTER` of hosts and GPU slots to use, e.g. w0@w1:0,2"},
	{name: "exclude", kind: config.String, arg: "FILTER", usage: "DeepSpeed-style `FILTER` of hosts and GPU slots to leave out"},
	{name: "nolocal", kind: config.Bool, def: "false", usage: "run no rank on this machine: leave the hosts that are this one out of the host list (as mpirun -nolocal)"},
	{name: "oversubscribe", kind: config.Bool, def: "false", usage: "allow more ranks than slots on a host"},
	{name: "map-by", kind: config.String, def: "slot", arg: "POLICY", usage: "place ranks by `POLICY`: slot (fill each host), node (round-robin), seq (a rank on each hostfile line), ppr:N:node; numa or package spread each host's bound ranks over its NUMA nodes or packages"},
	{name: "npernode", aliases: []string{"N"}, kind: config.Int, def: "0", arg: "N", usage: "run `N` ranks on every host (same as --map-by ppr:N:node)"},
	{name: "bind-to", kind: config.String, arg: "WHAT", usage: "bind each rank to a `WHAT`: gpu (local rank i next to GPU i: the cores and memory of its NUMA node), core, numa, package or none (default: gpu where there are GPUs, else none; oversubscribed jobs are not bound unless asked)"},
	{name: "gpu-bind", kind: config.String, def: "all", arg: "HOW", usage: "which GPUs each rank sees: all (every GPU the job may use; local rank i uses device i, as torchrun and mpirun leave it) or single (only its own GPU, as device 0)"},
	{name: "cpus-per-rank", kind: config.Int, def: "0", arg: "N", usage: "give each bound rank `N` whole cores (default: divide evenly)"},
	{name: "report-bindings", kind: config.Bool, def: "false", usage: "print each rank's GPU, CPUs, NUMA node, NIC and why, as it starts"},
	{name: "display-map", kind: config.Bool, def: "false", usage: "print where every rank will run, then run the job"},
	{name: "display-allocation", kind: config.Bool, def: "false", usage: "print the hosts the job may use and their slots, then run the job"},
	{name: "rankfile", kind: config.String, arg: "FILE", usage: "place each rank on the host and cores `FILE` names, one line a rank: rank N=HOST slot=[PACKAGE:]CORES (Open MPI's rankfile; without -H or --hostfile its hosts are the job's)"},
	{name: "dry-run", kind: config.Bool, def: "false", usage: "print the map and stop"},
	{name: "x", kind: config.StringList, arg: "NAME[=VALUE]", usage: "export `NAME[=VALUE]` to every rank (NAME alone takes gorun's value)"},
	{name: "print-env", kind: config.Int, def: "-1", arg: "RANK", usage: "print the environment rank `RANK` would get, and stop"},
	{name: "tag-output", kind: config.Bool, def: "false", usage: "prefix every output line with [rank] (or [host:rank])"},
	{name: "timestamp-output", kind: config.Bool, def: "false", usage: "prefix every output line with the time its bytes were read from the rank"},
	{name: "merge-output", kind: config.Bool, def: "false", usage: "print a line that several ranks print alike within --merge-window once, as [ranks] line (e.g. [0-7] epoch 1 loss 0.31)"},
	{name: "merge-window", kind: config.Duration, def: "200ms", arg: "DURATION", usage: "with --merge-output, how long a line waits for the other ranks' identical lines (it goes as soon as every running rank printed it)"},
	{name: "output-filename", kind: config.String, arg: "DIR", usage: "write each rank's output to `DIR`/rank.N/{stdout,stderr} instead"},
	{name: "outfile-pattern", kind: config.String, arg: "PATTERN", usage: "write each rank's stdout to the file `PATTERN` names on its host, instead of gorun's (Hydra's: %r rank, %h host, %p node, %g 0)"},
	{name: "errfile-pattern", kind: config.String, arg: "PATTERN", usage: "write each rank's stderr to the file `PATTERN` names on its host, instead of gorun's (as --outfile-pattern)"},
	{name: "log-dir", kind: config.String, arg: "DIR", usage: "torchrun's logs: each local rank's --redirects and --tee streams go to `DIR`/RUN_XXXXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log on its host"},
	{name: "redirects", kind: config.String, arg: "STD", usage: "torchrun's: the streams of each local rank that go to --log-dir's files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:1,1:2"},
	{name: "tee", kind: config.String, arg: "STD", usage: "torchrun's: the streams that go to --log-dir's files and to gorun's output too (as --redirects)"},
	{name: "local-ranks-filter", kind: config.String, arg: "RANKS", usage: "torchrun's: print only the output of these local ranks, e.g. 0,1 (--log-dir's files get all of it)"},
	{name: "print-exit-codes", kind: config.Bool, def: "false", usage: "when the job ends, print every rank's exit status, host by host (Hydra's -print-all-exitcodes)"},
	{name: "stdin", kind: config.String, def: "0", arg: "RANK", usage: "send gorun's stdin to `RANK` (default: 0), or none"},
	{name: "wdir", kind: config.String, arg: "DIR", usage: "start the ranks in `DIR` on every host (a relative DIR is taken from gorun's working directory; default: gorun's working directory)"},
	{name: "grace-period", kind: config.Duration, def: "3s", arg: "DURATION", usage: "time between SIGTERM and SIGKILL when the job is stopped"},
	{name: "timeout", kind: config.Duration, def: "0s", arg: "SECONDS", usage: "stop the job after `SECONDS` (or a duration such as 10m); 0 = never"},
	{name: "max-restarts", kind: config.Int, def: "0", arg: "N", usage: "restart the whole job up to `N` times after a failure"},
	{name: "nnodes", kind: config.String, arg: "N|MIN:MAX", usage: "per-node launch: this gorun is one of `N` started alike, one per node, that meet at --rdzv-endpoint and run one job (MIN:MAX: elastic; see PER-NODE LAUNCH in gorun(1))"},
	{name: "nproc-per-node", kind: config.Int, def: "0", arg: "P", usage: "run `P` ranks on this node (per-node launch; without --rdzv-endpoint the same as -N)"},
	{name: "rdzv-endpoint", kind: config.String, arg: "HOST:PORT", usage: "where the nodes of a per-node launch meet: the gorun on the node whose address HOST is serves it"},
	{name: "rdzv-id", kind: config.String, arg: "ID", usage: "the job's name at the endpoint; a node that gives another is refused"},
	{name: "rdzv-token-file", kind: config.String, arg: "FILE", usage: "read the secret token that the nodes of a per-node launch share from `FILE` (else $GORUN_RDZV_TOKEN; 128 bits at least: openssl rand -hex 32); a node without it is refused"},
	{name: "rdzv-last-call", kind: config.Duration, def: "2s", arg: "DURATION", usage: "elastic launch: once MIN nodes have joined, wait `DURATION` more for others before the job starts"},
	{name: "rdzv-timeout", kind: config.Duration, def: "10m", arg: "DURATION", usage: "give up if the nodes of a per-node launch have not met within `DURATION`"},
	{name: "summary-json", kind: config.String, arg: "FILE", usage: "write a JSON record of every rank and the first failure to `FILE`"},
	{name: "record", kind: config.String, arg: "DIR", usage: "keep a record of the job in `DIR`: the plan, each host's versions and environment, the bindings, the phases' times, how each rank ended (print it with gorun show DIR)"},
	{name: "hang-timeout", kind: config.Duration, def: "0s", arg: "DURATION", usage: "a job in which no rank made progress for `DURATION` (no output, rendezvous or collective call, and no CPU time or the same stacks twice) is hung: print where every rank is, and stop it (exit status 123); 0 = never"},
	{name: "on-hang", kind: config.String, def: "stop", arg: "WHAT", usage: "what --hang-timeout does to a hung job: stop, or report (print the verdict and let it run)"},
	{name: "trace", kind: config.Bool, def: "false", usage: "when the job ends, print where its time went: config and plan, agents started and up, ranks started, first output, first fence, all exited, agents gone (ms from gorun's start)"},
	{name: "jobs-dir", kind: config.String, arg: "DIR", usage: "publish the job in `DIR` for gorun ps, status and stacks (default ~/.gorun/jobs; off = not at all)"},
	{name: "ssh-config", kind: config.String, arg: "FILE", usage: "read ssh client settings from `FILE` (default ~/.ssh/config)"},
	{name: "ssh-port", kind: config.Int, def: "0", arg: "PORT", usage: "connect to sshd on `PORT` (a host's port= in the host list wins; this wins over the ssh config, as ssh -p)"},
	{name: "identity", aliases: []string{"i"}, kind: config.StringList, arg: "FILE", usage: "try the private key in `FILE` first (repeatable)"},
	{name: "ssh-accept-new", kind: config.Bool, def: "false", usage: "record the keys of hosts not yet in known_hosts (a changed key is always refused)"},
	{name: "ssh-parallel", kind: config.Int, def: "64", arg: "N", usage: "at most `N` SSH handshakes in flight (sshd's MaxStartups throttles bursts)"},
	{name: "connect-timeout", kind: config.Duration, def: "0s", arg: "DURATION", usage: "give up on a host that does not answer within `DURATION` (default: the ssh config's ConnectTimeout, else 10s)"},
	{name: "no-stage", kind: config.Bool, def: "false", usage: "do not copy gorun to hosts where it is not at the same path"},
	{name: "iface", kind: config.String, arg: "NAME", usage: "MASTER_ADDR is rank 0's address on interface `NAME`, Go collectives' TCP uses it, and in Slurm the head listens there for its agents (default: by route to the other hosts)"},
	{name: "launch-fanout", kind: config.String, def: "auto", arg: "K", usage: "start agents as a tree: gorun connects to `K` hosts, each agent to K more (0 = every host from gorun; auto = a tree of 32 above 64 hosts)"},
	{name: "rendezvous-timeout", kind: config.Duration, def: "5m", arg: "DURATION", usage: "fail a PMI barrier that not every host reaches within `DURATION`, naming the ranks that never arrived"},
	{name: "kv-rank-budget", kind: config.String, def: rendezvous.DefaultRankBudget.String(), arg: "KEYS,BYTES", usage: "a rank may put at most `KEYS,BYTES` keys and bytes (K, M, G: KiB, MiB, GiB) into the rendezvous store (PMI, Go ranks' KV) per job start; a put over it fails, naming the budget"},
	{name: "kv-job-budget", kind: config.String, def: rendezvous.DefaultJobBudget.String(), arg: "KEYS,BYTES", usage: "the rendezvous store holds at most `KEYS,BYTES` keys and bytes for the whole job per job start"},
	{name: "launcher", kind: config.String, def: "auto", arg: "HOW", usage: "how agents reach the hosts: auto (inside a batch job, its own launcher: srun in Slurm, qrsh -inherit in Grid Engine, blaunch in LSF, pbs_tmrsh in PBS, flux exec in Flux; else SSH), local, ssh, or a batch system or its launcher by name: slurm or srun, sge or qrsh, lsf or blaunch, pbs or pbs_tmrsh, flux"},
	{name: "pmix", kind: config.String, def: "auto", arg: "WHEN", usage: "serve PMIx to the ranks (Open MPI, mpi4py) through the gorun-pmix plugin: auto (when the program links Open MPI or imports mpi4py), on or off"},
	{name: "plugin", kind: config.String, arg: "NAME", usage: "Go ranks' collectives load the transport or collective plugin `NAME` (gorun-plugin-NAME in the plugin directories, or a path): its transport carries the traffic between hosts; see gorun-plugin(7)"},
	{name: "device", kind: config.String, arg: "NAME", usage: "Go ranks' device buffers (Communicator.AllocDevice) come from the device plugin `NAME` (cuda: each rank's GPU), beside any --plugin; gorun bench runs on them; see gorun-plugin(7)"},
	{name: "plugin-dir", kind: config.StringList, arg: "DIR", usage: "look for plugins in `DIR` first (repeatable; then GORUN_PLUGIN_PATH, ~/.local/lib/gorun/plugins, /usr/local/lib/gorun/plugins, /usr/lib/gorun/plugins)"},
	{name: "plugin-opt", kind: config.StringList, arg: "KEY=VALUE", usage: "pass the option `KEY=VALUE` to the plugin (repeatable)"},
	{name: "fabric-provider", kind: config.String, arg: "PROVIDER", usage: "the fabric plugin's libfabric `PROVIDER` (verbs;ofi_rxm, efa, tcp;ofi_rxm, shm; default: by topology); same as --plugin-opt provider=PROVIDER"},
	{name: "plugin-check", kind: config.Bool, def: "false", usage: "before starting any rank, run gorun plugins test --quick against --plugin on this host; a plugin that fails it stops the job (exit status 125)"},
	{name: "transport-fallback", kind: config.String, arg: "TRANSPORT", usage: "a rank whose plugin cannot start goes on over `TRANSPORT` (tcp) instead of failing"},
	{name: "heartbeat-timeout", kind: config.Duration, def: "5s", arg: "DURATION", usage: "a remote host silent this long is lost (a cut link leaves no EOF)"},
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
			f := &cli.BoolFlag{Name: s.name, Aliases: s.aliases, Usage: s.usage, Hidden: s.hidden}
			out = append(out, &boolFlag{f, f.Names()})
		case config.StringList:
			// One flag per spelling, sharing one list: urfave/cli would
			// copy an alias's values to the main name through String
			// and Set, splitting them again.
			l := lists[s.name] // shared by the main command's and bench's flags
			if l == nil {
				l = &listValue{}
				lists[s.name] = l
			}
			for i, n := range append([]string{s.name}, s.aliases...) {
				f := &cli.GenericFlag{Name: n, Usage: s.usage, Hidden: s.hidden || i > 0, Value: l}
				out = append(out, &genericFlag{f, f.Names()})
			}
		default:
			f := &cli.StringFlag{Name: s.name, Aliases: s.aliases, Usage: s.usage, Hidden: s.hidden, DefaultText: s.def}
			out = append(out, &stringFlag{f, f.Names()})
		}
	}
	return out
}

// The main command's flags, with their names worked out once: urfave/cli
// works out a flag's names on every call of Names (through a regular
// expression), and calls it for every flag for each flag it looks up
// (Context.IsSet, which its flag actions and setOnCommandLine call for
// every flag), so that with gorun's hundred flags it cost 3 ms of every
// gorun's start. Each embeds urfave/cli's flag, and so does what it does.
type (
	boolFlag struct {
		*cli.BoolFlag
		names []string
	}
	stringFlag struct {
		*cli.StringFlag
		names []string
	}
	genericFlag struct {
		*cli.GenericFlag
		names []string
	}
)

// Names returns the flag's names, the main one first.
func (f *boolFlag) Names() []string { return f.names }

// Names returns the flag's names, the main one first.
func (f *stringFlag) Names() []string { return f.names }

// Names returns the flag's names, the main one first.
func (f *genericFlag) Names() []string { return f.names }

// setOnCommandLine returns the settings the user gave as flags.
func setOnCommandLine(c *cli.Context) map[string][]string {
	out := map[string][]string{}
	for _, s := range settings {
		if s.kind == config.StringList {
			if l := lists[s.name]; l != nil && len(l.values) > 0 {
				out[s.name] = l.values
			}
			continue
		}
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
		default:
			out[s.name] = []string{c.String(s.name)}
		}
	}
	return out
}

// dashed writes a flag name as it is typed: one dash for one letter (-n,
// -H, -x), two for the others (Go's flags also take -np).
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// names returns the setting's spellings, the main name first.
func (s setting) names() []string {
	out := []string{dashed(s.name)}
	for _, a := range s.aliases {
		out = append(out, dashed(a))
	}
	return out
}

// optionsHelp renders the flags for --help, from the settings.
func optionsHelp() string {
	var b strings.Builder
	b.WriteString("OPTIONS:\n")
	for _, s := range settings {
		if s.hidden {
			continue
		}
		left := strings.Join(s.names(), ", ")
		if s.arg != "" {
			left += " " + s.arg
		}
		usage := strings.ReplaceAll(s.usage, "`", "")
		if s.kind != config.Bool && s.def != "" && s.def != "0" && s.def != "-1" && s.def != "0s" {
			usage += " (default: " + s.def + ")"
		}
		fmt.Fprintf(&b, "   %-32s %s\n", left, usage)
	}
	fmt.Fprintf(&b, "   %-32s %s\n", "-h, --help", "show this help")
	fmt.Fprintf(&b, "   %-32s %s\n", "--version", "print gorun's version")
	return b.String()
}

// lists holds the values of the list flags, by setting name.
var lists = map[string]*listValue{}

// listValue is a repeatable flag whose values are kept whole: urfave/cli's
// slice flags split at commas, and -x CUDA_VISIBLE_DEVICES=0,1 is one
// export.
type listValue struct{ values []string }

func (l *listValue) Set(v string) error { l.values = append(l.values, v); return nil }
func (l *listValue) String() string     { return strings.Join(l.values, " ") }
