package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testusers"
)

// Attack 9a of the security review, with the real binary and two users:
// another user leaves a gorun.toml in a shared directory (mode 1777) that
// exports a variable to every rank and points --summary-json at a file of
// the victim's. A victim who runs gorun there gets a usage error that
// names the file and why; no rank starts, and the victim's file is
// untouched. A gorun.toml of the victim's own in a directory only the
// victim can write is read (and gorun config says so); made writable by
// its group, it is refused too.
func TestConfigFileOfAnotherUser(t *testing.T) {
	t.Parallel()
	victim, attacker := testusers.Create(t, "gcfg"), testusers.Create(t, "gcfgx")
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	shared, err := os.MkdirTemp("", "gorun-gshared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	important := filepath.Join(victim.Home, "important.txt")
	writeAs(t, victim, important, "precious\n")
	evil := filepath.Join(shared, "gorun.toml")
	writeAs(t, attacker, evil, "x = [\"GORUN_PWNED=yes\"]\nsummary-json = \""+important+"\"\n")

	script := `echo "pwned=$GORUN_PWNED" > "$HOME/rank.$GORUN_RANK"`
	gorun := func(dir string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(gorunBin, args...)
		cmd.SysProcAttr, cmd.Env, cmd.Dir = victim.Credential(), victim.Env(), dir
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}

	out, code := gorun(shared, "-np", "2", "sh", "-c", script)
	if code != 2 || !strings.Contains(out, "refusing to read "+evil+": "+shared+" is writable by others (mode 1777)") {
		t.Errorf("gorun in %s with %s's gorun.toml: exit %d, want 2 naming the file and why\n%s", shared, attacker.Name, code, out)
	}
	if b, _ := os.ReadFile(important); string(b) != "precious\n" {
		t.Errorf("%s's gorun.toml overwrote %s: %q", attacker.Name, important, b)
	}
	for _, r := range []string{"0", "1"} {
		if b, err := os.ReadFile(filepath.Join(victim.Home, "rank."+r)); err == nil {
			t.Errorf("rank %s ran under %s's gorun.toml: %s", r, attacker.Name, b)
		}
	}
	// gorun config refuses it alike.
	if out, code := gorun(shared, "config"); code != 2 || !strings.Contains(out, "refusing to read "+evil) {
		t.Errorf("gorun config in %s: exit %d\n%s", shared, code, out)
	}

	// The victim's own file in the victim's own directory is read.
	own := filepath.Join(victim.Home, "proj")
	if out, err := victim.Command("mkdir", "-m", "755", own).CombinedOutput(); err != nil {
		t.Fatalf("mkdir %s: %v\n%s", own, err, out)
	}
	mine := filepath.Join(own, "gorun.toml")
	writeAs(t, victim, mine, "np = 2\nx = [\"MINE=1\"]\n")
	if out, code := gorun(own, "config"); code != 0 || !strings.HasPrefix(out, "# read gorun.toml\n") || !strings.Contains(out, "np = 2  # gorun.toml:1") {
		t.Errorf("gorun config with the victim's own gorun.toml: exit %d\n%s", code, out)
	}
	rec := filepath.Join(own, "rec")
	if out, code := gorun(own, "--record", rec, "sh", "-c", `echo "rank $GORUN_RANK MINE=$MINE"`); code != 0 || !strings.Contains(out, "rank 1 MINE=1") {
		t.Errorf("a job with the victim's own gorun.toml: exit %d\n%s", code, out)
	}
	// Its record names the file.
	if b, err := os.ReadFile(filepath.Join(rec, "record.json")); err != nil || !strings.Contains(string(b), `"config_files": [`) || !strings.Contains(string(b), `"`+mine+`"`) {
		t.Errorf("the record does not name %s: %v\n%s", mine, err, b)
	}
	if b, err := os.ReadFile(filepath.Join(rec, "record.txt")); err != nil || !regexp.MustCompile(`(?m)^config +`+regexp.QuoteMeta(mine)+`$`).Match(b) {
		t.Errorf("record.txt does not name %s: %v\n%s", mine, err, b)
	}
	// Made writable by its group, it is refused.
	if err := os.Chmod(mine, 0o664); err != nil {
		t.Fatal(err)
	}
	if out, code := gorun(own, "true"); code != 2 || !strings.Contains(out, mine+" is writable by its group (mode 0664)") {
		t.Errorf("a group-writable gorun.toml: exit %d, want 2 naming it\n%s", code, out)
	}
}

// writeAs writes text to path as user u.
func writeAs(t *testing.T, u *testusers.User, path, text string) {
	t.Helper()
	cmd := u.Command("sh", "-c", `umask 022; cat > "$0"`, path)
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s writing %s: %v\n%s", u.Name, path, err, out)
	}
}

// A gorun whose working directory was removed has no ./gorun.toml to
// check or read, and runs (a per-node launch's gorun may start in a
// directory that its host lacks).
func TestConfigWorkingDirectoryGone(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `cd "$1" && rmdir "$1" && exec "$0" -np 1 true`, exe, dir)
	cmd.Env = append(os.Environ(), "GORUN_TEST_MAIN=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("gorun in a removed directory: %v\n%s", err, out)
	}
}
