package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
	"github.com/gorun/gorun/launcher"
)

// heavy are the module paths whose package initialisation gorun leaves to
// gorun-tools, and testing.
var heavy = []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc", "google.golang.org/protobuf", "testing"}

// goListDeps lists the packages that the main package pkg links.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// heavyIn returns the packages of pkgs that are of heavy.
func heavyIn(pkgs []string) []string {
	var found []string
	for _, p := range pkgs {
		for _, h := range heavy {
			if p == h || strings.HasPrefix(p, h+"/") {
				found = append(found, p)
			}
		}
	}
	return found
}

// gorun links none of go-plugin, gRPC, protobuf and testing, whose
// initialisation every gorun process (head, agent, bind step) would pay
// at its start; gorun-tools, which holds what needs them, links them
// (which shows that the look finds them; go-plugin and the contract
// suite bring testing).
func TestGorunLinks(t *testing.T) {
	t.Parallel()
	if got := heavyIn(goListDeps(t, ".")); len(got) > 0 {
		t.Errorf("gorun links %d packages it must not, as %s: what needs them belongs in gorun-tools (launcher.Tools)", len(got), strings.Join(got[:min(len(got), 5)], ", "))
	}
	if got := strings.Join(heavyIn(goListDeps(t, "../"+launcher.ToolsBinary)), " "); !strings.Contains(got, "google.golang.org/grpc") {
		t.Errorf("gorun-tools links none of %s", strings.Join(heavy[:3], ", "))
	}
}

// `make build` builds every program under cmd/, as `go install ./cmd/...`
// installs them, and no build tag of gorun's own.
func TestMakeBuildsEveryCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", "-n", "build")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	list, err := exec.Command("go", "list", "../...").Output()
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, p := range strings.Fields(string(list)) {
		if strings.HasPrefix(p, "github.com/gorun/gorun/cmd/") {
			cmds = append(cmds, strings.TrimPrefix(p, "github.com/gorun/gorun/cmd/"))
		}
	}
	if len(cmds) < 2 {
		t.Fatalf("go list ../... names %d programs under cmd/: %q", len(cmds), cmds)
	}
	for _, c := range cmds {
		if !strings.Contains(string(out), "-o "+c+" ./cmd/"+c+"\n") {
			t.Errorf("make build does not build %s (-o %s ./cmd/%s):\n%s", c, c, c, out)
		}
	}
	if strings.Contains(string(out), "launcher_only") {
		t.Errorf("make build builds with the launcher_only tag:\n%s", out)
	}
}

