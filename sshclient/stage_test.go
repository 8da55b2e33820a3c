package sshclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// stageClient returns a fresh server made with opts and a client of it.
func stageClient(t *testing.T, opts ...serverOpt) (*testServer, *ssh.Client) {
	t.Helper()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)}, opts...)
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("node1", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	return s, dialOK(t, e.dialer(Options{}), "node1")
}

// stageSetup returns a client of a fresh server and a local "executable".
func stageSetup(t *testing.T) (*testServer, *ssh.Client, string, []byte) {
	t.Helper()
	s, c := stageClient(t)
	content := make([]byte, 300<<10)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "gorun")
	if err := os.WriteFile(exe, content, 0o755); err != nil {
		t.Fatal(err)
	}
	return s, c, exe, content
}

func cacheFor(home string, content []byte) string {
	sum := sha256.Sum256(content)
	return filepath.Join(home, ".cache", "gorun", "bin", hex.EncodeToString(sum[:])[:16], "gorun")
}

func TestStage(t *testing.T) {
	t.Parallel()
	s, c, exe, content := stageSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := cacheFor(s.home, content)

	// First: wantPath is missing there, so the binary is copied.
	st, err := Stage(ctx, c, exe, "/nonexistent/bin/gorun")
	if err != nil {
		t.Fatal(err)
	}
	if st != (Staged{Path: want, Cached: true, Copied: true}) {
		t.Fatalf("Stage = %+v; want %q, cached, copied", st, want)
	}
	path := st.Path
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("staged file differs (%v)", err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".gorun.tmp.*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// Second: the cached copy is reused, with one probe and no copy,
	// and Stage says it copied nothing.
	n := s.execCount()
	st, err = Stage(ctx, c, exe, "/nonexistent/bin/gorun")
	if err != nil || st != (Staged{Path: want, Cached: true}) {
		t.Fatalf("second Stage = %+v, %v; want %q, cached, not copied", st, err, want)
	}
	if s.execCount() != n+1 {
		t.Errorf("second Stage ran %d commands, want 1 (no copy)", s.execCount()-n)
	}

	// wantPath holds the same binary: used as is.
	same := filepath.Join(s.home, "bin with space", "gorun")
	os.MkdirAll(filepath.Dir(same), 0o755)
	os.WriteFile(same, content, 0o755)
	st, err = Stage(ctx, c, exe, same)
	if err != nil || st != (Staged{Path: same}) {
		t.Fatalf("Stage(same) = %+v, %v; want %q, not cached", st, err, same)
	}

	// wantPath holds another binary, or is not executable: staged.
	other := filepath.Join(s.home, "other")
	os.WriteFile(other, []byte("old gorun"), 0o755)
	notExec := filepath.Join(s.home, "noexec")
	os.WriteFile(notExec, content, 0o644)
	for _, p := range []string{other, notExec} {
		st, err = Stage(ctx, c, exe, p)
		if err != nil || st.Path != want || !st.Cached {
			t.Errorf("Stage(%s) = %+v, %v; want %q, cached", p, st, err, want)
		}
	}
}

func TestStageConcurrent(t *testing.T) {
	t.Parallel()
	s, c, exe, content := stageSetup(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := Stage(context.Background(), c, exe, "/nonexistent")
			if err != nil || st.Path != cacheFor(s.home, content) || !st.Cached {
				t.Errorf("Stage = %+v, %v", st, err)
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(cacheFor(s.home, content))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("staged file differs (%v)", err)
	}
}

func TestStageErrorNamesHost(t *testing.T) {
	t.Parallel()
	_, c, _, _ := stageSetup(t)
	_, err := Stage(context.Background(), c, filepath.Join(t.TempDir(), "missing"), "/x")
	var he *HostError
	if !errors.As(err, &he) || he.Host != "node1" {
		t.Fatalf("error %v, want a HostError for node1", err)
	}
}

// extraFile writes a local file named name with random content next to exe.
func extraFile(t *testing.T, exe, name string, size int) (string, []byte) {
	t.Helper()
	content := make([]byte, size)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if err := os.WriteFile(p, content, 0o755); err != nil {
		t.Fatal(err)
	}
	return p, content
}

// An extra file lands next to the staged gorun, with its mode, and is not
// copied again while an identical one is there.
func TestStageExtra(t *testing.T) {
	t.Parallel()
	s, c, exe, content := stageSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plugin, pluginContent := extraFile(t, exe, "gorun-pmix", 200<<10)
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, []byte("not a program\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := cacheFor(s.home, content)
	wantPlugin := filepath.Join(filepath.Dir(want), "gorun-pmix")
	wantNotes := filepath.Join(filepath.Dir(want), "notes.txt")

	// wantPath holds the same gorun: nothing is staged, extra files neither.
	same := filepath.Join(s.home, "bin", "gorun")
	os.MkdirAll(filepath.Dir(same), 0o755)
	os.WriteFile(same, content, 0o755)
	st, err := Stage(ctx, c, exe, same, plugin)
	if err != nil || st != (Staged{Path: same}) {
		t.Fatalf("Stage(same) = %+v, %v; want %q, not cached", st, err, same)
	}
	if _, err := os.Stat(wantPlugin); !os.IsNotExist(err) {
		t.Fatalf("gorun-pmix copied though gorun was not staged (%v)", err)
	}

	// Staged: gorun and the extra files are copied, three copies.
	n := s.execCount()
	st, err = Stage(ctx, c, exe, "/nonexistent/bin/gorun", plugin, notes)
	if err != nil || st != (Staged{Path: want, Cached: true, Copied: true}) {
		t.Fatalf("Stage = %+v, %v; want %q, cached, copied", st, err, want)
	}
	if got := s.execCount() - n; got != 4 {
		t.Errorf("Stage ran %d commands, want 4 (a probe and three copies)", got)
	}
	for _, f := range []struct {
		path    string
		content []byte
		mode    os.FileMode
	}{{want, content, 0o755}, {wantPlugin, pluginContent, 0o755}, {wantNotes, []byte("not a program\n"), 0o644}} {
		got, err := os.ReadFile(f.path)
		if err != nil || !bytes.Equal(got, f.content) {
			t.Errorf("%s differs (%v)", f.path, err)
		}
		if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v (%v), want %v", f.path, fi.Mode().Perm(), err, f.mode)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(want), ".*.tmp.*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// Again: all identical, so only the probe runs.
	n = s.execCount()
	st, err = Stage(ctx, c, exe, "/nonexistent/bin/gorun", plugin, notes)
	if err != nil || st != (Staged{Path: want, Cached: true}) {
		t.Fatalf("second Stage = %+v, %v; want %q, cached, not copied", st, err, want)
	}
	if got := s.execCount() - n; got != 1 {
		t.Errorf("second Stage ran %d commands, want 1 (no copy)", got)
	}

	// The plugin there differs, or is not executable: copied again,
	// gorun not.
	for _, spoil := range []func(){
		func() { os.WriteFile(wantPlugin, []byte("another gorun-pmix"), 0o755) },
		func() { os.Chmod(wantPlugin, 0o644) },
	} {
		spoil()
		n = s.execCount()
		if st, err := Stage(ctx, c, exe, "/nonexistent/bin/gorun", plugin); err != nil || !st.Copied {
			t.Fatalf("Stage = %+v, %v; want the plugin copied", st, err)
		}
		if got := s.execCount() - n; got != 2 {
			t.Errorf("Stage ran %d commands, want 2 (a probe and the plugin's copy)", got)
		}
		got, err := os.ReadFile(wantPlugin)
		if err != nil || !bytes.Equal(got, pluginContent) {
			t.Errorf("gorun-pmix differs after a new copy (%v)", err)
		}
		if st, err := os.Stat(wantPlugin); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("gorun-pmix: mode %v (%v), want 0755", st.Mode().Perm(), err)
		}
	}
}

// An extra file that cannot be read, or that has no plain name, is an error
// that names the host and the file, and nothing is copied.
func TestStageExtraErrors(t *testing.T) {
	t.Parallel()
	s, c, exe, content := stageSetup(t)
	dir := t.TempDir()
	asDir := filepath.Join(dir, "gorun-pmix")
	if err := os.Mkdir(asDir, 0o755); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(t.TempDir(), "gorun-pmix")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		extra []string
		says  string // the error names this
	}{
		{"missing", []string{filepath.Join(dir, "missing", "gorun-pmix")}, filepath.Join(dir, "missing", "gorun-pmix")},
		{"directory", []string{asDir}, asDir},
		{"named gorun", []string{filepath.Join(dir, "gorun")}, filepath.Join(dir, "gorun")},
		{"hidden", []string{filepath.Join(dir, ".x")}, filepath.Join(dir, ".x")},
		{"same name twice", []string{filepath.Join(dir, "a", "p"), filepath.Join(dir, "b", "p")}, filepath.Join(dir, "b", "p")},
	}
	if os.Geteuid() != 0 { // root reads it anyway
		cases = append(cases, struct {
			name  string
			extra []string
			says  string
		}{"unreadable", []string{unreadable}, unreadable})
	}
	for _, tc := range cases {
		_, err := Stage(context.Background(), c, exe, "/nonexistent", tc.extra...)
		t.Logf("%s: %v", tc.name, err)
		var he *HostError
		if !errors.As(err, &he) || he.Host != "node1" {
			t.Errorf("%s: error %v, want a HostError for node1", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %q does not name %s", tc.name, err, tc.says)
		}
	}
	if _, err := os.Stat(filepath.Dir(cacheFor(s.home, content))); !os.IsNotExist(err) {
		t.Errorf("something was copied (%v)", err)
	}
}

func TestShCommandQuoting(t *testing.T) {
	t.Parallel()
	got := shCommand("echo 'a b'\n  echo c\n")
	if want := `exec /bin/sh -c 'echo '\''a b'\''; echo c'`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
