package launcher

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gorun/gorun/jobs"
)

// WriteText prints the status as gorun status does: a header, one line
// per rank, and the straggler report of Go ranks' collectives.
func (s *JobStatus) WriteText(w io.Writer, now time.Time) error {
	hosts := "hosts"
	if len(s.Hosts) == 1 {
		hosts = "host"
	}
	fmt.Fprintf(w, "job %s: %s (%d ranks on %d %s), up %s, %d restart(s)\n", s.ID, strings.Join(s.Argv, " "),
		len(s.Ranks), len(s.Hosts), hosts, jobs.Age(now.Sub(s.Started)), s.Restarts)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "RANK\tHOST\tPID\tSTATE\tCPU%\tRSS\tLAST OUTPUT\tRENDEZVOUS\tCOLLECTIVES\tRESTARTS\t")
	for _, r := range s.Ranks {
		pid, out := "-", "never"
		if r.PID > 0 {
			pid = fmt.Sprint(r.PID)
		}
		if r.SinceOutput >= 0 {
			out = fmt.Sprintf("%.1fs ago", r.SinceOutput)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.1f\t%s\t%s\t%d\t%d\t%d\t\n", r.Rank, r.Host, pid, r.State, r.CPUPercent,
			sizeKB(r.RSSKB), out, r.Ops, r.Calls, r.Restarts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Stragglers != nil && s.Stragglers.Calls > 0 {
		fmt.Fprintf(w, "stragglers: %s\n", s.Stragglers)
	}
	if len(s.NoAnswer) > 0 {
		fmt.Fprintf(w, "no answer from the agents on %s\n", strings.Join(s.NoAnswer, ", "))
	}
	return nil
}

// sizeKB formats a size in KiB as 512K, 3.4M, 1.2G.
func sizeKB(kb int64) string {
	switch {
	case kb < 1024:
		return fmt.Sprintf("%dK", kb)
	case kb < 1024*1024:
		return fmt.Sprintf("%.1fM", float64(kb)/1024)
	}
	return fmt.Sprintf("%.1fG", float64(kb)/(1024*1024))
}
