package jobs

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteList prints jobs as gorun ps does: one line each, with its id,
// state, ranks, hosts, age, head and command.
func WriteList(w io.Writer, jobs []Info, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tRANKS\tHOSTS\tAGE\tHEAD\tCOMMAND")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s:%d\t%s\n", j.ID, j.State, j.Ranks, hostList(j.Hosts), Age(now.Sub(j.Started)),
			j.Host, j.PID, strings.Join(j.Argv, " "))
	}
	return tw.Flush()
}

// hostList names up to three hosts, and counts the rest.
func hostList(h []string) string {
	if len(h) <= 3 {
		return strings.Join(h, ",")
	}
	return fmt.Sprintf("%s,%s,... (%d)", h[0], h[1], len(h))
}

// Age formats a duration as ps does: 42s, 3m05s, 2h07m, 3d04h.
func Age(d time.Duration) string {
	s := int(d.Seconds())
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}
