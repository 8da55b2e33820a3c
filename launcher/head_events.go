package launcher

import (
	"context"
	"fmt"
	"syscall"

	"github.com/gorun/gorun/launcher/control"
)

// event is one thing the head reacts to. An agent's frames become events
// in [head.read]; the head's own signals, timers and context become events
// in [genState.next]. Each concrete type below has one handler in
// head_generation.go ([genState.handle] names them); the head's other
// waits (MASTER_ADDR, --print-env, gorun check) pick the replies they
// asked for.
type event interface {
	// origin is the node whose agent the event came from, -1 for the
	// head's own.
	origin() int
}

// fromAgent is embedded in the events an agent caused.
type fromAgent struct{ node int }

func (e fromAgent) origin() int { return e.node }

// fromHead is embedded in the events of the head's own.
type fromHead struct{}

func (fromHead) origin() int { return -1 }

// Events from agents.
type (
	// agentLost: the agent's control channel failed or ended, or it sent
	// a frame the head cannot read.
	agentLost struct {
		fromAgent
		err error
	}
	// ranksStarted: some of the agent's ranks run.
	ranksStarted struct {
		fromAgent
		control.Started
	}
	// rankExited: a rank ended, or could not start.
	rankExited struct {
		fromAgent
		control.Exited
	}
	// agentDone: every rank of a generation on the agent's host has ended.
	agentDone struct {
		fromAgent
		control.Done
	}
	// rankAborted: a rank called MPI_Abort, left before MPI_Finalize, or
	// never reached a fence ([head.fenceTimedOut] makes that one).
	rankAborted struct {
		fromAgent
		control.Abort
	}
	// fenceReached: the host's ranks reached a rendezvous fence.
	fenceReached struct {
		fromAgent
		control.Fence
	}
	// agentSignaled: the agent got a signal from outside (a resource
	// manager signalling its step) and forwarded it to its ranks.
	agentSignaled struct {
		fromAgent
		sig syscall.Signal
	}
	// agentError: an agent-side failure that is not one rank's.
	agentError struct {
		fromAgent
		msg string
	}
	// outputLost: a rank's output could not be written to its
	// --output-filename file.
	outputLost struct {
		fromAgent
		why string
	}
	// envReply answers --print-env's Launch.
	envReply struct {
		fromAgent
		control.Env
	}
	// routeReply answers the Route that picks MASTER_ADDR.
	routeReply struct {
		fromAgent
		control.RouteReply
	}
	// checkReply answers one of gorun check's questions.
	checkReply struct {
		fromAgent
		control.CheckReply
	}
	// probeReply answers a probe (gorun stacks, gorun status, the hang
	// watch, --record).
	probeReply struct {
		fromAgent
		control.ProbeReply
	}
)

// Events of the head's own.
type (
	// signalReceived: gorun itself got a signal.
	signalReceived struct {
		fromHead
		sig syscall.Signal
	}
	// timedOut: --timeout expired.
	timedOut struct{ fromHead }
	// graceExpired: agents told to stop their ranks have not all
	// confirmed within the grace period and the head's margin.
	graceExpired struct{ fromHead }
	// cancelled: Run's context is done.
	cancelled struct {
		fromHead
		err error
	}
)

// decodeEvent turns an agent's frame into its event. Frames that are not
// events (output, stdin acks, heartbeats, a launch tree's relays) are
// [head.inBand]'s.
func decodeEvent(node int, f control.Frame) (event, error) {
	from := fromAgent{node}
	switch f.Type {
	case control.TypeStarted:
		return decoded(f, func(v control.Started) event { return ranksStarted{from, v} })
	case control.TypeExited:
		return decoded(f, func(v control.Exited) event { return rankExited{from, v} })
	case control.TypeDone:
		return decoded(f, func(v control.Done) event { return agentDone{from, v} })
	case control.TypeEnv:
		return decoded(f, func(v control.Env) event { return envReply{from, v} })
	case control.TypeFence:
		return decoded(f, func(v control.Fence) event { return fenceReached{from, v} })
	case control.TypeAbort:
		return decoded(f, func(v control.Abort) event { return rankAborted{from, v} })
	case control.TypeSignaled:
		return decoded(f, func(v control.Signal) event { return agentSignaled{from, syscall.Signal(v.Signal)} })
	case control.TypeCheckRe:
		return decoded(f, func(v control.CheckReply) event { return checkReply{from, v} })
	case control.TypeRouteRe:
		return decoded(f, func(v control.RouteReply) event { return routeReply{from, v} })
	case control.TypeError:
		return decoded(f, func(v control.Error) event { return agentError{from, v.Msg} })
	case control.TypeProbeRe:
		return decoded(f, func(v control.ProbeReply) event { return probeReply{from, v} })
	case control.TypeDyn:
		return decoded(f, func(v control.Dyn) event { return dynRequested{from, v} })
	case control.TypeDynRe:
		return decoded(f, func(v control.DynReply) event { return dynAnswered{from, v} })
	}
	return nil, fmt.Errorf("%w: unexpected %s frame", control.ErrProtocol, f.Type)
}

// decoded decodes f's payload as a T and wraps it in its event E: the
// head's ([decodeEvent]) or the agent's ([decodeHeadFrame]).
func decoded[T, E any](f control.Frame, wrap func(T) E) (E, error) {
	var v T
	if err := f.Decode(&v); err != nil {
		var none E
		return none, err
	}
	return wrap(v), nil
}

// nextEvent waits for the agents' next event, or for ctx's end.
func (h *head) nextEvent(ctx context.Context) (event, error) {
	select {
	case e := <-h.events:
		return e, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
