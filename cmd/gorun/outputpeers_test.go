package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
)

// Issue 30, point 4 (migrant review P6, P8, P9): output as scripts parse
// it. launcher/output/testdata/peers holds what Open MPI's mpirun and
// Hydra's mpiexec printed and wrote, measured; these tests run gorun.

// filesUnder lists the files under dir, relative to it, sorted.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// gorun mpirun --output-filename writes Open MPI 4.1's layout, DIR/1/rank.N
// (N padded to the digits of -np), every rank's two files even when it
// printed nothing, and still prints to the terminal; DIR:nocopy,nojobid
// as Open MPI reads them. Plain gorun keeps its own layout
// (TestOutputFilename).
func TestMPIRunOutputFilename(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "o")
	r := runGorun(t, 60*time.Second, nil, "mpirun", "--output-filename", dir, "-np", "2", "sh", "-c", `echo out-$RANK; echo err-$RANK >&2`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := sortedLines(r.stdout); got != "out-0\nout-1\n" {
		t.Errorf("terminal stdout %q, want each rank's line (Open MPI prints a copy)", r.stdout)
	}
	for _, w := range []string{"err-0\n", "err-1\n"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("terminal stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	want := []string{"1/rank.0/stderr", "1/rank.0/stdout", "1/rank.1/stderr", "1/rank.1/stdout"}
	if got := filesUnder(t, dir); !slices.Equal(got, want) {
		t.Fatalf("files %q, want %q", got, want)
	}
	for _, f := range want {
		rank, s := f[len("1/rank."):len("1/rank.")+1], map[string]string{"stdout": "out", "stderr": "err"}[filepath.Base(f)]
		if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != s+"-"+rank+"\n" {
			t.Errorf("%s = %q", f, b)
		}
	}

	// Ten ranks: rank.00 to rank.09, empty files for ranks that say nothing.
	dir = filepath.Join(t.TempDir(), "o")
	r = runGorun(t, 60*time.Second, nil, "mpirun", "--oversubscribe", "--output-filename", dir, "-np", "10", "sh", "-c", `[ $RANK = 9 ] && echo nine; true`)
	if r.code != 0 {
		t.Fatalf("-np 10: exit %d\n%s", r.code, r.stderr)
	}
	got := filesUnder(t, dir)
	if len(got) != 20 || got[0] != "1/rank.00/stderr" || got[19] != "1/rank.09/stdout" {
		t.Errorf("-np 10: files %q, want 1/rank.00 to 1/rank.09, two each", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "1", "rank.09", "stdout")); string(b) != "nine\n" {
		t.Errorf("1/rank.09/stdout = %q", b)
	}

	// Open MPI's directives: no copy on the terminal, no job directory.
	dir = filepath.Join(t.TempDir(), "o")
	r = runGorun(t, 60*time.Second, nil, "mpirun", "--output-filename", dir+":nocopy,nojobid", "-np", "2", "sh", "-c", `echo out-$RANK`)
	if r.code != 0 || r.stdout != "" {
		t.Errorf(":nocopy,nojobid: exit %d, stdout %q (want none)\n%s", r.code, r.stdout, r.stderr)
	}
	if got := filesUnder(t, dir); !slices.Equal(got, []string{"rank.0/stderr", "rank.0/stdout", "rank.1/stderr", "rank.1/stdout"}) {
		t.Errorf(":nocopy,nojobid: files %q", got)
	}
	r = runGorun(t, 60*time.Second, nil, "mpirun", "--output-filename", dir+":nocopi", "-np", "1", "true")
	if r.code != launcher.ExitUsage || !strings.Contains(r.stderr, `unknown directive "nocopi"`) {
		t.Errorf(":nocopi: exit %d, want %d and the directives named\n%s", r.code, launcher.ExitUsage, r.stderr)
	}
}

// --tag-output and --timestamp-output print Open MPI's formats under
// gorun mpirun, alone and together; gorun mpiexec's -l and -prepend-rank
// print Hydra's "[rank] ", without the host, on any number of hosts;
// plain gorun keeps its own ("[host:rank] " on several hosts, RFC 3339
// times: TestTimestampOutput).
func TestPersonalityOutputFormats(t *testing.T) {
	t.Parallel()
	ctime := `[A-Z][a-z]{2} [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}`
	prog := []string{"sh", "-c", `echo out; echo err >&2`}
	tests := []struct {
		name           string
		args           []string
		stdout, stderr string // regular expressions every line of each must match; "" = no lines
		ranks          int    // lines on each
	}{
		{"mpirun --tag-output", []string{"mpirun", "--tag-output", "-np", "2"}, `^\[1,[01]\]<stdout>:out$`, `^\[1,[01]\]<stderr>:err$`, 2},
		{"mpirun --timestamp-output", []string{"mpirun", "--timestamp-output", "-np", "2"}, `^` + ctime + `<stdout>:out$`, `^` + ctime + `<stderr>:err$`, 2},
		{"mpirun both", []string{"mpirun", "--tag-output", "--timestamp-output", "-np", "2"}, `^` + ctime + `\[1,[01]\]<stdout>:out$`, `^` + ctime + `\[1,[01]\]<stderr>:err$`, 2},
		{"mpiexec -l on two hosts", []string{"mpiexec", "-l", "-hosts", "localhost,127.0.0.1", "-n", "2"}, `^\[[01]\] out$`, `^\[[01]\] err$`, 2},
		{"mpiexec -prepend-rank", []string{"mpiexec", "-prepend-rank", "-hosts", "localhost,127.0.0.1", "-n", "2"}, `^\[[01]\] out$`, `^\[[01]\] err$`, 2},
		{"gorun on two hosts", []string{"--tag-output", "-H", "localhost,127.0.0.1", "-np", "2"}, `^\[(localhost:0|127\.0\.0\.1:1)\] out$`, `^\[(localhost:0|127\.0\.0\.1:1)\] err$`, 2},
		{"torchrun --tag-output", []string{"torchrun", "--nproc-per-node", "2", "--no-python", "--tag-output"}, `^\[[01]\] out$`, `^\[[01]\] err$`, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorun(t, 60*time.Second, nil, append(tt.args, prog...)...)
			if r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			for _, c := range []struct{ name, text, re string }{{"stdout", r.stdout, tt.stdout}, {"stderr", r.stderr, tt.stderr}} {
				re := regexp.MustCompile(c.re)
				var lines []string
				for _, l := range strings.Split(strings.TrimSuffix(c.text, "\n"), "\n") {
					if !strings.HasPrefix(l, "gorun") { // gorun's own notes
						lines = append(lines, l)
					}
				}
				if len(lines) != tt.ranks {
					t.Errorf("%s: %d lines, want %d:\n%s", c.name, len(lines), tt.ranks, c.text)
				}
				for _, l := range lines {
					if !re.MatchString(l) {
						t.Errorf("%s line %q does not match %s", c.name, l, c.re)
					}
				}
			}
		})
	}
	// mpirun's clock is its local time, as ctime's.
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	r := runGorunIn(t, "", []string{"TZ=Asia/Tokyo"}, 60*time.Second, nil, "mpirun", "--timestamp-output", "-np", "1", "echo", "hi")
	stamp, _, _ := strings.Cut(r.stdout, "<stdout>:")
	if at, err := time.ParseInLocation("Mon Jan _2 15:04:05 2006", stamp, tokyo); err != nil || time.Since(at).Abs() > 5*time.Minute {
		t.Errorf("TZ=Asia/Tokyo: %q, want Tokyo's time now (%s)", r.stdout, time.Now().In(tokyo).Format(time.ANSIC))
	}
}

// --merge-output never prints a line without its rank tag: a straggler's
// line that came after the others' was written goes out as "[2] ...", not
// bare (migrant review P9).
func TestMergeOutputStraggler(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 60*time.Second, nil, "-np", "4", "--merge-output", "sh", "-c", `[ $RANK = 2 ] && sleep 1; echo epoch 1 loss 0.31`)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	seen := map[int]int{}
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		sub := taggedLine.FindStringSubmatch(l)
		if sub == nil || sub[2] != "epoch 1 loss 0.31" {
			t.Fatalf("line %q has no rank tag:\n%s", l, r.stdout)
		}
		for _, rank := range ranksOf(t, sub[1]) {
			seen[rank]++
		}
	}
	if len(seen) != 4 || seen[0] != 1 || seen[1] != 1 || seen[2] != 1 || seen[3] != 1 {
		t.Errorf("ranks in the tags: %v, want 0 to 3 once each:\n%s", seen, r.stdout)
	}
	if !strings.Contains(r.stdout, "[2] epoch 1 loss 0.31\n") {
		t.Errorf("the straggler's line is not tagged [2]:\n%s", r.stdout)
	}
}

