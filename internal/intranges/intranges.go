// Package intranges formats sets of integers (ranks, CPUs) the way
// gorun prints them everywhere: ascending, runs as ranges, 0-3,8,10-11.
package intranges

import (
	"slices"
	"strconv"
	"strings"
)

// Format writes v, sorted and without repeats, with runs of consecutive
// numbers as ranges: 0-3,8,10-11. v itself is not changed.
func Format(v []int) string {
	r := slices.Clone(v)
	slices.Sort(r)
	r = slices.Compact(r)
	var b strings.Builder
	for i := 0; i < len(r); {
		j := i
		for j+1 < len(r) && r[j+1] == r[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(r[j]))
		}
		i = j + 1
	}
	return b.String()
}
