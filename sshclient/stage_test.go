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
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// stageSetup returns a client of a fresh server and a local "executable".
func stageSetup(t *testing.T) (*testServer, *ssh.Client, string, []byte) {
	t.Helper()
	key := newKey(t)
	s := newTestServer(t, []ssh.PublicKey{pubOf(t, key)})
	e := newEnv(t)
	writeKey(t, filepath.Join(e.home, ".ssh", "id_ed25519"), key, "")
	e.writeConfig(hostBlock("node1", s))
	e.addKnown([]string{addr("127.0.0.1", s.port)}, s.hostKey())
	c := dialOK(t, e.dialer(Options{}), "node1")

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
	path, staged, err := Stage(ctx, c, exe, "/nonexistent/bin/gorun")
	if err != nil {
		t.Fatal(err)
	}
	if path != want || !staged {
		t.Fatalf("Stage = %q, %v; want %q, true", path, staged, want)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("staged file differs (%v)", err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", st.Mode())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".gorun.tmp.*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// Second: the cached copy is reused, with one probe and no copy.
	n := s.execCount()
	path, staged, err = Stage(ctx, c, exe, "/nonexistent/bin/gorun")
	if err != nil || path != want || !staged {
		t.Fatalf("second Stage = %q, %v, %v", path, staged, err)
	}
	if s.execCount() != n+1 {
		t.Errorf("second Stage ran %d commands, want 1 (no copy)", s.execCount()-n)
	}

	// wantPath holds the same binary: used as is.
	same := filepath.Join(s.home, "bin with space", "gorun")
	os.MkdirAll(filepath.Dir(same), 0o755)
	os.WriteFile(same, content, 0o755)
	path, staged, err = Stage(ctx, c, exe, same)
	if err != nil || path != same || staged {
		t.Fatalf("Stage(same) = %q, %v, %v; want %q, false", path, staged, err, same)
	}

	// wantPath holds another binary, or is not executable: staged.
	other := filepath.Join(s.home, "other")
	os.WriteFile(other, []byte("old gorun"), 0o755)
	notExec := filepath.Join(s.home, "noexec")
	os.WriteFile(notExec, content, 0o644)
	for _, p := range []string{other, notExec} {
		path, staged, err = Stage(ctx, c, exe, p)
		if err != nil || path != want || !staged {
			t.Errorf("Stage(%s) = %q, %v, %v; want %q, true", p, path, staged, err, want)
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
			path, staged, err := Stage(context.Background(), c, exe, "/nonexistent")
			if err != nil || path != cacheFor(s.home, content) || !staged {
				t.Errorf("Stage = %q, %v, %v", path, staged, err)
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
	_, _, err := Stage(context.Background(), c, filepath.Join(t.TempDir(), "missing"), "/x")
	var he *HostError
	if !errors.As(err, &he) || he.Host != "node1" {
		t.Fatalf("error %v, want a HostError for node1", err)
	}
}

func TestShCommandQuoting(t *testing.T) {
	t.Parallel()
	got := shCommand("echo 'a b'\n  echo c\n")
	if want := `exec /bin/sh -c 'echo '\''a b'\''; echo c'`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
