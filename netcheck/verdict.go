package netcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// hostStat counts one host's links and slow links, each way.
type hostStat struct {
	out, in         int
	slowOut, slowIn []float64 // the rates of its slow links
}

// nearlyAll reports whether slow of n is all or nearly all (three in
// four), of two or more.
func nearlyAll(slow, n int) bool { return n >= 2 && slow > 0 && 4*slow >= 3*n }

func stats(a Analysis) map[string]*hostStat {
	st := map[string]*hostStat{}
	for _, h := range a.Hosts {
		st[h] = &hostStat{}
	}
	for _, k := range a.Links {
		st[k.From].out++
		st[k.To].in++
	}
	for _, s := range a.Slow {
		st[s.From].slowOut = append(st[s.From].slowOut, s.Gbps)
		st[s.To].slowIn = append(st[s.To].slowIn, s.Gbps)
	}
	return st
}

// verdict names the host or the link behind a's slow links, a sentence
// per finding, and returns the hosts it blames.
func verdict(a Analysis) (string, []string) {
	med := FormatRate(a.Median)
	if len(a.Slow) == 0 {
		lo := slices.MinFunc(a.Links, func(x, y Link) int { return cmp.Compare(x.Gbps, y.Gbps) })
		return fmt.Sprintf("no slow link: %d links, median %s Gbit/s, the slowest %s->%s at %s", len(a.Links), med, lo.From, lo.To, FormatRate(lo.Gbps)), nil
	}
	if nearlyAll(len(a.Slow), len(a.Links)) {
		return fmt.Sprintf("%d of %d links are slow (median %s Gbit/s%s): the whole network, or the expectation, not one host or link",
			len(a.Slow), len(a.Links), med, expectNote(a.Expect)), nil
	}
	st := stats(a)
	type blame struct{ out, in bool }
	blamed := map[string]blame{}
	var suspects []string
	for _, h := range a.Hosts {
		s := st[h]
		b := blame{out: nearlyAll(len(s.slowOut), s.out), in: nearlyAll(len(s.slowIn), s.in)}
		if b.out || b.in {
			blamed[h] = b
			suspects = append(suspects, h)
		}
	}
	if len(suspects) > 1 && 2*len(suspects) > len(a.Hosts) {
		return fmt.Sprintf("%d of %d links are slow (median %s Gbit/s%s), on %d of %d hosts: more than one host or switch, look at the list",
			len(a.Slow), len(a.Links), med, expectNote(a.Expect), len(suspects), len(a.Hosts)), nil
	}
	var out []string
	for _, h := range suspects {
		b, s := blamed[h], st[h]
		var rates []float64
		var how string
		switch {
		case b.out && b.in:
			rates, how = append(slices.Clone(s.slowOut), s.slowIn...), "in both directions from "+h
		case b.out:
			rates, how = s.slowOut, "sending from "+h
		default:
			rates, how = s.slowIn, "to "+h
		}
		out = append(out, fmt.Sprintf("%s's link: %s Gbit/s against a median of %s, %s: a host problem, not a switch port",
			h, FormatRate(quantile(rates, 0.5)), med, how))
	}
	explained := func(s Slow) bool {
		return blamed[s.From].out || blamed[s.To].in
	}
	out = append(out, pairSentences(a, explained)...)
	return strings.Join(out, "\n"), suspects
}

// pairSentences names each pair whose slow links no blamed host explains.
func pairSentences(a Analysis, explained func(Slow) bool) []string {
	type pair struct{ a, b string }
	var order []pair
	ways := map[pair][]Slow{}
	others := map[string]int{} // unexplained slow links per host
	for _, s := range a.Slow {
		if explained(s) {
			continue
		}
		p := pair{s.From, s.To}
		if slices.Index(a.Hosts, s.To) < slices.Index(a.Hosts, s.From) {
			p = pair{s.To, s.From}
		}
		if _, ok := ways[p]; !ok {
			order = append(order, p)
		}
		ways[p] = append(ways[p], s)
		others[s.From]++
		others[s.To]++
	}
	var out []string
	for _, p := range order {
		ss := ways[p]
		var rates []float64
		for _, s := range ss {
			rates = append(rates, s.Gbps)
		}
		how := "in both directions"
		if len(ss) == 1 {
			how = "from " + ss[0].From + " to " + ss[0].To + " only"
		}
		tail := "its hosts' other links are fine: a path problem (cable, switch port)"
		if n := others[p.a] + others[p.b] - 2*len(ss); n > 0 {
			tail = fmt.Sprintf("%s and %s have %d other slow links: look at the list", p.a, p.b, n)
		}
		if len(a.Hosts) == 2 {
			tail = "with two hosts, the check cannot tell a host from the path"
		}
		out = append(out, fmt.Sprintf("the link %s<->%s: %s Gbit/s against a median of %s, %s; %s",
			p.a, p.b, FormatRate(quantile(rates, 0.5)), FormatRate(a.Median), how, tail))
	}
	return out
}

func expectNote(expect float64) string {
	if expect <= 0 {
		return ""
	}
	return ", expected " + FormatRate(expect)
}
