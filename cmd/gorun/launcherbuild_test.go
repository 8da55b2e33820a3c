package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// heavy are the module paths whose package initialisation the launcher
// build exists to leave out.
var heavy = []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc", "google.golang.org/protobuf"}

// deps lists the packages that cmd/gorun links with tags.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-tags", tags, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps -tags %s: %v", tags, err)
	}
	return strings.Fields(string(out))
}

// The launcher build links none of go-plugin, gRPC and protobuf; the full
// build does (which shows that the look finds them).
func TestLauncherBuildLinks(t *testing.T) {
	has := func(pkgs []string) []string {
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
	if got := has(deps(t, "launcher_only,urfave_cli_no_docs")); len(got) > 0 {
		t.Errorf("the launcher build links %d packages it should not, as %s", len(got), strings.Join(got[:min(len(got), 5)], ", "))
	}
	if got := has(deps(t, "urfave_cli_no_docs")); len(got) == 0 {
		t.Errorf("the full build links none of %s", strings.Join(heavy, ", "))
	}
}

// buildLauncher builds the launcher build of gorun into dir.
func buildLauncher(t *testing.T, dir string) string {
	t.Helper()
	testenv.SkipShort(t, "it builds gorun")
	bin := filepath.Join(dir, "gorun")
	cmd := exec.Command("go", "build", "-tags", "launcher_only,urfave_cli_no_docs", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the launcher build: %v\n%s", err, out)
	}
	return bin
}

// runLauncher runs the launcher build bin with args and env added, in a
// directory of its own, within a minute.
func runLauncher(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	return runCmd(t, ctx, cmd, time.Minute)
}

// The launcher build runs jobs itself and hands gorun bench (in both
// orders), gorun plugins and --plugin-check to gorun-tools next to it;
// without gorun-tools those fail saying how to build it, and jobs still
// run, one whose program takes "bench" as an argument included.
func TestLauncherBuild(t *testing.T) {
	dir := t.TempDir()
	bin := buildLauncher(t, dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// This test binary is the full build: gorun-tools, when told to be
	// gorun (GORUN_TEST_MAIN, which the launcher build passes on).
	if err := os.Symlink(self, filepath.Join(dir, toolsBinary)); err != nil {
		t.Fatal(err)
	}
	env := []string{"GORUN_TEST_MAIN=1", "PATH=/usr/bin:/bin"}

	r := runLauncher(t, bin, env, "-np", "2", "--tag-output", "sh", "-c", "echo r$RANK")
	if r.code != 0 || !strings.Contains(r.stdout, "r0") || !strings.Contains(r.stdout, "r1") {
		t.Fatalf("a job: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"bench", "allreduce", "-np", "2", "-b", "8", "-e", "64", "-w", "1", "--iters", "2"},
		{"-np", "2", "bench", "allreduce", "-b", "8", "-e", "64", "-w", "1", "--iters", "2"},
	} {
		r := runLauncher(t, bin, env, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Avg bus bandwidth") {
			t.Errorf("gorun %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := runLauncher(t, bin, env, "plugins", "list", "--plugin-dir", t.TempDir()); r.code != 0 || !strings.Contains(r.stdout+r.stderr, "no plugins") {
		t.Errorf("gorun plugins list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	alone := filepath.Join(t.TempDir(), "gorun")
	if err := os.Link(bin, alone); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"bench", "allreduce", "-np", "2"},
		{"-np", "2", "bench", "allreduce"},
		{"plugins", "list"},
		{"-np", "1", "--plugin", "nosuch", "--plugin-check", "true"},
	} {
		r := runLauncher(t, alone, env, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "gorun-tools, the full build of gorun") || !strings.Contains(r.stderr, "make build") {
			t.Errorf("gorun %s without gorun-tools: exit %d, want 2 and how to build it\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if r := runLauncher(t, alone, env, "-np", "1", "echo", "bench", "allreduce?"); r.code != 0 || r.stdout != "bench allreduce?\n" {
		t.Errorf("a job whose program's arguments say bench: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
