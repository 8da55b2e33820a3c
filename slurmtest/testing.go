package slurmtest

import (
	"context"
	"os"
	"testing"
	"time"
)

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one (not root, a package
// missing: see Check), the test fails when the CI environment variable is
// set (CI must run these tests, never skip them) and is skipped otherwise.
//
// The daemons also get SIGKILL if the thread that started them exits, which
// happens when the test binary dies without running its cleanups (a -timeout
// panic, a signal): so call Start from a goroutine that is not locked to its
// thread (runtime.LockOSThread). The slurmstepd's and tasks of jobs that were
// running then survive, with the state directory; `slurmtest --state DIR
// down` (or Load(DIR) and Down) removes them.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI is set: these tests must run)", err)
		}
		t.Skipf("%v", err)
	}
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