// The programs as `make build` builds them: gorun runs jobs itself and
// hands gorun bench (in both orders, and --print-thresholds), gorun plugins
// and --plugin-check to the gorun-tools next to it. Without it, or next to
// a gorun-tools of another build, those fail, saying why and how to get
// the right one, and jobs still run, one whose program takes "bench" as an
// argument included.
func TestBuiltPrograms(t *testing.T) {
	testenv.SkipShort(t, "it builds gorun and gorun-tools")
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin"}
	run := func(bin string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), env...)
		return runCmd(t, ctx, cmd, time.Minute)
	}

	r := run(gorunBin, "-np", "2", "--tag-output", "sh", "-c", "echo r$RANK")
	if r.code != 0 || !strings.Contains(r.stdout, "r0") || !strings.Contains(r.stdout, "r1") {
		t.Fatalf("a job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"bench", "allreduce", "-np", "2", "-b", "8", "-e", "64", "-w", "1", "--iters", "2"},
		{"-np", "2", "bench", "allreduce", "-b", "8", "-e", "64", "-w", "1", "--iters", "2"},
	} {
		r := run(gorunBin, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Avg bus bandwidth") {
			t.Errorf("gorun %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := run(gorunBin, "bench", "--print-thresholds", "--thresholds", "allreduce=ring"); r.code != 0 || !strings.Contains(r.stdout, "allreduce") {
		t.Errorf("gorun bench --print-thresholds: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(gorunBin, "bench", "--print-thresholds", "--thresholds", "allreduce=nosuch"); r.code != 2 || !strings.Contains(r.stderr, "gorun: bench: ") {
		t.Errorf("gorun bench --print-thresholds with a bad table: exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(gorunBin, "plugins", "list", "--plugin-dir", t.TempDir()); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "no plugins") {
		t.Errorf("gorun plugins list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(gorunBin, "plugins", "--help"); r.code != 0 || !strings.Contains(r.stdout, "gorun plugins") {
		t.Errorf("gorun plugins --help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(gorunBin, "-np", "1", "--plugin", "nosuch", "--plugin-check", "true"); r.code != 2 || !strings.Contains(r.stderr, "gorun: --plugin-check: ") || !strings.Contains(r.stderr, "nosuch") {
		t.Errorf("--plugin-check of a plugin that is not there: exit %d, want 2\n%s", r.code, r.stderr)
	}

	needTools := [][]string{
		{"bench", "allreduce", "-np", "2"},
		{"-np", "2", "bench", "allreduce"},
		{"bench", "--print-thresholds"},
		{"plugins", "list"},
		{"-np", "1", "--plugin", "nosuch", "--plugin-check", "true"},
	}
	alone := filepath.Join(t.TempDir(), "gorun")
	linkOrCopy(t, gorunBin, alone)
	for _, args := range needTools {
		r := run(alone, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "no gorun-tools: ") || !strings.Contains(r.stderr, "make build") {
			t.Errorf("gorun %s without gorun-tools: exit %d, want 2 and how to get it\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if r := run(alone, "-np", "1", "echo", "bench", "allreduce?"); r.code != 0 || r.stdout != "bench allreduce?\n" {
		t.Errorf("a job whose program's arguments say bench: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	gofmt := filepath.Join(runtime.GOROOT(), "bin", "gofmt")
	if _, err := os.Stat(gofmt); err != nil {
		t.Skipf("no Go program of another build at hand: %v", err)
	}
	linkOrCopy(t, gofmt, filepath.Join(filepath.Dir(alone), launcher.ToolsBinary))
	for _, args := range needTools {
		r := run(alone, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "is another build than this gorun") {
			t.Errorf("gorun %s next to a gorun-tools of another build: exit %d, want 2 and why\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// linkOrCopy hard-links from to to, or copies it where it cannot.
func linkOrCopy(t *testing.T, from, to string) {
	t.Helper()
	if os.Link(from, to) == nil {
		return
	}
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	if err = errors.Join(err, out.Close()); err != nil {
		t.Fatal(err)
	}
}

// gorun bench across hosts that lack gorun: the head copies gorun-tools
// with gorun (next to its copy, where each host's agent finds the ranks'
// program), and says so; a job of another program copies gorun alone.
func TestSSHStagingTools(t *testing.T) {
	c := sharedCluster(t)
	forgetStaged(t, gorunBin)
	// The head's /tmp is not the hosts' /tmp.
	head := headDir(t, "gorun", gorunBin, launcher.ToolsBinary, filepath.Join(binDir, launcher.ToolsBinary))
	bin := filepath.Join(head, "gorun")
	ssh := []string{"--ssh-config", c.SSHConfig}
	r := runBin(t, bin, 60*time.Second, append(ssh, "-H", "h1,h2", "hostname")...)
	if r.code != 0 || !strings.Contains(r.stderr, "using a copy in") || strings.Contains(r.stderr, launcher.ToolsBinary) {
		t.Errorf("a job of hostname: exit %d, want gorun copied alone\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, bin, 180*time.Second, append(ssh, "bench", "allreduce", "-H", "h1:1,h2:1", "-b", "4K", "-e", "64K", "-f", "4", "--iters", "2")...)
	if r.code != 0 || !strings.Contains(r.stdout, "# Hosts                : 2") || !strings.Contains(r.stdout, "# Out of bounds values : 0") ||
		!strings.Contains(r.stderr, "(with "+launcher.ToolsBinary+" next to it)") {
		t.Errorf("gorun bench on hosts without gorun-tools: exit %d, want gorun-tools copied next to gorun\n%s%s", r.code, r.stdout, r.stderr)
	}
}
