package hostfile

import (
	"fmt"
	"strings"

	"github.com/gorun/gorun/internal/editdist"
)

// UnknownHostError is a host name that is not among the hosts it must be
// one of (a rankfile's host not in the host list, a filter's host not in
// the hostfile, a -H host not in an allocation), with the closest name
// that is, if any: a typo (-H h1,hh2) gets "did you mean h2?".
type UnknownHostError struct {
	Name    string // the name as given
	Suggest string // the closest known name; "" when none is close
	What    string // what named it, for the message ("rank 3"); may be ""
}

// Error returns "rank 3: host hh2 is not among the hosts (did you mean
// h2?)".
func (e *UnknownHostError) Error() string {
	var b strings.Builder
	if e.What != "" {
		b.WriteString(e.What + ": ")
	}
	fmt.Fprintf(&b, "host %s is not among the hosts", e.Name)
	if e.Suggest != "" {
		fmt.Fprintf(&b, " (did you mean %s?)", e.Suggest)
	}
	return b.String()
}

// Closest returns the name in names nearest to name by edit distance,
// for a "did you mean": at most two edits, and fewer than half of name's
// length; "" when none is that close or name is among names. Ties go to
// the first in names.
func Closest(name string, names []string) string {
	best, bestDist := "", 3
	for _, n := range names {
		if n == name {
			return ""
		}
		if d := editdist.Distance(name, n); d < bestDist && d*2 < len(name) {
			best, bestDist = n, d
		}
	}
	return best
}
