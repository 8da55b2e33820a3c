package sshclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
)

// The attacks on the staging cache of security review row 4a, by a real
// second user: the sessions of the test server run as a throwaway victim
// (a real login's uid and $HOME), the attacker is another throwaway user.

// attack is one case of the attacks on the cache: what is done, and the
// path that gorun's refusal names, with what it says of it.
type attack struct {
	name   string
	do     func()
	path   string
	reason string
}

// asUser makes the server's sessions run as u, with u's home as $HOME.
func asUser(u *testusers.User) serverOpt {
	return func(s *testServer) { s.home, s.cred = u.Home, u.Credential() }
}

// attackerDir returns a directory of attacker's, mode 0777, that every
// user can reach (under a 0755 directory of root's in /tmp).
func attackerDir(t *testing.T, attacker *testusers.User) string {
	t.Helper()
	base, err := os.MkdirTemp("", "gorun-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(base, "evil")
	mkdirAs(t, evil, 0o777, attacker.UID, attacker.GID)
	return evil
}

// mkdirAs makes directory p with mode, owned by uid and gid.
func mkdirAs(t *testing.T, p string, mode os.FileMode, uid, gid uint32) {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// A victim's ~/.cache/gorun that is a symbolic link to another user's 0777
// directory, or a part of the cache (or $HOME) that others could change:
// Stage copies nothing and says which path, on which host, and why. A
// cache that Stage makes is the victim's alone (directories 0700).
func TestStageRefusesUnsafeCache(t *testing.T) {
	victim := testusers.Create(t, "gvictim")
	attacker := testusers.Create(t, "gattack")
	s, c := stageClient(t, asUser(victim))
	exe := filepath.Join(t.TempDir(), "gorun")
	content := []byte("#!/bin/sh\necho not really gorun\n")
	if err := os.WriteFile(exe, content, 0o755); err != nil {
		t.Fatal(err)
	}
	evil := attackerDir(t, attacker)
	home := s.home
	cache := filepath.Join(home, ".cache")
	v := func(p string, mode os.FileMode) { mkdirAs(t, p, mode, victim.UID, victim.GID) }
	cases := []attack{
		{"cache symlinked to another user's 0777 directory", func() {
			v(cache, 0o700)
			if err := os.Symlink(evil, filepath.Join(cache, "gorun")); err != nil {
				t.Fatal(err)
			}
			os.Lchown(filepath.Join(cache, "gorun"), int(victim.UID), int(victim.GID))
		}, filepath.Join(cache, "gorun"), "symbolic link"},
		{"~/.cache writable by others", func() { v(cache, 0o777) }, cache, "writable by others"},
		{"~/.cache writable by its group", func() { v(cache, 0o770) }, cache, "writable by its group"},
		{"~/.cache/gorun/bin owned by another user", func() {
			v(cache, 0o700)
			v(filepath.Join(cache, "gorun"), 0o700)
			mkdirAs(t, filepath.Join(cache, "gorun", "bin"), 0o755, attacker.UID, attacker.GID)
		}, filepath.Join(cache, "gorun", "bin"), "owned by another user"},
		{"$HOME writable by others", func() { os.Chmod(home, 0o757) }, home, "writable by others"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range cases {
		os.RemoveAll(cache)
		os.Chmod(home, 0o700)
		tc.do()
		_, err := Stage(ctx, c, exe, "/nonexistent/gorun")
		t.Logf("%s: %v", tc.name, err)
		var he *HostError
		switch {
		case err == nil:
			t.Errorf("%s: Stage succeeded", tc.name)
		case !errors.As(err, &he) || he.Host != "node1":
			t.Errorf("%s: %v, want a HostError naming node1", tc.name, err)
		case !strings.Contains(err.Error(), tc.path+" ") || !strings.Contains(err.Error(), tc.reason):
			t.Errorf("%s: %q does not name %s and say %q", tc.name, err, tc.path, tc.reason)
		}
		if ents, _ := os.ReadDir(evil); len(ents) > 0 {
			t.Errorf("%s: gorun wrote into the attacker's directory: %v", tc.name, ents)
			os.RemoveAll(evil)
			mkdirAs(t, evil, 0o777, attacker.UID, attacker.GID)
		}
		if _, err := os.Lstat(cacheFor(home, content)); err == nil {
			t.Errorf("%s: gorun was copied into the cache", tc.name)
		}
	}

	// A sound cache: the directories gorun makes are the victim's, 0700;
	// one that is there already with mode 0755 is fine as it is.
	os.RemoveAll(cache)
	os.Chmod(home, 0o700)
	staged, err := Stage(ctx, c, exe, "/nonexistent/gorun")
	if err != nil || !staged.Cached || staged.Path != cacheFor(home, content) {
		t.Fatalf("Stage = %+v, %v", staged, err)
	}
	path := staged.Path
	for p := filepath.Dir(path); p != home; p = filepath.Dir(p) {
		st, err := os.Lstat(p)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 || fileOwner(st) != victim.UID {
			t.Errorf("%s: %v (uid %d, %v), want a directory of uid %d, mode 0700", p, st.Mode(), fileOwner(st), err, victim.UID)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o755 || fileOwner(st) != victim.UID {
		t.Errorf("%s: %v (%v), want the victim's, 0755", path, st.Mode(), err)
	}
	os.RemoveAll(cache)
	v(cache, 0o755)
	if _, err := Stage(ctx, c, exe, "/nonexistent/gorun"); err != nil {
		t.Errorf("a ~/.cache of mode 0755: %v", err)
	}
}

// fileOwner returns the uid that owns the file of st.
func fileOwner(st os.FileInfo) uint32 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Uid
	}
	return ^uint32(0)
}

// The shell check itself (checkFunc), run as a throwaway user under each
// sh at hand: what it accepts (the user's own, root's, missing paths, odd
// names) and what it refuses: symbolic links first, then the others in
// the order of its arguments.
func TestCheckFunc(t *testing.T) {
	user := testusers.Create(t, "gcheck")
	other := testusers.Create(t, "gother")
	base, err := os.MkdirTemp("", "gorun-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	p := func(name string) string { return filepath.Join(base, name) }
	mkdirAs(t, p("mine"), 0o700, user.UID, user.GID)
	mkdirAs(t, p("it's mine too"), 0o755, user.UID, user.GID)
	mkdirAs(t, p("roots"), 0o755, 0, 0)
	mkdirAs(t, p("theirs"), 0o755, other.UID, other.GID)
	mkdirAs(t, p("open"), os.ModeSticky|0o777, user.UID, user.GID)
	mkdirAs(t, p("group"), 0o770, user.UID, user.GID)
	if err := os.Symlink(p("mine"), p("link")); err != nil {
		t.Fatal(err)
	}
	args := []string{p("mine"), p("it's mine too"), p("roots"), p("missing"), p("link"), p("theirs"), p("open"), p("group")}
	want := []string{
		p("link") + "\tis a symbolic link",
		p("theirs") + "\tis owned by another user",
		p("open") + "\tis writable by others",
		p("group") + "\tis writable by its group",
	}
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, shQuote(a))
	}
	script := checkFunc + "k " + strings.Join(quoted, " ") + "\n"
	for _, sh := range []string{"/bin/dash", "/bin/bash", "/bin/sh"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		out, err := user.Command(sh, "-c", script).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v: %s", sh, err, out)
			continue
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			u, ok := ParseUnsafe(l)
			if !ok {
				t.Errorf("%s: a line that is no refusal: %q", sh, l)
				continue
			}
			got = append(got, u.Path+"\t"+u.Reason)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: k says\n%s\nwant\n%s", sh, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// All the user's own: nothing, and no id (a function here that
		// would break find's -user) to tell root's from another's.
		out, err = user.Command(sh, "-c", checkFunc+"id() { echo id ran; }; k "+strings.Join([]string{quoted[0], quoted[1], quoted[3]}, " ")+"\n").CombinedOutput()
		if err != nil || len(out) != 0 {
			t.Errorf("%s: sound paths: %v %q", sh, err, out)
		}
	}
}
