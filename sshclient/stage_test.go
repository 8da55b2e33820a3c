package sshclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gorun/gorun/internal/testenv"
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

// hashLog returns a directory with sha256sum and shasum that log each call
// in the file returned, then hash as the real ones do (or fail, where the
// system has neither), for withPathFirst.
func hashLog(t *testing.T) (dir, log string) {
	t.Helper()
	dir = t.TempDir()
	log = filepath.Join(dir, "calls")
	for _, tool := range []string{"sha256sum", "shasum"} {
		real, err := exec.LookPath(tool)
		if err != nil {
			real = "false"
		}
		script := "#!/bin/sh\necho " + tool + " >> " + shQuote(log) + "\nexec " + shQuote(real) + " \"$@\"\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, log
}

// hashes returns how many times the tools of hashLog ran.
func hashes(t *testing.T, log string) int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// A copy that Stage verified gets a stamp, and is then trusted by its stamp
// without being hashed again, by Stage and by StartCommand; a copy changed
// in place (even with its modification time set back), replaced by
// another file of the same size, or whose stamp is gone, is hashed again,
// and copied again where it differs.
func TestStageStamp(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "sha256sum", "coreutils")
	testenv.NeedTool(t, "stat", "coreutils")
	tools, log := hashLog(t)
	s, c := stageClient(t, withPathFirst(tools))
	// A program, padded to a size worth hashing.
	content := []byte("#!/bin/sh\necho \"genuine $*\"\nexit 0\n#" + strings.Repeat("x", 256<<10) + "\n")
	exe := filepath.Join(t.TempDir(), "gorun")
	if err := os.WriteFile(exe, content, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := cacheFor(s.home, content)
	stamp := filepath.Join(filepath.Dir(want), ".gorun.stamp")
	sum := sha256.Sum256(content)

	// step runs Stage and StartCommand, and checks what each did: whether
	// Stage copied, and how many files were hashed there.
	step := func(name string, copied bool, hashed int) {
		t.Helper()
		n := hashes(t, log)
		st, err := Stage(ctx, c, exe, "/nonexistent/bin/gorun")
		if err != nil || st != (Staged{Path: want, Cached: true, Copied: copied}) {
			t.Fatalf("%s: Stage = %+v, %v; want %q, cached, copied %v", name, st, err, want, copied)
		}
		if got := hashes(t, log) - n; got != hashed {
			t.Errorf("%s: Stage hashed %d times, want %d", name, got, hashed)
		}
		if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("%s: the staged file differs (%v)", name, err)
		}
		b, err := os.ReadFile(stamp)
		if err != nil || !strings.HasPrefix(string(b), hex.EncodeToString(sum[:])+" ") {
			t.Fatalf("%s: stamp %q (%v), want one that starts with the sha256", name, b, err)
		}
		if fi, err := os.Stat(stamp); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: stamp mode %v (%v), want 0600", name, fi.Mode().Perm(), err)
		}
		n = hashes(t, log)
		out, errOut, code := execStart(t, c, "/nonexistent/bin/gorun", exe, nil, "agent", "a b")
		if code != 0 || out != "genuine agent a b\n" {
			t.Errorf("%s: StartCommand: exit %d, %q %q; want the staged copy run", name, code, out, errOut)
		}
		if got := hashes(t, log) - n; got != 0 {
			t.Errorf("%s: StartCommand hashed %d times, want none", name, got)
		}
	}
	// bad checks that StartCommand runs nothing now (exit 127, silent).
	bad := func(name string) {
		t.Helper()
		if out, errOut, code := execStart(t, c, "/nonexistent/bin/gorun", exe, nil, "agent"); code != 127 || out != "" || errOut != "" {
			t.Errorf("%s: StartCommand: exit %d, %q %q; want 127 and nothing said", name, code, out, errOut)
		}
	}

	step("first copy", true, 1) // the copier verifies what it received
	step("from the cache", false, 0)

	// Changed in place, same size, and its mtime set back: the change
	// time tells. (A moment first: file times tick at a few ms at worst.)
	fi, _ := os.Stat(want)
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(want, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("Y"), int64(len(content)-2))
	f.Close()
	os.Chtimes(want, fi.ModTime(), fi.ModTime())
	bad("changed in place")
	step("changed in place", true, 2) // the probe's hash, the copier's

	// Replaced by another file of the same size.
	time.Sleep(20 * time.Millisecond)
	other := bytes.Clone(content)
	other[len(other)-2] = 'Z'
	os.WriteFile(want+".new", other, 0o755)
	os.Rename(want+".new", want)
	bad("replaced")
	step("replaced", true, 2)

	// The stamp is gone, or says another sum: the copy is hashed, found
	// right, stamped again and not copied; then trusted again.
	os.Remove(stamp)
	bad("no stamp")
	step("no stamp", false, 1)
	step("stamped again", false, 0)
	b, _ := os.ReadFile(stamp)
	os.WriteFile(stamp, append([]byte(strings.Repeat("0", 64)), b[64:]...), 0o600)
	bad("another sum")
	step("another sum", false, 1)
	step("stamped again after another sum", false, 0)
}

