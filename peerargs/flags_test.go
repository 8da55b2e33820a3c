package peerargs

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the outcomes in testdata/flags/*.txt from what Translate does")

// flagList is one file of testdata/flags: a peer's whole flag list.
type flagList struct {
	file string
	tool Tool
	base []string // the command line each flag is put in front of
}

// flagLists are the peers' lists. Each line of a list is tried as the
// flag (with its values) in front of base.
var flagLists = []flagList{
	{"mpirun.txt", MPIRun, []string{"prog"}},
	{"mpiexec.txt", MPIExec, []string{"prog"}},
	{"torchrun-1.13.txt", TorchRun, []string{"prog"}},
	{"torchrun-2.x.txt", TorchRun, []string{"prog"}},
	{"horovodrun.txt", HorovodRun, []string{"-np", "1", "prog"}},
	{"deepspeed.txt", DeepSpeed, []string{"--no_local_rank", "prog"}},
}

// flagLine is one line of a list: the flag and its values, the outcome,
// and its text (works: the gorun flags it becomes, "-" for none; note:
// the note; refused: the error), and for works the note it also prints.
type flagLine struct {
	n                   int
	args                []string
	outcome, text, also string
}

// splitArgs splits a line's flag part at blanks, keeping what is between
// single quotes together.
func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				out = append(out, cur.String())
			}
			cur.Reset()
			any = false
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

// outcome is what Translate makes of args in front of base: its outcome
// and text as a list's line gives them.
func outcome(tool Tool, args, base []string) (kind, text, also string) {
	o := Options{Gorun: gorunFlags, ReadFile: func(string) ([]byte, error) { return []byte("-np 1 a\n# b\n-np 2 b x\n"), nil }}
	b, err := Translate(tool, base, o)
	if err != nil {
		panic(err)
	}
	if name := strings.TrimLeft(args[0], "-"); name == "app" || name == "configfile" {
		base = base[:len(base)-1] // the file names the programs
	}
	tr, err := Translate(tool, append(slices.Clone(args), base...), o)
	if err != nil {
		return "refused", strings.TrimPrefix(err.Error(), string(tool)+": "), ""
	}
	c := contribution(tr.Args, b.Args)
	notes := strings.Join(tr.Notes, " | ")
	if len(c) == 0 && notes != "" {
		return "note", notes, ""
	}
	text = strings.Join(c, " ")
	if text == "" {
		text = "-"
	}
	return "works", text, notes
}

// contribution is got without base's arguments (matched from the end).
func contribution(got, base []string) []string {
	out := slices.Clone(got)
	j := len(out) - 1
	for i := len(base) - 1; i >= 0; i-- {
		for k := j; k >= 0; k-- {
			if out[k] == base[i] {
				out = slices.Delete(out, k, k+1)
				j = k - 1
				break
			}
		}
	}
	return out
}

// readFlagList reads a list: its lines, and the comment lines as they are.
func readFlagList(t *testing.T, path string) (lines []flagLine, raw []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range raw {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, "\t")
		fl := flagLine{n: i + 1, args: splitArgs(f[0])}
		if len(f) > 1 {
			fl.outcome = f[1]
		}
		if len(f) > 2 {
			fl.text = f[2]
		}
		if len(f) > 3 {
			fl.also = f[3]
		}
		lines = append(lines, fl)
	}
	return lines, raw
}

// Every flag of every peer's list either works, is taken with a note, or
// is refused with the gorun way, as testdata/flags says; and the lists
// hold every flag peerargs knows of each peer, and no other.
func TestFlagLists(t *testing.T) {
	known := map[Tool]map[string]bool{}
	for _, fl := range flagLists {
		path := filepath.Join("testdata", "flags", fl.file)
		lines, raw := readFlagList(t, path)
		if known[fl.tool] == nil {
			known[fl.tool] = map[string]bool{}
		}
		counts := map[string]int{}
		for _, l := range lines {
			kind, text, also := outcome(fl.tool, l.args, fl.base)
			counts[kind]++
			name := strings.TrimLeft(strings.SplitN(l.args[0], "=", 2)[0], "-")
			p := &parser{tool: fl.tool, table: flagTable(fl.tool)}
			if _, ok := lookup(p.table, p.spelling(name)); ok {
				known[fl.tool][p.spelling(name)] = true
			}
			if *update {
				line := strings.Join(quoteArgs(l.args), " ") + "\t" + kind + "\t" + text
				if also != "" {
					line += "\t" + also
				}
				raw[l.n-1] = line
				continue
			}
			where := fmt.Sprintf("%s:%d: %s %s", path, l.n, fl.tool, strings.Join(l.args, " "))
			if kind != l.outcome || text != l.text || also != l.also {
				t.Errorf("%s:\ngot  %s\t%s\t%s\nwant %s\t%s\t%s", where, kind, text, also, l.outcome, l.text, l.also)
			}
			if kind == "refused" && !strings.Contains(text, ": ") {
				t.Errorf("%s: the refusal %q names no way", where, text)
			}
		}
		t.Logf("%s: %d works, %d note, %d refused", fl.file, counts["works"], counts["note"], counts["refused"])
		if *update {
			if err := os.WriteFile(path, []byte(strings.Join(raw, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for tool, seen := range known {
		for _, f := range flagTable(tool) {
			for _, n := range f.names {
				if !seen[n] {
					t.Errorf("%s's flag %s is in no list of testdata/flags", tool, n)
				}
			}
		}
	}
}

// quoteArgs writes args as a list's line holds them.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, " ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
