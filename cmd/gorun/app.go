package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun/gorun/config"
	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/filetrust"
	"github.com/gorun/gorun/launcher"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// version is gorun's version as a packager sets it, with -ldflags "-X
// main.version=..."; gorunVersion reads what Go stamped where it is unset.
var version string

// gorunVersion returns gorun's version: version where set, else the main
// module's version that Go stamped from version control when it built
// gorun (a tag, or a pseudo-version that names the commit, with "+dirty"
// for uncommitted changes), else 0.1.0-dev.
func gorunVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "0.1.0-dev"
}

const examples = `
EXAMPLES:
   gorun -np 4 hostname                       4 ranks on this machine
   gorun -n 8 python3 train.py --lr 1e-3      arguments after the program are the program's
   gorun -H localhost:4 --tag-output ./prog   prefix every line with [rank]
   gorun --hostfile hosts -np 16 ./prog       hosts from a file (see gorun-hostfile(5))
   gorun --dry-run -np 8 -H a:4,b:4 ./prog    print the map and stop
   gorun --print-env 3 -np 4 ./prog           show exactly what rank 3 gets

EXIT STATUS:
   0        every rank exited 0
   N        the first rank to fail exited with N (its summary names it)
   128+N    the first rank to fail was killed by signal N, or gorun got signal N
   2        usage, configuration, host list or plan error: nothing started
   123      no rank made progress for --hang-timeout
   124      --timeout expired
   125      gorun itself failed while the job ran (an agent was lost, or a
            rank's --output-filename file could not be written)
   126      the program is not executable;  127  the program was not found

Long flags also work with one dash, as mpirun users type them: -np 4.
Every flag can also be set as GORUN_<FLAG> (e.g. GORUN_GRACE_PERIOD=10s) or as
a key in /etc/gorun/config.toml, ~/.config/gorun/config.toml or ./gorun.toml;
flags win over the environment, which wins over the files. "gorun config"
shows the merged result.`

// helpTemplate is --help: the flags come from the settings table, so that
// each shows its value's name and meaningful default once. They are
// rendered when help is shown (helpExtra), not as gorun starts: every
// gorun process, agents too, would otherwise pay for it (0.2 ms, 500
// allocations).
const helpTemplate = `NAME:
   {{.Name}} - {{.Usage}}

USAGE:
   gorun [flags] PROGRAM [ARGS...]
   gorun [flags] COMMAND
   gorun mpirun|mpiexec|torchrun|horovodrun|deepspeed [ITS FLAGS] PROGRAM [ARGS...]   (see PERSONALITIES in gorun(1))

COMMANDS:{{range .VisibleCommands}}
   {{join .Names ", "}}{{"\t"}}{{.Usage}}{{end}}

{{index ExtraInfo "options"}}` + examples + "\n"

// helpExtra is what helpTemplate reads through ExtraInfo.
func helpExtra() map[string]string { return map[string]string{"options": optionsHelp()} }

// errExit carries an exit code out of urfave/cli.
type errExit struct {
	code int
	err  error
}

func (e errExit) Error() string { return e.err.Error() }

func newApp(stdout, stderr io.Writer) *cli.App {
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print gorun's version"}
	lists = map[string]*listValue{}
	app := &cli.App{
		Name:                  "gorun",
		Usage:                 "launch and supervise the ranks of a parallel job",
		UsageText:             "gorun [flags] PROGRAM [ARGS...]\n   gorun COMMAND [flags]",
		Version:               gorunVersion(),
		Flags:                 cliFlags(),
		HideHelpCommand:       true,
		Writer:                stdout,
		ErrWriter:             stderr,
		CustomAppHelpTemplate: helpTemplate,
		ExtraInfo:             helpExtra,
		// A flag urfave/cli cannot parse (a value missing or of the wrong
		// type): one line, no help (rewriteArgs has refused unknown flags).
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return errExit{code: launcher.ExitUsage, err: err}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 && !c.Bool("dry-run") {
				cli.ShowAppHelp(c)
				return errExit{code: launcher.ExitUsage, err: errors.New("no program to run")}
			}
			return runJob(c, stdout, stderr)
		},
		Commands: []*cli.Command{
			agentCommand(),
			{
				Name:      "check",
				Usage:     "preflight: reach every host, report latency, gorun version, CPUs, GPUs, the program's path and which hosts reach each other; with --net, measure the links between them",
				ArgsUsage: "[PROGRAM]",
				Flags:     checkFlags(),
				Action: func(c *cli.Context) error {
					if c.Bool("net") {
						return runCheckNet(c, stdout, stderr)
					}
					return runCheck(c, stdout)
				},
			},
			showCommand(stdout),
			topoCommand(stdout),
			psCommand(stdout),
			statusCommand(stdout),
			stacksCommand(stdout),
			benchCommand(stdout, stderr),
			pluginsCommand(),
			{
				Name:  "config",
				Usage: "print the merged configuration and where each value came from",
				Action: func(c *cli.Context) error {
					cfg, err := loadConfig(c)
					if err != nil {
						return err
					}
					return cfg.Format(stdout)
				},
			},
			{
				Name:      "completion",
				Usage:     "print a shell completion script (bash or zsh)",
				ArgsUsage: "bash|zsh",
				Action: func(c *cli.Context) error {
					return completion(stdout, c.Args().First())
				},
			},
		},
	}
	return app
}

