package slurmtest

import (
	"context"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// Need ends t unless this machine can run a cluster (root and the
// packages: see Check): the test is skipped, saying why, or fails where
// the CI environment variable is set, since CI must run these tests
// (package internal/testenv decides). In -short mode it skips t in any
// case: a cluster needs root and takes seconds to start.
func Need(t testing.TB) {
	t.Helper()
	testenv.SkipShort(t, "slurmtest clusters need root and take seconds to start")
	if err := Check(); err != nil {
		testenv.Missing(t, err.Error())
	}
}

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one, or in -short mode,
// Need ends the test first.
//
// The daemons also get SIGKILL if the thread that started them exits, which
// happens when the test binary dies without running its cleanups (a -timeout
// panic, a signal): so call Start from a goroutine that is not locked to its
// thread (runtime.LockOSThread). The slurmstepd's and tasks of jobs that were
// running then survive, with the state directory; `slurmtest --state DIR
// down` (or Load(DIR) and Down) removes them.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o.pdeathsig = true
	c, err := Up(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("slurmtest: down: %v", err)
		}
	})
	return c
}
