package collbench

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorun/gorun/internal/svgdoc"
)

// Result is one message size's measurement, one row of nccl-tests' table.
type Result struct {
	Collective string        // "allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv", "barrier"
	Op         string        // "sum", "prod", "min", "max", "avg", or "" where none applies
	DType      string        // "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"
	Ranks      int           // number of ranks that took part
	Bytes      int64         // message size in bytes, as nccl-tests' "size" column (for allgather/alltoall/reducescatter: the total buffer, count*ranks*elemsize as nccl-tests does)
	Count      int64         // elements, as nccl-tests' "count" column
	Time       time.Duration // mean time of one iteration, the slowest rank's
	AlgBW      float64       // GB/s (1e9 bytes/s) = Bytes / Time
	BusBW      float64       // GB/s = AlgBW * BusFactor(Collective, Ranks)
	Algorithm  string        // the algorithm that ran, e.g. "ring", "rabenseifner", "hier(ring)"
	Errors     int           // wrong elements found by the check, summed over ranks; -1 if not checked
}

// BusFactor returns nccl-tests' bus-bandwidth factor for a collective on n
// ranks, the number that turns an algorithm bandwidth into a bus bandwidth:
//
//	allreduce                                  2(n-1)/n
//	reducescatter, allgather, alltoall         (n-1)/n
//	gather, scatter                            (n-1)/n
//	broadcast, reduce, sendrecv                1
//	barrier                                    0
//
// On one rank nothing crosses a bus, so the (n-1)/n collectives give 0 there,
// while broadcast, reduce and sendrecv still give 1. The name is matched
// without regard to case, '_' and '-' ("all_reduce", "AllReduce" and
// "reduce-scatter" are understood). An unknown collective, or n < 1, gives 0.
func BusFactor(collective string, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch normCollective(collective) {
	case "allreduce":
		return 2 * f
	case "reducescatter", "allgather", "alltoall", "gather", "scatter":
		return f
	case "broadcast", "bcast", "reduce", "sendrecv":
		return 1
	default: // barrier and unknown collectives
		return 0
	}
}