// run runs gorun with args and returns its exit code.
func run(args []string, early *launcher.EarlyAgent) (int, error) {
	args, notes, tool, err := personality(args)
	if err != nil {
		// One line that names the launcher: gorun mpirun: unknown flag -foo.
		fmt.Fprintf(os.Stderr, "gorun %v\n", err)
		return launcher.ExitUsage, nil
	}
	for _, n := range notes {
		fmt.Fprintf(os.Stderr, "gorun %s: note: %s\n", tool, n)
	}
	args, notes, err = rewriteArgs(args)
	if err != nil {
		return launcher.ExitUsage, err
	}
	for _, n := range notes {
		fmt.Fprintf(os.Stderr, "gorun: note: %s\n", n)
	}
	app := newApp(os.Stdout, os.Stderr)
	app.Metadata = map[string]any{personalityKey: env.Launcher(tool), earlyAgentKey: early}
	err = app.Run(benchArgs(args))
	var ee errExit
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		if ee.err == nil || ee.err.Error() == "" {
			return ee.code, nil
		}
		return ee.code, ee.err
	default:
		// urfave/cli's own errors: bad flags.
		return launcher.ExitUsage, err
	}
}

// personalityKey is where run leaves, in the app's Metadata, the
// personality whose command line gorun took (an env.Launcher).
const personalityKey = "personality"

// personalityOf is the personality whose command line c's gorun took; ""
// for plain gorun.
func personalityOf(c *cli.Context) env.Launcher {
	l, _ := c.App.Metadata[personalityKey].(env.Launcher)
	return l
}

// loadConfig merges files, environment and the command line. c may be a
// subcommand's context: flag look-ups walk up to the main command's flags.
// A configuration file that another user could have written is refused
// (checkConfigFiles) before any is read.
func loadConfig(c *cli.Context) (*config.Config, error) {
	files := config.DefaultFiles()
	if err := checkConfigFiles(files); err != nil {
		return nil, errExit{code: launcher.ExitUsage, err: err}
	}
	cfg, err := config.Load(schema(), files, os.Environ(), setOnCommandLine(c))
	if err != nil {
		return nil, errExit{code: launcher.ExitUsage, err: err}
	}
	return cfg, nil
}

// checkConfigFiles refuses the first of files that a user other than this
// one or root could have written or could replace (filetrust.Config: the
// file and every directory above it are this user's or root's, and
// writable by no one else), as git refuses a repository another user owns:
// a ./gorun.toml left in a shared directory would otherwise choose what
// every rank runs (-x LD_PRELOAD=...) and where gorun writes. A file that
// is not there is not an error.
func checkConfigFiles(files []string) error {
	for _, f := range files {
		abs, err := filepath.Abs(f) // so that the error says where
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // the working directory is gone: no ./gorun.toml to read
		case err != nil:
			return fmt.Errorf("configuration file %s: %w", f, err)
		}
		switch err := filetrust.Check(abs, filetrust.Config); {
		case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		case !filepath.IsAbs(f):
			return fmt.Errorf("%w; or run gorun from another directory", err)
		default:
			return err
		}
	}
	return nil
}

// absPaths returns paths made absolute where they can be: the record
// names ./gorun.toml by where it was.
func absPaths(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		out[i] = p
	}
	return out
}

