package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorun/gorun/launcher/control"
)

// defaultProbeTimeout bounds an agent's answer to a probe whose Timeout is
// unset.
const defaultProbeTimeout = 10 * time.Second

// answerProbe answers one of the head's probes, in its own goroutine: a
// probe reads the ranks and the host and changes nothing in them.
func (a *agent) answerProbe(q control.Probe) {
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = defaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		data any
		err  error
	)
	switch q.Kind {
	case control.ProbeStacks:
		data, err = a.probeStacks(ctx)
	case control.ProbeStatus:
		data, err = a.probeStatus(ctx)
	case control.ProbeInfo:
		data, err = a.probeInfo(ctx)
	default:
		err = fmt.Errorf("unknown probe %q", q.Kind)
	}
	rep := control.ProbeReply{ID: q.ID}
	if err == nil {
		rep.Data, err = json.Marshal(data)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	a.w.Send(control.TypeProbeRe, rep)
}

// probeStacks returns every local rank's stacks.
func (a *agent) probeStacks(ctx context.Context) (any, error) {
	return nil, fmt.Errorf("stacks: not yet")
}

// probeStatus returns every local rank's state.
func (a *agent) probeStatus(ctx context.Context) (any, error) {
	return nil, fmt.Errorf("status: not yet")
}
