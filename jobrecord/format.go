package jobrecord

import (
	"cmp"
	"encoding/json"
	"fmt"
	"github.com/gorun/gorun/internal/intranges"
	"github.com/gorun/gorun/internal/plural"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// shortList is how many rows of a long list (hosts, bindings, ranks,
// variables) Format prints without verbose.
const shortList = 16

// shortLines is how many of a rank's last lines Format prints without
// verbose.
const shortLines = 10

// Format prints the record for a reader: a header (the job, its command,
// when it ran and for how long, its result and gorun's exit code, the
// first failure), the phases with their durations, the plan, the hosts
// (with what differs between them), the skew between the hosts
// ([FormatSkew]), the bindings, each host's environment as it differs
// from the head's, the ranks that did not exit 0 with their causes and
// last lines, and the hang verdict. Without
// verbose, hosts that look alike share a row and long lists stop after
// their first rows, saying how many more -v prints; with it, every row,
// every line and the kernels' builds.
func (r *Record) Format(w io.Writer, verbose bool) error {
	p := &printer{verbose: verbose}
	p.header(r)
	p.phases(r)
	p.plan(r)
	p.hosts(r)
	p.skew(r)
	p.bindings(r)
	p.env(r)
	p.ranks(r)
	p.hang(r)
	_, err := io.WriteString(w, p.b.String())
	return err
}

// printer builds Format's text.
type printer struct {
	b       strings.Builder
	verbose bool
}

// section starts a section: a blank line, then its title.
func (p *printer) section(title string) {
	p.b.WriteString("\n" + title + "\n")
}

// table prints rows (cells separated by tabs), aligned, each after
// indent.
func (p *printer) table(indent string, rows []string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintf(tw, "%s%s\n", indent, row)
	}
	tw.Flush()
	for line := range strings.Lines(b.String()) {
		p.b.WriteString(strings.TrimRight(line, " \n") + "\n") // an empty last cell pads
	}
}

// limit returns how many of n rows to print: all of them when verbose,
// else at most max.
func (p *printer) limit(n, max int) int {
	if p.verbose || n <= max {
		return n
	}
	return max
}

// more says how many of a list's rows were left out.
func (p *printer) more(left int, what, indent string) {
	if left > 0 {
		fmt.Fprintf(&p.b, "%s... %d more %s (-v prints them all)\n", indent, left, what)
	}
}

func (p *printer) header(r *Record) {
	rows := []string{"job\t" + cmp.Or(r.JobID, "-")}
	if len(r.Argv) > 0 {
		rows = append(rows, "command\t"+shellJoin(r.Argv))
	}
	if len(r.ConfigFiles) > 0 {
		rows = append(rows, "config\t"+strings.Join(r.ConfigFiles, ", "))
	}
	if !r.Start.IsZero() {
		rows = append(rows, "started\t"+r.Start.Format("2006-01-02 15:04:05.000 -0700"))
		if !r.End.IsZero() {
			rows = append(rows, "ran\t"+duration(r.End.Sub(r.Start)))
		}
	}
	res := cmp.Or(r.Reason, "unknown")
	rows = append(rows, fmt.Sprintf("result\t%s, gorun exited %d", res, r.ExitCode))
	if f := r.FirstFailure; f != nil {
		rows = append(rows, fmt.Sprintf("first failure\trank %d on %s: %s", f.Rank, f.Host, f.Cause))
	}
	if r.Message != "" {
		rows = append(rows, "message\t"+r.Message)
	}
	g := cmp.Or(r.GorunVersion, "?")
	if r.HeadHost != "" {
		g += ", head on " + r.HeadHost
	}
	rows = append(rows, "gorun\t"+g)
	p.table("", rows)
}