// runCheck runs `gorun check` on the job's hosts.
func runCheck(c *cli.Context, stdout io.Writer) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	s := read(cfg)
	src := launcher.HostSource{Hostfile: s.str("hostfile"), HostList: s.list("host"), Include: s.str("include"), Exclude: s.str("exclude")}
	hosts, _, _, err := src.Hosts()
	if err != nil {
		return errExit{code: launcher.ExitUsage, err: err}
	}
	fanout, err := launcher.ParseFanout(s.str("launch-fanout"))
	if err != nil {
		return errExit{code: launcher.ExitUsage, err: err}
	}
	res, err := launcher.Check(context.Background(), launcher.CheckOptions{
		Hosts: hosts, Program: c.Args().First(), Fanout: fanout, SSH: s.ssh(), Out: stdout, Version: gorunVersion(),
		BeatTimeout: s.dur("heartbeat-timeout"),
	})
	launcher.FormatCheck(stdout, res)
	if err != nil {
		return errExit{code: 1, err: err}
	}
	return nil
}

// settingsOf reads merged settings by name.
type settingsOf struct{ cfg *config.Config }

func read(cfg *config.Config) settingsOf { return settingsOf{cfg} }

func (s settingsOf) list(name string) []string { v, _ := s.cfg.Get(name); return v.Values }
func (s settingsOf) str(name string) string    { return strings.Join(s.list(name), ",") }
func (s settingsOf) num(name string) int       { n, _ := strconv.Atoi(s.str(name)); return n }
func (s settingsOf) on(name string) bool       { return s.str(name) == "true" }
func (s settingsOf) dur(name string) time.Duration {
	d, _ := time.ParseDuration(s.str(name))
	return d
}

// ssh returns the SSH settings.
func (s settingsOf) ssh() control.SSH {
	return control.SSH{ConfigFile: s.str("ssh-config"), Port: s.num("ssh-port"), Identities: s.list("identity"),
		AcceptNew: s.on("ssh-accept-new"), ConnectTimeout: s.dur("connect-timeout"), MaxHandshakes: s.num("ssh-parallel"),
		Stage: !s.on("no-stage")}
}

// perNodeOptions reads a per-node launch's settings: nil without
// --rdzv-endpoint, where --nproc-per-node is -N. nPerNode is -N.
func perNodeOptions(s settingsOf) (p *launcher.PerNode, nPerNode int, err error) {
	nPerNode = s.num("npernode")
	if s.str("rdzv-endpoint") == "" {
		if nn := s.str("nnodes"); nn != "" && nn != "1" {
			return nil, 0, fmt.Errorf("--nnodes %s: a per-node launch needs --rdzv-endpoint HOST:PORT, where its nodes meet (or run one gorun with the hosts in -H or --hostfile)", nn)
		}
		if p := s.num("nproc-per-node"); p > 0 {
			if nPerNode > 0 && nPerNode != p {
				return nil, 0, fmt.Errorf("--nproc-per-node %d and -N %d: give one", p, nPerNode)
			}
			nPerNode = p
		}
		return nil, nPerNode, nil
	}
	for _, n := range []string{"host", "hostfile", "include", "exclude", "np", "npernode"} {
		if s.str(n) != "" && s.str(n) != "0" {
			return nil, 0, fmt.Errorf("--%s and --rdzv-endpoint: a per-node launch's hosts are the nodes that join the endpoint, each with --nproc-per-node ranks; give one or the other", n)
		}
	}
	p = &launcher.PerNode{Endpoint: s.str("rdzv-endpoint"), ID: s.str("rdzv-id"), NProc: s.num("nproc-per-node"),
		LastCall: s.dur("rdzv-last-call"), Timeout: s.dur("rdzv-timeout")}
	if p.MinNodes, p.MaxNodes, err = launcher.ParseNNodes(cmp.Or(s.str("nnodes"), "1")); err != nil {
		return nil, 0, err
	}
	if p.Token, err = launcher.ReadToken(s.str("rdzv-token-file"), os.Getenv); err != nil {
		return nil, 0, err
	}
	return p, nPerNode, nil
}

// runJob turns the merged settings into launcher options and runs the job.
func runJob(c *cli.Context, stdout, stderr io.Writer) error {
	o, err := jobOptions(c, stdout, stderr)
	if err != nil {
		return err
	}
	o.Argv = c.Args().Slice()
	if o.Apps, err = launcher.ParseApps(o.Argv, o.Plan.NP); err != nil { // prog1 : -np 2 prog2
		return errExit{code: launcher.ExitUsage, err: err}
	}
	if note, err := launcherProgram(o.Argv, o.Plan.NP); err != nil { // gorun -np 2 mpirun ./prog
		return errExit{code: launcher.ExitUsage, err: err}
	} else if note != "" {
		fmt.Fprintf(stderr, "gorun: note: %s\n", note)
	}
	o.Personality = personalityOf(c)
	if err := preflightPlugin(c, o, stdout, stderr); err != nil {
		return err
	}
	code, err := launcher.Run(context.Background(), o)
	if err != nil || code != 0 {
		return errExit{code: code, err: err}
	}
	return nil
}

