// This file holds the agent's start of a generation: turning a Launch
// frame into each rank's binding, program and environment, starting the
// generation's PMI-1 and PMIx servers, and forking the ranks.

package launcher

import (
	"errors"
	"fmt"
	"github.com/gorun/gorun/stacks"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/launcher/output"
	"github.com/gorun/gorun/topology"
)

// maxForkers bounds the goroutines that fork ranks side by side.
const maxForkers = 4

// SelfProgram, as a job's program, names the gorun binary that each host's
// agent runs: `gorun bench` launches its ranks so, wherever gorun was
// staged.
const SelfProgram = "gorun:self"

// launchPlan is what a Launch frame becomes on this host: each rank's
// binding and environment, filled in step by step as the launch finds the
// program and starts the rendezvous servers that the ranks are told of.
type launchPlan struct {
	l    control.Launch
	base []string // the agent's environment, which the ranks' environments start from

	plan    []topology.RankBinding // by index in l.Ranks; nil: the ranks start unbound
	hints   []env.RankHints        // the binding's variables, by index in l.Ranks
	report  string                 // the --report-bindings text for this host
	topo    string                 // a summary of this host's topology, when it was looked at
	bindErr error

	paths            []string         // each app's program, once resolved (by index in l.Apps; one without apps)
	pmi              *pmiState        // the PMI-1 server its ranks connect to; nil: none
	pmixEnv          map[int][]string // by rank, when the program needs PMIx
	kvSock, kvSecret string           // the ranks' rendezvous socket and its secret
	stacksDir        string           // where the ranks' Python hook writes its dumps; "" = no hook
}

// newLaunchPlan computes the ranks' bindings for l. A spawned job's ranks
// take the host's slots after those its earlier ranks hold
// (Spawned.SlotsUsed): they are planned as the last of that many more.
func newLaunchPlan(l control.Launch) *launchPlan {
	p := &launchPlan{l: l, base: os.Environ()}
	used := 0
	if l.Spawned != nil {
		used = l.Spawned.SlotsUsed
	}
	if used == 0 {
		p.setBindings(bindings(l, p.base))
	} else {
		all := l
		all.Ranks = make([]control.RankSpec, used, used+len(l.Ranks))
		for i := range all.Ranks {
			all.Ranks[i] = control.RankSpec{Rank: -1 - i, LocalRank: i}
		}
		all.Ranks = append(all.Ranks, l.Ranks...)
		all.LocalWorldSize = len(all.Ranks)
		p.setBindings(bindings(all, p.base))
		if len(p.plan) == len(all.Ranks) {
			p.plan = p.plan[used:]
		}
		if len(p.hints) == len(all.Ranks) {
			p.hints = p.hints[used:]
		}
		p.report = spawnedReport(p.report, l.Host, l.Spawned.Job)
	}
	if p.bindErr == nil {
		p.bindErr = p.applySlots() // a rankfile's cores
	}
	return p
}

