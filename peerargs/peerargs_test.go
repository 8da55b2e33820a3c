package peerargs

import (
	"fmt"
	"os"
	"os/exec"
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
	module string
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
			if m, ok := strings.CutPrefix(f[0], "module="); ok {
				c.module, f = m, f[1:]
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
		got, err := Translate(c.tool, c.args, Options{Gorun: gorunFlags, Python: c.python, Module: c.module})
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
		"mpiexec": MPIExec, "mpiexec.hydra": MPIExec, "torchrun": TorchRun, "horovodrun": HorovodRun, "deepspeed": DeepSpeed} {
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
// they went in, last (up to a ':' of mpirun's and mpiexec's, which starts
// another program).
func FuzzTranslate(f *testing.F) {
	f.Add("mpirun", "-np 4 --mca btl tcp ./prog -np 2", "-np 2 -foo : x")
	f.Add("mpiexec", "-n 2 -genv A 1 -launcher fork prog : x", "-genv A")
	f.Add("torchrun", "--nnodes 1:4 --nproc_per_node=2 --rdzv-endpoint [::1] --rdzv-conf a=1,join_timeout=2 -m mod --x", "--no-python")
	f.Fuzz(func(t *testing.T, tool, line, tail string) {
		Translate(Tool(tool), strings.Fields(line), Options{Gorun: gorunFlags})
		rest := strings.Fields(tail)
		for _, tool := range []Tool{MPIRun, MPIExec, TorchRun, HorovodRun, DeepSpeed} {
			head := []string{"-np", "2", "prog"}
			switch tool {
			case TorchRun:
				head = []string{"--nproc-per-node", "2", "prog"}
			case DeepSpeed:
				head = []string{"--num_gpus", "2", "--no_local_rank", "prog"}
			}
			got, err := Translate(tool, append(head, rest...), Options{Gorun: gorunFlags})
			if (tool == MPIRun || tool == MPIExec) && slices.Contains(rest, ":") {
				continue // MPMD: what follows ':' is read as the next program's options
			}
			if err != nil {
				t.Fatalf("%s %q: %v", tool, append(head, rest...), err)
			}
			want := append([]string{"prog"}, rest...)
			if n := len(got.Args); n < len(want) || !slices.Equal(got.Args[n-len(want):], want) {
				t.Errorf("%s %q: %q does not end with %q", tool, append(head, rest...), got.Args, want)
			}
		}
	})
}

// A job of several programs in a file (Open MPI's --app, Hydra's
// -configfile): one program a line, '#' lines skipped, read through
// Options.ReadFile; its errors name the flag.
func TestTranslateAppFile(t *testing.T) {
	files := map[string]string{"ok": "# two programs\n-np 1 ./a -v\n\n  -np 2 -x A=1 ./b\n", "empty": "# nothing\n",
		"hydra": "-n 1 ./a -v\n-n 2 -env A 1 ./b\n"}
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return []byte(b), nil
		}
		return nil, fmt.Errorf("open %s: no such file", name)
	}
	o := Options{Gorun: gorunFlags, ReadFile: read}
	for _, tt := range []struct {
		tool      Tool
		args      []string
		want, err string
	}{
		{MPIRun, []string{"--app", "ok"}, "-np 1 ./a -v : -np 2 -x A=1 ./b", ""},
		{MPIRun, []string{"--mca", "btl", "tcp", "--app", "ok"}, "-x OMPI_MCA_btl=tcp -np 1 ./a -v : -np 2 -x A=1 ./b", ""},
		{MPIExec, []string{"-configfile", "hydra", "-l"}, "--oversubscribe --tag-output -np 1 ./a -v : -np 2 -x A=1 ./b", ""},
		{MPIRun, []string{"--app", "ok", "prog"}, "", "mpirun: --app ok and the program prog: give one"},
		{MPIRun, []string{"--app", "empty"}, "", "mpirun: --app empty: the file names no program"},
		{MPIExec, []string{"-configfile", "gone"}, "", "mpiexec: -configfile gone: open gone: no such file"},
		{MPIRun, []string{"--app", "ok", "--app", "ok"}, "", "mpirun: --app ok: give one (and --app ok before it)"},
	} {
		got, err := Translate(tt.tool, tt.args, o)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s %q: error %v, want %q", tt.tool, tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || strings.Join(got.Args, " ") != tt.want {
			t.Errorf("%s %q = %q, %v; want %q", tt.tool, tt.args, got.Args, err, tt.want)
		}
	}
}