// A program that could not be executed (missing, not executable) is not
// restarted by --max-restarts: the job ends at once with the reason
// (migrant review P8); a .py that is not executable gets the hint, in
// plain gorun and in the personalities, and in a per-node launch.
func TestStartFailureNotRestarted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "train.py"), []byte("print('hi')\n"), 0o644)
	hint := func(prog string) string {
		return "it is a Python script: run it as python3 " + prog + ", or with gorun torchrun " + prog
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no such file", []string{"-np", "2", "--max-restarts", "2", "./nonexist"}, launcher.ExitNotFound,
			[]string{"could not start: ./nonexist: no such file", "no restart (--max-restarts 2)"}},
		{"a .py not executable", []string{"-np", "2", "--max-restarts", "2", "./train.py"}, launcher.ExitNotExec,
			[]string{"./train.py: not an executable file; " + hint("./train.py"), "no restart (--max-restarts 2)"}},
		{"a .py not in PATH", []string{"-np", "1", "train.py"}, launcher.ExitNotFound,
			[]string{"train.py: command not found in PATH", hint("train.py")}},
		{"gorun mpirun", []string{"mpirun", "-np", "2", "./train.py"}, launcher.ExitNotExec, []string{hint("./train.py")}},
		{"gorun mpiexec", []string{"mpiexec", "-n", "2", "./train.py"}, launcher.ExitNotExec, []string{hint("./train.py")}},
		{"gorun torchrun --no-python", []string{"torchrun", "--nproc-per-node", "1", "--max-restarts", "1", "--no-python", "./train.py"}, launcher.ExitNotExec,
			[]string{hint("./train.py"), "no restart (--max-restarts 1)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runGorunIn(t, dir, nil, 60*time.Second, nil, tt.args...)
			if r.code != tt.code || strings.Contains(r.stderr, "restarting the job") {
				t.Errorf("exit %d, want %d and no restart\n%s", r.code, tt.code, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	// The review's per-node repro: an elastic per-node launch restarted a
	// program that is not executable three times.
	t.Run("per-node", func(t *testing.T) {
		t.Parallel()
		endpoint := "127.0.0.1:" + freePort(t)
		r := runGorunIn(t, dir, []string{"GORUN_RDZV_TOKEN=" + perNodeToken}, 60*time.Second, nil,
			"--nnodes=1:2", "--nproc-per-node=2", "--max-restarts=3", "--rdzv-last-call=100ms", "--rdzv-endpoint="+endpoint, "./train.py")
		if r.code != launcher.ExitNotExec || strings.Contains(r.stderr, "restarting the job") || !strings.Contains(r.stderr, hint("./train.py")) {
			t.Errorf("exit %d, want %d, no restart and the hint\n%s", r.code, launcher.ExitNotExec, r.stderr)
		}
	})
}

// In a per-node launch each node prints its own ranks' output, with the
// job's --tag-output, as each node's torchrun prints its workers': the
// endpoint's node its own, not every node's.
func TestPerNodeOutputEachNode(t *testing.T) {
	t.Parallel()
	endpoint := "127.0.0.1:" + freePort(t)
	start := func() *node {
		cmd := gorunCommand(context.Background(), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", endpoint,
			"--tag-output", "--merge-output", "sh", "-c", `echo "rank $RANK"; echo all; echo "err $RANK" >&2`)
		cmd.Env = append(cmd.Env, "GORUN_RDZV_TOKEN="+perNodeToken)
		return startNode(t, cmd)
	}
	a := start()
	waitListening(t, endpoint)
	b := start()
	for i, n := range []*node{a, b} {
		if code := n.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("node %d: exit %d\n%s", i, code, n.stderr.String())
		}
	}
	for i, n := range []*node{a, b} {
		host := "127.0.0.1"
		if i == 1 {
			host = "127.0.0.1#2"
		}
		r0, r1 := 2*i, 2*i+1
		want := sortedLines(fmt.Sprintf("[%d,%d] all\n[%s:%d] rank %d\n[%s:%d] rank %d\n", r0, r1, host, r0, r0, host, r1, r1))
		if got := sortedLines(n.stdout.String()); got != want {
			t.Errorf("node %d printed\n%s\nwant\n%s", i, got, want)
		}
		for _, r := range []int{r0, r1} {
			if w := fmt.Sprintf("[%s:%d] err %d\n", host, r, r); !strings.Contains(n.stderr.String(), w) {
				t.Errorf("node %d's stderr lacks %q:\n%s", i, w, n.stderr.String())
			}
		}
	}
}
