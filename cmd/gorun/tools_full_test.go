//go:build !launcher_only

package main

import (
	"slices"
	"testing"

	"github.com/gorun/gorun/collbench"
)

// The launcher build's copy of the collectives that gorun bench takes
// (benchCollectives) is collbench's list.
func TestBenchCollectives(t *testing.T) {
	if !slices.Equal(benchCollectives, collbench.Collectives) || benchAll != collbench.All {
		t.Errorf("benchCollectives %q (%q), collbench %q (%q)", benchCollectives, benchAll, collbench.Collectives, collbench.All)
	}
}
