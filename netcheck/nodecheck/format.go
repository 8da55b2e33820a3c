package nodecheck

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Format writes the reports, one block per host: the GPU pairs as a
// matrix (rows copy to columns), the host copies, the RDMA ports, the
// flags and the note. A host with nothing measured is its note alone.
func Format(w io.Writer, rs []Report) {
	// Hosts with nothing measured and the same reason share one line
	// ("h1, h2: no GPUs, no RDMA NICs: nothing measured inside"), first.
	var why []string
	hosts := map[string][]string{}
	var measured []Report
	for _, r := range rs {
		if len(r.Pairs) > 0 || len(r.HostCopies) > 0 || len(r.NICs) > 0 {
			measured = append(measured, r)
			continue
		}
		reason := strings.TrimPrefix(r.Note, r.Host+": ")
		if reason == "" {
			reason = "nothing measured inside"
		}
		if hosts[reason] == nil {
			why = append(why, reason)
		}
		hosts[reason] = append(hosts[reason], r.Host)
	}
	for _, reason := range why {
		fmt.Fprintf(w, "%s: %s\n", strings.Join(hosts[reason], ", "), reason)
	}
	for i, r := range measured {
		if i > 0 || len(why) > 0 {
			fmt.Fprintln(w)
		}
		gpus := "no GPUs"
		if r.GPUs > 0 {
			gpus = gpuCount(r.GPUs)
		}
		fmt.Fprintf(w, "%s: %s, %d RDMA ports\n", r.Host, gpus, len(r.NICs))
		formatPairs(w, r.Pairs)
		formatHost(w, r.HostCopies)
		formatNICs(w, r.NICs)
		for _, f := range r.Flags {
			fmt.Fprintf(w, "  FLAG %s\n", f)
		}
		if len(r.Flags) == 0 {
			fmt.Fprintln(w, "  nothing flagged")
		}
		if r.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", r.Note)
		}
	}
}

// formatPairs writes the GPU pairs as a matrix, GB/s and link class in
// each cell.
func formatPairs(w io.Writer, pairs []PairResult) {
	if len(pairs) == 0 {
		return
	}
	var names []string
	seen := map[string]bool{}
	cell := map[[2]string]string{}
	for _, p := range pairs {
		for _, n := range []string{p.From, p.To} {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		v := fmt.Sprintf("%.1f", p.GBps)
		if p.Error != "" {
			v = "failed"
		}
		if p.Link != "" {
			v += " " + p.Link
		}
		cell[[2]string{p.From, p.To}] = v
	}
	fmt.Fprintln(w, "  GPU to GPU copies, GB/s (row to column) and link class:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "    \t%s\t\n", strings.Join(names, "\t"))
	for _, from := range names {
		row := []string{from}
		for _, to := range names {
			v, ok := cell[[2]string{from, to}]
			switch {
			case from == to:
				v = "-"
			case !ok:
				v = "not measured"
			}
			row = append(row, v)
		}
		fmt.Fprintf(tw, "    %s\t\n", strings.Join(row, "\t"))
	}
	tw.Flush()
}

func formatHost(w io.Writer, copies []HostCopy) {
	if len(copies) == 0 {
		return
	}
	fmt.Fprintln(w, "  host copies, GB/s:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "    \thost to GPU\tGPU to host\t")
	for _, c := range copies {
		if c.Error != "" {
			fmt.Fprintf(tw, "    %s\tfailed\tfailed\t\n", c.GPU)
			continue
		}
		fmt.Fprintf(tw, "    %s\t%.1f\t%.1f\t\n", c.GPU, c.ToGPUGBps, c.FromGPUGBps)
	}
	tw.Flush()
}

func formatNICs(w io.Writer, ports []NICPort) {
	if len(ports) == 0 {
		return
	}
	fmt.Fprintln(w, "  RDMA ports:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range ports {
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", p.Label(), orUnknown(p.State), orUnknown(p.Rate), p.LinkLayer)
	}
	tw.Flush()
}
