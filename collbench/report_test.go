package collbench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var updateGolden = flag.Bool("update", false, "rewrite collbench/testdata/*.golden from the current output")

func TestBusFactor(t *testing.T) {
	t.Parallel()
	type row struct {
		coll string
		want [4]float64 // n = 1, 2, 4, 8
	}
	rows := []row{
		{"allreduce", [4]float64{0, 1, 1.5, 1.75}},
		{"reducescatter", [4]float64{0, 0.5, 0.75, 0.875}},
		{"allgather", [4]float64{0, 0.5, 0.75, 0.875}},
		{"alltoall", [4]float64{0, 0.5, 0.75, 0.875}},
		{"broadcast", [4]float64{1, 1, 1, 1}},
		{"reduce", [4]float64{1, 1, 1, 1}},
		{"sendrecv", [4]float64{1, 1, 1, 1}},
		{"barrier", [4]float64{0, 0, 0, 0}},
		{"All_Reduce", [4]float64{0, 1, 1.5, 1.75}},
		{"reduce-scatter", [4]float64{0, 0.5, 0.75, 0.875}},
		{"gather", [4]float64{0, 0.5, 0.75, 0.875}},
		{"nosuch", [4]float64{0, 0, 0, 0}},
		{"", [4]float64{0, 0, 0, 0}},
	}
	for _, r := range rows {
		for i, n := range []int{1, 2, 4, 8} {
			if got := BusFactor(r.coll, n); got != r.want[i] {
				t.Errorf("BusFactor(%q, %d) = %v, want %v", r.coll, n, got, r.want[i])
			}
		}
	}
	for _, c := range []string{"allreduce", "broadcast", "sendrecv"} {
		for _, n := range []int{0, -1} {
			if got := BusFactor(c, n); got != 0 {
				t.Errorf("BusFactor(%q, %d) = %v, want 0", c, n, got)
			}
		}
	}
	// Non-power-of-two: allreduce on 3 ranks is 4/3.
	if got, want := BusFactor("allreduce", 3), 2*float64(2)/3; math.Abs(got-want) > 1e-15 {
		t.Errorf("BusFactor(allreduce, 3) = %v, want %v", got, want)
	}
}

