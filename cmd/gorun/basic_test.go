package main

import (
	"regexp"
	"strconv"
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

// --trace prints the job's phases in one line, in the order they happen.
func TestTrace(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "--trace", "-np", "2", "true")
	m := regexp.MustCompile(`gorun: trace \(ms from gorun's start\): flags, config, plan ([\d.]+); agents started ([\d.]+); agents up ([\d.]+); ranks started ([\d.]+); first fence -; all exited ([\d.]+); agents gone ([\d.]+)\n`).FindStringSubmatch(r.stderr)
	if r.code != 0 || m == nil {
		t.Fatalf("exit %d, no trace line:\n%s", r.code, r.stderr)
	}
	prev := 0.0
	for i, name := range []string{"plan", "agents started", "agents up", "ranks started", "all exited", "agents gone"} {
		v, _ := strconv.ParseFloat(m[i+1], 64)
		if v < prev {
			t.Errorf("%s at %v ms, before the phase before it (%v ms):\n%s", name, v, prev, r.stderr)
		}
		prev = v
	}
	if r := runGorun(t, 30*time.Second, nil, "-np", "1", "true"); strings.Contains(r.stderr, "trace") {
		t.Errorf("a trace without --trace:\n%s", r.stderr)
	}
}