// jobOptions reads a job's options, all but its program, from the merged
// configuration.
func jobOptions(c *cli.Context, stdout, stderr io.Writer) (launcher.Options, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return launcher.Options{}, err
	}
	s := read(cfg)
	get, list, num, dur, flag := s.str, s.list, s.num, s.dur, s.on
	usage := func(err error) error { return errExit{code: launcher.ExitUsage, err: err} }

	if err := checkJobValues(s); err != nil {
		return launcher.Options{}, usage(err)
	}
	pl, err := jobPlacement(s)
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	var exports []env.Export
	for _, x := range list("x") {
		e, err := env.ParseExport(x)
		if err != nil {
			return launcher.Options{}, usage(err)
		}
		exports = append(exports, e)
	}
	stdinRank, err := launcher.ParseStdin(get("stdin"))
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	fanout, err := launcher.ParseFanout(get("launch-fanout"))
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	plugin, err := pluginSettings(get, list)
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	gpuBind, err := env.ParseGPUBind(get("gpu-bind"))
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	var budgets [2]rendezvous.Budget
	for i, n := range []string{"kv-rank-budget", "kv-job-budget"} {
		if budgets[i], err = rendezvous.ParseBudget(get(n)); err != nil {
			return launcher.Options{}, usage(fmt.Errorf("--%s: %w", n, err))
		}
	}
	var wdir string
	if d := get("wdir"); d != "" {
		if wdir, err = filepath.Abs(d); err != nil {
			return launcher.Options{}, usage(fmt.Errorf("--wdir %s: %w", d, err))
		}
	}
	perNode, nPerNode, err := perNodeOptions(s)
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	var runID string
	if perNode == nil {
		runID = get("rdzv-id") // TORCHELASTIC_RUN_ID, as torchrun's
	}
	files, err := rankFiles(s, runID)
	if err != nil {
		return launcher.Options{}, usage(err)
	}
	o := launcher.Options{
		PerNode: perNode,
		Dir:     wdir,
		Hosts:   pl.hosts, ImplicitHosts: pl.implicit,
		Plan: launcher.PlanOptions{NP: pl.np, MapBy: pl.mapBy, NPerNode: nPerNode,
			Oversubscribe: flag("oversubscribe"), Source: pl.desc, Rankfile: pl.rankfile},
		DisplayAllocation: flag("display-allocation"), PrintExitCodes: flag("print-exit-codes"), RankFiles: files, RunID: runID,
		Exports: exports, DisplayMap: flag("display-map"), DryRun: flag("dry-run"), PrintEnv: num("print-env"),
		Tag: flag("tag-output"), Timestamp: flag("timestamp-output"), OutputDir: get("output-filename"),
		MergeOutput: flag("merge-output"), MergeWindow: dur("merge-window"),
		StdinRank: stdinRank, Grace: dur("grace-period"), Timeout: dur("timeout"), MaxRestarts: num("max-restarts"),
		SummaryJSON: get("summary-json"), RecordDir: get("record"), ConfigFiles: absPaths(cfg.Files()), HangTimeout: dur("hang-timeout"), OnHang: get("on-hang"), JobsDir: get("jobs-dir"),
		Stdout: stdout, Stderr: stderr, Version: gorunVersion(), Trace: flag("trace"), Started: mainStart,
		Iface: get("iface"), Plugin: plugin, Fanout: fanout, BeatTimeout: dur("heartbeat-timeout"),
		BindTo: get("bind-to"), CPUsPerRank: num("cpus-per-rank"), ReportBind: flag("report-bindings"), GPUBind: string(gpuBind),
		RendezvousTimeout: dur("rendezvous-timeout"), PMIx: get("pmix"), Alloc: pl.alloc,
		KVRankBudget: budgets[0], KVJobBudget: budgets[1],
		SSH: s.ssh(), EarlyAgent: earlyAgentOf(c),
	}
	return o, nil
}

