package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// typedFlags lists every flag of the main command as users type it and as
// --help shows it: a one-letter name with one dash (-n, -H, -x), a longer
// one with two (--np, --machinefile), then urfave/cli's --help and
// --version.
func typedFlags() []string {
	var out []string
	for _, s := range settings {
		if s.hidden {
			continue
		}
		for _, n := range append([]string{s.name}, s.aliases...) {
			if len(n) == 1 {
				out = append(out, "-"+n)
			} else {
				out = append(out, "--"+n)
			}
		}
	}
	return append(out, "--help", "--version")
}

// longFlags is typedFlags without the one-letter ones.
func longFlags() []string {
	var out []string
	for _, f := range typedFlags() {
		if strings.HasPrefix(f, "--") {
			out = append(out, f)
		}
	}
	return out
}

// completionScript runs `gorun completion shell` and returns the script,
// also written to a file.
func completionScript(t *testing.T, shell string) (script, file string) {
	t.Helper()
	r := runGorun(t, 30*time.Second, nil, "completion", shell)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("gorun completion %s: exit %d\nstderr:\n%s", shell, r.code, r.stderr)
	}
	if r.stdout == "" {
		t.Fatalf("gorun completion %s printed nothing", shell)
	}
	file = filepath.Join(t.TempDir(), "gorun."+shell)
	if err := os.WriteFile(file, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return r.stdout, file
}

func runShell(t *testing.T, sh string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", sh, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestCompletionBash checks that the bash script is valid bash, and that
// loaded into bash it completes every flag from its first letters, as
// typed, and the subcommands.
func TestCompletionBash(t *testing.T) {
	t.Parallel()
	bash := testenv.NeedTool(t, "bash", "bash")
	script, file := completionScript(t, "bash")
	if out := runShell(t, bash, "-n", file); out != "" {
		t.Errorf("bash -n on gorun completion bash printed:\n%s", out)
	}
	for _, f := range longFlags() {
		if !strings.Contains(script, f) {
			t.Errorf("gorun completion bash does not mention %s", f)
		}
	}

	// Complete "gorun <prefix>" for every flag and subcommand, where the
	// prefix is the flag without its last letter.
	words := append(typedFlags(), "config", "completion")
	var drive strings.Builder
	drive.WriteString("source \"$1\"\n")
	for _, w := range words {
		prefix := w[:len(w)-1]
		if len(prefix) < 1 {
			prefix = w
		}
		drive.WriteString("COMP_WORDS=(gorun '" + prefix + "'); COMP_CWORD=1; COMPREPLY=(); _gorun\n")
		drive.WriteString("printf '%s\\t%s\\n' '" + w + "' \"${COMPREPLY[*]}\"\n")
	}
	out := runShell(t, bash, "-c", drive.String(), "drive", file)
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		w, reply, _ := strings.Cut(line, "\t")
		got[w] = strings.Fields(reply)
	}
	for _, w := range words {
		offered := false
		for _, c := range got[w] {
			offered = offered || c == w
		}
		if !offered {
			t.Errorf("bash completion of %q does not offer %s; it offers %q", w[:len(w)-1], w, got[w])
		}
	}
}

// TestCompletionZsh checks that the zsh script names every flag as typed
// in an _arguments spec, and that zsh -n accepts it where zsh is installed
// (zsh is optional: the test skips that part without it, even in CI).
func TestCompletionZsh(t *testing.T) {
	t.Parallel()
	script, file := completionScript(t, "zsh")
	if !strings.HasPrefix(script, "#compdef gorun\n") {
		t.Errorf("gorun completion zsh does not start with #compdef gorun:\n%s", script)
	}
	for _, f := range typedFlags() {
		// '--np[...]', '*--host[...]' (repeatable), '-x[...]'.
		if !regexp.MustCompile(`'\*?` + regexp.QuoteMeta(f) + `\[`).MatchString(script) {
			t.Errorf("gorun completion zsh has no _arguments spec for %s", f)
		}
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skipf("zsh is not installed, so zsh -n is not run (zsh is optional): %v", err)
	}
	if out := runShell(t, zsh, "-n", file); out != "" {
		t.Errorf("zsh -n on gorun completion zsh printed:\n%s", out)
	}
}

// TestCompletionOtherShell checks that an unsupported shell is a usage
// error.
func TestCompletionOtherShell(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion", "fish"}, {"completion"}} {
		r := runGorun(t, 30*time.Second, nil, args...)
		if r.code != 2 {
			t.Errorf("gorun %s: exit %d, want 2\nstderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("gorun %s printed a script:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
}
