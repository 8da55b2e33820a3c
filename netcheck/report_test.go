package netcheck

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: got\n%s\nwant\n%s", path, got, want)
	}
}

func TestWriteMatrix(t *testing.T) {
	for _, name := range []string{"host-both-ways", "fine"} {
		c := readCase(t, filepath.Join("testdata", name+".txt"))
		var b bytes.Buffer
		if err := WriteMatrix(&b, Analyze(c.links, c.hosts, c.expect, 0)); err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("testdata", name+".matrix.golden"), b.Bytes())
	}
}

// The JSON report has the keys the man page promises, lists never null.
func TestWriteJSON(t *testing.T) {
	c := readCase(t, "testdata/host-both-ways.txt")
	a := Analyze(c.links, c.hosts, 0, 0)
	var b bytes.Buffer
	if err := WriteJSON(&b, NewReport(a, Info{Transport: "tcp"}, nil, nil)); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"links", "slow", "hosts", "skew", "verdict"} {
		if len(got[k]) == 0 || string(got[k]) == "null" {
			t.Errorf("key %q: %s", k, got[k])
		}
	}
	var r struct {
		Links []map[string]any `json:"links"`
		Slow  []map[string]any `json:"slow"`
	}
	json.Unmarshal(b.Bytes(), &r)
	if len(r.Links) != 12 || len(r.Slow) != 6 {
		t.Errorf("%d links, %d slow: want 12 and 6", len(r.Links), len(r.Slow))
	}
	for _, k := range []string{"from", "to", "gbps", "expected_gbps", "why"} {
		if _, ok := r.Slow[0][k]; !ok {
			t.Errorf("slow link without %q: %v", k, r.Slow[0])
		}
	}
	for _, k := range []string{"from", "to", "gbps", "rtt_us"} {
		if _, ok := r.Links[0][k]; !ok {
			t.Errorf("link without %q: %v", k, r.Links[0])
		}
	}
}

// The SVG is well-formed XML with a cell per host pair, the slow ones red.
func TestWriteSVG(t *testing.T) {
	c := readCase(t, "testdata/host-both-ways.txt")
	var b bytes.Buffer
	if err := WriteSVG(&b, Analyze(c.links, c.hosts, 0, 0)); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	rects := 0
	red := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
			for _, a := range se.Attr {
				if a.Name.Local == "fill" && strings.HasPrefix(a.Value, "#dc00") {
					red++
				}
			}
		}
	}
	if rects != 1+16 || red != 6 {
		t.Errorf("%d rects (want a background and 16 cells), %d red (want 6)", rects, red)
	}
}

func TestHeat(t *testing.T) {
	for _, c := range []struct {
		g    float64
		want string
	}{{0, "#dc0050"}, {5, "#dcc850"}, {10, "#00c850"}, {20, "#00c850"}} {
		if got := heat(c.g, 10); got != c.want {
			t.Errorf("heat(%v, 10) = %s, want %s", c.g, got, c.want)
		}
	}
}
