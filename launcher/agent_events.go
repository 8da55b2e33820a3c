// This file holds the agent's events: what the head's frames become, the
// agent's own (signals, timers, ranks' ends, its servers' questions to the
// head, its launch tree), the goroutine that reads the frames, and the
// loop's two halves, next and handle. Each event has one handler; the
// handlers live with their concern (agent.go lists the files).

package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/gorun/gorun/launcher/control"
)

// agentEvent is one thing the agent reacts to. The head's frames become
// events in [agent.read]; signals, timers and ctx's end in [agent.next];
// the goroutines that wait on something (a rank's output, a rendezvous
// server's fence, a lower agent's start) post theirs ([agent.post]).
// [agent.handle] passes each to its handler, on the loop's goroutine.
type agentEvent interface{ agentEvent() }

// Events from the head: its frames.
type (
	// launchAsked: start a generation, a spawned job's ranks, or answer
	// --print-env (control.Launch).
	launchAsked struct{ control.Launch }
	// killAsked: stop every rank, SIGKILL after grace.
	killAsked struct{ grace time.Duration }
	// signalAsked: pass sig on to every rank.
	signalAsked struct{ sig syscall.Signal }
	// stdinArrived: a chunk of rank 0's stdin; empty: its end.
	stdinArrived struct{ control.Stdin }
	// routeAsked: which local address reaches the peers (MASTER_ADDR).
	routeAsked struct{ control.Route }
	// checkAsked: one of gorun check's questions.
	checkAsked struct{ control.Check }
	// probeAsked: gorun stacks, gorun status, the hang watch, --record.
	probeAsked struct{ control.Probe }
	// modexAsked: another host's rank wants PMIx data of one of ours.
	modexAsked struct{ control.Dyn }
	// dynReplied: the head's answer to one of our ranks' requests.
	dynReplied struct{ control.DynReply }
	// fenceReplied: a fence is complete; raw is the frame's payload,
	// which goes on to the lower agents.
	fenceReplied struct {
		control.FenceReply
		raw []byte
	}
	// kidAsked: start a lower agent of the launch tree.
	kidAsked struct{ control.Spawn }
	// relayArrived: bytes of the head's frames for a lower agent.
	relayArrived struct{ control.Relay }
	// shutdownAsked: the job is over.
	shutdownAsked struct{}
	// headGone: the head's frames ended (EOF) or could not be read.
	headGone struct{ err error }
)

// The agent's own events.
type (
	// signalCaught: the agent got a signal other than SIGCHLD.
	signalCaught struct{ sig syscall.Signal }
	// childExited: SIGCHLD, a child of the agent ended.
	childExited struct{}
	// rankEnded: a rank's process ended, with its exit code, or -1 and
	// the signal that killed it.
	rankEnded struct {
		pid, code int
		sig       syscall.Signal
		maxRSS    int64 // KiB
		ooms      int   // OOM kills while it ran, when SIGKILL ended it
	}
	// procEnded: a rank that Procs runs ended (ProcRank.Exit).
	procEnded struct {
		p    *rankProc
		code int
		sig  syscall.Signal
	}
	// rankFinished: an ended rank's output is all relayed: its end can
	// be reported. early: it left MPI without finalizing it.
	rankFinished struct {
		control.Exited
		early bool
	}
	// beatDue: time to send the head a heartbeat.
	beatDue struct{}
	// silenceDue: time to look whether the head went silent.
	silenceDue struct{ now time.Time }
	// killDue: the grace period of a kill is over.
	killDue struct{}
	// endDue: the ranks had their time to end as the agent stops.
	endDue struct{}
	// ctxDone: RunAgent's context is done.
	ctxDone struct{ err error }
	// fenceCalled: a rendezvous server of this host's ranks reached a
	// fence ([hostFencer]); reply gets the head's answer.
	fenceCalled struct {
		gen, job, node int
		puts           map[string]string
		reply          chan<- control.FenceReply
	}
	// dynCalled: a rank's request that only the head can answer
	// ([agent.dynCall]); reply gets the answer.
	dynCalled struct {
		control.Dyn
		reply chan<- control.DynReply
	}
	// kidStarted: a lower agent started (agent.spawn); kept gets
	// whether the loop keeps it.
	kidStarted struct {
		k    *kid
		proc AgentProcess
		kept chan<- bool
	}
	// kidFenced: a lower agent's subtree reached a fence.
	kidFenced struct{ control.Fence }
	// roundDue: a fence round of the subtree timed out (treeFence).
	roundDue struct{ key [2]int }
	// kidBeatDue: time to beat the lower agents, and drop silent ones.
	kidBeatDue struct{ now time.Time }
)

