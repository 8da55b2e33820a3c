package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/internal/plural"
	"github.com/gorun/gorun/launcher/control"
	"github.com/gorun/gorun/rendezvous"
)

// The head runs the job as generations: generation 0 is the first start
// of every rank, and each restart (--max-restarts) is the next. The loop
// and its state follow torch elastic's agent (_invoke_run, WorkerState):
// generation feeds events to one small handler each, and the handlers
// change a genState, which tests build and feed without processes.

// reason is why a generation ended.
type reason int

const (
	reasonSuccess    reason = iota // every rank exited 0
	reasonFailed                   // a rank failed or aborted: result.first
	reasonTimeout                  // --timeout expired
	reasonSignal                   // gorun, or its step's agents, got a signal
	reasonAgentLost                // an agent was lost
	reasonOutputLost               // a rank's --output-filename file failed
	reasonCancelled                // Run's context was cancelled
	reasonHang                     // no rank made progress for --hang-timeout
)

// result is how a generation ended.
type result struct {
	reason reason
	signal syscall.Signal // reasonSignal: what gorun received
	lost   string         // reasonAgentLost: which host, why; reasonOutputLost: whose output, why
	host   string         // reasonAgentLost: the host whose agent was lost, when known
	first  *RankRecord    // reasonFailed: the generation's first failure
}

// exitCancelled is the code of a job that Run's context cancelled: that
// of a job ended by SIGTERM.
const exitCancelled = exitSignalStart + int(syscall.SIGTERM)

// genState is the head's state during one generation.
//
// The first of these decides how the generation ends, and res keeps it:
// a rank fails or aborts, an agent or a rank's output is lost, --timeout
// expires, Run's context is cancelled, or a signal other than SIGUSR1/2
// reaches gorun or its step's agents. Every one but the signal makes the
// head stop the job (stopping): Kill to every agent, which sends SIGTERM
// to its ranks and SIGKILL after the grace period, and a timer of the
// head's own (escalate) for agents that do not confirm. A signal is
// forwarded to every rank instead; a second one kills them. The
// generation is over when no agent is pending: each has said Done or
// been lost.
type genState struct {
	h   *head
	gen int
	ctx context.Context // Run's, which the fences' answers honour too

	res        result
	failedAt   time.Time // when a rank's exit made res a failure (onExited); zero otherwise, and when an abort is the first
	lostAt     time.Time // when an agent's loss made res a failure (onAgentLost); zero otherwise
	lostNode   int       // the node whose agent's loss res names; -1 when none
	pending    int       // agents launched that have neither said Done nor been lost
	started    int       // ranks that have started
	stopping   bool      // Kill was sent to every agent
	interrupts int       // signals from outside that were not SIGUSR1 or SIGUSR2
	// lastSig is when a step's agent last reported each signal, which
	// is forwarded once a second at most.
	lastSig map[syscall.Signal]time.Time
	// headSig is when gorun itself last got each signal: an agent that
	// reports the same one within a second got it with gorun (a signal
	// to the whole process group), and it was forwarded already.
	headSig map[syscall.Signal]time.Time
	now     func() time.Time // the clock: time.Now but in tests

	// The generation's dynamic processes (head_dyn.go); nil before its
	// first request. sent counts the Launch frames sent to each agent,
	// agentDone says which have said Done for all of theirs.
	dyn       *dynState
	sent      map[int]int
	agentDone map[int]bool

	// What the loop waits on besides the agents' events; each timer
	// and ctx's end is nil once handled.
	sigs     <-chan os.Signal
	timeout  <-chan time.Time
	escalate <-chan time.Time
	done     <-chan struct{}
}

func (h *head) newGen(ctx context.Context, gen int, sigs <-chan os.Signal, timeout <-chan time.Time) *genState {
	return &genState{h: h, gen: gen, ctx: ctx, res: result{reason: reasonSuccess}, lostNode: -1, lastSig: map[syscall.Signal]time.Time{}, headSig: map[syscall.Signal]time.Time{}, now: time.Now,
		sigs: sigs, timeout: timeout, done: ctx.Done(), sent: map[int]int{}, agentDone: map[int]bool{}}
}

