package sshclient

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gorun/gorun/internal/testusers"
)

// execStaged runs the staged copy at path with args over c, as the launcher
// does, and returns its output and exit status.
func execStaged(t *testing.T, c *ssh.Client, path string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runRemote(t, c, StagedCommand(path, args...))
}

// runRemote runs cmd in a new session on c and returns its output and
// exit status.
func runRemote(t *testing.T, c *ssh.Client, cmd string) (stdout, stderr string, code int) {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb strings.Builder
	s.Stdout, s.Stderr = &out, &errb
	err = s.Run(cmd)
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitStatus()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// execStart runs StartCommand(wantPath, localExe, extra, args...) over c, as
// the launcher's first command, and returns its output and exit status.
func execStart(t *testing.T, c *ssh.Client, wantPath, localExe string, extra []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd, err := StartCommand(wantPath, localExe, extra, args...)
	if err != nil {
		t.Fatal(err)
	}
	return runRemote(t, c, cmd)
}

// Security review row 4b: the staged gorun replaced between staging and
// exec. The victim stages a sound copy; then another user replaces it,
// through a cache directory that became writable by others, or leaves a
// file of its own there, or swaps ~/.cache/gorun for a link to a tree of
// its own. The exec step, which checks in the same shell, refuses each,
// naming the path and why, and the attacker's program never runs.
func TestStagedExecRefusesReplacedCopy(t *testing.T) {
	victim := testusers.Create(t, "gvictim")
	attacker := testusers.Create(t, "gattack")
	s, c := stageClient(t, asUser(victim))
	exe := filepath.Join(t.TempDir(), "gorun")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"genuine $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	staged, err := Stage(ctx, c, exe, "/nonexistent/gorun")
	if err != nil || !staged.Cached {
		t.Fatalf("Stage = %+v, %v", staged, err)
	}
	path := staged.Path
	out, errOut, code := execStaged(t, c, path, "agent", "--host", "node1")
	if code != 0 || out != "genuine agent --host node1\n" {
		t.Fatalf("the genuine copy: exit %d, %q %q", code, out, errOut)
	}
	out, errOut, code = execStart(t, c, "/nonexistent/gorun", exe, nil, "agent", "--host", "node1")
	if code != 0 || out != "genuine agent --host node1\n" {
		t.Fatalf("the genuine copy, by StartCommand: exit %d, %q %q", code, out, errOut)
	}
	sum, err := localHash(exe)
	if err != nil {
		t.Fatal(err)
	}

	evil := attackerDir(t, attacker)
	marker := filepath.Join(evil, "ran")
	fake := "#!/bin/sh\nid > " + marker + "\nprintf '\\000GORUN-CONTROL fake\\n'\n"
	dir := filepath.Dir(path)
	cache := filepath.Join(s.home, ".cache")
	rel, err := filepath.Rel(filepath.Join(cache, "gorun"), path)
	if err != nil {
		t.Fatal(err)
	}
	// asAttacker runs an sh script as the attacker: $FAKE is the fake
	// gorun, $1 the cache directory, $2 the staged copy, $3 the
	// attacker's directory, $4 the copy's path below ~/.cache/gorun.
	asAttacker := func(script string) {
		t.Helper()
		cmd := attacker.Command("/bin/sh", "-c", script, "sh", dir, path, evil, rel)
		cmd.Env = append(cmd.Env, "FAKE="+fake, "SUM="+sum)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("attacker: %v: %s", err, out)
		}
	}
	// open makes $HOME and the cache down to dir 0755, as many homes and
	// an older gorun's cache are: others may pass, not write.
	open := func() {
		for p := filepath.Dir(dir); p != filepath.Dir(s.home); p = filepath.Dir(p) {
			os.Chmod(p, 0o755)
		}
	}
	cases := []attack{
		{"the cache directory became writable by others, and the attacker replaced gorun", func() {
			open()
			os.Chmod(dir, 0o777)
			asAttacker(`printf '%s' "$FAKE" > "$1/.x" && chmod 755 "$1/.x" && mv -f "$1/.x" "$2"`)
		}, dir, "writable by others"},
		{"the directory is the victim's alone again, but the attacker's gorun is still there", func() {
			open()
			os.Chmod(dir, 0o777)
			asAttacker(`printf '%s' "$FAKE" > "$1/.x" && chmod 755 "$1/.x" && mv -f "$1/.x" "$2"`)
			os.Chmod(dir, 0o700)
		}, path, "owned by another user"},
		{"the cache directory became writable by others, and the attacker replaced gorun and wrote a stamp that vouches for it", func() {
			open()
			os.Chmod(dir, 0o777)
			asAttacker(`printf '%s' "$FAKE" > "$1/.x" && chmod 755 "$1/.x" && mv -f "$1/.x" "$2" &&
				printf '%s %s\n' "$SUM" "$(TZ=UTC0 stat -c '%i %s %y %z' -- "$2")" > "$1/.y" && mv -f "$1/.y" "$1/.gorun.stamp"`)
		}, dir, "writable by others"},
		{"~/.cache/gorun swapped for a link to the attacker's tree", func() {
			asAttacker(`mkdir -p "$3/$(dirname "$4")" && printf '%s' "$FAKE" > "$3/$4" && chmod 755 "$3/$4"`)
			os.Rename(filepath.Join(cache, "gorun"), filepath.Join(cache, "gorun.victim"))
			if err := os.Symlink(evil, filepath.Join(cache, "gorun")); err != nil {
				t.Fatal(err)
			}
		}, filepath.Join(cache, "gorun"), "symbolic link"},
	}
	for _, tc := range cases {
		os.RemoveAll(cache)
		os.RemoveAll(evil)
		mkdirAs(t, evil, 0o777, attacker.UID, attacker.GID)
		if again, err := Stage(ctx, c, exe, "/nonexistent/gorun"); err != nil || again.Path != path {
			t.Fatalf("%s: Stage = %+v, %v", tc.name, again, err)
		}
		tc.do()
		out, errOut, code := execStaged(t, c, path, "agent", "--host", "node1")
		t.Logf("%s: exit %d, %q", tc.name, code, errOut)
		if _, err := os.Stat(marker); err == nil {
			b, _ := os.ReadFile(marker)
			t.Errorf("%s: the attacker's program ran as %s", tc.name, strings.TrimSpace(string(b)))
		}
		first, _, _ := strings.Cut(errOut, "\n")
		u, ok := ParseUnsafe(first)
		if code != 126 || out != "" || !ok || u.Path != tc.path || !strings.Contains(u.Reason, tc.reason) {
			t.Errorf("%s: exit %d, %q %q; want 126 and a refusal of %s (%s)", tc.name, code, out, errOut, tc.path, tc.reason)
		}
		// The launcher's first command runs nothing of the cache's
		// either: 127, silent, and Stage then says why.
		out, errOut, code = execStart(t, c, "/nonexistent/gorun", exe, nil, "agent", "--host", "node1")
		if _, err := os.Stat(marker); err == nil {
			b, _ := os.ReadFile(marker)
			t.Errorf("%s: StartCommand ran the attacker's program as %s", tc.name, strings.TrimSpace(string(b)))
			os.Remove(marker)
		}
		if code != 127 || out != "" || errOut != "" {
			t.Errorf("%s: StartCommand: exit %d, %q %q; want 127 and nothing said", tc.name, code, out, errOut)
		}
	}
}

// StagedCommand of a path that is not in the staging cache checks the
// file and its directory, and passes its arguments through quoted.
func TestStagedCommandOtherPath(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, tc := range []struct {
		dir  string
		mode os.FileMode
		code int
		out  string
	}{{"sound", 0o755, 0, "ran a b'c\n"}, {"open", 0o777, 126, ""}} {
		dir := filepath.Join(root, tc.dir)
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, tc.mode)
		exe := filepath.Join(dir, "prog")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\necho ran \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/sh", "-c", StagedCommand(exe, "a", "b'c"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		u, _ := ParseUnsafe(strings.TrimSpace(stderr.String()))
		if code != tc.code || string(out) != tc.out || (code == 126) != (u != nil && u.Path == dir) {
			t.Errorf("%s: exit %d, %q, %q", tc.dir, code, out, stderr.String())
		}
	}
	if out, err := exec.Command("/bin/sh", "-c", StagedCommand(filepath.Join(root, "missing"))).CombinedOutput(); err == nil || !strings.Contains(err.Error(), "127") {
		t.Errorf("a missing file: %v %q", err, out)
	}
}
