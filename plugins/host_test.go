package plugins

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
)

// Find prefers the given directories, in order, skips what is not an
// executable file, and says where it looked when it finds nothing.
func TestFind(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(a, "gorun-x"), []byte("not executable"), 0o644)
	os.WriteFile(filepath.Join(b, "gorun-x"), []byte("#!/bin/sh\n"), 0o755)
	p, _, err := Find("gorun-x", a, b)
	if err != nil || p != filepath.Join(b, "gorun-x") {
		t.Fatalf("Find = %q, %v", p, err)
	}
	t.Setenv("PATH", t.TempDir())
	_, looked, err := Find("gorun-x", a)
	if !errors.Is(err, ErrNotFound) || len(looked) != 2 || !strings.Contains(err.Error(), a) {
		t.Errorf("Find of a missing plugin: %v (looked %q)", err, looked)
	}
}

// Start refuses what is not an executable plugin, naming it.
func TestStartRefusesNonExecutable(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "plug")
	os.WriteFile(f, []byte("x"), 0o644)
	for _, path := range []string{f, dir, filepath.Join(dir, "missing")} {
		if _, err := Start(Spec{Name: "demo", Path: path}); err == nil || !strings.Contains(err.Error(), "plugin demo") {
			t.Errorf("Start(%s): %v", path, err)
		}
	}
}

// A binary that is not the plugin (it exits, or prints no handshake) is an
// error naming the plugin, and leaves nothing running.
func TestStartNotAPlugin(t *testing.T) {
	for _, bin := range []string{"/bin/true", "/bin/echo"} {
		_, err := Start(Spec{Name: "demo", Path: bin, StartTimeout: 5 * time.Second,
			Handshake: plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "K", MagicCookieValue: "V"}})
		if err == nil || !strings.Contains(err.Error(), "plugin demo ("+bin+")") {
			t.Errorf("%s: %v", bin, err)
		}
	}
}

// Only a directory of this user's that nobody else can enter counts as
// private (and lets a plugin skip TLS).
func TestPrivateDir(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	if !privateDir(dir) {
		t.Errorf("%s (0700) is not private", dir)
	}
	os.Chmod(dir, 0o750)
	if privateDir(dir) {
		t.Errorf("%s (0750) is private", dir)
	}
	if privateDir(filepath.Join(dir, "missing")) || privateDir("/") {
		t.Error("a missing directory or / is private")
	}
}
