package filetrust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/internal/testusers"
)

// Check's rules, one path shape at a time: what it accepts, and for
// what it refuses, the path it names and why.
func TestCheck(t *testing.T) {
	other := testusers.Create(t, "gcheck")
	root := t.TempDir() // under /tmp: a sticky directory on the way
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		testusers.Dir(t, p, mode)
		return p
	}
	file := func(rel string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	link := func(target, rel string) string {
		p := filepath.Join(root, rel)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	theirs := func(p string) string {
		if err := os.Lchown(p, int(other.UID), int(other.GID)); err != nil {
			t.Fatal(err)
		}
		return p
	}

	mk("ok", 0o755)
	okFile := file("ok/p", 0o755)
	mk("open", 0o777)
	file("open/p", 0o755)
	mk("sticky", os.ModeSticky|0o777)
	mk("sticky/mine", 0o755)
	file("sticky/mine/p", 0o755)
	theirs(mk("sticky/theirs", 0o755))
	file("sticky/theirs/p", 0o755)
	theirs(mk("theirdir", 0o755))
	file("theirdir/p", 0o755)
	link(okFile, "ok/abs")
	link("../../ok/p", "sticky/mine/rel")
	link(filepath.Join(root, "open", "p"), "ok/to-open")
	link(filepath.Join(root, "open"), "ok/via-open")
	theirs(link(filepath.Join(root, "ok"), "sticky/their-link"))
	link("loop2", "ok/loop1")
	link("loop1", "ok/loop2")

	cases := []struct {
		path   string
		at     string // the path named, "" when accepted
		reason string
	}{
		{okFile, "", ""},
		{"ok/../ok/p", "", ""},
		{filepath.Join(root, "ok", "abs"), "", ""},
		{filepath.Join(root, "sticky", "mine", "p"), "", ""},
		{filepath.Join(root, "sticky", "mine", "rel"), "", ""}, // -> ../../ok/p, from sticky/mine
		{filepath.Join(root, "open", "p"), filepath.Join(root, "open"), "is writable by others (mode 0777)"},
		{filepath.Join(root, "sticky", "theirs", "p"), filepath.Join(root, "sticky", "theirs"), "is owned by user " + other.Name},
		{filepath.Join(root, "theirdir", "p"), filepath.Join(root, "theirdir"), "is owned by user " + other.Name},
		{filepath.Join(root, "ok", "to-open"), filepath.Join(root, "open"), "is writable by others"},
		{filepath.Join(root, "ok", "via-open", "p"), filepath.Join(root, "open"), "is writable by others"},
		{filepath.Join(root, "sticky", "their-link", "p"), filepath.Join(root, "sticky", "their-link"), "is owned by user " + other.Name},
		{filepath.Join(root, "ok", "loop1"), filepath.Join(root, "ok", "loop1"), "more than 40 symbolic links"},
		{filepath.Join(root, "ok"), filepath.Join(root, "ok"), "is not a regular file"},
	}
	t.Chdir(root) // for the relative path
	for _, tc := range cases {
		p := tc.path
		err := Check(p, Plugin)
		if tc.at == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
			}
			continue
		}
		var ue *UnsafeError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: %v, want an UnsafeError", tc.path, err)
			continue
		}
		if ue.File != p || ue.Path != tc.at || !strings.Contains(ue.Reason, tc.reason) {
			t.Errorf("%s: %+v, want %s %s", tc.path, ue, tc.at, tc.reason)
		}
	}
	if err := Check(filepath.Join(root, "ok", "missing"), Plugin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// A configuration file is held to the same rules, and its errors say what
// it is: a gorun.toml in a sticky directory such as /tmp, even one of
// this user's own, is refused, since another user could have put it there
// first; one that its group can write is refused too.
func TestCheckConfig(t *testing.T) {
	root := t.TempDir()
	sticky := testusers.Dir(t, filepath.Join(root, "scratch"), os.ModeSticky|0o777)
	inSticky := filepath.Join(sticky, "gorun.toml")
	mine := testusers.Dir(t, filepath.Join(root, "proj"), 0o755)
	groupW := filepath.Join(mine, "gorun.toml")
	for _, p := range []string{inSticky, groupW} {
		if err := os.WriteFile(p, []byte("np = 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(groupW, 0o664)
	for _, tc := range []struct{ path, want string }{
		{inSticky, "refusing to read " + inSticky + ": " + sticky + " is writable by others (mode 1777): its sticky bit keeps others from replacing your files there, but not from adding configuration files of their own; keep configuration files in a directory that only you (or root) can write"},
		{groupW, "refusing to read " + groupW + ": " + groupW + " is writable by its group (mode 0664); chmod go-w it"},
	} {
		if err := Check(tc.path, Config); !errors.Is(err, ErrUnsafe) || err.Error() != tc.want {
			t.Errorf("Check(%s, Config) = %v\nwant %s", tc.path, err, tc.want)
		}
	}
	os.Chmod(groupW, 0o644)
	if err := Check(groupW, Config); err != nil {
		t.Errorf("Check(%s, Config) with mode 0644: %v", groupW, err)
	}
}