// Files that a command line names for their hosts: Intel MPI's
// -configfile with a -host on each line places each line's ranks there;
// DeepSpeed's --num_nodes N takes the first N hosts of the hostfile.
func TestTranslateHostFiles(t *testing.T) {
	files := map[string]string{"intel": "-n 1 -host h1 ./io\n-n 2 -host h2 ./compute\n",
		"ds3": "h1 slots=2\n# a comment\nh2 slots=2\nh3 slots=2\n"}
	read := func(name string) ([]byte, error) {
		if b, ok := files[name]; ok {
			return []byte(b), nil
		}
		return nil, fmt.Errorf("open %s: no such file", name)
	}
	o := Options{Gorun: gorunFlags, ReadFile: read}
	for _, tt := range []struct {
		tool      Tool
		args      []string
		want, err string
	}{
		{MPIExec, []string{"-configfile", "intel"}, "--oversubscribe -np 1 -H h1:1,h2:2 ./io : -np 2 ./compute", ""},
		{DeepSpeed, []string{"--hostfile=ds3", "--num_nodes=2", "--no_local_rank", "train.py"}, "--hostfile ds3 --include h1@h2 python3 -u train.py", ""},
		{DeepSpeed, []string{"--num_nodes", "1", "--no_local_rank", "train.py"}, "python3 -u train.py", ""},
		{DeepSpeed, []string{"-H", "ds3", "--num_nodes", "4", "train.py"}, "", "deepspeed: --num_nodes 4: ds3 lists 3 host(s): give at most that many, or list more"},
		{DeepSpeed, []string{"-H", "ds3", "--num_nodes", "2", "--include", "h2", "train.py"}, "", "deepspeed: --num_nodes 2 with --include h2: give one (--include h1@h2 names the hosts)"},
		{DeepSpeed, []string{"--num_nodes", "2", "train.py"}, "", "deepspeed: --num_nodes 2: the first hosts of the hostfile, and /job/hostfile cannot be read: give --hostfile FILE, or name the hosts (--include h1@h2)"},
	} {
		got, err := Translate(tt.tool, tt.args, o)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%s %q: error %v, want %q", tt.tool, tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || strings.Join(got.Args, " ") != tt.want {
			t.Errorf("%s %q = %q, %v; want %q", tt.tool, tt.args, got.Args, err, tt.want)
		}
	}
}

// Owners names the tools that have a flag (torchrun's abbreviations too:
// its --np is --nproc-per-node); LauncherProgram knows a launcher run as the program.
func TestOwnersAndLaunchers(t *testing.T) {
	for name, want := range map[string]string{"allow-run-as-root": "mpirun", "genvnone": "mpiexec", "nproc_per": "torchrun",
		"np": "mpirun mpiexec torchrun horovodrun", "num_gpus": "deepspeed", "frobnicate": "", "H": "mpirun horovodrun deepspeed"} {
		var got []string
		for _, o := range Owners(name) {
			got = append(got, string(o))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("Owners(%q) = %q, want %q", name, got, want)
		}
	}
	for _, argv := range [][]string{{"mpirun"}, {"/usr/bin/mpiexec.hydra", "-n", "2"}, {"mpirun.openmpi"}, {"mpiexec.mpich"},
		{"python3", "-m", "torch.distributed.run"}, {"/usr/bin/python3.11", "-m", "torch.distributed.run", "x.py"}, {"deepspeed"},
		{"python", "-m", "torch.distributed.launch", "--use-env", "x.py"}} {
		if _, ok := LauncherProgram(argv); !ok {
			t.Errorf("LauncherProgram(%q): not a launcher", argv)
		}
	}
	for _, argv := range [][]string{{}, {"./mpirun-test"}, {"python3", "train.py"}, {"python3", "-m", "torch.distributed"}, {"pythonic", "-m", "torch.distributed.run"}} {
		if tool, ok := LauncherProgram(argv); ok {
			t.Errorf("LauncherProgram(%q) = %s", argv, tool)
		}
	}
}

// Closest suggests a near name, never a flag's opposite nor one of a
// letter.
func TestClosest(t *testing.T) {
	names := []string{"oversubscribe", "nooversubscribe", "tag-output", "x", "np"}
	for word, want := range map[string]string{"tag-outptu": "tag-output", "tag_output": "tag-output", "nooversubscrib": "nooversubscribe",
		"no-oversubscribe": "nooversubscribe", "oversubscrib": "oversubscribe", "y": "", "frobnicate": "", "nq": ""} {
		if got := Closest(word, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", word, got, want)
		}
	}
	// Without the flag itself, its opposite is no suggestion.
	for word, names := range map[string][]string{"nooversubscribe": {"oversubscribe"}, "no-oversubscribe": {"oversubscribe"}, "oversubscribe": {"nooversubscribe"}} {
		if got := Closest(word, names); got != "" {
			t.Errorf("Closest(%q, %q) = %q, want none", word, names, got)
		}
	}
}

// gorun deepspeed's wrapper gives each rank --local_rank=$LOCAL_RANK after
// the script and before its arguments, as DeepSpeed's launch.py does.
func TestDeepSpeedWrapper(t *testing.T) {
	tr, err := Translate(DeepSpeed, []string{"--num_gpus", "2", "--module", "pkg.train", "--lr", "a b"}, Options{Gorun: gorunFlags, Python: "printf"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Args) < 4 || tr.Args[2] != "sh" || tr.Args[3] != "-c" || tr.Args[4] != DSWrapper {
		t.Fatalf("args %q", tr.Args)
	}
	if got, want := strings.Join(tr.Args[6:], " "), "4 printf -u -m pkg.train --lr a b"; got != want {
		t.Errorf("the wrapper's arguments: %q, want %q", got, want)
	}
	// printf and its format stand for python3: they print the arguments.
	c := exec.Command("sh", "-c", DSWrapper, "sh", "5", "printf", "%s|", "-u", "-m", "pkg.train", "--lr", "a b")
	c.Env = append(os.Environ(), "LOCAL_RANK=3")
	out, err := c.CombinedOutput()
	if err != nil || string(out) != "-u|-m|pkg.train|--local_rank=3|--lr|a b|" {
		t.Errorf("the wrapper ran %q, %v", out, err)
	}
}