func (p *printer) phases(r *Record) {
	if len(r.Phases) == 0 {
		return
	}
	p.section("phases")
	rows := []string{"phase\tat\ttook"}
	for _, ph := range r.Phases {
		at := "-"
		if !ph.Start.IsZero() && !r.Start.IsZero() {
			at = "+" + duration(ph.Start.Sub(r.Start))
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s", ph.Name, at, duration(ph.Duration)))
	}
	p.table("  ", rows)
}

func (p *printer) plan(r *Record) {
	if len(r.Plan.Text) == 0 {
		return
	}
	p.section("plan")
	n := p.limit(len(r.Plan.Text), shortList+2)
	for _, l := range r.Plan.Text[:n] {
		l = strings.TrimPrefix(strings.TrimPrefix(l, "gorun: "), "plan: ")
		p.b.WriteString("  " + l + "\n")
	}
	p.more(len(r.Plan.Text)-n, "lines", "  ")
}

// hostColumns are what the hosts section shows of a host: a title, and a
// host's value as shown with or without verbose.
var hostColumns = []struct {
	title string
	show  func(h *HostInfo, verbose bool) string
}{
	{"gorun", func(h *HostInfo, _ bool) string { return h.GorunVersion }},
	{"kernel", func(h *HostInfo, v bool) string {
		if v {
			return h.Kernel // with its build: uname -v
		}
		rel, _, _ := strings.Cut(h.Kernel, " ")
		return rel
	}},
	{"os", func(h *HostInfo, _ bool) string { return h.OS }},
	{"arch", func(h *HostInfo, _ bool) string { return h.Arch }},
	{"cpus", func(h *HostInfo, _ bool) string { return count(h.CPUs) }},
	{"memory", func(h *HostInfo, _ bool) string { return memory(h.MemKB) }},
	{"driver", func(h *HostInfo, _ bool) string { return h.Driver }},
	{"cuda", func(h *HostInfo, _ bool) string { return h.CUDA }},
	{"nccl", func(h *HostInfo, _ bool) string { return h.NCCL }},
	{"mpi", func(h *HostInfo, _ bool) string { return mpi(h.MPI) }},
	{"python", func(h *HostInfo, _ bool) string { return h.Python }},
}

func (p *printer) hosts(r *Record) {
	if len(r.Hosts) == 0 {
		return
	}
	p.section(fmt.Sprintf("hosts: %d", len(r.Hosts)))
	// Hosts that said nothing (lost, or an agent that could not be
	// asked) are left out of the comparison; their notes say why.
	var known []HostInfo
	for _, h := range r.Hosts {
		if answered(&h) {
			known = append(known, h)
		}
	}
	// Columns with one value on every host are listed once; the others
	// make a table, where hosts alike share a row unless verbose.
	var same []string
	var differ []int
	for c, col := range hostColumns {
		if len(known) == 0 {
			break
		}
		first := col.show(&known[0], p.verbose)
		switch {
		case slices.ContainsFunc(known, func(h HostInfo) bool { return col.show(&h, p.verbose) != first }):
			differ = append(differ, c)
		case first != "":
			same = append(same, col.title+"\t"+first)
		}
	}
	if len(same) > 0 {
		if len(known) == 1 {
			fmt.Fprintf(&p.b, "  %s:\n", known[0].Host)
		} else if len(known) == len(r.Hosts) {
			p.b.WriteString("  the same on every host:\n")
		} else {
			p.b.WriteString("  the same on every host that answered:\n")
		}
		p.table("    ", same)
	}
	if len(differ) > 0 {
		p.b.WriteString("  differs between hosts:\n")
		type row struct {
			hosts []string
			cells string
		}
		var rows []*row
		byCells := map[string]*row{}
		for i := range known {
			h := &known[i]
			var cells []string
			for _, c := range differ {
				cells = append(cells, cmp.Or(hostColumns[c].show(h, p.verbose), "-"))
			}
			key := strings.Join(cells, "\t")
			if x := byCells[key]; x != nil && !p.verbose {
				x.hosts = append(x.hosts, h.Host)
				continue
			}
			x := &row{hosts: []string{h.Host}, cells: key}
			rows = append(rows, x)
			byCells[key] = x
		}
		title := "host"
		for _, c := range differ {
			title += "\t" + hostColumns[c].title
		}
		lines := []string{title}
		n := p.limit(len(rows), shortList)
		for _, x := range rows[:n] {
			name := x.hosts[0]
			if len(x.hosts) > 1 {
				name += fmt.Sprintf(" and %d more alike", len(x.hosts)-1)
			}
			lines = append(lines, name+"\t"+x.cells)
		}
		p.table("    ", lines)
		p.more(len(rows)-n, "kinds of host", "    ")
	}
	for _, h := range r.Hosts {
		if len(h.Notes) == 0 && !answered(&h) {
			fmt.Fprintf(&p.b, "  %s: no information\n", h.Host)
		}
		for _, n := range h.Notes {
			fmt.Fprintf(&p.b, "  %s: %s\n", h.Host, n)
		}
	}
}

// skew prints what differs between the hosts (FormatSkew), when more
// than one host said anything about itself.
func (p *printer) skew(r *Record) {
	if len(slices.DeleteFunc(slices.Clone(r.Hosts), func(h HostInfo) bool { return !answered(&h) })) < 2 {
		return
	}
	p.b.WriteString("\n")
	FormatSkew(&p.b, r.Skew())
}

// answered reports whether the host said anything about itself.
func answered(h *HostInfo) bool { return h.Kernel != "" || h.GorunVersion != "" || h.OS != "" }

func (p *printer) bindings(r *Record) {
	if len(r.Bindings) == 0 {
		return
	}
	p.section("bindings")
	rows := []string{"rank\thost\tcpus\tmems\tgpus\tnote"}
	n := p.limit(len(r.Bindings), shortList)
	for _, b := range r.Bindings[:n] {
		rows = append(rows, fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s", b.Rank, b.Host, cmp.Or(b.CPUs, "-"), cmp.Or(b.Mems, "-"), cmp.Or(b.GPUs, "-"), b.Note))
	}
	p.table("  ", rows)
	p.more(len(r.Bindings)-n, "ranks", "  ")
}

func (p *printer) env(r *Record) {
	var with []*HostInfo
	for i := range r.Hosts {
		if d := r.Hosts[i].EnvDiff; d != nil && !d.Empty() {
			with = append(with, &r.Hosts[i])
		}
	}
	if len(with) == 0 {
		return
	}
	head := ""
	if r.HeadHost != "" {
		head = " (" + r.HeadHost + ")"
	}
	p.section("environment: how each host's differs from the head's" + head)
	var headEnv map[string]string
	if r.Head != nil {
		headEnv = envMap(r.Head.Env)
	}
	// Hosts whose differences are the same are printed once.
	type group struct {
		hosts []string
		lines []string
	}
	var groups []*group
	byLines := map[string]*group{}
	for _, h := range with {
		d := h.EnvDiff
		var lines []string
		for _, kv := range d.Added {
			lines = append(lines, "+ "+kv)
		}
		for _, kv := range d.Changed {
			l := "~ " + kv
			if name, _, _ := strings.Cut(kv, "="); headEnv != nil {
				if hv, ok := headEnv[name]; ok {
					l += "   (head: " + hv + ")"
				}
			}
			lines = append(lines, l)
		}
		for _, name := range d.Removed {
			lines = append(lines, "- "+name)
		}
		key := strings.Join(lines, "\n")
		if g := byLines[key]; g != nil {
			g.hosts = append(g.hosts, h.Host)
			continue
		}
		g := &group{hosts: []string{h.Host}, lines: lines}
		groups = append(groups, g)
		byLines[key] = g
	}
	for _, g := range groups {
		fmt.Fprintf(&p.b, "  %s:\n", p.names(g.hosts, 8))
		n := p.limit(len(g.lines), shortLines)
		for _, l := range g.lines[:n] {
			p.b.WriteString("    " + l + "\n")
		}
		p.more(len(g.lines)-n, "variables", "    ")
	}
}

func (p *printer) ranks(r *Record) {
	if len(r.Ranks) == 0 {
		return
	}
	ok := 0
	var bad []RankEnd
	for _, e := range r.Ranks {
		if e.OK() {
			ok++
		} else {
			bad = append(bad, e)
		}
	}
	p.section(fmt.Sprintf("ranks: %d, %d exited 0", len(r.Ranks), ok))
	if len(bad) == 0 {
		return
	}
	// The first failure first; then ranks by cause, in rank order, each
	// cause once: a cause that several ranks share is one line unless
	// verbose.
	slices.SortStableFunc(bad, func(a, b RankEnd) int {
		if f := r.FirstFailure; f != nil {
			if (a.Rank == f.Rank) != (b.Rank == f.Rank) {
				if a.Rank == f.Rank {
					return -1
				}
				return 1
			}
		}
		return cmp.Compare(a.Rank, b.Rank)
	})
	var causes []string
	byCause := map[string][]RankEnd{}
	for _, e := range bad {
		c := cause(e)
		if byCause[c] == nil {
			causes = append(causes, c)
		}
		byCause[c] = append(byCause[c], e)
	}
	printed := 0
	for _, c := range causes {
		ends := byCause[c]
		if len(ends) > 1 && !p.verbose {
			var ranks []int
			var hosts []string
			for _, e := range ends {
				ranks = append(ranks, e.Rank)
				if !slices.Contains(hosts, e.Host) {
					hosts = append(hosts, e.Host)
				}
			}
			slices.Sort(ranks)
			fmt.Fprintf(&p.b, "  ranks %s on %s: %s\n", ranges(ranks), p.names(hosts, 4), c)
			continue
		}
		for _, e := range ends {
			if !p.verbose && printed == shortList {
				p.more(len(bad)-printed, "ranks", "  ")
				return
			}
			printed++
			fmt.Fprintf(&p.b, "  rank %d on %s", e.Rank, e.Host)
			if e.PID != 0 {
				fmt.Fprintf(&p.b, " (pid %d)", e.PID)
			}
			fmt.Fprintf(&p.b, ": %s", c)
			if e.Restarts > 0 {
				fmt.Fprintf(&p.b, ", after %s", plural.Of(e.Restarts, "restart"))
			}
			p.b.WriteString("\n")
			lines := e.LastLines
			if n := p.limit(len(lines), shortLines); n < len(lines) {
				fmt.Fprintf(&p.b, "    | ... (%d lines before; -v prints them)\n", len(lines)-n)
				lines = lines[len(lines)-n:]
			}
			for _, l := range lines {
				p.b.WriteString("    | " + l + "\n")
			}
		}
	}
}

// cause says how a rank ended where its Cause does not.
func cause(e RankEnd) string {
	switch {
	case e.Cause != "":
		return e.Cause
	case e.Signal != "":
		return "killed by " + e.Signal
	}
	return "exited " + strconv.Itoa(e.Exit)
}

// verdict is the shape of a hang verdict that Format reads.
type verdict struct {
	Groups []struct {
		Ranks   []int    `json:"ranks"`
		Hosts   []string `json:"hosts"`
		Summary string   `json:"summary"`
	} `json:"groups"`
	Odd []json.RawMessage `json:"odd"`
}

func (p *printer) hang(r *Record) {
	if len(r.Hang) == 0 || string(r.Hang) == "null" {
		return
	}
	p.section("hang verdict")
	var v verdict
	if err := json.Unmarshal(r.Hang, &v); err != nil {
		fmt.Fprintf(&p.b, "  (a verdict this gorun cannot read: %v)\n", err)
		return
	}
	if len(v.Groups) == 0 && len(v.Odd) == 0 {
		p.b.WriteString("  (empty)\n")
	}
	for _, g := range v.Groups {
		what := "ranks " + ranges(g.Ranks)
		if len(g.Ranks) == 1 {
			what = "rank " + ranges(g.Ranks)
		}
		if len(g.Hosts) > 0 {
			what += " on " + p.names(g.Hosts, 4)
		}
		fmt.Fprintf(&p.b, "  %s: %s\n", what, cmp.Or(g.Summary, "(no summary)"))
	}
	for _, o := range v.Odd {
		fmt.Fprintf(&p.b, "  odd: %s\n", odd(o))
	}
}

// odd describes one of a verdict's odd ones: a rank number, a sentence,
// or an object with a rank and a summary (or why); anything else as JSON.
func odd(raw json.RawMessage) string {
	var n int
	if json.Unmarshal(raw, &n) == nil {
		return "rank " + strconv.Itoa(n)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Rank    *int   `json:"rank"`
		Host    string `json:"host"`
		Summary string `json:"summary"`
		Why     string `json:"why"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Rank != nil {
		s := "rank " + strconv.Itoa(*o.Rank)
		if o.Host != "" {
			s += " on " + o.Host
		}
		if t := cmp.Or(o.Summary, o.Why); t != "" {
			s += ": " + t
		}
		return s
	}
	return string(raw)
}

// duration prints d rounded to a readable precision: 1.234s, 12ms, 340µs.
func duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// memory prints KiB as GiB, or "" for 0.
func memory(kb int64) string {
	switch {
	case kb == 0:
		return ""
	case kb >= 10<<20:
		return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}

// count prints n, or "" for 0.
func count(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// mpi prints a host's MPI map: "mpich 4.0.2, openmpi 4.1.4 (mpirun:
// mpirun.openmpi)".
func mpi(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "mpirun" {
			parts = append(parts, k+" "+m[k])
		}
	}
	s := strings.Join(parts, ", ")
	if run := m["mpirun"]; run != "" {
		s = strings.TrimSpace(s + " (mpirun: " + filepath.Base(run) + ")")
	}
	return s
}

// names lists hosts: all of them when verbose, else at most max and then
// how many more.
func (p *printer) names(hosts []string, max int) string {
	if p.verbose || len(hosts) <= max {
		return strings.Join(hosts, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(hosts[:max], ", "), len(hosts)-max)
}

// ranges formats ascending ints compactly: 0-3,8,10-11.
func ranges(v []int) string { return intranges.Format(v) }

// shellJoin prints argv as a shell would take it back: words with
// anything but letters, digits and -_./=:,@%+ in single quotes.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		safe := a != "" && strings.IndexFunc(a, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./=:,@%+", c))
		}) < 0
		if safe {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
