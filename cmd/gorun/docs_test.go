package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The documents' examples are checked against what gorun prints.
//
// A transcript is a ```console block of README.md or of a page of docs/
// (the tour, docs/tour.md), or an .EX block of the EXAMPLES section of
// man/gorun.1 whose lines start with a "$ " prompt.
// Each "$ " line is a command (a trailing backslash continues it on the
// next line); the lines after it, up to the next command, are its output,
// standard output and standard error together, as a terminal shows them.
// The commands of a transcript run in order in one bash, with this test
// binary as gorun (see TestMain), in a scratch directory that looks like
// the repository's root (its directories and go.mod are linked there), so
// that the files a transcript writes (hosts, gorun.toml, job.json) land in
// the scratch directory. ```sh blocks, and .EX blocks without a prompt,
// show commands without their output: they are not transcripts.
//
// What differs from machine to machine is normalised on both sides before
// the comparison (see normaliser): host names, pids, job ids, ports,
// durations, the scratch directory (shown as /home/me/gorun), runs of
// blanks (table widths); and, in the transcripts that need it, CPU lists
// and NIC names, benchmark figures, and which rank fails first. gorun's
// note that a job runs oversubscribed depends on the CPU count, and its note
// that unbound ranks got OMP_NUM_THREADS=1 on whether they are bound (GPUs
// bind them by default): each is left out of what gorun printed when the
// document does not show it. The lines of different ranks come in any
// order, so a command's output is compared as a set of lines; where the
// document elides lines with "...", in order.
//
// The transcripts that build the example plugins are left out with
// -short; notChecked lists those not run at all, and why.

// notChecked lists the transcripts that TestDocExamples and
// TestManPageExamples do not run, each found by a string in its commands,
// with the reason. Every entry must match a transcript.
var notChecked = []struct{ match, reason string }{
	{"/tmp/docs-hosts", "stands up SSH test hosts (root, network namespaces, an sshd per host, a gorun built into a directory every host sees); " +
		"the SSH tests run the same commands on the suite's shared hosts: TestSSHJob, TestSSHMasterAddr, TestSSHCheck, " +
		"TestSSHProgramMissingOnOneHost, TestSSHHostErrors, TestSSHStaging, TestSSHFanoutAgentForwarding"},
	{"ddp_train.py", "needs PyTorch (python3-torch) and trains for seconds; TestTorchDDPGloo runs the same script under gorun and checks the lines it prints per rank"},
	{"$ cat hosts\n", "its hosts (node1 to node4) are examples, not hosts of this machine"},
}

// repoRoot is the repository's root, seen from this package.
var repoRoot = filepath.Join("..", "..")

// step is one command of a transcript and the output the document shows.
type step struct {
	cmd  string
	want []string
}

// transcript is a document's example: where it is and its commands.
type transcript struct {
	where string
	steps []step
}

// commands returns the transcript's commands, one a line.
func (tr transcript) commands() string {
	var b strings.Builder
	for _, s := range tr.steps {
		b.WriteString("$ " + s.cmd + "\n")
	}
	return b.String()
}

