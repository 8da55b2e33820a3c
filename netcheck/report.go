package netcheck

import (
	"bufio"
	"cmp"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gorun/gorun/internal/svgdoc"
	"github.com/gorun/gorun/jobrecord"
)

// Report is the object `gorun check --net --json` prints.
type Report struct {
	Links []Link `json:"links"`
	Slow  []Slow `json:"slow"`
	// Hosts are the hosts' own reports (package nodecheck), as they came.
	Hosts []json.RawMessage `json:"hosts"`
	// Skew is what differs between the hosts.
	Skew       []jobrecord.SkewItem `json:"skew"`
	Verdict    string               `json:"verdict"`
	MedianGbps float64              `json:"median_gbps"`
	ExpectGbps float64              `json:"expected_gbps,omitempty"`
	Transport  string               `json:"transport,omitempty"`
	// ElapsedS is the time to the verdict, seconds, the agents' start
	// included.
	ElapsedS float64 `json:"elapsed_s,omitempty"`
}

// NewReport returns a's report, with empty lists rather than null.
func NewReport(a Analysis, info Info, hosts []json.RawMessage, skew []jobrecord.SkewItem) Report {
	r := Report{Links: a.Links, Slow: a.Slow, Hosts: hosts, Skew: skew, Verdict: a.Verdict,
		MedianGbps: a.Median, ExpectGbps: a.Expect, Transport: info.Transport}
	if r.Links == nil {
		r.Links = []Link{}
	}
	if r.Slow == nil {
		r.Slow = []Slow{}
	}
	if r.Hosts == nil {
		r.Hosts = []json.RawMessage{}
	}
	if r.Skew == nil {
		r.Skew = []jobrecord.SkewItem{}
	}
	return r
}

// WriteText writes the check's result for people: the matrix, the hosts'
// own reports (nodeText, as rank 0 formatted them), what differs between
// the hosts, and how long the check took.
func WriteText(w io.Writer, a Analysis, info Info, nodeText string, skew []jobrecord.SkewItem, took time.Duration) error {
	if err := WriteMatrix(w, a); err != nil {
		return err
	}
	if nodeText != "" {
		fmt.Fprintf(w, "\nInside each host:\n%s", nodeText)
	}
	if len(skew) > 0 {
		fmt.Fprintf(w, "\nWhat differs between the hosts:\n")
		jobrecord.FormatSkew(w, skew)
	}
	_, err := fmt.Fprintf(w, "\n%d hosts, %d rounds of pairs over %s, in %.1f s\n", len(a.Hosts), info.Rounds, cmp.Or(info.Transport, "no transport"), took.Seconds())
	return err
}

