package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// Need ends t unless this machine can run fixture name's clusters (check
// returns nil): the test is skipped, saying why, or fails where the CI
// environment variable is set, since CI must run these tests (package
// internal/testenv decides). In -short mode it skips t in any case: a
// cluster needs root and takes seconds to start.
func Need(t testing.TB, name string, check func() error) {
	t.Helper()
	testenv.SkipShort(t, name+" clusters need root and take seconds to start")
	if err := check(); err != nil {
		testenv.Missing(t, err.Error())
	}
}

// Downer is a cluster that Start tears down.
type Downer interface {
	// Down stops the cluster and removes its state directory.
	Down() error
}

// Start runs up (with 2 minutes to bring a cluster up) for a test, failing
// it on error, and tears the cluster down in t.Cleanup, also when the test
// fails. Call Need first.
func Start[C Downer](t testing.TB, name string, up func(ctx context.Context) (C, error)) C {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Errorf("%s: down: %v", name, err)
		}
	})
	return c
}
