package peerargs

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// gorunFlags are some of gorun's main flags, as cmd/gorun passes them.
var gorunFlags = map[string]bool{
	"np": true, "n": true, "H": true, "host": true, "hostfile": true, "x": true, "npernode": true, "N": true,
	"dry-run": false, "tag-output": false, "oversubscribe": false, "summary-json": true, "max-restarts": true,
	"nnodes": true, "nproc-per-node": true, "rdzv-endpoint": true, "launcher": true, "iface": true,
	"help": false, "h": false, "version": false,
}

// translateCase is one paragraph of testdata/translate.txt.
type translateCase struct {
	line   int
	python string
	tool   Tool
	args   []string
	want   string // gorun's arguments, joined by blanks
	notes  []string
	err    string
}

// readCases reads testdata/translate.txt.
func readCases(t *testing.T) []translateCase {
	t.Helper()
	b, err := os.ReadFile("testdata/translate.txt")
	if err != nil {
		t.Fatal(err)
	}
	var cases []translateCase
	var c *translateCase
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			c = nil
		case c == nil:
			f := strings.Fields(l)
			cases = append(cases, translateCase{line: i + 1})
			c = &cases[len(cases)-1]
			if p, ok := strings.CutPrefix(f[0], "python="); ok {
				c.python, f = p, f[1:]
			}
			c.tool, c.args = Tool(f[0]), f[1:]
		case strings.HasPrefix(l, "=> "):
			c.want = strings.TrimPrefix(l, "=> ")
		case strings.HasPrefix(l, "note: "):
			c.notes = append(c.notes, strings.TrimPrefix(l, "note: "))
		case strings.HasPrefix(l, "error: "):
			c.err = strings.TrimPrefix(l, "error: ")
		default:
			t.Fatalf("testdata/translate.txt:%d: %q is not a case's line", i+1, l)
		}
	}
	return cases
}

// Each tool's command line becomes gorun's, with its notes, or is refused
// with its error.
func TestTranslate(t *testing.T) {
	cases := readCases(t)
	if len(cases) < 40 {
		t.Fatalf("read %d cases from testdata/translate.txt", len(cases))
	}
	for _, c := range cases {
		got, err := Translate(c.tool, c.args, Options{Gorun: gorunFlags, Python: c.python})
		where := fmt.Sprintf("testdata/translate.txt:%d", c.line)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: %s %s: error %v, want %q (got %q)", where, c.tool, strings.Join(c.args, " "), err, c.err, got.Args)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %s %s: %v", where, c.tool, strings.Join(c.args, " "), err)
			continue
		}
		if g := strings.Join(got.Args, " "); g != c.want {
			t.Errorf("%s: %s %s:\ngot  %s\nwant %s", where, c.tool, strings.Join(c.args, " "), g, c.want)
		}
		if strings.Join(got.Notes, "\n") != strings.Join(c.notes, "\n") {
			t.Errorf("%s: notes\n%q, want\n%q", where, got.Notes, c.notes)
		}
	}
}

// A value that holds blanks stays one argument.
func TestTranslateKeepsArguments(t *testing.T) {
	got, err := Translate(MPIExec, []string{"-genv", "A", "1 2", "sh", "-c", "echo $A"}, Options{Gorun: gorunFlags})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--oversubscribe", "-x", "A=1 2", "sh", "-c", "echo $A"}
	if strings.Join(got.Args, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("got %q, want %q", got.Args, want)
	}
}

// Named knows every name the tools' commands have, and no other.
func TestNamed(t *testing.T) {
	for name, want := range map[string]Tool{"mpirun": MPIRun, "orterun": MPIRun, "prterun": MPIRun,
		"mpiexec": MPIExec, "mpiexec.hydra": MPIExec, "torchrun": TorchRun} {
		if got, ok := Named(name); !ok || got != want {
			t.Errorf("Named(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"gorun", "srun", "mpiexec.openmpi", "python3", ""} {
		if got, ok := Named(name); ok {
			t.Errorf("Named(%q) = %q, want none", name, got)
		}
	}
	if _, err := Translate("srun", nil, Options{}); err == nil {
		t.Error("Translate(srun) took it")
	}
}

// FuzzTranslate reads any command line of any tool without a panic, and
// whatever follows the program is the program's: after "-np 2 prog" (or
// torchrun's "--nproc-per-node 2 prog") the fuzzed arguments come out as
// they went in, last.
func FuzzTranslate(f *testing.F) {
	f.Add("mpirun", "-np 4 --mca btl tcp ./prog -np 2", "-np 2 -foo : x")
	f.Add("mpiexec", "-n 2 -genv A 1 -launcher fork prog : x", "-genv A")
	f.Add("torchrun", "--nnodes 1:4 --nproc_per_node=2 --rdzv-endpoint [::1] --rdzv-conf a=1,join_timeout=2 -m mod --x", "--no-python")
	f.Fuzz(func(t *testing.T, tool, line, tail string) {
		Translate(Tool(tool), strings.Fields(line), Options{Gorun: gorunFlags})
		rest := strings.Fields(tail)
		for _, tool := range []Tool{MPIRun, MPIExec, TorchRun} {
			head := []string{"-np", "2", "prog"}
			if tool == TorchRun {
				head = []string{"--nproc-per-node", "2", "prog"}
			}
			got, err := Translate(tool, append(head, rest...), Options{Gorun: gorunFlags})
			if err != nil {
				if tool != TorchRun && slices.Contains(rest, ":") {
					continue // MPMD
				}
				t.Fatalf("%s %q: %v", tool, append(head, rest...), err)
			}
			want := append([]string{"prog"}, rest...)
			if n := len(got.Args); n < len(want) || !slices.Equal(got.Args[n-len(want):], want) {
				t.Errorf("%s %q: %q does not end with %q", tool, append(head, rest...), got.Args, want)
			}
		}
	})
}
