package testhosts

import (
	"context"
	"testing"

	"github.com/gorun/gorun/internal/testcluster"
)

// Need ends t unless this machine can run clusters (root and the tools:
// see Check): the test is skipped, saying why, or fails where the CI
// environment variable is set, since CI must run these tests (package
// internal/testenv decides). In -short mode it skips t in any case: a
// cluster needs root and takes seconds to start.
func Need(t testing.TB) {
	t.Helper()
	testcluster.Need(t, "testhosts", Check)
}

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one, or in -short mode,
// Need ends the test first.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	return testcluster.Start(t, "testhosts", func(ctx context.Context) (*Cluster, error) { return Up(ctx, o) })
}
