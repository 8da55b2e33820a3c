package launcher

import (
	"cmp"
	"context"

	"github.com/gorun/gorun/jobrecord"
)

// probeInfo describes the agent's host for a job record (--record): its
// versions and its environment, redacted (see jobrecord.Gather), under
// the host's name in the plan.
func (a *agent) probeInfo(ctx context.Context) (any, error) {
	info := jobrecord.Gather(ctx, a.o.Version)
	info.Host = cmp.Or(a.o.Host, info.Host)
	return info, nil
}
