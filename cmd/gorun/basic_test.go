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

// --trace prints the job's phases in one line, in the order they happen;
// the first output, when a rank wrote some, comes before all exited.
func TestTrace(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`gorun: trace \(ms from gorun's start\): flags, config, plan ([\d.]+); agents started ([\d.]+); agents up ([\d.]+); ranks started ([\d.]+); first output ([\d.]+|-); first fence -; all exited ([\d.]+); agents gone ([\d.]+)\n`)
	for _, tt := range []struct {
		prog   []string
		output bool
	}{
		{[]string{"true"}, false},
		{[]string{"echo", "hello"}, true},
	} {
		r := runGorun(t, 30*time.Second, nil, append([]string{"--trace", "-np", "2"}, tt.prog...)...)
		m := line.FindStringSubmatch(r.stderr)
		if r.code != 0 || m == nil {
			t.Fatalf("%v: exit %d, no trace line:\n%s", tt.prog, r.code, r.stderr)
		}
		prev := 0.0
		for i, name := range []string{"plan", "agents started", "agents up", "ranks started"} {
			v, _ := strconv.ParseFloat(m[i+1], 64)
			if v < prev {
				t.Errorf("%s at %v ms, before the phase before it (%v ms):\n%s", name, v, prev, r.stderr)
			}
			prev = v
		}
		exited, _ := strconv.ParseFloat(m[6], 64)
		gone, _ := strconv.ParseFloat(m[7], 64)
		if exited < prev || gone < exited {
			t.Errorf("all exited at %v ms, agents gone at %v, ranks started at %v:\n%s", exited, gone, prev, r.stderr)
		}
		if out, err := strconv.ParseFloat(m[5], 64); tt.output != (err == nil) || err == nil && (out <= 0 || out > exited) {
			t.Errorf("%v: first output %q (all exited at %v ms):\n%s", tt.prog, m[5], exited, r.stderr)
		}
	}
	if r := runGorun(t, 30*time.Second, nil, "-np", "1", "true"); strings.Contains(r.stderr, "trace") {
		t.Errorf("a trace without --trace:\n%s", r.stderr)
	}
}
