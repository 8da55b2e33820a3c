package gridenginetest

import (
	"context"
	"testing"

	"github.com/gorun/gorun/internal/testcluster"
)

// Need ends t unless this machine can run a cluster (root and the
// packages: see Check): the test is skipped, saying why, or fails where
// the CI environment variable is set, since CI must run these tests
// (package internal/testenv decides). In -short mode it skips t in any
// case: a cluster needs root and takes seconds to start.
func Need(t testing.TB) {
	t.Helper()
	testcluster.Need(t, "gridenginetest", Check)
}

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one, or in -short mode,
// Need ends the test first.
//
// The processes Up starts also get SIGKILL if the thread that started them
// exits, which happens when the test binary dies without running its
// cleanups (a -timeout panic, a signal): so call Start from a goroutine
// that is not locked to its thread (runtime.LockOSThread). The jobs'
// processes then survive, with the state directory and the unreachable
// route; `gridenginetest --state DIR down` (or Load(DIR) and Down) removes
// them.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	o.pdeathsig = true
	return testcluster.Start(t, "gridenginetest", func(ctx context.Context) (*Cluster, error) { return Up(ctx, o) })
}