func TestFill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r            Result
		algbw, busbw float64
	}{
		{Result{Collective: "allreduce", Ranks: 8, Bytes: 1 << 30, Time: time.Second}, 1.073741824, 1.073741824 * 1.75},
		{Result{Collective: "allreduce", Ranks: 4, Bytes: 4e9, Time: 100 * time.Millisecond}, 40, 60},
		{Result{Collective: "allgather", Ranks: 2, Bytes: 1000, Time: time.Microsecond}, 1, 0.5},
		{Result{Collective: "broadcast", Ranks: 16, Bytes: 8e6, Time: time.Millisecond}, 8, 8},
		{Result{Collective: "sendrecv", Ranks: 1, Bytes: 3000, Time: time.Microsecond}, 3, 3},
		{Result{Collective: "allreduce", Ranks: 1, Bytes: 3000, Time: time.Microsecond}, 3, 0},
		{Result{Collective: "barrier", Ranks: 8, Bytes: 0, Time: 5 * time.Microsecond}, 0, 0},
		{Result{Collective: "allreduce", Ranks: 8, Bytes: 1024, Time: 0, AlgBW: 7, BusBW: 9}, 0, 0},
		{Result{Collective: "allreduce", Ranks: 8, Bytes: 1024, Time: -time.Second, AlgBW: 7, BusBW: 9}, 0, 0},
	}
	for _, tt := range tests {
		r := tt.r
		r.Fill()
		if math.Abs(r.AlgBW-tt.algbw) > 1e-12*tt.algbw || math.Abs(r.BusBW-tt.busbw) > 1e-12*tt.busbw {
			t.Errorf("%+v.Fill(): algbw %v busbw %v, want %v %v", tt.r, r.AlgBW, r.BusBW, tt.algbw, tt.busbw)
		}
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"8", 8},
		{"8B", 8},
		{"8b", 8},
		{"1K", 1024},
		{"1k", 1024},
		{"1KB", 1024},
		{"1kb", 1024},
		{"1KiB", 1024},
		{"1kib", 1024},
		{"256M", 256 << 20},
		{"256MiB", 256 << 20},
		{"1G", 1 << 30},
		{"8GB", 8 << 30},
		{"2T", 2 << 40},
		{" 64K ", 64 << 10},
		{"64 KiB", 64 << 10},
		{"9223372036854775807", math.MaxInt64},
		{"8388607T", 8388607 << 40},
	}
	for _, tt := range good {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	bad := []string{"", " ", "K", "-8", "+8", "1.5K", "8X", "8KX", "1Ki", "1 K B", "0x10",
		"9223372036854775808", "8388608T", "99999999999G", "1e6"}
	for _, in := range bad {
		got, err := ParseSize(in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseSize(%q): error %q does not name the input", in, err)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	good := []struct {
		min, max int64
		factor   int
		step     int64
		elem     int64
		want     []int64
	}{
		{8, 64, 2, 0, 4, []int64{8, 16, 32, 64}},
		{0, 64, 2, 0, 4, []int64{0, 4, 8, 16, 32, 64}},
		{0, 50, 2, 0, 4, []int64{0, 4, 8, 16, 32}},
		{0, 0, 2, 0, 4, []int64{0}},
		{0, 0, 2, 0, 0, []int64{0}},
		{0, 3, 2, 0, 4, []int64{0}},
		{8, 8, 2, 0, 4, []int64{8}},
		{8, 100, 2, 0, 4, []int64{8, 16, 32, 64}},
		{3, 100, 3, 0, 1, []int64{3, 9, 27, 81}},
		{12, 1 << 10, 4, 0, 4, []int64{12, 48, 192, 768}},
		{1 << 10, 1 << 20, 32, 0, 4, []int64{1 << 10, 1 << 15, 1 << 20}},
		{0, 16, 0, 4, 4, []int64{0, 4, 8, 12, 16}},
		{0, 50, 2, 16, 4, []int64{0, 16, 32, 48}},
		{100, 350, 0, 100, 4, []int64{100, 200, 300}},
		{100, 100, 0, 100, 4, []int64{100}},
		{1 << 62, math.MaxInt64, 2, 0, 4, []int64{1 << 62}},
		{math.MaxInt64 - 1, math.MaxInt64, 0, 5, 4, []int64{math.MaxInt64 - 1}},
	}
	for _, tt := range good {
		got, err := Sizes(tt.min, tt.max, tt.factor, tt.step, tt.elem)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Sizes(%d, %d, %d, %d, %d) = %v, %v; want %v", tt.min, tt.max, tt.factor, tt.step, tt.elem, got, err, tt.want)
		}
	}
	bad := []struct {
		min, max int64
		factor   int
		step     int64
		elem     int64
	}{
		{-1, 64, 2, 0, 4},
		{64, 8, 2, 0, 4},
		{8, 64, 1, 0, 4},
		{8, 64, 0, 0, 4},
		{8, 64, -2, 0, 4},
		{8, 64, 2, -1, 4},
		{0, 64, 2, 0, 0},
		{0, 64, 2, 0, -4},
		{0, 1 << 40, 0, 1, 4},
	}
	for _, tt := range bad {
		if got, err := Sizes(tt.min, tt.max, tt.factor, tt.step, tt.elem); err == nil {
			t.Errorf("Sizes(%d, %d, %d, %d, %d) = %v, want an error", tt.min, tt.max, tt.factor, tt.step, tt.elem, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{8, "8 B"},
		{512, "512 B"},
		{1023, "1023 B"},
		{1024, "1 KiB"},
		{1536, "1.5 KiB"},
		{1100, "1.07 KiB"},
		{4 << 10, "4 KiB"},
		{3 << 19, "1.5 MiB"},
		{64 << 20, "64 MiB"},
		{1<<20 - 1, "1 MiB"},
		{1 << 30, "1 GiB"},
		{5 << 39, "2.5 TiB"},
		{1 << 50, "1 PiB"},
		{1 << 62, "4 EiB"},
		{math.MaxInt64, "8 EiB"},
		{-512, "-512 B"},
		{-(3 << 19), "-1.5 MiB"},
		{math.MinInt64, "-8 EiB"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// fixture is the fixed header and results the golden files were made from:
// an 8-rank allreduce whose algorithm changes with size, with one unchecked
// and one wrong row, and a 0-byte row.
func fixture() (Header, []Result) {
	h := Header{
		Collective: "allreduce", Op: "sum", DType: "float32",
		Ranks: 8, Hosts: 2, Transport: "shm+tcp",
		Iters: 20, Warmup: 5,
		Command: "gorun -np 8 bench allreduce -b 8 -e 128M -f 4",
	}
	type m struct {
		bytes int64
		time  time.Duration
		algo  string
		wrong int
	}
	ms := []m{
		{0, 1200 * time.Nanosecond, "ring", 0},
		{8, 21340 * time.Nanosecond, "recursive-doubling", 0},
		{128, 22815 * time.Nanosecond, "recursive-doubling", 0},
		{2048, 30007 * time.Nanosecond, "rabenseifner", 0},
		{32 << 10, 61234 * time.Nanosecond, "rabenseifner", -1},
		{512 << 10, 398765 * time.Nanosecond, "hier(ring)", 0},
		{8 << 20, 4123456 * time.Nanosecond, "hier(ring)", 3},
		{128 << 20, 61234567 * time.Nanosecond, "ring", 0},
	}
	rs := make([]Result, len(ms))
	for i, x := range ms {
		rs[i] = Result{
			Collective: "allreduce", Op: "sum", DType: "float32", Ranks: 8,
			Bytes: x.bytes, Count: x.bytes / 4, Time: x.time,
			Algorithm: x.algo, Errors: x.wrong,
		}
		rs[i].Fill()
	}
	return h, rs
}

// fixtureAllGather is a second fixture: no reduction, nothing checked, two
// ranks, a bfloat16 buffer.
func fixtureAllGather() (Header, []Result) {
	h := Header{Collective: "allgather", DType: "bfloat16", Ranks: 2, Transport: "shm", Iters: 5}
	var rs []Result
	for i, b := range []int64{64, 4096, 1 << 20} {
		r := Result{
			Collective: "allgather", DType: "bfloat16", Ranks: 2,
			Bytes: b, Count: b / 2 / 2, Time: time.Duration(5000*(i+1)*(i+1)) * time.Nanosecond,
			Algorithm: "ring", Errors: -1,
		}
		r.Fill()
		rs = append(rs, r)
	}
	return h, rs
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./collbench -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s; got:\n%s", path, got)
	}
}

func TestWriteGolden(t *testing.T) {
	t.Parallel()
	fixtures := map[string]func() (Header, []Result){
		"allreduce": fixture,
		"allgather": fixtureAllGather,
		"empty":     func() (Header, []Result) { return Header{}, nil },
	}
	for name, f := range fixtures {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, rs := f()
			var tab, csvb, js bytes.Buffer
			if err := WriteTable(&tab, h, rs); err != nil {
				t.Fatal(err)
			}
			if err := WriteCSV(&csvb, rs); err != nil {
				t.Fatal(err)
			}
			if err := WriteJSON(&js, h, rs); err != nil {
				t.Fatal(err)
			}
			golden(t, name+".table.golden", tab.Bytes())
			golden(t, name+".csv.golden", csvb.Bytes())
			golden(t, name+".json.golden", js.Bytes())
		})
	}
}

func TestWriteTableColumns(t *testing.T) {
	t.Parallel()
	h, rs := fixture()
	var buf bytes.Buffer
	if err := WriteTable(&buf, h, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	find := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Fatalf("no line starting %q in\n%s", prefix, buf.String())
		return -1
	}
	i := find("#       size")
	if want := "#       size         count      type   redop      time   algbw   busbw  #wrong  algorithm"; lines[i] != want {
		t.Errorf("column header\n%q, want\n%q", lines[i], want)
	}
	if want := "#        (B)    (elements)                        (us)  (GB/s)  (GB/s)"; lines[i+1] != want {
		t.Errorf("units line\n%q, want\n%q", lines[i+1], want)
	}
	// Every row's numbers end where the header's column names end.
	ends := []int{}
	for j := 1; j < len(lines[i]); j++ {
		if lines[i][j] != ' ' && (j+1 == len(lines[i]) || lines[i][j+1] == ' ') {
			ends = append(ends, j)
		}
	}
	for k, r := range rs {
		row := lines[i+2+k]
		for _, e := range ends[:8] {
			if e >= len(row) || row[e] == ' ' || (e+1 < len(row) && row[e+1] != ' ') {
				t.Errorf("row %q: no column ending at %d", row, e)
			}
		}
		if !strings.HasSuffix(row, "  "+r.Algorithm) {
			t.Errorf("row %q does not end with its algorithm %q", row, r.Algorithm)
		}
	}
	// 8 MiB in 4123.456 us: 2.03 GB/s, busbw 1.75 times that.
	if row := lines[i+2+6]; !strings.Contains(row, "  4123.5    2.03    3.56       3  hier(ring)") {
		t.Errorf("8 MiB row = %q", row)
	}
	if row := lines[i+2+4]; !strings.Contains(row, "     N/A  rabenseifner") {
		t.Errorf("unchecked row = %q", row)
	}
	if !strings.Contains(buf.String(), "\n# Out of bounds values : 3\n") {
		t.Errorf("no or wrong out-of-bounds line in\n%s", buf.String())
	}
	var sum float64
	for _, r := range rs {
		sum += r.BusBW
	}
	if want := fmt.Sprintf("\n# Avg bus bandwidth    : %.2f\n", sum/float64(len(rs))); !strings.Contains(buf.String(), want) {
		t.Errorf("no %q in\n%s", want, buf.String())
	}
}

func TestWriteTableNA(t *testing.T) {
	t.Parallel()
	_, rs := fixtureAllGather()
	var buf bytes.Buffer
	if err := WriteTable(&buf, Header{}, rs); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"# Out of bounds values : N/A\n", "    none  ", "     N/A  ring\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	buf.Reset()
	if err := WriteTable(&buf, Header{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "# Avg bus bandwidth    : N/A\n") {
		t.Errorf("empty table:\n%s", buf.String())
	}
}

func TestWriteCSVParses(t *testing.T) {
	t.Parallel()
	_, rs := fixture()
	rs[1].Algorithm = `hier("ring", tree)` // needs quoting
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rs); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(rs)+1 {
		t.Fatalf("%d records, want %d", len(recs), len(rs)+1)
	}
	if got := strings.Join(recs[0], ","); got != "collective,op,dtype,ranks,bytes,count,time_us,algbw_gbps,busbw_gbps,algorithm,wrong" {
		t.Errorf("header row %q", got)
	}
	if recs[2][9] != rs[1].Algorithm || recs[5][10] != "-1" || recs[7][6] != "4123.456" {
		t.Errorf("rows %q", recs[1:])
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, f := range []func() (Header, []Result){fixture, fixtureAllGather} {
		h, rs := f()
		var buf bytes.Buffer
		if err := WriteJSON(&buf, h, rs); err != nil {
			t.Fatal(err)
		}
		// The keys are as documented.
		var raw map[string]any
		if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		res := raw["results"].([]any)[0].(map[string]any)
		for _, k := range []string{"collective", "op", "dtype", "ranks", "bytes", "count", "time_us", "algbw_gbps", "busbw_gbps", "algorithm", "wrong"} {
			if _, ok := res[k]; !ok {
				t.Errorf("result has no %q: %v", k, res)
			}
		}
		for _, k := range []string{"collective", "op", "dtype", "ranks", "hosts", "transport", "iters", "warmup", "command"} {
			if _, ok := raw["header"].(map[string]any)[k]; !ok {
				t.Errorf("header has no %q", k)
			}
		}
		// And it reads back to the same values.
		var doc jsonReport
		dec := json.NewDecoder(&buf)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Errorf("more than one document: %v", err)
		}
		if got := Header(doc.Header); got != h {
			t.Errorf("header %+v, want %+v", got, h)
		}
		got := make([]Result, len(doc.Results))
		for i, j := range doc.Results {
			got[i] = Result{
				Collective: j.Collective, Op: j.Op, DType: j.DType, Ranks: j.Ranks,
				Bytes: j.Bytes, Count: j.Count, Time: time.Duration(math.Round(j.TimeUS * 1e3)),
				AlgBW: j.AlgBW, BusBW: j.BusBW, Algorithm: j.Algorithm, Errors: j.Wrong,
			}
		}
		if !reflect.DeepEqual(got, rs) {
			t.Errorf("round trip:\n%+v\nwant\n%+v", got, rs)
		}
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, Header{}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"results": []`) {
		t.Errorf("empty results: %s", buf.String())
	}
	if err := WriteJSON(&buf, Header{}, []Result{{BusBW: math.Inf(1)}}); err == nil {
		t.Error("WriteJSON with an infinite bandwidth: no error")
	}
}

// svgDoc is what the SVG tests look at.
type svgDoc struct {
	polylines, paths int
	titles, texts    []string
	root             string
}

// parseSVG checks that s is well-formed XML and collects its parts.
func parseSVG(t *testing.T, s []byte) svgDoc {
	t.Helper()
	var d svgDoc
	dec := xml.NewDecoder(bytes.NewReader(s))
	var stack []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, s)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				d.root = tok.Name.Space + " " + tok.Name.Local
			}
			stack = append(stack, tok.Name.Local)
			switch tok.Name.Local {
			case "polyline":
				d.polylines++
			case "path":
				d.paths++
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 {
				continue
			}
			switch stack[len(stack)-1] {
			case "title":
				d.titles = append(d.titles, string(tok))
			case "text":
				d.texts = append(d.texts, string(tok))
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}
	return d
}

func TestWriteSVG(t *testing.T) {
	t.Parallel()
	h, rs := fixture()
	h.Transport = "shm+tcp <&>" // must be escaped
	var buf bytes.Buffer
	if err := WriteSVG(&buf, h, rs); err != nil {
		t.Fatal(err)
	}
	d := parseSVG(t, buf.Bytes())
	if d.root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q", d.root)
	}
	if d.polylines+d.paths != 1 {
		t.Errorf("%d polylines and %d paths, want one series", d.polylines, d.paths)
	}
	title := "gorun bench: allreduce sum float32 (8 ranks on 2 hosts, shm+tcp <&>)"
	if len(d.titles) == 0 || d.titles[0] != title || !slicesContains(d.texts, title) {
		t.Errorf("title %q not in titles %q / texts %q", title, d.titles, d.texts)
	}
	for _, want := range []string{"8 B", "1 KiB", "64 MiB", "Bus bandwidth (GB/s)", "Message size (log2 scale)"} {
		if !slicesContains(d.texts, want) {
			t.Errorf("no text %q in %q", want, d.texts)
		}
	}
	// The 0-byte row is left out: 7 points.
	if n := bytes.Count(buf.Bytes(), []byte("<circle cx=")); n != 7+1 { // 7 markers + the legend's
		t.Errorf("%d circles, want 8", n)
	}
	if bytes.Contains(buf.Bytes(), []byte("NaN")) || bytes.Contains(buf.Bytes(), []byte("Inf")) {
		t.Errorf("SVG has NaN or Inf:\n%s", buf.Bytes())
	}
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestWriteSVGSeries(t *testing.T) {
	t.Parallel()
	_, a := fixture()
	_, b := fixtureAllGather()
	c := append([]Result(nil), a...)
	for i := range c {
		c[i].Ranks = 16
		c[i].Fill()
	}
	rs := append(append(append([]Result(nil), a...), b...), c...)
	var buf bytes.Buffer
	if err := WriteSVG(&buf, Header{Collective: "mixed"}, rs); err != nil {
		t.Fatal(err)
	}
	d := parseSVG(t, buf.Bytes())
	if d.polylines+d.paths != 3 {
		t.Errorf("%d polylines and %d paths, want 3 series", d.polylines, d.paths)
	}
	for _, want := range []string{"allreduce sum float32 8 ranks", "allgather bfloat16 2 ranks", "allreduce sum float32 16 ranks"} {
		if !slicesContains(d.texts, want) {
			t.Errorf("legend has no %q: %q", want, d.texts)
		}
	}
}

func TestWriteSVGEdgeCases(t *testing.T) {
	t.Parallel()
	cases := map[string][]Result{
		"empty":      nil,
		"zero bytes": {{Collective: "barrier", Ranks: 4, Time: time.Microsecond, Errors: -1}},
	}
	for name, rs := range cases {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, Header{}, rs); err != nil {
			t.Fatal(err)
		}
		d := parseSVG(t, buf.Bytes())
		if !slicesContains(d.texts, "no data") || d.polylines+d.paths != 0 {
			t.Errorf("%s: texts %q, %d polylines", name, d.texts, d.polylines)
		}
		if d.titles[0] != "gorun bench" {
			t.Errorf("%s: title %q", name, d.titles[0])
		}
	}
	// One point, zero bandwidth, odd and huge sizes, NaN: still valid, no NaN.
	odd := map[string][]Result{
		"one point":  {{Collective: "allreduce", Ranks: 2, Bytes: 1000, Time: time.Microsecond}},
		"zero bw":    {{Collective: "allreduce", Ranks: 1, Bytes: 1, Time: time.Microsecond}, {Collective: "allreduce", Ranks: 1, Bytes: 3}},
		"huge":       {{Bytes: 1}, {Bytes: math.MaxInt64, BusBW: 1e-9}},
		"nan":        {{Bytes: 8, BusBW: math.NaN()}, {Bytes: 16, BusBW: math.Inf(1)}, {Bytes: 32, BusBW: 0.003}, {Bytes: 64, BusBW: -1}},
		"wide range": {{Bytes: 1, BusBW: 1}, {Bytes: 1 << 40, BusBW: 12345}},
	}
	for name, rs := range odd {
		for i := range rs {
			if rs[i].Time > 0 {
				rs[i].Fill()
			}
		}
		var buf bytes.Buffer
		if err := WriteSVG(&buf, Header{DType: "<x>"}, rs); err != nil {
			t.Fatal(err)
		}
		d := parseSVG(t, buf.Bytes())
		if d.polylines != 1 {
			t.Errorf("%s: %d polylines", name, d.polylines)
		}
		if bytes.Contains(buf.Bytes(), []byte("NaN")) || bytes.Contains(buf.Bytes(), []byte("Inf")) {
			t.Errorf("%s: NaN or Inf in\n%s", name, buf.Bytes())
		}
	}
}

func TestTableLayout(t *testing.T) {
	t.Parallel()
	// The comment form of a table line keeps its columns.
	l := tableLine("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "algorithm")
	if c := commentLine(l); len(c) != len(l) || c[0] != '#' || l[0] != ' ' {
		t.Errorf("commentLine(%q) = %q", l, c)
	}
}