// checkJobValues refuses the job's counts and durations that are
// negative, and the values of its closed choices that are none of them.
func checkJobValues(s settingsOf) error {
	for _, n := range []string{"np", "npernode", "nproc-per-node", "max-restarts", "ssh-port", "ssh-parallel", "cpus-per-rank"} {
		if s.num(n) < 0 {
			return fmt.Errorf("--%s %d: must not be negative", n, s.num(n))
		}
	}
	for _, n := range []string{"grace-period", "timeout", "hang-timeout", "merge-window", "rdzv-last-call", "rdzv-timeout"} {
		if s.dur(n) < 0 {
			return fmt.Errorf("--%s %v: must not be negative", n, s.dur(n))
		}
	}
	switch s.str("on-hang") {
	case launcher.OnHangStop, launcher.OnHangReport:
	default:
		return fmt.Errorf("--on-hang %q: want stop or report", s.str("on-hang"))
	}
	switch s.str("pmix") {
	case launcher.PMIxAuto, launcher.PMIxOn, launcher.PMIxOff:
	default:
		return fmt.Errorf("--pmix %q: want auto, on or off", s.str("pmix"))
	}
	return nil
}

// placement is where a job's ranks go, as its options say: the hosts
// (and where they came from), the rank count, the mapping and the
// rankfile.
type placement struct {
	alloc    *launcher.Allocation
	hosts    []hostfile.Host
	implicit bool
	desc     string
	np       int
	mapBy    launcher.MapBy
	rankfile []hostfile.RankSlot
}

// jobPlacement reads the job's hosts (a hostfile, -H, an allocation or a
// rankfile), its rank count and its mapping.
func jobPlacement(s settingsOf) (placement, error) {
	var p placement
	var err error
	if p.alloc, err = launcher.DetectAllocation(os.Getenv, s.str("launcher")); err != nil {
		return p, err
	}
	src := launcher.HostSource{Hostfile: s.str("hostfile"), HostList: s.list("host"), Include: s.str("include"), Exclude: s.str("exclude"), NoLocal: s.on("nolocal"), Alloc: p.alloc}
	if p.hosts, p.implicit, p.desc, err = src.Hosts(); err != nil {
		return p, err
	}
	p.np = s.num("np")
	if p.np == 0 && p.alloc != nil && p.alloc.NTasks > 0 && s.str("hostfile") == "" && len(s.list("host")) == 0 {
		p.np = p.alloc.NTasks // as srun: the allocation's task count, not its rounded-up slots
	}
	if p.mapBy, err = launcher.ParseMapBy(s.str("map-by")); err != nil {
		return p, err
	}
	if p.mapBy.Policy == "seq" {
		if p.rankfile, err = sequence(s, p); err != nil {
			return p, err
		}
	}
	if f := s.str("rankfile"); f != "" {
		if p.rankfile, err = hostfile.ParseRankfileFile(f); err != nil {
			return p, err
		}
		if p.implicit {
			if p.hosts, err = launcher.RankfileHosts(p.rankfile); err != nil {
				return p, err
			}
			p.implicit, p.desc = false, "--rankfile "+f
		}
	}
	return p, nil
}

// sequence is --map-by seq's placement: a rank on each line of the
// hostfile, in order (Open MPI's rmaps seq).
func sequence(s settingsOf, p placement) ([]hostfile.RankSlot, error) {
	f := s.str("hostfile")
	switch {
	case s.str("rankfile") != "":
		return nil, errors.New("--map-by seq and --rankfile: each places every rank: give one")
	case f == "":
		return nil, errors.New("--map-by seq places one rank on each line of a hostfile: give --hostfile FILE (or -H's hosts in rank order with one slot each)")
	}
	seq, err := hostfile.ParseSequenceFile(f)
	if err != nil {
		return nil, err
	}
	return launcher.Sequential(seq, p.np, "--hostfile "+f)
}

// rankFiles is where the ranks' output goes besides the terminal:
// torchrun's --log-dir layout or Hydra's -outfile-pattern, not both.
func rankFiles(s settingsOf, runID string) (*launcher.RankFiles, error) {
	files, err := launcher.TorchLogs(s.str("log-dir"), runID, s.str("redirects"), s.str("tee"), s.str("local-ranks-filter"))
	if err != nil {
		return nil, err
	}
	hydra, err := launcher.HydraFiles(s.str("outfile-pattern"), s.str("errfile-pattern"))
	if err != nil {
		return nil, err
	}
	if hydra != nil {
		if files != nil {
			return nil, errors.New("--outfile-pattern or --errfile-pattern, and --log-dir, --redirects, --tee or --local-ranks-filter: give one kind")
		}
		files = hydra
	}
	return files, nil
}
