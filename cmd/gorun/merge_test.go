package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// floodScript prints, on every rank, lines "step i" (alike on every rank)
// and "rank R line i" (its own), one write each.
func floodScript(lines int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "step $i"; echo "rank $RANK line $i"; i=$((i+1)); done`, lines/2)
}

// floodWant is what floodScript prints on rank r.
func floodWant(r, lines int) []string {
	var want []string
	for i := range lines / 2 {
		want = append(want, "step "+strconv.Itoa(i), "rank "+strconv.Itoa(r)+" line "+strconv.Itoa(i))
	}
	return want
}

// taggedLine is a line of gorun's output with --tag-output: one rank's, or
// with --merge-output several ranks'.
var taggedLine = regexp.MustCompile(`^\[([0-9,\-]+)\] (.*)$`)

// ranksOf expands a rank list of --merge-output: "0-3,5,7" is 0 1 2 3 5 7.
func ranksOf(t *testing.T, list string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || b < a {
			t.Fatalf("bad rank list %q", list)
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out
}

// 16 ranks print 2000 lines each, half of them alike: with --merge-output
// expanding the rank lists gives every rank's every line once, in order,
// in fewer lines than the ranks printed. Without it every line comes as
// the rank printed it. The times of both runs are logged.
func TestMergeOutputFlood(t *testing.T) {
	t.Parallel()
	const ranks, lines = 16, 2000
	script := floodScript(lines)

	r := runGorun(t, 120*time.Second, nil, "-np", strconv.Itoa(ranks), "--tag-output", "--merge-output", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	got := make([][]string, ranks)
	out := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	merged := 0
	for _, l := range out {
		m := taggedLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line without ranks: %q", l)
		}
		rs := ranksOf(t, m[1])
		if len(rs) > 1 {
			merged++
		}
		for _, k := range rs {
			if k < 0 || k >= ranks {
				t.Fatalf("rank %d in %q", k, l)
			}
			got[k] = append(got[k], m[2])
		}
	}
	for k := range ranks {
		if want := floodWant(k, lines); !slices.Equal(got[k], want) {
			i := 0
			for i < min(len(got[k]), len(want)) && got[k][i] == want[i] {
				i++
			}
			lo := max(0, i-2)
			t.Fatalf("rank %d: %d lines, want %d; they differ from line %d on: got %q, want %q", k, len(got[k]), len(want), i,
				got[k][lo:min(len(got[k]), i+3)], want[lo:min(len(want), i+3)])
		}
	}
	if len(out) >= ranks*lines {
		t.Errorf("%d output lines for the %d the ranks printed: nothing merged", len(out), ranks*lines)
	}
	t.Logf("--merge-output: %d lines of %d ranks in %d output lines (%d of several ranks) in %v",
		ranks*lines, ranks, len(out), merged, r.elapsed.Round(time.Millisecond))

	plain := runGorun(t, 120*time.Second, nil, "-np", strconv.Itoa(ranks), "sh", "-c", script)
	if plain.code != 0 {
		t.Fatalf("without --merge-output: exit %d: %s", plain.code, plain.stderr)
	}
	var want []string
	for k := range ranks {
		want = append(want, floodWant(k, lines)...)
	}
	gotPlain := strings.Split(strings.TrimSuffix(plain.stdout, "\n"), "\n")
	slices.Sort(want)
	slices.Sort(gotPlain)
	if !slices.Equal(gotPlain, want) {
		t.Fatalf("without --merge-output: %d lines, want the %d the ranks printed", len(gotPlain), len(want))
	}
	t.Logf("without it: %d lines in %v", len(gotPlain), plain.elapsed.Round(time.Millisecond))
}