// normCollective lower-cases a collective's name and drops '_' and '-'.
func normCollective(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// Fill computes AlgBW and BusBW from Bytes, Time, Collective and Ranks. Both
// are 0 when Time is not positive.
func (r *Result) Fill() {
	if r.Time <= 0 {
		r.AlgBW, r.BusBW = 0, 0
		return
	}
	// Bytes per nanosecond are GB/s (1e9 bytes/s).
	r.AlgBW = float64(r.Bytes) / float64(r.Time.Nanoseconds())
	r.BusBW = r.AlgBW * BusFactor(r.Collective, r.Ranks)
}

// Header says what ran; it is printed above the table and stored with the
// results in JSON.
type Header struct {
	Collective, Op, DType string // as in Result; Op is "" where none applies
	Ranks, Hosts          int    // ranks, and the hosts they ran on
	Transport             string // e.g. "shm+tcp"
	Iters, Warmup         int    // timed and untimed (warm-up) iterations per size
	Command               string // the command line
	Device                string // the device buffers' plugin ("cuda"), or "" for host memory
}

// Column layout of the table: widths of size, count, type, redop, time,
// algbw, busbw and #wrong, each after two spaces; the algorithm comes last,
// left-aligned. These are the widths of nccl-tests' out-of-place columns.
const tableRow = "%12s  %12s  %8s  %6s  %8s  %6s  %6s  %6s  %s"

// tableLine formats one line of the table without trailing blanks.
func tableLine(cols ...any) string {
	return strings.TrimRight(fmt.Sprintf(tableRow, cols...), " ")
}

// commentLine turns a table line into a comment: its first column is wide
// enough that the first character is a blank, which becomes '#'.
func commentLine(s string) string {
	return "#" + s[1:]
}

// WriteTable writes an nccl-tests-like text table: a '#' comment block with
// the header's fields (empty ones left out), two column-header lines
//
//	#       size         count      type   redop      time   algbw   busbw  #wrong  algorithm
//	#        (B)    (elements)                        (us)  (GB/s)  (GB/s)
//
// then one right-aligned row per result: time in µs with 1 decimal,
// bandwidths with 2 decimals, #wrong as an integer or "N/A" when the result
// was not checked, redop "none" where no operation applies. Last come
// nccl-tests' two summary lines,
//
//	# Out of bounds values : N
//	# Avg bus bandwidth    : X
//
// where N is the number of wrong elements over all checked rows ("N/A" when
// no row was checked) and X the mean bus bandwidth of the rows, 2 decimals
// ("N/A" when there are no rows).
func WriteTable(w io.Writer, h Header, rs []Result) error {
	bw := bufio.NewWriter(w)
	t := NewTable(bw, h)
	for _, r := range rs {
		t.Row(r)
	}
	t.Close()
	return bw.Flush()
}

// Table writes the table of [WriteTable] one row at a time, so that a
// benchmark's rows appear as they are measured.
type Table struct {
	w       io.Writer
	all     bool // rows of several collectives: name each
	sumBus  float64
	rows    int
	wrong   int
	checked bool
	err     error
}

// NewTable writes the header block and the column headers to w, and
// returns the Table to add rows to.
func NewTable(w io.Writer, h Header) *Table {
	t := &Table{w: w, all: h.Collective == All}
	var b strings.Builder
	for _, kv := range headerLines(h) {
		fmt.Fprintf(&b, "# %-20s : %s\n", kv[0], kv[1])
	}
	b.WriteString("#\n")
	b.WriteString(commentLine(tableLine("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "algorithm")) + "\n")
	b.WriteString(commentLine(tableLine("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "")) + "\n")
	t.write(b.String())
	return t
}

func (t *Table) write(s string) {
	if t.err == nil {
		_, t.err = io.WriteString(t.w, s)
	}
}

// Row writes one result.
func (t *Table) Row(r Result) {
	algo := r.Algorithm
	if t.all {
		algo = r.Collective + ": " + algo
	}
	op := r.Op
	if op == "" {
		op = "none"
	}
	t.write(tableLine(
		strconv.FormatInt(r.Bytes, 10),
		strconv.FormatInt(r.Count, 10),
		r.DType, op,
		strconv.FormatFloat(usec(r.Time), 'f', 1, 64),
		strconv.FormatFloat(r.AlgBW, 'f', 2, 64),
		strconv.FormatFloat(r.BusBW, 'f', 2, 64),
		wrongString(r.Errors),
		algo) + "\n")
	t.sumBus += r.BusBW
	t.rows++
	if r.Errors >= 0 {
		t.wrong += r.Errors
		t.checked = true
	}
}

// Close writes the summary lines and returns the first write error.
func (t *Table) Close() error {
	oob, avg := "N/A", "N/A"
	if t.checked {
		oob = strconv.Itoa(t.wrong)
	}
	if t.rows > 0 {
		avg = strconv.FormatFloat(t.sumBus/float64(t.rows), 'f', 2, 64)
	}
	t.write(fmt.Sprintf("# %-20s : %s\n# %-20s : %s\n#\n", "Out of bounds values", oob, "Avg bus bandwidth", avg))
	return t.err
}

// headerLines lists the header's non-empty fields as (name, value) pairs.
func headerLines(h Header) [][2]string {
	var out [][2]string
	add := func(k, v string) {
		if v != "" {
			out = append(out, [2]string{k, v})
		}
	}
	num := func(k string, v int) {
		if v != 0 {
			add(k, strconv.Itoa(v))
		}
	}
	add("Collective", h.Collective)
	add("Reduction", h.Op)
	add("Data type", h.DType)
	num("Ranks", h.Ranks)
	num("Hosts", h.Hosts)
	add("Transport", h.Transport)
	add("Device buffers", h.Device)
	if h.Iters != 0 || h.Warmup != 0 {
		add("Iterations", fmt.Sprintf("%d (after %d warm-up)", h.Iters, h.Warmup))
	}
	add("Command", h.Command)
	return out
}

// usec is d in microseconds.
func usec(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3
}

// wrongString renders a Result's Errors: the count, or "N/A" when unchecked.
func wrongString(n int) string {
	if n < 0 {
		return "N/A"
	}
	return strconv.Itoa(n)
}

// csvHeader is the first row WriteCSV writes.
var csvHeader = []string{"collective", "op", "dtype", "ranks", "bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "wrong"}

// WriteCSV writes a header row
//
//	collective,op,dtype,ranks,bytes,count,time_us,algbw_gbps,busbw_gbps,algorithm,wrong
//
// then one row per result, with encoding/csv. Numbers are written in full
// (time_us exactly, the bandwidths as the shortest decimal that reads back as
// the same float64); wrong is -1 for a result that was not checked.
func WriteCSV(w io.Writer, rs []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, r := range rs {
		rec := []string{
			r.Collective, r.Op, r.DType,
			strconv.Itoa(r.Ranks),
			strconv.FormatInt(r.Bytes, 10),
			strconv.FormatInt(r.Count, 10),
			strconv.FormatFloat(usec(r.Time), 'f', -1, 64),
			strconv.FormatFloat(r.AlgBW, 'f', -1, 64),
			strconv.FormatFloat(r.BusBW, 'f', -1, 64),
			r.Algorithm,
			strconv.Itoa(r.Errors),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// jsonReport is the document WriteJSON writes.
type jsonReport struct {
	Header  jsonHeader   `json:"header"`
	Results []jsonResult `json:"results"`
}

// jsonHeader is a Header in JSON.
type jsonHeader struct {
	Collective string `json:"collective"`
	Op         string `json:"op"`
	DType      string `json:"dtype"`
	Ranks      int    `json:"ranks"`
	Hosts      int    `json:"hosts"`
	Transport  string `json:"transport"`
	Iters      int    `json:"iters"`
	Warmup     int    `json:"warmup"`
	Command    string `json:"command"`
	Device     string `json:"device,omitempty"`
}

// jsonResult is a Result in JSON.
type jsonResult struct {
	Collective string  `json:"collective"`
	Op         string  `json:"op"`
	DType      string  `json:"dtype"`
	Ranks      int     `json:"ranks"`
	Bytes      int64   `json:"bytes"`
	Count      int64   `json:"count"`
	TimeUS     float64 `json:"time_us"`
	AlgBW      float64 `json:"algbw_gbps"`
	BusBW      float64 `json:"busbw_gbps"`
	Algorithm  string  `json:"algorithm"`
	Wrong      int     `json:"wrong"`
}

// WriteJSON writes one indented JSON document
//
//	{"header": {"collective": ..., "op": ..., "dtype": ..., "ranks": ...,
//	            "hosts": ..., "transport": ..., "iters": ..., "warmup": ...,
//	            "command": ...},
//	 "results": [{"collective": ..., "op": ..., "dtype": ..., "ranks": ...,
//	              "bytes": ..., "count": ..., "time_us": ..., "algbw_gbps": ...,
//	              "busbw_gbps": ..., "algorithm": ..., "wrong": ...}, ...]}
//
// with time_us a float (microseconds) and wrong -1 for a result that was not
// checked. "results" is [] when rs is empty. Bandwidths that are NaN or
// infinite are an error, as JSON has no such numbers.
func WriteJSON(w io.Writer, h Header, rs []Result) error {
	doc := jsonReport{Header: jsonHeader(h), Results: make([]jsonResult, 0, len(rs))}
	for _, r := range rs {
		doc.Results = append(doc.Results, jsonResult{
			Collective: r.Collective, Op: r.Op, DType: r.DType, Ranks: r.Ranks,
			Bytes: r.Bytes, Count: r.Count, TimeUS: usec(r.Time),
			AlgBW: r.AlgBW, BusBW: r.BusBW, Algorithm: r.Algorithm, Wrong: r.Errors,
		})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("collbench: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// sizeUnits are the binary prefixes FormatSize uses, from 1024^0 up.
var sizeUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// FormatSize renders a number of bytes with the largest binary unit it
// reaches and at most two decimals, trailing zeros dropped: "0 B", "512 B",
// "4 KiB", "1.5 MiB", "64 MiB", "1 GiB". Negative sizes get a leading '-'.
func FormatSize(b int64) string {
	if b < 0 {
		if b == math.MinInt64 {
			return "-8 EiB"
		}
		return "-" + FormatSize(-b)
	}
	if b < 1024 {
		return strconv.FormatInt(b, 10) + " B"
	}
	u := 0
	for u+1 < len(sizeUnits) && b >= int64(1)<<(10*(u+1)) {
		u++
	}
	v := float64(b) / float64(int64(1)<<(10*u))
	s := strconv.FormatFloat(v, 'f', 2, 64)
	if s == "1024.00" && u+1 < len(sizeUnits) { // 1023.995 and up round to the next unit
		u, s = u+1, "1.00"
	}
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + sizeUnits[u]
}

// ParseSize parses a size as nccl-tests' -b and -e options do: a decimal
// integer of bytes, optionally followed by a unit, case-insensitive: "B";
// "K", "KB" or "KiB" (1024); "M", "MB", "MiB" (1024^2); "G", "GB", "GiB"
// (1024^3); "T", "TB", "TiB" (1024^4). Like nccl-tests, "KB" means 1024
// bytes. Blanks around the input and between number and unit are allowed.
// Errors name the input.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && '0' <= in[i] && in[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("collbench: invalid size %q: want a number of bytes such as 8, 64K or 1G", s)
	}
	n, err := strconv.ParseInt(in[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("collbench: invalid size %q: number out of range", s)
	}
	var shift uint
	switch strings.ToLower(strings.TrimSpace(in[i:])) {
	case "", "b":
		shift = 0
	case "k", "kb", "kib":
		shift = 10
	case "m", "mb", "mib":
		shift = 20
	case "g", "gb", "gib":
		shift = 30
	case "t", "tb", "tib":
		shift = 40
	default:
		return 0, fmt.Errorf("collbench: invalid size %q: unknown unit %q (want B, K, M, G or T)", s, strings.TrimSpace(in[i:]))
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("collbench: invalid size %q: too large", s)
	}
	return n << shift, nil
}

// maxSizes bounds how many sizes Sizes returns.
const maxSizes = 1 << 20

// Sizes returns the message sizes from min to max as nccl-tests' -b, -e, -f
// and -i options give them: starting at min, multiplying by factor at each
// step, or, when step > 0, adding step instead (factor is then ignored). max
// is included when a step lands on it; sizes never exceed it.
//
// min may be 0: 0 comes first, and with a factor the sizes then go on from
// elem, the element size (0 times a factor would stay 0), so that
// Sizes(0, 64, 2, 0, 4) is 0, 4, 8, 16, 32, 64; with a step they go on from
// step. elem must be positive when it is used.
//
// It is an error for min to be negative, max to be below min, step to be
// negative, factor to be below 2 when step is 0, or the list to hold more than
// 2^20 sizes.
func Sizes(min, max int64, factor int, step int64, elem int64) ([]int64, error) {
	switch {
	case min < 0:
		return nil, fmt.Errorf("collbench: minimum size %d is negative", min)
	case max < min:
		return nil, fmt.Errorf("collbench: maximum size %d is below minimum size %d", max, min)
	case step < 0:
		return nil, fmt.Errorf("collbench: size step %d is negative", step)
	case step == 0 && factor < 2:
		return nil, fmt.Errorf("collbench: size factor %d is below 2 (and no step was given)", factor)
	}
	if step > 0 {
		if (max-min)/step >= maxSizes {
			return nil, fmt.Errorf("collbench: sizes %d to %d by %d are more than %d", min, max, step, maxSizes)
		}
		out := make([]int64, 0, (max-min)/step+1)
		for s := min; ; s += step {
			out = append(out, s)
			if s > max-step { // the next would pass max (or overflow)
				break
			}
		}
		return out, nil
	}
	out := []int64{}
	cur := min
	if min == 0 {
		out = append(out, 0)
		if max == 0 {
			return out, nil
		}
		if elem <= 0 {
			return nil, fmt.Errorf("collbench: element size %d is not positive (needed after size 0)", elem)
		}
		cur = elem
	}
	f := int64(factor)
	for cur <= max {
		out = append(out, cur)
		if cur > max/f { // the next would pass max (or overflow)
			break
		}
		cur *= f
	}
	return out, nil
}

// svgGeometry: the canvas and the plot area inside it, in SVG user units.
const (
	svgWidth   = 800
	svgHeight  = 500
	svgLeft    = 80 // room for y tick labels and the y axis label
	svgRight   = 30 // room for the last x tick label
	svgTop     = 50 // room for the title
	svgBottom  = 90 // room for slanted x tick labels and the x axis label
	svgPlotW   = svgWidth - svgLeft - svgRight
	svgPlotH   = svgHeight - svgTop - svgBottom
	svgMaxTick = 32 // at most this many x ticks
)

// svgColors are the series' colours, reused in turn.
var svgColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// svgSeries is one line of the plot.
type svgSeries struct {
	key    string // collective, op, dtype, ranks
	label  string
	points []Result
}

// seriesOf groups the results with a positive size by collective, reduction,
// data type and number of ranks, in order of first appearance, each sorted by
// size.
func seriesOf(rs []Result) []*svgSeries {
	var out []*svgSeries
	byKey := map[string]*svgSeries{}
	for _, r := range rs {
		if r.Bytes <= 0 || math.IsNaN(r.BusBW) || math.IsInf(r.BusBW, 0) {
			continue
		}
		key := fmt.Sprintf("%s\x00%s\x00%s\x00%d", r.Collective, r.Op, r.DType, r.Ranks)
		s := byKey[key]
		if s == nil {
			s = &svgSeries{key: key, label: seriesLabel(r)}
			byKey[key] = s
			out = append(out, s)
		}
		s.points = append(s.points, r)
	}
	for _, s := range out {
		slices.SortStableFunc(s.points, func(a, b Result) int {
			switch {
			case a.Bytes < b.Bytes:
				return -1
			case a.Bytes > b.Bytes:
				return 1
			}
			return 0
		})
	}
	return out
}

// seriesLabel names a series in the legend.
func seriesLabel(r Result) string {
	parts := []string{}
	for _, p := range []string{r.Collective, r.Op, r.DType} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if r.Ranks > 0 {
		parts = append(parts, fmt.Sprintf("%d ranks", r.Ranks))
	}
	if len(parts) == 0 {
		return "results"
	}
	return strings.Join(parts, " ")
}

// svgTitle is the plot's title, from the header.
func svgTitle(h Header) string {
	var what []string
	for _, p := range []string{h.Collective, h.Op, h.DType} {
		if p != "" {
			what = append(what, p)
		}
	}
	t := "gorun bench"
	if len(what) > 0 {
		t += ": " + strings.Join(what, " ")
	}
	var where []string
	switch {
	case h.Ranks > 0 && h.Hosts > 0:
		where = append(where, fmt.Sprintf("%d ranks on %d hosts", h.Ranks, h.Hosts))
	case h.Ranks > 0:
		where = append(where, fmt.Sprintf("%d ranks", h.Ranks))
	case h.Hosts > 0:
		where = append(where, fmt.Sprintf("%d hosts", h.Hosts))
	}
	if h.Transport != "" {
		where = append(where, h.Transport)
	}
	if len(where) > 0 {
		t += " (" + strings.Join(where, ", ") + ")"
	}
	return t
}

// xmlText escapes s for XML character data and attribute values.
func xmlText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		case '\t', '\n', '\r':
			b.WriteByte(' ')
		default:
			// Characters XML 1.0 does not allow are replaced.
			if r < 0x20 || r == 0xFFFE || r == 0xFFFF || (0xD800 <= r && r <= 0xDFFF) {
				b.WriteRune('\uFFFD')
			} else {
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// num formats a coordinate with one decimal.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts
// [0, max] into about n intervals, and the number of decimals its multiples
// need.
func niceStep(max float64, n int) (float64, int) {
	raw := max / float64(n)
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	var m float64
	switch f := raw / base; {
	case f <= 1:
		m = 1
	case f <= 2:
		m = 2
	case f <= 5:
		m = 5
	default:
		m = 10
	}
	dec := 0
	if m == 10 {
		exp++
		m = 1
	}
	if exp < 0 {
		dec = int(-exp)
	}
	return m * math.Pow(10, exp), dec
}

// WriteSVG writes a standalone SVG 1.1 line plot (no external references,
// valid XML) of bus bandwidth (y, GB/s, linear from 0) against message size
// (x, log2 axis, ticks at powers of two labelled as FormatSize does: "8 B",
// "1 KiB", "64 MiB"). There is one series, a <polyline> with a circle at each
// point, per distinct (Collective, Op, DType, Ranks) in rs, usually one, with
// a legend; the title comes from h, and the plot has axis labels and grid
// lines. Rows with Bytes <= 0, or a bus bandwidth that is NaN or infinite,
// are left out of the plot; bandwidths below 0 are drawn at 0. When no row is left a
// valid SVG saying "no data" is written.
func WriteSVG(w io.Writer, h Header, rs []Result) error {
	bw := bufio.NewWriter(w)
	title := xmlText(svgTitle(h))
	svgdoc.Begin(bw, svgWidth, svgHeight, title)

	series := seriesOf(rs)
	if len(series) == 0 {
		fmt.Fprintf(bw, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"20\" fill=\"#666\">no data</text>\n</svg>\n", svgWidth/2, svgHeight/2)
		return bw.Flush()
	}

	// x: exponents of two, snapped to the tick step.
	minB, maxB := int64(math.MaxInt64), int64(0)
	maxBW := 0.0
	for _, s := range series {
		for _, p := range s.points {
			minB = min(minB, p.Bytes)
			maxB = max(maxB, p.Bytes)
			maxBW = max(maxBW, p.BusBW)
		}
	}
	lo := int(math.Floor(math.Log2(float64(minB))))
	hi := int(math.Ceil(math.Log2(float64(maxB))))
	if hi == lo {
		lo, hi = max(lo-1, 0), hi+1
	}
	xstep := 1
	for (hi-lo+xstep-1)/xstep > svgMaxTick {
		xstep++
	}
	if xstep > 1 { // snap to multiples of the step, so that 1 KiB, 1 MiB... stay ticks when they can
		lo = lo / xstep * xstep
		hi = (hi + xstep - 1) / xstep * xstep
	}
	xOf := func(b int64) float64 {
		return svgLeft + (math.Log2(float64(b))-float64(lo))/float64(hi-lo)*svgPlotW
	}

	// y: 0 to a round number above the largest bandwidth.
	if maxBW <= 0 {
		maxBW = 1
	}
	ystep, ydec := niceStep(maxBW, 5)
	yTicks := int(math.Ceil(maxBW/ystep - 1e-9))
	yMax := float64(yTicks) * ystep
	yOf := func(v float64) float64 {
		v = min(max(v, 0), yMax)
		return svgTop + svgPlotH - v/yMax*svgPlotH
	}

	// Grid, ticks and tick labels.
	bw.WriteString("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">\n")
	for e := lo; e <= hi; e += xstep {
		x := num(svgLeft + float64(e-lo)/float64(hi-lo)*svgPlotW)
		fmt.Fprintf(bw, "<line x1=\"%s\" y1=\"%d\" x2=\"%s\" y2=\"%d\"/>\n", x, svgTop, x, svgTop+svgPlotH)
	}
	for i := 0; i <= yTicks; i++ {
		y := num(yOf(float64(i) * ystep))
		fmt.Fprintf(bw, "<line x1=\"%d\" y1=\"%s\" x2=\"%d\" y2=\"%s\"/>\n", svgLeft, y, svgLeft+svgPlotW, y)
	}
	bw.WriteString("</g>\n<g class=\"ticks\" fill=\"#333\">\n")
	for e := lo; e <= hi; e += xstep {
		x := num(svgLeft + float64(e-lo)/float64(hi-lo)*svgPlotW)
		label := "2^" + strconv.Itoa(e) + " B"
		if e < 63 {
			label = FormatSize(int64(1) << e)
		}
		fmt.Fprintf(bw, "<text x=\"%s\" y=\"%d\" text-anchor=\"end\" transform=\"rotate(-40 %s %d)\">%s</text>\n",
			x, svgTop+svgPlotH+16, x, svgTop+svgPlotH+16, xmlText(label))
	}
	for i := 0; i <= yTicks; i++ {
		v := float64(i) * ystep
		fmt.Fprintf(bw, "<text x=\"%d\" y=\"%s\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
			svgLeft-8, num(yOf(v)), strconv.FormatFloat(v, 'f', ydec, 64))
	}
	bw.WriteString("</g>\n")

	// Axes and their labels.
	fmt.Fprintf(bw, "<g class=\"axes\" stroke=\"#333\" stroke-width=\"1.5\">\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>\n</g>\n",
		svgLeft, svgTop+svgPlotH, svgLeft+svgPlotW, svgTop+svgPlotH,
		svgLeft, svgTop, svgLeft, svgTop+svgPlotH)
	fmt.Fprintf(bw, "<text class=\"xlabel\" x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\">Message size (log2 scale)</text>\n",
		svgLeft+svgPlotW/2, svgHeight-20)
	fmt.Fprintf(bw, "<text class=\"ylabel\" x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" transform=\"rotate(-90 %d %d)\">Bus bandwidth (GB/s)</text>\n",
		22, svgTop+svgPlotH/2, 22, svgTop+svgPlotH/2)

	// Series, then the legend on top of them.
	for i, s := range series {
		color := svgColors[i%len(svgColors)]
		pts := make([]string, len(s.points))
		for j, p := range s.points {
			pts[j] = num(xOf(p.Bytes)) + "," + num(yOf(p.BusBW))
		}
		fmt.Fprintf(bw, "<g class=\"series\" fill=\"%s\" stroke=\"%s\">\n<title>%s</title>\n", color, color, xmlText(s.label))
		fmt.Fprintf(bw, "<polyline fill=\"none\" stroke-width=\"2\" points=\"%s\"/>\n", strings.Join(pts, " "))
		for _, p := range s.points {
			fmt.Fprintf(bw, "<circle cx=\"%s\" cy=\"%s\" r=\"3.5\"><title>%s: %s GB/s</title></circle>\n",
				num(xOf(p.Bytes)), num(yOf(p.BusBW)), xmlText(FormatSize(p.Bytes)), strconv.FormatFloat(p.BusBW, 'f', 2, 64))
		}
		bw.WriteString("</g>\n")
	}
	bw.WriteString("<g class=\"legend\">\n")
	for i, s := range series {
		color := svgColors[i%len(svgColors)]
		y := svgTop + 14 + 20*i
		fmt.Fprintf(bw, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"%s\"/>\n<text x=\"%d\" y=\"%d\" dominant-baseline=\"middle\">%s</text>\n",
			svgLeft+14, y, svgLeft+38, y, color, svgLeft+26, y, color, svgLeft+46, y, xmlText(s.label))
	}
	bw.WriteString("</g>\n</svg>\n")
	return bw.Flush()
}
