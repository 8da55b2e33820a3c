package testhosts

import (
	"context"
	"os"
	"testing"
	"time"
)

// Start brings a cluster up for a test and tears it down in t.Cleanup, also
// when the test fails. If this machine cannot run one (not root, a tool
// missing: see Check), the test fails when the CI environment variable is set
// (CI must run these tests, never skip them) and is skipped otherwise.
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