// spawnedReport is the --report-bindings text of a spawned job's ranks on
// host: that of all the ranks planned, less the placeholders of the slots
// taken before them (negative ranks), the others named with their job.
func spawnedReport(report, host string, job int) string {
	var b strings.Builder
	skip := false
	for line := range strings.Lines(report) {
		switch {
		case strings.HasPrefix(line, host+" rank -"):
			skip = true
			continue
		case strings.HasPrefix(line, host+" rank "):
			skip = false
			line = host + " spawned job " + strconv.Itoa(job) + " rank " + strings.TrimPrefix(line, host+" rank ")
		case skip && strings.HasPrefix(line, " "):
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// id is rank i's number in the job's frames (by index in l.Ranks): its
// rank, after the ranks before its job's for a spawned job's.
func (p *launchPlan) id(i int) int {
	if sp := p.l.Spawned; sp != nil {
		return sp.Base + p.l.Ranks[i].Rank
	}
	return p.l.Ranks[i].Rank
}

// job is the spawned job of the launch (0: the generation).
func (p *launchPlan) job() int {
	if sp := p.l.Spawned; sp != nil {
		return sp.Job
	}
	return 0
}

// binding is rank i's binding (by index in l.Ranks), nil when unbound.
func (p *launchPlan) binding(i int) *topology.RankBinding {
	if i < len(p.plan) {
		return &p.plan[i]
	}
	return nil
}

// app is the app context that rank i runs (by index in l.Ranks): the
// launch's one program unless it carries several (MPMD).
func (p *launchPlan) app(i int) control.App {
	return launchApp(p.l, p.l.Ranks[i].App)
}

// launchApp is app k of l: its program, working directory and own exports.
func launchApp(l control.Launch, k int) control.App {
	if len(l.Apps) == 0 {
		return control.App{Argv: l.Argv, Dir: l.Dir, Size: l.WorldSize}
	}
	a := l.Apps[min(max(k, 0), len(l.Apps)-1)]
	if a.Dir == "" {
		a.Dir = l.Dir
	}
	return a
}

// apps is the number of programs the launch runs (1 without apps).
func (p *launchPlan) apps() int { return max(len(p.l.Apps), 1) }

// path is rank i's program, resolved (by index in l.Ranks).
func (p *launchPlan) path(i int) string {
	if k := p.l.Ranks[i].App; k < len(p.paths) {
		return p.paths[k]
	}
	return p.paths[0]
}

// exports are rank i's -x exports: the job's, then its app's.
func (p *launchPlan) exports(i int) []string {
	if len(p.l.Apps) == 0 {
		return p.l.Exports
	}
	return append(slices.Clip(p.l.Exports), p.app(i).Exports...)
}

// rank is what rank i's environment is computed from (by index in l.Ranks).
func (p *launchPlan) rank(i int) env.Rank {
	l, s := p.l, p.l.Ranks[i]
	var vars []string
	if i < len(p.hints) {
		vars = p.hints[i].Vars
	}
	return env.Rank{
		Launcher: env.Launcher(l.Personality),
		JobID:    l.JobID, RunID: l.RunID, Rank: s.Rank, WorldSize: l.WorldSize, LocalRank: s.LocalRank,
		LocalWorldSize: l.LocalWorldSize, NodeRank: l.NodeRank, NodeCount: l.NodeCount,
		CrossRank: s.CrossRank, CrossSize: s.CrossSize,
		Host: l.Host, MasterAddr: l.MasterAddr, MasterPort: l.MasterPort,
		RestartCount: l.Generation, MaxRestarts: l.MaxRestarts, Dir: p.app(i).Dir, Binding: vars, PMIFD: pmiFD,
		PMIx: p.pmixEnv[s.Rank], AgentSocket: p.kvSock, Secret: p.kvSecret, Slurm: l.Slurm,
		StacksDir: p.stacksDir, StacksSignal: stacks.DumpSignal,
	}
}

// environ is rank i's environment (by index in l.Ranks).
func (p *launchPlan) environ(i int) []string {
	return env.Build(p.base, p.rank(i), p.exports(i))
}

// defaultThreads is whether rank i (by index in l.Ranks) gets
// OMP_NUM_THREADS=1 by default (env.DefaultThreads).
func (p *launchPlan) defaultThreads(i int) bool {
	return env.DefaultThreads(p.base, p.rank(i), p.exports(i))
}

// launch starts a generation of ranks, or a job they spawned, or answers
// a print-env request. An ending agent starts nothing.
func (a *agent) launch(l control.Launch) {
	if a.ending != nil {
		return
	}
	if l.Spawned != nil {
		a.launchSpawned(l)
		return
	}
	p := newLaunchPlan(l)
	if l.PrintEnv > 0 {
		a.printEnv(p)
		return
	}
	a.beginGeneration(l)
	a.startPrint(l)
	a.tree.timeout = l.PMI.FenceTimeout
	ooms := 0
	if !a.simulated() {
		ooms = oomKills()
	}
	a.restartPMI(p)
	p.stacksDir = a.prepareStacks()
	if code, msg := a.prepare(p); msg != "" {
		for _, s := range l.Ranks {
			a.failRank(l.Generation, s.Rank, code, msg)
		}
	} else {
		if !a.simulated() {
			growForLaunch(len(l.Ranks))
		}
		a.masterPort.release() // for rank 0's program to bind, where it runs here
		procs, errs := a.forkAll(p)
		a.register(p, procs, errs, ooms)
	}
	if a.live == 0 {
		a.done()
	}
}

// printEnv answers --print-env: the environment that the rank asked for
// would get, with the socket that would be served.
func (a *agent) printEnv(p *launchPlan) {
	l := p.l
	if len(l.Secret) >= 16 && a.ensureSockDir() == nil {
		p.kvSock, p.kvSecret = filepath.Join(a.sockDir, kvSockName(l.Generation)), l.Secret
	}
	p.stacksDir = a.prepareStacks()
	for i, s := range l.Ranks {
		if s.Rank == l.PrintEnv-1 {
			a.send(control.TypeEnv, control.Env{Rank: s.Rank, Env: p.environ(i)})
			return
		}
	}
	a.send(control.TypeError, control.Error{Msg: fmt.Sprintf("rank %d is not on this host", l.PrintEnv-1)})
}

// beginGeneration makes l's generation the current one, with all its ranks
// to report, forgets the questions of the generations before it, and
// lists /dev/shm before any of its ranks starts.
func (a *agent) beginGeneration(l control.Launch) {
	a.gen, a.stopped, a.live = l.Generation, false, len(l.Ranks)
	a.endDyn()
	a.launches = 1
	a.shm.begin()
	a.disarmKill()
	a.forgetFences(l.Generation)
}

// restartPMI replaces the last generation's PMI-1 server with one for this
// generation, and gives the ranks its socket. Without one, the ranks start
// all the same.
func (a *agent) restartPMI(p *launchPlan) {
	a.pmi.close()
	a.pmi = nil
	pmi, err := a.startPMI(p.l)
	if err != nil {
		a.log.printf("PMI server: %v", err)
		return
	}
	a.pmi, p.pmi = pmi, pmi
	if p.kvSock = pmi.socket(); p.kvSock != "" {
		p.kvSecret = p.l.Secret
	}
}

// prepare finds the program, checks the bindings, and replaces the last
// generation's PMIx server with one for this generation when the program
// needs it. A message says why no rank can start, with the exit code to
// report for each.
func (a *agent) prepare(p *launchPlan) (code int, msg string) {
	code, msg = a.resolveAll(p)
	if msg == "" && p.bindErr != nil {
		code, msg = 2, "binding: "+p.bindErr.Error()
	}
	a.pmix.close()
	a.pmix = nil
	if msg == "" {
		px, err := a.startPMIx(p.l, p.paths...)
		if err != nil {
			code, msg = 2, err.Error()
		} else if px != nil {
			a.pmix, p.pmixEnv = px, px.env
		}
	}
	return code, msg
}

// resolveAll finds every app's program.
func (a *agent) resolveAll(p *launchPlan) (code int, msg string) {
	p.paths = make([]string, p.apps())
	for k := range p.paths {
		app := launchApp(p.l, k)
		if p.paths[k], code, msg = a.resolveProgram(app.Argv, app.Dir, append(slices.Clip(p.l.Exports), app.Exports...), p.base); msg != "" {
			return code, msg
		}
	}
	return 0, ""
}

// failRank reports a rank of generation gen that did not start as exited
// (rank: its number in the job's frames).
func (a *agent) failRank(gen, rank, code int, msg string) {
	a.send(control.TypeExited, control.Exited{Generation: gen, Rank: rank, End: time.Now(), Code: code, Err: msg})
	a.live--
}

// forkAll forks every rank of the plan and returns, by index in its
// Ranks, each one's process or why it could not be forked. Forking costs
// most of a launch: on a box with several cores, a few goroutines fork
// side by side. No rank is reaped before it is registered: the loop that
// reaps runs this.
func (a *agent) forkAll(p *launchPlan) ([]*rankProc, []error) {
	ranks := p.l.Ranks
	procs := make([]*rankProc, len(ranks))
	errs := make([]error, len(ranks))
	var next atomic.Int64
	fork := func() {
		for i := int(next.Add(1) - 1); i < len(ranks); i = int(next.Add(1) - 1) {
			app := p.app(i)
			exe, argv := bindArgv(p.binding(i), p.path(i), app.Argv)
			if a.simulated() {
				procs[i], errs[i] = a.startProc(ranks[i], p.id(i), p.pmi, exe, argv, p.environ(i), app.Dir)
			} else {
				procs[i], errs[i] = a.start(app.Dir, ranks[i], p.id(i), p.pmi, exe, argv, p.environ(i))
			}
			if procs[i] != nil {
				procs[i].job, procs[i].mpiRank = p.job(), ranks[i].Rank
			}
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), len(ranks), maxForkers) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fork()
		}()
	}
	fork() // this goroutine forks too: one rank needs no other
	wg.Wait()
	return procs, errs
}

// register hands the forked ranks to the reaper and tells the head which
// started; a rank that could not be forked is reported as exited, with the
// shells' status for a missing or unexecutable program. ooms is the
// kernel's OOM-kill count before the fork.
func (a *agent) register(p *launchPlan, procs []*rankProc, errs []error, ooms int) {
	l := p.l
	started := control.Started{Generation: l.Generation, Report: p.report, Topo: p.topo}
	for i := range l.Ranks {
		rp, err := procs[i], errs[i]
		if err != nil {
			a.failRank(l.Generation, p.id(i), forkExitCode(err), fmt.Sprintf("cannot start %s: %v", p.app(i).Argv[0], err)+execHint(p.app(i).Argv[0], err))
			continue
		}
		rp.ooms = ooms
		a.byPID[rp.pid] = rp
		if rp.stdin != nil {
			a.stdin[rp.rank] = rp.stdin
		}
		started.Ranks = append(started.Ranks, control.RankStart{Rank: rp.rank, PID: rp.pid, Time: rp.start, Binding: bindingOf(p.binding(i))})
		if p.defaultThreads(i) {
			started.DefaultThreads++
		}
	}
	if len(started.Ranks) > 0 {
		a.send(control.TypeStarted, started)
	}
}

// forkExitCode is the status a shell would give for a program that could
// not be executed with err.
func forkExitCode(err error) int {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return ExitNotFound
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC):
		return ExitNotExec
	}
	return 1
}