// WriteJSON writes r as one indented JSON object.
func WriteJSON(w io.Writer, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("netcheck: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// matrix indexes a's links by host pair.
func matrix(a Analysis) (idx map[string]int, cell func(i, j int) (Link, bool), slow func(i, j int) bool) {
	idx = map[string]int{}
	for i, h := range a.Hosts {
		idx[h] = i
	}
	n := len(a.Hosts)
	m := make([]*Link, n*n)
	for i := range a.Links {
		k := &a.Links[i]
		m[idx[k.From]*n+idx[k.To]] = k
	}
	s := make([]bool, n*n)
	for _, k := range a.Slow {
		s[idx[k.From]*n+idx[k.To]] = true
	}
	cell = func(i, j int) (Link, bool) {
		if k := m[i*n+j]; k != nil {
			return *k, true
		}
		return Link{}, false
	}
	return idx, cell, func(i, j int) bool { return s[i*n+j] }
}

// WriteMatrix prints a as `nvidia-smi topo -m` prints its own: the
// bandwidth matrix (rows send, columns receive, Gbit/s, slow links
// starred), the round-trip times, a legend, the slow links and the
// verdict.
func WriteMatrix(w io.Writer, a Analysis) error {
	if len(a.Links) == 0 {
		_, err := fmt.Fprintf(w, "Verdict: %s\n", a.Verdict)
		return err
	}
	_, cell, slow := matrix(a)
	table := func(title, pad string, val func(Link, int, int) string) error {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\t", title)
		for _, h := range a.Hosts {
			fmt.Fprintf(tw, "%s%s\t", h, pad)
		}
		fmt.Fprintln(tw)
		for i, h := range a.Hosts {
			fmt.Fprintf(tw, "%s\t", h)
			for j := range a.Hosts {
				k, ok := cell(i, j)
				switch {
				case i == j:
					fmt.Fprintf(tw, "X%s\t", pad)
				case !ok:
					fmt.Fprintf(tw, "-%s\t", pad)
				default:
					fmt.Fprintf(tw, "%s\t", val(k, i, j))
				}
			}
			fmt.Fprintln(tw)
		}
		return tw.Flush()
	}
	err := table("Gbit/s", " ", func(k Link, i, j int) string {
		if slow(i, j) {
			return FormatRate(k.Gbps) + "*"
		}
		return FormatRate(k.Gbps) + " "
	})
	fmt.Fprintln(w)
	if err := errors.Join(err, table("RTT us", "", func(k Link, _, _ int) string { return strconv.FormatFloat(k.RTTus, 'f', 0, 64) })); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLegend:\n\n  X    = Self\n  -    = not measured\n  *    = slow: below a fraction of the median (%s Gbit/s)%s\n", FormatRate(a.Median), expectNote(a.Expect))
	fmt.Fprint(w, "  Gbit/s: rows send, columns receive; RTT us: the pair's round trip, microseconds\n")
	if len(a.Slow) > 0 {
		fmt.Fprintf(w, "\nSlow links:\n")
		for _, s := range a.Slow {
			fmt.Fprintf(w, "  %s -> %s  %s Gbit/s: %s\n", s.From, s.To, FormatRate(s.Gbps), s.Why)
		}
	}
	_, err = fmt.Fprintf(w, "\nVerdict: %s\n", strings.ReplaceAll(a.Verdict, "\n", "\n         "))
	return err
}

// The heat map's geometry, in pixels.
const (
	svgCell   = 56
	svgMargin = 80
	svgTop    = 60
)

// WriteSVG draws a's bandwidth matrix as a heat map: each cell coloured
// by its rate against the median (red below the slow fraction, through
// yellow, to green at the median and above), its rate written in it.
func WriteSVG(w io.Writer, a Analysis) error {
	bw := bufio.NewWriter(w)
	_, cell, slow := matrix(a)
	n := len(a.Hosts)
	width, height := svgMargin+n*svgCell+40, svgTop+svgMargin+n*svgCell+60
	title := xmlText(fmt.Sprintf("gorun check --net: Gbit/s from row to column (median %s)", FormatRate(a.Median)))
	svgdoc.Begin(bw, width, height, title)
	x0, y0 := svgMargin, svgTop+svgMargin
	bw.WriteString("<g class=\"labels\" fill=\"#333\">\n")
	for i, h := range a.Hosts {
		c := i*svgCell + svgCell/2
		fmt.Fprintf(bw, "<text x=\"%d\" y=\"%d\" text-anchor=\"start\" transform=\"rotate(-45 %d %d)\">%s</text>\n", x0+c, y0-8, x0+c, y0-8, xmlText(h))
		fmt.Fprintf(bw, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", x0-8, y0+c, xmlText(h))
	}
	bw.WriteString("</g>\n<g class=\"cells\" stroke=\"white\">\n")
	for i := range a.Hosts {
		for j := range a.Hosts {
			x, y := x0+j*svgCell, y0+i*svgCell
			k, ok := cell(i, j)
			fill, label := "#eee", "-"
			if i == j {
				label = "X"
			} else if ok {
				fill, label = heat(k.Gbps, a.Median), FormatRate(k.Gbps)
			}
			tip := xmlText(fmt.Sprintf("%s -> %s: %s Gbit/s, RTT %.0f us", a.Hosts[i], a.Hosts[j], label, k.RTTus))
			weight := "normal"
			if ok && slow(i, j) {
				weight = "bold"
			}
			fmt.Fprintf(bw, "<g><title>%s</title><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" text-anchor=\"middle\" dominant-baseline=\"middle\" stroke=\"none\" font-weight=\"%s\">%s</text></g>\n",
				tip, x, y, svgCell, svgCell, fill, x+svgCell/2, y+svgCell/2, weight, xmlText(label))
		}
	}
	bw.WriteString("</g>\n")
	fmt.Fprintf(bw, "<text class=\"verdict\" x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>\n</svg>\n", 10, y0+n*svgCell+30, xmlText(strings.SplitN(a.Verdict, "\n", 2)[0]))
	return bw.Flush()
}

// heat colours rate g against median m: red at 0.25 m and below, yellow
// at 0.5 m, green at m and above.
func heat(g, m float64) string {
	t := 1.0
	if m > 0 {
		t = min(max((g/m-0.25)/0.75, 0), 1)
	}
	r, gr := 220.0, 200.0
	if t < 1.0/3 {
		gr = 200 * 3 * t
	} else {
		r = 220 * (1 - 1.5*(t-1.0/3))
	}
	return fmt.Sprintf("#%02x%02x50", int(math.Round(r)), int(math.Round(gr)))
}

func xmlText(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