func (launchAsked) agentEvent()   {}
func (killAsked) agentEvent()     {}
func (signalAsked) agentEvent()   {}
func (stdinArrived) agentEvent()  {}
func (routeAsked) agentEvent()    {}
func (checkAsked) agentEvent()    {}
func (probeAsked) agentEvent()    {}
func (modexAsked) agentEvent()    {}
func (dynReplied) agentEvent()    {}
func (fenceReplied) agentEvent()  {}
func (kidAsked) agentEvent()      {}
func (relayArrived) agentEvent()  {}
func (shutdownAsked) agentEvent() {}
func (headGone) agentEvent()      {}
func (signalCaught) agentEvent()  {}
func (childExited) agentEvent()   {}
func (rankEnded) agentEvent()     {}
func (procEnded) agentEvent()     {}
func (rankFinished) agentEvent()  {}
func (beatDue) agentEvent()       {}
func (silenceDue) agentEvent()    {}
func (killDue) agentEvent()       {}
func (endDue) agentEvent()        {}
func (ctxDone) agentEvent()       {}
func (fenceCalled) agentEvent()   {}
func (dynCalled) agentEvent()     {}
func (kidStarted) agentEvent()    {}
func (kidFenced) agentEvent()     {}
func (roundDue) agentEvent()      {}
func (kidBeatDue) agentEvent()    {}

// decodeHeadFrame turns a frame from the head into its event; a heartbeat
// is none (nil). Payloads that the reader reuses are copied: the loop
// handles the event after the reader has read on.
func decodeHeadFrame(f control.Frame) (agentEvent, error) {
	switch f.Type {
	case control.TypeBeat:
		return nil, nil
	case control.TypeLaunch:
		return decoded(f, func(v control.Launch) agentEvent { return launchAsked{v} })
	case control.TypeKill:
		return decoded(f, func(v control.Kill) agentEvent { return killAsked{v.Grace} })
	case control.TypeSignal:
		return decoded(f, func(v control.Signal) agentEvent { return signalAsked{syscall.Signal(v.Signal)} })
	case control.TypeRoute:
		return decoded(f, func(v control.Route) agentEvent { return routeAsked{v} })
	case control.TypeCheck:
		return decoded(f, func(v control.Check) agentEvent { return checkAsked{v} })
	case control.TypeProbe:
		return decoded(f, func(v control.Probe) agentEvent { return probeAsked{v} })
	case control.TypeDyn:
		return decoded(f, func(v control.Dyn) agentEvent { return modexAsked{v} })
	case control.TypeDynRe:
		return decoded(f, func(v control.DynReply) agentEvent { return dynReplied{v} })
	case control.TypeSpawn:
		return decoded(f, func(v control.Spawn) agentEvent { return kidAsked{v} })
	case control.TypeShutdown:
		return shutdownAsked{}, nil
	case control.TypeStdin:
		s, err := f.Stdin()
		s.Data = bytes.Clone(s.Data)
		return stdinArrived{s}, err
	case control.TypeRelay:
		r, err := f.Relay()
		r.Data = bytes.Clone(r.Data)
		return relayArrived{r}, err
	case control.TypeFenceRe:
		if len(f.Payload) <= control.KeepAbove { // larger ones are ours to keep
			f.Payload = bytes.Clone(f.Payload)
		}
		r, err := f.FenceReply()
		return fenceReplied{r, f.Payload}, err
	}
	return nil, fmt.Errorf("%w: unexpected %s frame from the head", control.ErrProtocol, f.Type)
}

