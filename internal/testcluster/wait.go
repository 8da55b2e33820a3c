package testcluster

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Wait is how a cluster waits for one of its daemons to be ready.
type Wait struct {
	// Name prefixes the errors: the fixture's package.
	Name string
	// Tick is the first pause between two polls; it doubles up to MaxTick.
	Tick, MaxTick time.Duration
	// Exited names a watched process that has exited, or "".
	Exited func() string
	// Tails are the ends of the daemons' logs, added to every error.
	Tails func() string
}

// For polls ready until it is true, ctx is done, timeout passes or a
// watched process exits. more adds to the error of a timeout.
func (w Wait) For(ctx context.Context, what string, timeout time.Duration, ready func() bool, more ...func() string) error {
	deadline := time.Now().Add(timeout)
	tick := w.Tick
	for {
		if ready() {
			return nil
		}
		if w.Exited != nil {
			if name := w.Exited(); name != "" {
				return fmt.Errorf("%s: %s exited while waiting for %s%s", w.Name, name, what, w.tails())
			}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, f := range more {
				b.WriteString("; " + f())
			}
			return fmt.Errorf("%s: timed out after %v waiting for %s%s%s", w.Name, timeout, what, b.String(), w.tails())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for %s: %w", w.Name, what, ctx.Err())
		case <-time.After(tick):
		}
		tick = min(2*tick, w.MaxTick)
	}
}

func (w Wait) tails() string {
	if w.Tails == nil {
		return ""
	}
	return w.Tails()
}
