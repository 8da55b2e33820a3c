// This file holds two reports peers' users ask for: the hosts and slots a
// job may use (--display-allocation, Open MPI's), and every rank's exit
// status at the end (--print-exit-codes, Hydra's -print-all-exitcodes).

package launcher

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/hostfile"
	"github.com/gorun/gorun/internal/plural"
)

// FormatAllocation prints the hosts a job may use, with their slots, for
// --display-allocation: what the host source gave (source names it),
// before any rank is placed.
func FormatAllocation(w io.Writer, hosts []hostfile.Host, source string) error {
	if source == "" {
		source = "the host list"
	}
	fmt.Fprintf(w, "gorun: allocation: %s, %s (%s)\n", plural.Of(len(hosts), "host"), plural.Of(hostfile.Total(hosts), "slot"), source)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  host\tslots\tmax_slots")
	for _, h := range hosts {
		most := "-"
		if h.MaxSlots > 0 {
			most = strconv.Itoa(h.MaxSlots)
		}
		name := h.Name
		if h.User != "" {
			name = h.User + "@" + name
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", name, h.Slots, most)
	}
	return tw.Flush()
}

// exitStatus is a rank's end as a number: its exit code, or 128+N when
// signal N killed it (a shell's $?); -1 when it never ended.
func exitStatus(r RankRecord) int {
	switch {
	case r.SignalNum > 0:
		return 128 + r.SignalNum
	case r.End.IsZero() && r.Err == "":
		return -1
	}
	return r.Code
}

// printExitCodes prints every rank's exit status at the end of the job
// (--print-exit-codes), host by host in node order, the ranks of each in
// rank order: "gorun: exit codes: [a] 0,0 [b] 0,1". Under gorun mpiexec
// the line is Hydra's -print-all-exitcodes line, its numbers the wait
// statuses Hydra prints (code*256, or the signal number).
func (h *head) printExitCodes() {
	if !h.o.PrintExitCodes || h.plan == nil {
		return
	}
	var b strings.Builder
	if h.o.Personality == env.MPIExec {
		host, _ := os.Hostname()
		fmt.Fprintf(&b, "[mpiexec@%s] Exit codes:", host)
	} else {
		b.WriteString("gorun: exit codes:")
	}
	for _, n := range h.plan.Nodes {
		codes := make([]string, len(n.Ranks))
		for i, r := range n.Ranks {
			st := -1
			if r < len(h.rec) {
				st = exitStatus(h.rec[r])
				if h.o.Personality == env.MPIExec && st >= 0 {
					st = hydraStatus(h.rec[r])
				}
			}
			codes[i] = strconv.Itoa(st)
		}
		fmt.Fprintf(&b, " [%s] %s", n.Host.Name, strings.Join(codes, ","))
	}
	fmt.Fprintln(h.o.Stderr, b.String())
}

// hydraStatus is a rank's end as Hydra prints it: the wait status (exit
// code times 256, or the signal's number).
func hydraStatus(r RankRecord) int {
	if r.SignalNum > 0 {
		return r.SignalNum
	}
	return r.Code << 8
}