// resolve finds the launch's program as a shell would, in the ranks'
// PATH, and checks the working directory.
func (a *agent) resolve(l control.Launch, base []string) (path string, code int, msg string) {
	return a.resolveProgram(l.Argv, l.Dir, l.Exports, base)
}

// resolveProgram finds argv's program as a shell would, in the PATH of
// base and exports, and checks the working directory dir.
func (a *agent) resolveProgram(argv []string, dir string, exports, base []string) (path string, code int, msg string) {
	l := control.Launch{Argv: argv, Dir: dir, Exports: exports}
	if len(l.Argv) == 0 {
		return "", 2, "no program to run"
	}
	if st, err := os.Stat(l.Dir); err != nil || !st.IsDir() {
		return "", 1, fmt.Sprintf("working directory %s does not exist here", l.Dir)
	}
	prog := l.Argv[0]
	if prog == SelfProgram {
		exe, err := os.Executable()
		if err != nil {
			return "", 127, fmt.Sprintf("gorun's own executable: %v", err)
		}
		return exe, 0, ""
	}
	if prog == ToolsProgram {
		return companionPath()
	}
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(l.Dir, prog)
		}
		st, err := os.Stat(prog)
		switch {
		case err != nil:
			return "", 127, fmt.Sprintf("%s: no such file", l.Argv[0])
		case st.IsDir() || st.Mode()&0o111 == 0:
			return "", 126, fmt.Sprintf("%s: not an executable file", l.Argv[0]) + pythonHint(l.Argv[0])
		}
		if code, bad := badInterpreter(prog, l.Dir); bad != "" {
			return "", code, l.Argv[0] + ": " + bad
		}
		return prog, 0, ""
	}
	pathVar := ""
	for _, kv := range append(base, l.Exports...) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(l.Dir, dir)
		}
		p := filepath.Join(dir, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			if code, bad := badInterpreter(p, l.Dir); bad != "" {
				return "", code, p + ": " + bad
			}
			return p, 0, ""
		}
	}
	return "", 127, fmt.Sprintf("%s: command not found in PATH (%s)", prog, pathVar) + pythonHintHere(prog, l.Dir)
}

