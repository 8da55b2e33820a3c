package peerargs

import (
	"strings"

	"github.com/gorun/gorun/internal/editdist"
)

// Closest returns the name in names nearest to word by edit distance, for
// a "did you mean": one of at most two edits, and no closer to word than
// a third of its length, else "". A name that is word's opposite (word
// with "no" in front taken away or put there: nooversubscribe and
// oversubscribe) is never suggested, nor is a name of one letter (any
// other letter is one edit away). Ties go to the first in names.
func Closest(word string, names []string) string {
	norm := strings.ToLower(strings.ReplaceAll(word, "_", "-"))
	best, bestDist := "", 3
	for _, n := range names {
		if len(n) < 2 || opposite(norm, strings.ReplaceAll(n, "_", "-")) {
			continue
		}
		d := editdist.Distance(norm, strings.ToLower(strings.ReplaceAll(n, "_", "-")))
		if d < bestDist && d*3 <= len(norm) {
			best, bestDist = n, d
		}
	}
	return best
}

// opposite reports whether a and b are a flag and its negation.
func opposite(a, b string) bool {
	trim := func(s string) string { return strings.TrimPrefix(strings.TrimPrefix(s, "no-"), "no") }
	return a != b && (trim(a) == b || trim(b) == a)
}
