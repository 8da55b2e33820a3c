package netcheck

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// DefaultSlowFraction is the fraction of the cluster's median rate below
// which a link is slow.
const DefaultSlowFraction = 0.5

// Slow is a link that Analyze flags: its rate, the rate it was held
// against, and why it is slow.
type Slow struct {
	From         string  `json:"from"`
	To           string  `json:"to"`
	Gbps         float64 `json:"gbps"`
	ExpectedGbps float64 `json:"expected_gbps"`
	Why          string  `json:"why"`
}

// Analysis is what Analyze makes of a matrix.
type Analysis struct {
	// Hosts are the hosts, in the matrix's order.
	Hosts []string
	// Links are the measured links.
	Links []Link
	// Median is the cluster's median rate in Gbit/s: the median, over
	// the hosts, of each host's median link rate (its links both ways;
	// with three hosts, its upper quartile), so that one slow host does
	// not drag it down.
	Median float64
	// Expect is the expected rate (--expect), 0 for none.
	Expect float64
	// Slow are the links below Fraction of Median or below Expect.
	Slow []Slow
	// Suspects are the hosts the verdict blames.
	Suspects []string
	// Verdict says, in a sentence per finding, which host or which link
	// is slow, or "no slow link".
	Verdict string
}

// Analyze flags the links below fraction (0: DefaultSlowFraction) of the
// cluster's median, or below expect (Gbit/s; 0: none), and names the
// host or the link: a host when all or nearly all of its links are slow
// in one direction or both while the others' are not, a link when one
// pair alone is slow. hosts gives the matrix's order; hosts that only the
// links name come after.
func Analyze(links []Link, hosts []string, expect, fraction float64) Analysis {
	if fraction <= 0 {
		fraction = DefaultSlowFraction
	}
	a := Analysis{Hosts: slices.Clone(hosts), Links: links, Expect: expect}
	for _, k := range links {
		for _, h := range []string{k.From, k.To} {
			if !slices.Contains(a.Hosts, h) {
				a.Hosts = append(a.Hosts, h)
			}
		}
	}
	if len(links) == 0 {
		a.Verdict = "no link to measure: the check needs two hosts or more"
		return a
	}
	a.Median = reference(links, a.Hosts)
	for _, k := range links {
		var why []string
		var want float64
		if k.Gbps < fraction*a.Median {
			why = append(why, fmt.Sprintf("below %s of the median %s Gbit/s", trimFloat(fraction), FormatRate(a.Median)))
			want = a.Median
		}
		if expect > 0 && k.Gbps < expect {
			why = append(why, fmt.Sprintf("below the expected %s Gbit/s", FormatRate(expect)))
			want = expect
		}
		if len(why) > 0 {
			a.Slow = append(a.Slow, Slow{From: k.From, To: k.To, Gbps: k.Gbps, ExpectedGbps: want, Why: strings.Join(why, ", ")})
		}
	}
	a.Verdict, a.Suspects = verdict(a)
	return a
}

// reference is the median over hosts of each host's median link rate:
// one slow host's links are 2 of each other host's 2(n-1), under its
// median from four hosts on. With three, they are half of them, so each
// host's upper quartile stands in. (The upper quartile everywhere made
// the reference the fast tail of a noisy cluster, and its ordinary links
// slow against it.)
func reference(links []Link, hosts []string) float64 {
	q := 0.5
	if len(hosts) <= 3 {
		q = 0.75
	}
	var per []float64
	for _, h := range hosts {
		var rs []float64
		for _, k := range links {
			if k.From == h || k.To == h {
				rs = append(rs, k.Gbps)
			}
		}
		if len(rs) > 0 {
			per = append(per, quantile(rs, q))
		}
	}
	return quantile(per, 0.5)
}

// quantile is the q-quantile of vs, linearly interpolated; vs is not
// changed.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	x := q * float64(len(s)-1)
	i := int(math.Floor(x))
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

// FormatRate writes a rate in Gbit/s with about two significant digits
// below 10 and none after the point from 100 up: 0.19, 9.4, 25, 400.
func FormatRate(g float64) string {
	switch {
	case g < 1:
		return strconv.FormatFloat(g, 'f', 2, 64)
	case g < 100:
		return strconv.FormatFloat(g, 'f', 1, 64)
	}
	return strconv.FormatFloat(g, 'f', 0, 64)
}

func trimFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