// start forks one rank in directory dir, numbered id in the job's frames,
// whose PMI-1 connection pmi serves (nil: none). The caller registers it.
func (a *agent) start(dir string, s control.RankSpec, id int, pmi *pmiState, path string, argv, environ []string) (*rankProc, error) {
	// Every descriptor made here: the child's ends are closed once it is
	// forked, and all of them if anything fails.
	var parent, child []*os.File
	fail := func(err error) (*rankProc, error) {
		for _, f := range append(parent, child...) {
			f.Close()
		}
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, outR), append(child, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, errR), append(child, errW)
	pmiMine, pmiTheirs, err := socketpair(s.Rank)
	if err != nil {
		return fail(err)
	}
	parent, child = append(parent, pmiMine), append(child, pmiTheirs)
	var inR, inW *os.File
	if s.Stdin {
		inR, inW, err = os.Pipe()
	} else {
		inR, err = os.Open(os.DevNull)
	}
	if err != nil {
		return fail(err)
	}
	child = append(child, inR)
	if inW != nil {
		parent = append(parent, inW)
	}
	files, err := openRankFiles(s.Files, dir)
	if err != nil {
		return fail(err)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir:   dir,
		Env:   environ,
		Files: []uintptr{inR.Fd(), outW.Fd(), errW.Fd(), pmiTheirs.Fd()},
		// Each rank leads its own session (and so its own process group,
		// which the agent signals), as Hydra's ranks do: with the kernel's
		// autogroup scheduling a session is one CPU share, and ranks
		// sharing the launcher's would together weigh as one process
		// against the rest of the machine.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		files.close()
		return fail(err)
	}
	for _, f := range child {
		f.Close()
	}
	p := &rankProc{rank: id, pid: pid, start: time.Now(), outR: []*os.File{outR, errR}, files: files}
	if pmi != nil {
		pmi.serve(pmiMine, s.Rank)
	} else {
		pmiMine.Close()
	}
	p.readers.Add(2)
	go a.relay(p, outR, output.Stdout)
	go a.relay(p, errR, output.Stderr)
	if inW != nil {
		p.stdin = make(chan []byte, stdinWindow+1)
		go a.feed(id, inW, p.stdin)
	}
	return p, nil
}
