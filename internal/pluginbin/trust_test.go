package pluginbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun/gorun/env"
	"github.com/gorun/gorun/internal/testusers"
)

// CheckBinary's rules, one path shape at a time: what it accepts, and for
// what it refuses, the path it names and why.
func TestCheckBinary(t *testing.T) {
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
		err := CheckBinary(p)
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
	if err := CheckBinary(filepath.Join(root, "ok", "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// SecretEnv covers the secret that package env puts in a rank's
// environment, and Environ removes exactly those variables.
func TestEnviron(t *testing.T) {
	const secret = "0123456789abcdef01234567"
	for _, kv := range Environ(env.Vars(env.Rank{JobID: "j", Secret: secret, AgentSocket: "/run/sock"})) {
		if strings.Contains(kv, secret) {
			t.Errorf("a rank's %s is passed on", kv)
		}
	}
	got := Environ([]string{"A=1", "GORUN_JOB_SECRET=s", "GORUN_AGENT_KEY=k", "SSH_AUTH_SOCK=/x", "GORUN_JOB_SECRETX=2", "B"})
	if strings.Join(got, " ") != "A=1 GORUN_JOB_SECRETX=2 B" {
		t.Errorf("Environ = %q", got)
	}
}
