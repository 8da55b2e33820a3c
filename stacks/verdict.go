package stacks

import (
	"cmp"
	"fmt"
	"github.com/gorun/gorun/internal/intranges"
	"github.com/gorun/gorun/internal/plural"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Verdict is many ranks' stacks grouped by where their main threads are,
// and the ranks that are not where most are.
type Verdict struct {
	// Groups are the ranks grouped by Signature, smallest group first,
	// ties by lowest rank.
	Groups []Group `json:"groups"`
	// Odd are the ranks of every group smaller than the largest one,
	// ascending; none where there is one group or every group is as
	// large as the largest.
	Odd []int `json:"odd"`
	// Ranks are the stacks the verdict was made of, by rank.
	Ranks []Rank `json:"ranks"`
}

// Group is ranks whose main threads are at the same place.
type Group struct {
	Ranks []int    `json:"ranks"` // ascending
	Hosts []string `json:"hosts"` // the ranks' hosts, in natural order
	// Summary shows the place: up to five functions, innermost first,
	// joined by " <- " ("read <- next_batch <- train_step"), or why
	// the ranks have no frames.
	Summary string `json:"summary"`
	// Frames is the normalised main stack of the group's first rank,
	// innermost first; nil for ranks without frames.
	Frames []Frame `json:"frames"`
	Lang   string  `json:"lang"`
}

// mainThread returns r's main process and its main thread's frames,
// normalised.
func (r Rank) mainThread() (Proc, []Frame) {
	m := MainProc(r.Procs)
	if m < 0 {
		return Proc{}, nil
	}
	p := r.Procs[m]
	if len(p.Threads) == 0 {
		return p, nil
	}
	return p, Normalize(frameLang(p), p.Threads[mainOf(p.Threads)].Frames)
}

// frameLang is the language of p's frames: native where a native tool
// read them (a Python interpreter's C frames too), else p's.
func frameLang(p Proc) string {
	switch p.Method {
	case MethodEuStack, MethodGDB:
		return LangNative
	}
	return p.Lang
}

// Signature returns the key the verdict groups ranks by: the language of
// the rank's main process ([MainProc]) and the names of its main
// thread's normalised frames ([Normalize]); for a rank without frames,
// why, with the system call or kernel function its main process sleeps
// in.
func (r Rank) Signature() string {
	lang, frames, why := r.place()
	if frames == nil {
		return "!" + lang + "|" + why
	}
	names := make([]string, len(frames))
	for i, f := range frames {
		names[i] = f.Func
	}
	return lang + "|" + strings.Join(names, ";")
}

// place returns what r's Signature is made of.
func (r Rank) place() (lang string, frames []Frame, why string) {
	if r.Err != "" {
		return "", nil, r.Err
	}
	p, frames := r.mainThread()
	if len(frames) > 0 {
		return p.Lang, frames, ""
	}
	why = "no frames"
	if p.Note != "" {
		why += " (" + p.Note + ")"
	}
	switch {
	case p.Syscall == "running":
		why += "; running"
	case p.Syscall != "":
		why += "; in " + p.Syscall
	case p.WChan != "":
		why += "; in " + p.WChan
	}
	if len(r.Procs) == 0 {
		why = "no processes"
	}
	return p.Lang, nil, why
}

// NewVerdict groups ranks by their Signature.
func NewVerdict(ranks []Rank) *Verdict {
	v := &Verdict{Ranks: slices.SortedFunc(slices.Values(ranks), func(a, b Rank) int { return cmp.Compare(a.Rank, b.Rank) })}
	index := map[string]int{}
	for _, r := range v.Ranks {
		sig := r.Signature()
		i, ok := index[sig]
		if !ok {
			lang, frames, why := r.place()
			g := Group{Frames: frames, Lang: lang, Summary: why}
			if frames != nil {
				g.Summary = summary(lang, frames)
			}
			i = len(v.Groups)
			index[sig] = i
			v.Groups = append(v.Groups, g)
		}
		g := &v.Groups[i]
		g.Ranks = append(g.Ranks, r.Rank)
		if !slices.Contains(g.Hosts, r.Host) {
			g.Hosts = append(g.Hosts, r.Host)
		}
	}
	for i := range v.Groups {
		slices.SortFunc(v.Groups[i].Hosts, naturalCompare)
	}
	slices.SortStableFunc(v.Groups, func(a, b Group) int {
		return cmp.Or(cmp.Compare(len(a.Ranks), len(b.Ranks)), cmp.Compare(a.Ranks[0], b.Ranks[0]))
	})
	if n := len(v.Groups); n > 1 {
		largest := len(v.Groups[n-1].Ranks)
		for _, g := range v.Groups {
			if len(g.Ranks) < largest {
				v.Odd = append(v.Odd, g.Ranks...)
			}
		}
		slices.Sort(v.Odd)
	}
	return v
}

// summary shows frames, innermost first: all of up to five, or the
// innermost four, "..." and the outermost.
func summary(lang string, frames []Frame) string {
	names := make([]string, 0, 6)
	for i, f := range frames {
		if len(frames) > 5 && i == 4 {
			names = append(names, "...", shortName(lang, frames[len(frames)-1].Func))
			break
		}
		names = append(names, shortName(lang, f.Func))
	}
	return strings.Join(names, " <- ")
}

// WriteText writes the verdict for a person:
//
//	gorun: stacks of 16 ranks on 4 hosts
//	  rank 2 on h3: read <- next_batch <- train_step
//	  ranks 0-1,3-15 on h1-h4: MPI_Barrier <- sync_grads <- main
//	gorun: verdict: rank 2 on h3 differs from the 15 others: read <- next_batch <- train_step
//
// verbose adds, under each group, every process and thread of the
// group's first rank, each frame with its file and line. The Notice of
// a rank's main process ([MainProc]) comes before the verdict, once for
// all the ranks that have the same:
//
//	gorun: note: rank 0 on h1: the program handles signal 45 itself (it called signal.signal): Python stacks not taken
func (v *Verdict) WriteText(w io.Writer, verbose bool) {
	var hosts []string
	for _, r := range v.Ranks {
		if !slices.Contains(hosts, r.Host) {
			hosts = append(hosts, r.Host)
		}
	}
	fmt.Fprintf(w, "gorun: stacks of %s on %s\n", plural.Of(len(v.Ranks), "rank"), plural.Of(len(hosts), "host"))
	langs := map[string]bool{}
	for _, g := range v.Groups {
		if g.Lang != "" {
			langs[g.Lang] = true
		}
	}
	for _, g := range v.Groups {
		lang := ""
		if len(langs) > 1 && g.Lang != "" {
			lang = " [" + g.Lang + "]"
		}
		fmt.Fprintf(w, "  %s%s: %s\n", where(g.Ranks, g.Hosts), lang, g.Summary)
		if verbose {
			v.writeRank(w, g.Ranks[0])
		}
	}
	v.writeNotices(w)
	fmt.Fprintf(w, "gorun: verdict: %s\n", v.sentence())
}

// writeNotices writes the Notice of each rank's main process, one line
// for the ranks that have the same, in the order of their first rank.
func (v *Verdict) writeNotices(w io.Writer) {
	type ranksOn struct {
		ranks []int
		hosts []string
	}
	var order []string
	by := map[string]*ranksOn{}
	for _, r := range v.Ranks {
		m := MainProc(r.Procs)
		if m < 0 || r.Procs[m].Notice == "" {
			continue
		}
		n := r.Procs[m].Notice
		g, ok := by[n]
		if !ok {
			g = &ranksOn{}
			by[n] = g
			order = append(order, n)
		}
		g.ranks = append(g.ranks, r.Rank)
		if !slices.Contains(g.hosts, r.Host) {
			g.hosts = append(g.hosts, r.Host)
		}
	}
	for _, n := range order {
		g := by[n]
		slices.SortFunc(g.hosts, naturalCompare)
		fmt.Fprintf(w, "gorun: note: %s: %s\n", where(g.ranks, g.hosts), n)
	}
}

// sentence is the verdict's last line, after "verdict: ".
func (v *Verdict) sentence() string {
	total := len(v.Ranks)
	switch {
	case len(v.Groups) == 0:
		return "no ranks"
	case len(v.Groups) == 1 && total == 1:
		return "one rank: " + v.Groups[0].Summary
	case len(v.Groups) == 1:
		return fmt.Sprintf("all %d ranks are at the same place: %s", total, v.Groups[0].Summary)
	case len(v.Odd) == 0:
		return fmt.Sprintf("no rank is odd one out: %d groups of %s each", len(v.Groups), plural.Of(len(v.Groups[0].Ranks), "rank"))
	}
	var hosts []string
	oddGroups := 0
	for _, g := range v.Groups {
		if len(g.Ranks) < len(v.Groups[len(v.Groups)-1].Ranks) {
			oddGroups++
			for _, h := range g.Hosts {
				if !slices.Contains(hosts, h) {
					hosts = append(hosts, h)
				}
			}
		}
	}
	slices.SortFunc(hosts, naturalCompare)
	verb := "differ"
	if len(v.Odd) == 1 {
		verb = "differs"
	}
	others := total - len(v.Odd)
	s := fmt.Sprintf("%s %s from the %s", where(v.Odd, hosts), verb, plural.Of(others, "other"))
	if others == 1 {
		s = fmt.Sprintf("%s %s from the other one", where(v.Odd, hosts), verb)
	}
	if oddGroups == 1 {
		return s + ": " + v.Groups[0].Summary
	}
	return fmt.Sprintf("%s (%d places, above)", s, oddGroups)
}

// writeRank writes every process and thread of rank r, for WriteText's
// verbose form.
func (v *Verdict) writeRank(w io.Writer, rank int) {
	i, ok := slices.BinarySearchFunc(v.Ranks, rank, func(r Rank, n int) int { return cmp.Compare(r.Rank, n) })
	if !ok {
		return
	}
	r := v.Ranks[i]
	for _, p := range r.Procs {
		fmt.Fprintf(w, "    rank %d on %s, pid %d %s", r.Rank, r.Host, p.PID, p.Comm)
		if p.Main {
			fmt.Fprint(w, " (main)")
		}
		fmt.Fprintf(w, ": %s, state %s", p.Method, p.State)
		if p.Syscall != "" {
			fmt.Fprintf(w, ", %s", p.Syscall)
		} else if p.WChan != "" {
			fmt.Fprintf(w, ", in %s", p.WChan)
		}
		fmt.Fprintf(w, ", cpu %.2fs\n", p.CPU)
		if p.Note != "" {
			fmt.Fprintf(w, "      note: %s\n", p.Note)
		}
		for _, t := range p.Threads {
			fmt.Fprintf(w, "      thread %s", threadID(p, t))
			if t.Name != "" {
				fmt.Fprintf(w, " %q", t.Name)
			}
			if t.Main {
				fmt.Fprint(w, " (main)")
			}
			fmt.Fprintln(w, ":")
			for _, f := range t.Frames {
				fmt.Fprintf(w, "        %s", f.Func)
				switch {
				case f.File != "" && f.Line > 0:
					fmt.Fprintf(w, " (%s:%d)", f.File, f.Line)
				case f.File != "":
					fmt.Fprintf(w, " (%s)", f.File)
				}
				if f.Module != "" && frameLang(p) == LangNative {
					fmt.Fprintf(w, " in %s", moduleBase(f.Module))
				}
				fmt.Fprintln(w)
			}
		}
	}
}

// threadID shows a thread's id as its tool does: the faulthandler's in
// hex, the others in decimal.
func threadID(p Proc, t Thread) string {
	if p.Method == MethodFaulthandler {
		return fmt.Sprintf("%#x", t.ID)
	}
	return strconv.FormatInt(t.ID, 10)
}

// where says "rank 2 on h3" or "ranks 0-1,3-15 on h1-h4".
func where(ranks []int, hosts []string) string {
	s := "rank "
	if len(ranks) > 1 {
		s = "ranks "
	}
	return s + FormatRanks(ranks) + " on " + formatHosts(hosts)
}

// FormatRanks writes ranks as ascending ranges: "0-1,3-15".
func FormatRanks(ranks []int) string { return intranges.Format(ranks) }

// formatHosts writes hosts (in natural order) with runs of consecutive
// numbers compressed ("h1-h4,login2"), or as "12 hosts" where that makes
// more than four names or ranges, or more than 64 bytes.
func formatHosts(hosts []string) string {
	var parts []string
	for i := 0; i < len(hosts); {
		a, ok := splitHost(hosts[i])
		j := i
		for ok && j+1 < len(hosts) {
			b, ok2 := splitHost(hosts[j+1])
			if !ok2 || b.prefix != a.prefix || b.num != a.num+(j+1-i) || !(b.digits == a.digits || !a.padded && !b.padded) {
				break
			}
			j++
		}
		if j > i {
			parts = append(parts, hosts[i]+"-"+hosts[j])
		} else {
			parts = append(parts, hosts[i])
		}
		i = j + 1
	}
	s := strings.Join(parts, ",")
	if len(parts) > 4 || len(s) > 64 {
		return plural.Of(len(hosts), "host")
	}
	return s
}

// hostNumber is a host name split at its trailing number.
type hostNumber struct {
	prefix string
	num    int
	digits int  // how many digits the number has
	padded bool // it starts with a 0
}

// splitHost splits a host name at its trailing number; ok is false where
// it has none (or one too long for an int).
func splitHost(h string) (hostNumber, bool) {
	i := len(h)
	for i > 0 && h[i-1] >= '0' && h[i-1] <= '9' {
		i--
	}
	if i == len(h) || len(h)-i > 9 {
		return hostNumber{prefix: h}, false
	}
	num, _ := strconv.Atoi(h[i:])
	return hostNumber{prefix: h[:i], num: num, digits: len(h) - i, padded: h[i] == '0' && len(h)-i > 1}, true
}

// naturalCompare orders host names with their trailing numbers compared
// as numbers: h2 before h10.
func naturalCompare(a, b string) int {
	ha, oka := splitHost(a)
	hb, okb := splitHost(b)
	if oka && okb && ha.prefix == hb.prefix {
		return cmp.Or(cmp.Compare(ha.num, hb.num), cmp.Compare(a, b))
	}
	return cmp.Compare(a, b)
}