// read turns the head's frames into events until they end, after a
// shutdown frame or with the channel's error (headGone). It notes when
// the head was last heard of, for the silence watch.
func (a *agent) read(r *control.Reader) {
	for {
		f, err := r.Next()
		if err != nil {
			a.post(nil, headGone{err})
			return
		}
		a.heard.Store(time.Now().UnixNano())
		e, err := decodeHeadFrame(f)
		if err != nil {
			a.post(nil, headGone{err})
			return
		}
		if e == nil {
			continue
		}
		if a.post(nil, e) != nil {
			return
		}
		if _, ok := e.(shutdownAsked); ok {
			return
		}
	}
}

// errAgentEnded is what a goroutine gets that waits on the loop once the
// loop has ended.
var errAgentEnded = errors.New("the agent is ending")

// post hands e to the loop. It fails when ctx (nil: none) is done, or
// the loop has ended, first. An event posted as the loop ends may stay
// unhandled: one that hands the loop something to release waits for its
// answer (kidStarted).
func (a *agent) post(ctx context.Context, e agentEvent) error {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case a.events <- e:
		return nil
	case <-done:
		return ctx.Err()
	case <-a.quit:
		return errAgentEnded
	}
}

// next waits for the agent's next event: one posted (the head's frames
// among them), a signal, a heartbeat's or the silence watch's tick, the
// kill's or the end's deadline, the lower agents' heartbeat, or ctx's end.
func (a *agent) next() agentEvent {
	select {
	case e := <-a.events:
		return e
	case s := <-a.sigs:
		if s == syscall.SIGCHLD {
			return childExited{}
		}
		return signalCaught{s.(syscall.Signal)}
	case <-a.beatC:
		return beatDue{}
	case now := <-a.silenceC:
		return silenceDue{now}
	case <-a.killC:
		return killDue{}
	case <-a.endC:
		return endDue{}
	case now := <-a.kidBeatC:
		return kidBeatDue{now}
	case <-a.ctxDone:
		return ctxDone{a.ctx.Err()}
	}
}

// handle passes an event to its handler.
func (a *agent) handle(e agentEvent) {
	switch e := e.(type) {
	case launchAsked:
		a.launch(e.Launch)
	case killAsked:
		a.kill(e.grace)
	case signalAsked:
		a.signalAll(e.sig)
	case stdinArrived:
		a.onStdin(e.Stdin)
	case routeAsked:
		a.answerRoute(e.Route)
	case checkAsked:
		go func() { a.w.Send(control.TypeCheckRe, a.check(e.Check)) }()
	case probeAsked:
		a.onProbe(e.Probe)
	case modexAsked:
		go a.answerDyn(e.Dyn, a.pmix)
	case dynReplied:
		a.dynWait.deliver(e.ID, e.DynReply)
	case fenceReplied:
		a.onFenceReplied(e)
	case kidAsked:
		a.startKid(e.Spawn)
	case relayArrived:
		a.relayTo(e.Relay)
	case shutdownAsked:
		a.stop(0, nil)
	case headGone:
		a.onHeadGone(e.err)
	default:
		a.handleOwn(e)
	}
}

// handleOwn passes one of the agent's own events to its handler.
func (a *agent) handleOwn(e agentEvent) {
	switch e := e.(type) {
	case signalCaught:
		a.onSignal(e.sig)
	case childExited:
		a.reap()
	case rankEnded:
		a.onRankEnded(e)
	case procEnded:
		a.onProcEnded(e)
	case rankFinished:
		a.onFinished(e)
	case beatDue:
		a.send(control.TypeBeat, nil)
	case silenceDue:
		a.onSilence(e.now)
	case killDue:
		a.onKillDue()
	case endDue:
		a.endC, a.ending.expired = nil, true
	case ctxDone:
		a.ctxDone = nil
		a.stop(stopGraceOnEOF, e.err)
	case fenceCalled:
		a.onFenceCalled(e)
	case dynCalled:
		a.onDynCalled(e)
	case kidStarted:
		a.onKidStarted(e)
	case kidFenced:
		a.arrive(e.Fence)
	case roundDue:
		a.onRoundDue(e.key)
	case kidBeatDue:
		a.beatKids(e.now)
	}
}
