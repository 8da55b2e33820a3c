package launcher

import (
	"context"
	"fmt"
)

// probeInfo describes the agent's host for a job record (--record).
func (a *agent) probeInfo(ctx context.Context) (any, error) {
	return nil, fmt.Errorf("host info: not yet")
}