// StartCommand runs the program at wantPath where it is there, whatever
// the cache holds, and looks for extra files next to the staged copy:
// missing, without a stamp, or no longer executable, nothing runs.
func TestStartCommand(t *testing.T) {
	t.Parallel()
	testenv.NeedTool(t, "stat", "coreutils")
	s, c := stageClient(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "gorun")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"staged $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugin, _ := extraFile(t, exe, "gorun-pmix", 1<<10)
	shared := filepath.Join(s.home, "shared dir", "gorun")
	os.MkdirAll(filepath.Dir(shared), 0o755)
	if err := os.WriteFile(shared, []byte("#!/bin/sh\necho \"shared $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, _, code := execStart(t, c, shared, exe, []string{plugin}, "agent", "x'y"); code != 0 || out != "shared agent x'y\n" {
		t.Errorf("shared path: exit %d, %q", code, out)
	}
	if _, _, code := execStart(t, c, "/nonexistent", exe, nil, "agent"); code != 127 {
		t.Errorf("nothing staged: exit %d, want 127", code)
	}
	st, err := Stage(ctx, c, exe, "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	if out, _, code := execStart(t, c, "/nonexistent", exe, nil, "agent"); code != 0 || out != "staged agent\n" {
		t.Errorf("staged: exit %d, %q", code, out)
	}
	if _, _, code := execStart(t, c, "/nonexistent", exe, []string{plugin}, "agent"); code != 127 {
		t.Errorf("gorun-pmix not staged: exit %d, want 127", code)
	}
	if _, err := Stage(ctx, c, exe, "/nonexistent", plugin); err != nil {
		t.Fatal(err)
	}
	if out, _, code := execStart(t, c, "/nonexistent", exe, []string{plugin}, "agent"); code != 0 || out != "staged agent\n" {
		t.Errorf("staged with gorun-pmix: exit %d, %q", code, out)
	}
	there := filepath.Join(filepath.Dir(st.Path), "gorun-pmix")
	os.Chmod(there, 0o644)
	if _, _, code := execStart(t, c, "/nonexistent", exe, []string{plugin}, "agent"); code != 127 {
		t.Errorf("gorun-pmix not executable there: exit %d, want 127", code)
	}
	os.Chmod(there, 0o755)
	os.Remove(filepath.Join(filepath.Dir(st.Path), ".gorun-pmix.stamp"))
	if _, _, code := execStart(t, c, "/nonexistent", exe, []string{plugin}, "agent"); code != 127 {
		t.Errorf("gorun-pmix without its stamp: exit %d, want 127", code)
	}
	if _, err := StartCommand("/x", filepath.Join(dir, "missing"), nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Errorf("a missing gorun: %v, want an error naming it", err)
	}
}