// generations runs the job, and runs it again after a rank failed while
// --max-restarts allows (torchrun's restart of the whole job). --timeout
// bounds all generations together.
func (h *head) generations(ctx context.Context, sigs <-chan os.Signal) result {
	var timeout <-chan time.Time
	if h.o.Timeout > 0 {
		t := time.NewTimer(h.o.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for gen := h.o.FirstGeneration; ; gen++ {
		res := h.generation(ctx, gen, sigs, timeout)
		if !h.restart(ctx, gen, res) {
			return res
		}
	}
}

// restart decides whether the job starts again after generation gen
// ended with res: only after a rank's failure, while restarts are left
// and ctx is not done, and not when the rank's program could not be
// executed (RankRecord.startFailure), which a restart would not change.
// It says so, and counts the restart in every rank's record.
func (h *head) restart(ctx context.Context, gen int, res result) bool {
	if res.reason != reasonFailed || gen >= h.o.MaxRestarts || ctx.Err() != nil {
		return false
	}
	f := res.first
	if f.startFailure() {
		h.notef("gorun: no restart (--max-restarts %d): %s's program could not be executed on %s, and would not be again\n",
			h.o.MaxRestarts, f.name(), f.Host)
		return false
	}
	h.notef("gorun: %s on %s %s; restarting the job (restart %d of %d)\n",
		f.name(), f.Host, f.describe(), gen+1, h.o.MaxRestarts)
	for i := range h.rec {
		h.rec[i].Restarts = gen + 1
	}
	return true
}

// generation runs one start of the whole job until every agent is done.
func (h *head) generation(ctx context.Context, gen int, sigs <-chan os.Signal, timeout <-chan time.Time) result {
	g := h.newGen(ctx, gen, sigs, timeout)
	for i := range h.live {
		h.live[i].ended.Store(nil)
	}
	h.gen.Store(int32(gen))
	if err := g.launch(); err != nil {
		return result{reason: reasonAgentLost, lost: err.Error()}
	}
	if !h.launched.Swap(true) && h.infoDone != nil {
		go h.askHosts(ctx)
	}
	h.setState("running")
	if gen == h.o.FirstGeneration && h.o.StdinRank >= 0 {
		go h.pumpStdin(h.agents[h.plan.Ranks[h.o.StdinRank].Node], h.o.StdinRank)
	}
	for g.pending > 0 {
		g.handle(g.next())
	}
	h.spawnedRecs = g.spawnedRecs()
	return g.res
}

// launch sends the generation's Launch to every agent still connected.
func (g *genState) launch() error {
	h := g.h
	for i, n := range h.plan.Nodes {
		a := h.agents[i]
		if a.gone {
			continue
		}
		if a.ended.Load() {
			// Its channel ended before the launch, and its loss may
			// have been read by a wait for another agent's answer.
			g.pending++
			g.onAgentLost(agentLost{fromAgent{i}, errors.New("its control channel ended before its ranks were launched")})
			continue
		}
		if err := a.w.Send(control.TypeLaunch, h.launchFor(g.gen, i, n, h.master, h.agents[0].hello.FreePort)); err != nil {
			return fmt.Errorf("agent on %s: %w", n.Host.Name, err)
		}
		g.pending++
		g.sent[i] = 1
	}
	return nil
}

// next waits for the generation's next event: an agent's, a signal to
// gorun, --timeout, the escalation timer, or the end of Run's context.
func (g *genState) next() event {
	select {
	case e := <-g.h.events:
		return e
	case s := <-g.sigs:
		return signalReceived{sig: s.(syscall.Signal)}
	case <-g.timeout:
		return timedOut{}
	case <-g.escalate:
		return graceExpired{}
	case <-g.done:
		return cancelled{err: g.ctx.Err()}
	}
}

// handle passes an event to its handler.
func (g *genState) handle(e event) {
	switch e := e.(type) {
	case agentLost:
		g.onAgentLost(e)
	case ranksStarted:
		g.onStarted(e)
	case rankExited:
		g.onExited(e)
	case rankAborted:
		g.onAbort(e)
	case agentDone:
		g.onDone(e)
	case fenceReached:
		g.onFence(e)
	case outputLost:
		g.onOutputLost(e)
	case agentError:
		g.onAgentError(e)
	case agentSignaled:
		g.onAgentSignaled(e)
	case signalReceived:
		g.onSignal(e)
	case timedOut:
		g.onTimeout()
	case graceExpired:
		g.onGraceExpired()
	case cancelled:
		g.onCancelled(e)
	case hangDetected:
		g.onHang(e)
	case dynRequested:
		g.onDyn(e)
	case dynAnswered:
		g.onDynAnswer(e)
	case dynExpired:
		g.onDynExpired(e)
	}
	// envReply, routeReply, checkReply: answers that nobody waits for
	// during a generation.
}

// end makes r the generation's outcome unless it has one already, and
// reports whether it did.
func (g *genState) end(r result) bool {
	if g.res.reason != reasonSuccess {
		return false
	}
	g.res = r
	return true
}

// stop tells every agent to stop its ranks: SIGTERM, SIGKILL after grace.
func (g *genState) stop(grace time.Duration) {
	g.stopping = true
	g.h.setState("stopping")
	for _, a := range g.h.agents {
		if !a.gone {
			a.w.Send(control.TypeKill, control.Kill{Grace: grace})
		}
	}
	// Agents escalate to SIGKILL themselves; this is the head's own
	// bound in case an agent does not answer.
	g.escalate = time.After(grace + 5*time.Second)
}

// stopOnce stops the job with the grace period unless it is stopping.
func (g *genState) stopOnce() {
	if !g.stopping {
		g.stop(g.h.o.Grace)
	}
}

// onAgentLost: the agent's ranks are gone with it; the job stops.
func (g *genState) onAgentLost(e agentLost) {
	h := g.h
	a := h.agents[e.node]
	if a.gone {
		return
	}
	a.gone = true
	if !g.agentDone[e.node] {
		g.pending--
	}
	r := result{reason: reasonAgentLost, host: h.plan.Nodes[e.node].Host.Name, lost: fmt.Sprintf("lost the agent on %s: %v%s", h.plan.Nodes[e.node].Host.Name, e.err, h.subtreeNote(e.node))}
	switch {
	case g.end(r):
		g.lostAt, g.lostNode = g.now(), e.node
	case g.res.reason == reasonAgentLost && g.lostNode >= 0 && h.below(g.lostNode, e.node):
		// The agent named so far was below this one in the launch tree:
		// this one's end took it along (a host whose lower agents' streams
		// ended before its own did), so the job names this one.
		g.res, g.lostNode = r, e.node
	}
	h.markLost(e.node, g.gen)
	for _, j := range g.dynJobs() {
		for r, nd := range j.nodeOf {
			if nd == e.node && j.recs[r].End.IsZero() {
				j.recs[r].End, j.recs[r].Err = time.Now(), "its host's agent was lost"
			}
		}
	}
	g.stopOnce()
}

// onStarted records the ranks' processes, and the time when the first
// generation's last rank started.
func (g *genState) onStarted(e ranksStarted) {
	h := g.h
	before := g.started
	for _, rs := range e.Ranks {
		r := g.recOf(rs.Rank)
		if r == nil {
			continue
		}
		r.PID, r.Start = rs.PID, rs.Time
		if rs.Rank >= len(h.rec) {
			if j, _ := g.dyn.spawned(rs.Rank); j != nil {
				g.spawnedStarted(j, "")
			}
			continue
		}
		if rs.Binding != nil && h.binds != nil {
			h.binds[rs.Rank] = *rs.Binding
		}
		g.started++
	}
	if e.Report != "" {
		h.notef("%s", e.Report)
	}
	h.compareTopo(e.node, e.Topo)
	if g.started == before {
		return // a spawned job's ranks (MPI_Comm_spawn)
	}
	if g.gen == 0 {
		h.threads.add(e.DefaultThreads)
	}
	if g.started == len(h.plan.Ranks) && g.gen == h.o.FirstGeneration {
		h.phases.RanksStarted = time.Since(h.start)
		if n := h.threads.note(h.o.Personality); n != "" {
			h.notef("%s", n)
		}
	}
}

// defaultThreads tallies the first generation's ranks that got
// OMP_NUM_THREADS=1 by default (env.DefaultThreads), host by host.
type defaultThreads struct {
	ranks, hosts int
	perHost      int  // the count of every host that had some, while they agree
	mixed        bool // hosts had different counts
}

// add counts a host's ranks that got the default (n may be 0).
func (d *defaultThreads) add(n int) {
	if n == 0 {
		return
	}
	if d.hosts > 0 && n != d.perHost {
		d.mixed = true
	}
	d.ranks, d.hosts, d.perHost = d.ranks+n, d.hosts+1, n
}

// note is the line that says so, "" when no rank got the default: gorun
// sets it as torchrun does, and says which of the two did it (l is the
// personality, env.TorchRun or gorun's own).
func (d *defaultThreads) note(l env.Launcher) string {
	tail := ", gorun's default where ranks share a host (-x OMP_NUM_THREADS=N to choose)\n"
	if l == env.TorchRun {
		tail = ", as torchrun sets it (-x OMP_NUM_THREADS=N to choose)\n"
	}
	switch {
	case d.ranks == 0:
		return ""
	case d.mixed:
		return fmt.Sprintf("gorun: note: OMP_NUM_THREADS=1 for the %d unbound ranks that share a host"+tail, d.ranks)
	}
	return fmt.Sprintf("gorun: note: OMP_NUM_THREADS=1 for the %d unbound ranks per host"+tail, d.perHost)
}

// onExited records how a rank ended; the first rank to fail, unless
// gorun stopped it, ends the generation.
func (g *genState) onExited(e rankExited) {
	if e.Generation != g.gen {
		return
	}
	r := g.recOf(e.Rank)
	if r == nil {
		return
	}
	r.update(&e.Exited)
	if r.PID == 0 && r.Err != "" {
		r.Err += notFoundHint(r.Err)
	}
	if j, k := g.dyn.spawned(e.Rank); j != nil {
		g.spawnedEnded(j, k)
		if r.PID == 0 && r.Err != "" {
			g.spawnedStarted(j, fmt.Sprintf("rank %d on %s could not start: %s", k, r.Host, r.Err))
		}
	}
	if e.Rank < len(g.h.live) {
		how := r.describe()
		g.h.live[e.Rank].ended.Store(&how)
	}
	if len(e.Coll) > 0 {
		var p rendezvous.Progress
		if json.Unmarshal(e.Coll, &p) == nil {
			if g.h.finalProg == nil {
				g.h.finalProg = map[int]rendezvous.Progress{}
			}
			g.h.finalProg[e.Rank] = p
		}
	}
	if r.failed() && !e.Stopped {
		first := *r
		if g.end(result{reason: reasonFailed, first: &first}) {
			g.failedAt = g.now()
			g.stopOnce()
		} else if f := g.res.first; g.res.reason == reasonFailed && f != nil && !g.failedAt.IsZero() && f.Host == r.Host && r.End.Before(f.End) {
			// Its agent reaped it before the rank taken as the first
			// failure, whose report overtook its own (each is sent once
			// the rank's output is drained): a rank that crashed and a
			// rank whose PMI fence failed on that crash, say. One host's
			// clock orders them. Only an exit is ordered so: an abort's
			// end is the head's time of reading it, and the agent sent
			// it before any exit it caused.
			g.res.first = &first
		}
	}
}

// fenceCulprit reports whether a, a fence's timeout naming the ranks that
// never arrived, names the job's first failure rather than the rank
// taken for it: a rank that exited (not one in a's list) within
// fenceVictimWindow before a came, the way a rank waiting in that fence
// exits when the fence fails (MPICH's PMI_Barrier returns -1), its exit
// overtaking the report of the timeout on the way to the head.
func (g *genState) fenceCulprit(a control.Abort) bool {
	f := g.res.first
	return g.res.reason == reasonFailed && f != nil && len(a.Missing) > 0 && a.Timeout > 0 &&
		!g.failedAt.IsZero() && g.now().Sub(g.failedAt) < fenceVictimWindow && !slices.Contains(a.Missing, f.Rank)
}

// fenceVictimWindow bounds how long after a rank's failure a fence's
// timeout may still name the culprits instead (fenceCulprit).
const fenceVictimWindow = time.Second

// onAbort: a rank that ends the job through PMI (or never reached a
// fence) is a failure, and its host leaves the generation's fences.
func (g *genState) onAbort(e rankAborted) {
	h := g.h
	if e.Generation != g.gen {
		return
	}
	rp := g.recOf(e.Rank)
	if rp == nil {
		return
	}
	r := *rp
	why, code := h.abortReason(e.Abort)
	// Nobody waits on it in a fence any more.
	if j, _ := g.dyn.spawned(e.Rank); j != nil {
		j.store.Leave(g.gen, slices.Index(j.nodes, e.node), fmt.Sprintf("%s on %s %s", r.name(), r.Host, why))
	} else {
		h.store.Leave(g.gen, e.node, fmt.Sprintf("%s on %s %s", r.name(), r.Host, why))
	}
	replace := g.res.reason != reasonSuccess
	if replace && !g.fenceCulprit(e.Abort) {
		return
	}
	r.Err, r.Code, r.End = why, code, g.now()
	if r.PID == 0 {
		r.PID = -1
	}
	if replace {
		// The job is stopping already; the culprit takes the first's place, once.
		g.res.first, g.failedAt = &r, time.Time{}
		return
	}
	g.end(result{reason: reasonFailed, first: &r})
	g.stopOnce()
}

// abortReason says why an aborting rank ended the job, and the code it
// ends with.
func (h *head) abortReason(x control.Abort) (string, int) {
	switch {
	case x.Early && x.Msg != "":
		return x.Msg, 1
	case x.Early:
		return "left before MPI_Finalize (its PMI connection closed)", 1
	case len(x.Missing) > 0:
		return fmt.Sprintf("never reached a rendezvous fence within %v (--rendezvous-timeout); ranks that never arrived: %s",
			x.Timeout, h.rankList(x.Missing)), ExitTimeout
	case x.Msg != "":
		return fmt.Sprintf("called MPI_Abort(%d): %s", x.Code, x.Msg), x.Code
	}
	return fmt.Sprintf("called MPI_Abort(%d)", x.Code), x.Code
}

// onDone: the agent's ranks of this generation have all ended.
//
// An agent that was sent more Launch frames (a spawned job's) than its
// Done counts sends another Done once those ranks end too.
func (g *genState) onDone(e agentDone) {
	if e.Generation != g.gen || max(e.Launches, 1) < g.sent[e.node] || g.agentDone[e.node] || g.h.agents[e.node].gone {
		return
	}
	g.h.agents[e.node].maxRSS = e.MaxRSS
	g.agentDone[e.node] = true
	g.pending--
}

// onFence answers a host's fence when every host has reached it; the
// store waits for them, so the answer comes off the loop.
func (g *genState) onFence(e fenceReached) {
	st := g.fenceStore(e.Job)
	if st == nil {
		return
	}
	go g.h.answerFence(g.ctx, st, e.node, e.Fence)
}

// onOutputLost: a rank's output cannot reach its file; the job stops.
func (g *genState) onOutputLost(e outputLost) {
	if g.end(result{reason: reasonOutputLost, lost: e.why}) {
		g.stopOnce()
	}
}

// onAgentError says what went wrong on the agent's host.
func (g *genState) onAgentError(e agentError) {
	g.h.notef("gorun: agent on %s: %s\n", g.h.plan.Nodes[e.node].Host.Name, e.msg)
}

// onAgentSignaled: a resource manager signalled its step's agents, which
// passed it to their ranks: the ranks it did not reach (those gorun
// started itself) get it too, once.
func (g *genState) onAgentSignaled(e agentSignaled) {
	now := g.now()
	if now.Sub(g.lastSig[e.sig]) < time.Second || now.Sub(g.headSig[e.sig]) < time.Second {
		return
	}
	g.lastSig[e.sig] = now
	g.h.notef("gorun: %s got %s from outside: forwarded to every rank\n", g.h.plan.Nodes[e.node].Host.Name, sigName(e.sig))
	g.h.broadcastUnstepped(control.TypeSignal, control.Signal{Signal: int(e.sig)})
	if e.sig != syscall.SIGUSR1 && e.sig != syscall.SIGUSR2 {
		g.interrupts++
		g.endBySignal(e.sig)
	}
}

// endBySignal ends the generation as one that a signal from outside
// stopped. A SIGTERM that comes within signalCauseWindow of an agent's
// loss, or of a rank's death by SIGTERM or SIGKILL, takes that failure's
// place: whatever sent it (Slurm cancelling the job: srun answers the
// SIGTERM with SIGKILL to its step) killed the agent or rank too, and
// that end overtook the signal on the way here. A user's interrupt is no
// such cause, and leaves the failure first.
func (g *genState) endBySignal(sig syscall.Signal) {
	r := result{reason: reasonSignal, signal: sig}
	if g.end(r) || sig != syscall.SIGTERM {
		return
	}
	now := g.now()
	switch {
	case g.res.reason == reasonAgentLost && !g.lostAt.IsZero() && now.Sub(g.lostAt) < signalCauseWindow:
		g.res, g.lostAt = r, time.Time{}
	case g.res.reason == reasonFailed && g.res.first != nil && !g.failedAt.IsZero() && now.Sub(g.failedAt) < signalCauseWindow &&
		(g.res.first.SignalNum == int(syscall.SIGTERM) || g.res.first.SignalNum == int(syscall.SIGKILL)):
		// A rank killed just before by SIGTERM or SIGKILL that gorun
		// did not send: the same sender's (slurmstepd signals the
		// ranks of the batch host's step too).
		g.res, g.failedAt = r, time.Time{}
	}
}

// signalCauseWindow bounds how long after an agent's loss a signal may
// still be taken for its cause (endBySignal).
const signalCauseWindow = 2 * time.Second

// onSignal forwards a signal gorun got to every rank; a second interrupt
// kills them.
func (g *genState) onSignal(e signalReceived) {
	h := g.h
	g.headSig[e.sig] = g.now()
	if g.now().Sub(g.lastSig[e.sig]) < time.Second && g.interrupts == 1 {
		return // the same signal, which a step's agent reported first
	}
	if e.sig == syscall.SIGUSR1 || e.sig == syscall.SIGUSR2 {
		h.broadcast(control.TypeSignal, control.Signal{Signal: int(e.sig)})
		return
	}
	g.interrupts++
	g.endBySignal(e.sig)
	if g.interrupts == 1 {
		h.notef("gorun: got %s: forwarded to every rank (send it again to kill them)\n", sigName(e.sig))
		h.broadcast(control.TypeSignal, control.Signal{Signal: int(e.sig)})
	} else {
		h.notef("gorun: got %s again: killing every rank\n", sigName(e.sig))
		g.stop(0)
	}
}

// onTimeout: --timeout expired; the job stops.
func (g *genState) onTimeout() {
	g.timeout = nil
	if !g.stopping {
		g.h.timeoutVerdict(g.ctx)
	}
	g.end(result{reason: reasonTimeout})
	g.h.notef("gorun: --timeout %v expired: stopping the job\n", g.h.o.Timeout)
	g.stop(g.h.o.Grace)
}

// onGraceExpired kills the agents that did not confirm their ranks ended.
func (g *genState) onGraceExpired() {
	g.escalate = nil
	for i, a := range g.h.agents {
		if a.gone {
			continue
		}
		if a.ended.Load() {
			// Its channel ended and its loss was not seen: it never
			// will be, so it is lost now.
			g.onAgentLost(agentLost{fromAgent{i}, errors.New("its control channel ended")})
			continue
		}
		g.h.notef("gorun: agent on %s did not confirm its ranks ended; killing it\n", g.h.plan.Nodes[i].Host.Name)
		a.proc.Kill()
	}
}

// onCancelled: Run's context is done; the job stops as on --timeout.
func (g *genState) onCancelled(e cancelled) {
	g.done = nil
	g.end(result{reason: reasonCancelled})
	g.h.notef("gorun: cancelled (%v): stopping the job\n", e.err)
	g.stopOnce()
}

// compareTopo warns, once per host, when a host's topology differs from
// the first one reported (bindings then differ across hosts too).
func (h *head) compareTopo(node int, topo string) {
	if topo == "" || h.topoWarned[node] {
		return
	}
	if h.topoFirst == "" {
		h.topoFirst, h.topoFirstNode = topo, node
		return
	}
	if topo != h.topoFirst {
		if h.topoWarned == nil {
			h.topoWarned = map[int]bool{}
		}
		h.topoWarned[node] = true
		h.notef("gorun: warning: %s differs from %s: %s, against %s\n", h.plan.Nodes[node].Host.Name,
			h.plan.Nodes[h.topoFirstNode].Host.Name, topo, h.topoFirst)
	}
}

// subtreeNote names the hosts that a lost agent was the launch tree's way
// to, which are lost with it.
func (h *head) subtreeNote(node int) string {
	sub := subtree(node, len(h.plan.Nodes), h.o.Fanout)
	if len(sub) == 0 {
		return ""
	}
	names := make([]string, 0, 8)
	for _, n := range sub[:min(len(sub), 8)] {
		names = append(names, h.plan.Nodes[n].Host.Name)
	}
	more := ""
	if len(sub) > len(names) {
		more = fmt.Sprintf(" and %d more", len(sub)-len(names))
	}
	return fmt.Sprintf("; the %s below it in the launch tree went with it: %s%s", plural.Of(len(sub), "host"), strings.Join(names, ", "), more)
}

// markLost records the ranks of a lost agent as ended.
func (h *head) markLost(node, gen int) {
	now := time.Now()
	for _, r := range h.plan.Nodes[node].Ranks {
		if h.rec[r].End.IsZero() || h.rec[r].Generation != gen {
			h.rec[r].Generation, h.rec[r].End, h.rec[r].Err = gen, now, "its host's agent was lost"
		}
	}
}

// notFoundHint is the way for a program that a host's PATH lacks and
// gorun's own PATH has, given the agent's "PROG: command not found in
// PATH (...)": most often a rank on another host, whose PATH is its ssh
// login's, not gorun's (mpirun's ranks have the same PATH; horovodrun
// passes its own with -x PATH).
func notFoundHint(err string) string {
	prog, _, ok := strings.Cut(err, ": command not found in PATH")
	if !ok || prog == "" || strings.ContainsAny(prog, "/ ") {
		return ""
	}
	p, lerr := exec.LookPath(prog)
	if lerr != nil || !filepath.IsAbs(p) {
		return ""
	}
	return fmt.Sprintf("; gorun's PATH has it (%s): give its full path, or pass gorun's PATH to the ranks with -x PATH", p)
}
