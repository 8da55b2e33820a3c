package testhosts

import (
	"context"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// Need ends t unless this machine can run clusters (root and the tools:
// see Check): the test is skipped, saying why, or fails where the CI
// environment variable is set, since CI must run these tests (package
// internal/testenv decides). In -short mode it skips t in any case: a
// cluster needs root and takes seconds to start.
func Need(t testing.TB) {
	t.Helper()
	testenv.SkipShort(t, "testhosts clusters need root and take seconds to start")
	if err := Check(); err != nil {
		testenv.Missing(t, err.Error())
	}
}

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one, or in -short mode,
// Need ends the test first.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Up(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("testhosts: down: %v", err)
		}
	})
	return c
}
