package testcluster

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrepareDir(t *testing.T) {
	none := func(string) error { return nil }
	dir := filepath.Join(t.TempDir(), "state")
	got, err := PrepareDir("fix", dir, 0o750, none)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(got); err != nil || fi.Mode().Perm() != 0o750 || !filepath.IsAbs(got) {
		t.Fatalf("PrepareDir made %q: %v %v", got, fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(got, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareDir("fix", dir, 0o750, none); err == nil || !strings.HasPrefix(err.Error(), "fix: state directory ") {
		t.Errorf("a non-empty directory: %v", err)
	}
	// downOld empties it, as a previous cluster's Down does.
	if _, err := PrepareDir("fix", dir, 0o750, func(d string) error { return os.RemoveAll(d) }); err != nil {
		t.Errorf("after downOld: %v", err)
	}
	boom := errors.New("boom")
	if _, err := PrepareDir("fix", dir, 0o750, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("a failing downOld: %v", err)
	}
	tmp, err := PrepareDir("fix", "", 0o755, none)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(tmp)
	if !strings.HasPrefix(filepath.Base(tmp), "gorun-fix-") {
		t.Errorf("temporary state directory %s", tmp)
	}
	if err := RemoveDir(tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("RemoveDir left %s: %v", tmp, err)
	}
}

func TestCLI(t *testing.T) {
	var ran []string
	sub := func(name string) func(string, []string, io.Writer, io.Writer) error {
		return func(state string, args []string, stdout, stderr io.Writer) error {
			ran = append(ran, name+" "+state+" "+strings.Join(args, " "))
			if name == "env" {
				return NoArgs(name, args)
			}
			if name == "status" {
				return errors.New("fix: broken")
			}
			return nil
		}
	}
	c := CLI{Name: "fix", StateEnv: "FIX_STATE_TEST", Usage: "usage: fix (default %s)\n", Up: sub("up"), Down: sub("down"), Status: sub("status"), Env: sub("env")}
	t.Setenv("FIX_STATE_TEST", "/from/env")
	for _, tt := range []struct {
		args   []string
		code   int
		ran    string
		stderr string
	}{
		{nil, 2, "", "usage: fix (default " + filepath.Join(os.TempDir(), "gorun-fix") + ")"},
		{[]string{"frob"}, 2, "", "usage: fix"},
		{[]string{"--state", "/s", "up", "3"}, 0, "up /s 3", ""},
		{[]string{"down"}, 0, "down /from/env ", ""},
		{[]string{"env", "x"}, 2, "env /from/env x", `fix: env takes no arguments, not "x"`},
		{[]string{"status"}, 1, "status /from/env ", "fix: broken\n"},
	} {
		ran = nil
		var stdout, stderr bytes.Buffer
		code := c.Run(tt.args, &stdout, &stderr)
		if code != tt.code || strings.Join(ran, ";") != tt.ran || !strings.Contains(stderr.String(), tt.stderr) {
			t.Errorf("fix %q: exit %d, ran %q, stderr %q; want %d, %q, %q", tt.args, code, ran, stderr.String(), tt.code, tt.ran, tt.stderr)
		}
	}
}

func TestPrintExports(t *testing.T) {
	var b bytes.Buffer
	PrintExports(&b, []string{"A=x y", "B=it's"}, [][2]string{{"C", "c=d"}})
	want := "export A='x y'\nexport B='it'\\''s'\nexport C='c=d'\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