// parseTranscript splits the lines of a block into commands and their
// output. ok is false when no line has a prompt.
func parseTranscript(where string, lines []string) (tr transcript, ok bool) {
	tr.where = where
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if cmd, isCmd := strings.CutPrefix(l, "$ "); isCmd {
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd = strings.TrimSuffix(cmd, `\`) + "\n" + lines[i]
			}
			tr.steps = append(tr.steps, step{cmd: cmd})
			continue
		}
		if len(tr.steps) == 0 {
			if strings.TrimSpace(l) != "" {
				return tr, false // output before any command: a sample, not a transcript
			}
			continue
		}
		last := &tr.steps[len(tr.steps)-1]
		last.want = append(last.want, l)
	}
	return tr, len(tr.steps) > 0
}

// docTranscripts returns the transcripts of the ```console blocks of
// README.md and of the pages of docs/.
func docTranscripts(t *testing.T) []transcript {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []transcript
	for _, page := range append([]string{filepath.Join(repoRoot, "README.md")}, pages...) {
		out = append(out, mdTranscripts(t, page)...)
	}
	if len(out) == 0 {
		t.Fatal("README.md and docs/*.md have no ```console block")
	}
	return out
}

// mdTranscripts returns the transcripts of a Markdown page's ```console
// blocks.
func mdTranscripts(t *testing.T, page string) []transcript {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	name, err := filepath.Rel(repoRoot, page)
	if err != nil {
		t.Fatal(err)
	}
	var out []transcript
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```console" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		tr, ok := parseTranscript(fmt.Sprintf("%s:%d", name, start), lines[start:i])
		if !ok {
			t.Errorf("%s:%d: a console block without a $ command; make it a text block", name, start)
			continue
		}
		out = append(out, tr)
	}
	return out
}

// roffExample turns one line of an .EX block into the text it shows.
var roffExample = strings.NewReplacer(`\-`, "-", `\(aq`, "'", `\(dq`, `"`, `\(ti`, "~", `\e`, `\`, `\&`, "")

// manExamples returns the .EX blocks of gorun.1's EXAMPLES section, as
// text, with the line of each.
func manExamples(t *testing.T) (blocks [][]string, where []string) {
	t.Helper()
	page := readManPage(t, "gorun.1")
	lines := strings.Split(page, "\n")
	inExamples := false
	for i := 0; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], ".SH ") {
			inExamples = lines[i] == ".SH EXAMPLES"
			continue
		}
		if !inExamples || lines[i] != ".EX" {
			continue
		}
		start := i + 1
		var block []string
		for i++; i < len(lines) && lines[i] != ".EE"; i++ {
			block = append(block, roffExample.Replace(lines[i]))
		}
		blocks = append(blocks, block)
		where = append(where, fmt.Sprintf("man/gorun.1:%d", start+1))
	}
	if len(blocks) == 0 {
		t.Fatal("man/gorun.1 has no .EX blocks under EXAMPLES")
	}
	return blocks, where
}

// TestDocExamples runs every transcript of README.md and of docs/ (the
// tour) and compares what gorun prints with what the page shows.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	runTranscripts(t, docTranscripts(t))
}

// TestManPageExamples runs the transcripts of gorun.1's EXAMPLES as
// TestDocExamples does, and checks that the command lines shown there
// without output are ones gorun accepts: each "gorun -..." line must pass
// with --dry-run (a hostfile it names is made, with two hosts).
func TestManPageExamples(t *testing.T) {
	t.Parallel()
	blocks, where := manExamples(t)
	var trs []transcript
	var plain []string
	for i, b := range blocks {
		if tr, ok := parseTranscript(where[i], b); ok {
			trs = append(trs, tr)
			continue
		}
		for j := 0; j < len(b); j++ {
			l := b[j]
			for strings.HasSuffix(l, `\`) && j+1 < len(b) {
				j++
				l = strings.TrimSuffix(l, `\`) + b[j]
			}
			if strings.HasPrefix(l, "gorun -") {
				plain = append(plain, l)
			}
		}
	}
	runTranscripts(t, trs)
	for _, l := range plain {
		t.Run(l, func(t *testing.T) {
			t.Parallel()
			args := strings.Fields(strings.TrimPrefix(l, "gorun "))
			if i := slices.Index(args, "--print-env"); i >= 0 && i+1 < len(args) {
				// Not with --dry-run (a usage error): its value must be
				// a rank all the same.
				if _, err := strconv.Atoi(args[i+1]); err != nil {
					t.Errorf("man/gorun.1 EXAMPLES shows %q: --print-env %s is no rank", l, args[i+1])
				}
				args = slices.Delete(args, i, i+2)
			}
			dir := t.TempDir()
			for i, a := range args[:len(args)-1] {
				if a == "--hostfile" { // a hostfile the reader has
					os.WriteFile(filepath.Join(dir, args[i+1]), []byte("node1 slots=4\nnode2 slots=4\n"), 0o644)
				}
			}
			r := runGorunIn(t, dir, nil, 30*time.Second, nil, append([]string{"--dry-run"}, args...)...)
			if r.code != 0 {
				t.Errorf("man/gorun.1 EXAMPLES shows %q; with --dry-run gorun exits %d:\n%s%s", l, r.code, r.stdout, r.stderr)
			}
		})
	}
}

// runTranscripts runs each transcript in a subtest of its own, or skips it
// saying why (notChecked).
func runTranscripts(t *testing.T, trs []transcript) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		t.Run(tr.where, func(t *testing.T) {
			for _, n := range notChecked {
				if strings.Contains(tr.commands(), n.match) {
					t.Skipf("not checked: %s", n.reason)
				}
			}
			if testing.Short() && strings.Contains(tr.commands(), "go build ") {
				t.Skip("not run with -short: it builds the example plugins (a minute with a cold build cache)")
			}
			if strings.Contains(tr.commands(), "--bind-to core") && runtime.NumCPU() < 2 {
				t.Skipf("binds 2 ranks to a core each; this machine has %d CPU", runtime.NumCPU())
			}
			t.Parallel()
			checkTranscript(t, root, tr)
		})
	}
}

// TestNotCheckedExamplesExist keeps notChecked honest: each entry matches
// a transcript of the README, of docs/ or of the man page.
func TestNotCheckedExamplesExist(t *testing.T) {
	t.Parallel()
	all := docTranscripts(t)
	blocks, where := manExamples(t)
	for i, b := range blocks {
		if tr, ok := parseTranscript(where[i], b); ok {
			all = append(all, tr)
		}
	}
	for _, n := range notChecked {
		if !slices.ContainsFunc(all, func(tr transcript) bool { return strings.Contains(tr.commands(), n.match) }) {
			t.Errorf("notChecked names %q, which no transcript of README.md, docs/ or man/gorun.1 has any more", n.match)
		}
	}
}

// scratchRepo makes a directory that looks like the repository's root to
// the commands of a transcript: the repository's directories, go.mod and
// go.sum linked, gorun (this test binary) as ./gorun and on PATH. It
// returns the directory and the environment to run the commands with:
// gorun's variables and config files of this machine left out.
func scratchRepo(t *testing.T, root string) (dir string, env []string) {
	t.Helper()
	dir = t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if (e.IsDir() && !strings.HasPrefix(name, ".")) || name == "go.mod" || name == "go.sum" {
			if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, ".bin")
	os.Mkdir(bin, 0o755)
	for _, link := range []string{filepath.Join(dir, "gorun"), filepath.Join(bin, "gorun")} {
		if err := os.Symlink(exe, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GORUN_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	// -trimpath keeps the scratch directory's path out of the build cache's
	// keys, so that a go build in a transcript is cached from run to run.
	env = append(env, "GORUN_TEST_MAIN=1", "GOFLAGS=-trimpath", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, ".config"))
	return dir, env
}

// stepMark separates the output of a transcript's commands.
const stepMark = "@@gorun-docs-test-step@@"

// checkTranscript runs tr's commands in a scratch repository and compares
// each command's output with the document's.
func checkTranscript(t *testing.T, root string, tr transcript) {
	dir, env := scratchRepo(t, root)
	var script strings.Builder
	for _, s := range tr.steps {
		// The mark keeps the command's exit status for the next one's $?.
		fmt.Fprintf(&script, "%s\n__rc=$?; printf '\\n%s\\n'; (exit $__rc)\n", s.cmd, stepMark)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir, cmd.Env, cmd.WaitDelay = dir, env, 5*time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && ctx.Err() != nil {
		t.Fatalf("%s: the commands did not finish within 3 minutes: %v\n%s", tr.where, err, out.String())
	}
	got := strings.Split(strings.ReplaceAll(out.String(), dir, "/home/me/gorun"), "\n"+stepMark+"\n")
	if len(got) != len(tr.steps)+1 {
		t.Fatalf("%s: %d commands, but %d outputs:\n%s", tr.where, len(tr.steps), len(got)-1, out.String())
	}
	host, _ := os.Hostname()
	norm := normaliser(tr.commands(), host)
	for i, s := range tr.steps {
		var gotLines []string
		if got[i] != "" {
			gotLines = strings.Split(strings.TrimSuffix(got[i], "\n"), "\n")
		}
		want := norm(s.want, nil)
		have := norm(gotLines, s.want)
		if !sameOutput(want, have) {
			t.Errorf("%s: $ %s\nthe document shows (normalised):\n%s\ngorun printed (normalised):\n%s",
				tr.where, s.cmd, indent(want), indent(have))
		}
	}
}

// A rewrite replaces what a regexp matches.
type rewrite struct {
	re   *regexp.Regexp
	with string
}

// everywhere are the rewrites of every transcript.
var everywhere = []rewrite{
	{regexp.MustCompile(`\bpid \d+`), "pid PID"},
	{regexp.MustCompile(`\bjob [0-9a-f]{12}\b`), "job JOBID"},
	{regexp.MustCompile(`\bMASTER_PORT=\d+`), "MASTER_PORT=PORT"},
	{regexp.MustCompile(`\b\d+\.\d+(s|ms|µs|us)\b`), "DURATION"},
}

// when are the rewrites of the transcripts whose commands have a string.
var when = map[string][]rewrite{
	// Bindings on this machine: its CPUs and NICs.
	"--report-bindings": {
		{regexp.MustCompile(`\bCPUs [0-9,-]+`), "CPUs CPULIST"},
		// Whether the machine has a NIC that is up (a container's eth0
		// is a veth, no NIC): the rank's NIC, and the why's last clause.
		{regexp.MustCompile(`(NUMA \d+) NIC [A-Za-z0-9_.-]+$`), "$1"},
		{regexp.MustCompile(`; (NIC [A-Za-z0-9_.-]+ is on NUMA \d+|no NIC is up)$`), "; NIC PLACEMENT"},
		{regexp.MustCompile(`\bNIC [A-Za-z0-9_.-]+`), "NIC NICNAME"},
		{regexp.MustCompile(`^Cpus_allowed_list: [0-9,-]+$`), "Cpus_allowed_list: CPULIST"},
	},
	// gorun bench's figures: time, algbw, busbw.
	" bench ": {
		{regexp.MustCompile(`^(\d+ \d+ \w+ \w+) [0-9.]+ [0-9.]+ [0-9.]+ (\d+ \S+)$`), "$1 TIME ALGBW BUSBW $2"},
		{regexp.MustCompile(`^# Avg bus bandwidth : [0-9.]+$`), "# Avg bus bandwidth : BUSBW"},
	},
	// Which of two failing ranks fails first.
	"--max-restarts": {{regexp.MustCompile(`\brank \d+ on localhost\b`), "rank R on localhost"}},
}

// oversubscribed is gorun's note that a job runs on more ranks than the
// machine's CPUs.
var oversubscribed = regexp.MustCompile(`^gorun: note: \d+ ranks on localhost's \d+ slots?: running oversubscribed`)

// defaultThreads is gorun's note that ranks sharing a host unbound got
// OMP_NUM_THREADS=1: whether they are bound depends on the machine (GPUs
// bind them by default).
var defaultThreads = regexp.MustCompile(`^gorun: note: OMP_NUM_THREADS=1 for the \d+ unbound ranks`)

// machineNotes are gorun's notes that depend on the machine, left out of
// what gorun printed when the document does not show them.
var machineNotes = []*regexp.Regexp{oversubscribed, defaultThreads}

// normaliser returns the function that normalises a command's output
// lines for a transcript with these commands on this host. Given what the
// document shows (doc, nil for the document's own lines), it also leaves
// out each of machineNotes where the document has none.
func normaliser(commands, host string) func(lines, doc []string) []string {
	rules := slices.Clone(everywhere)
	for k, rs := range when {
		if strings.Contains(commands, k) {
			rules = append(rules, rs...)
		}
	}
	blanks := regexp.MustCompile(`[ \t]+`)
	hostname := regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(host) + `$`)
	return func(lines, doc []string) []string {
		var drop []*regexp.Regexp
		for _, note := range machineNotes {
			if doc != nil && !slices.ContainsFunc(doc, note.MatchString) {
				drop = append(drop, note)
			}
		}
		var out []string
		for _, l := range lines {
			if slices.ContainsFunc(drop, func(note *regexp.Regexp) bool { return note.MatchString(l) }) {
				continue
			}
			if doc != nil && host != "" {
				l = hostname.ReplaceAllString(l, "${1}vm")
			}
			l = strings.TrimSpace(blanks.ReplaceAllString(l, " "))
			for _, r := range rules {
				l = r.re.ReplaceAllString(l, r.with)
			}
			out = append(out, l)
		}
		return out
	}
}

// sameOutput reports whether got is what want shows: the same lines in
// any order, or, where want elides lines with "...", want's lines in
// order with anything in place of each "...".
func sameOutput(want, got []string) bool {
	if !slices.Contains(want, "...") {
		return slices.Equal(slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(got)))
	}
	var match func(w, g []string) bool
	match = func(w, g []string) bool {
		switch {
		case len(w) == 0:
			return len(g) == 0
		case w[0] == "...":
			for k := 0; k <= len(g); k++ {
				if match(w[1:], g[k:]) {
					return true
				}
			}
			return false
		default:
			return len(g) > 0 && w[0] == g[0] && match(w[1:], g[1:])
		}
	}
	return match(want, got)
}

// indent shows lines indented, for an error message.
func indent(lines []string) string {
	if len(lines) == 0 {
		return "    (nothing)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
