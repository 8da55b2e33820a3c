package main

import (
	"strings"
	"testing"
	"time"
)

func TestRunsEveryRank(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "-np", "4", "sh", "-c", `echo "rank $RANK of $WORLD_SIZE"`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for i := range 4 {
		want := "rank " + string(rune('0'+i)) + " of 4"
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}
