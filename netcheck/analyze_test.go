package netcheck

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// matrixCase is a testdata/*.txt case: a rate matrix (rows send, "-" for
// none), an optional "expect RATE", and what Analyze must find.
type matrixCase struct {
	hosts    []string
	links    []Link
	expect   float64
	slow     int
	suspects []string
	verdict  string
}

func readCase(t *testing.T, path string) matrixCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c matrixCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		key, rest, _ := strings.Cut(line, " ")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case key == "expect":
			c.expect, err = strconv.ParseFloat(rest, 64)
		case key == "want-slow":
			c.slow, err = strconv.Atoi(rest)
		case key == "want-suspects":
			c.suspects = fields[1:]
		case key == "want-verdict":
			c.verdict = rest
		case c.hosts == nil:
			c.hosts = fields
		default:
			for j, v := range fields[1:] {
				if v == "-" {
					continue
				}
				g, perr := strconv.ParseFloat(v, 64)
				if perr != nil {
					err = perr
				}
				c.links = append(c.links, Link{From: fields[0], To: c.hosts[j], Gbps: g, RTTus: 50})
			}
		}
		if err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
	}
	return c
}

func TestAnalyze(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no testdata/*.txt")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			c := readCase(t, file)
			a := Analyze(c.links, c.hosts, c.expect, 0)
			if len(a.Slow) != c.slow {
				t.Errorf("%d slow links, want %d: %+v", len(a.Slow), c.slow, a.Slow)
			}
			if !slices.Equal(a.Suspects, c.suspects) && len(a.Suspects)+len(c.suspects) > 0 {
				t.Errorf("suspects %q, want %q", a.Suspects, c.suspects)
			}
			if !strings.Contains(a.Verdict, c.verdict) {
				t.Errorf("verdict:\n%s\nwant it to contain:\n%s", a.Verdict, c.verdict)
			}
			for _, s := range a.Slow {
				if s.Gbps >= s.ExpectedGbps || s.Why == "" {
					t.Errorf("slow link %+v: its rate must be below the one it is held against, and say why", s)
				}
			}
		})
	}
}

// A fraction of 0.9 flags links that 0.5 lets pass.
func TestAnalyzeFraction(t *testing.T) {
	c := readCase(t, "testdata/fine.txt")
	if a := Analyze(c.links, c.hosts, 0, 0.9); len(a.Slow) == 0 {
		t.Errorf("fraction 0.9: nothing slow in %v", c.links)
	}
}

func TestAnalyzeNoLinks(t *testing.T) {
	a := Analyze(nil, []string{"h1"}, 0, 0)
	if len(a.Slow) != 0 || !strings.Contains(a.Verdict, "two hosts") {
		t.Errorf("one host: %+v", a)
	}
}

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		q    float64
		want float64
	}{
		{[]float64{3, 1, 2}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4, 5}, 0.75, 4},
		{[]float64{7}, 0.75, 7},
		{nil, 0.5, 0},
	} {
		if got := quantile(c.in, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.in, c.q, got, c.want)
		}
	}
}
