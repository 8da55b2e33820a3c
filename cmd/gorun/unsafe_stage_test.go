package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testusers"
)

// Security review rows 4a and 4b through the real path: gorun (the head)
// logs in to a test host as a throwaway victim, over real sshd, and
// stages itself into the victim's ~/.cache/gorun. Another user then
// replaces the staged copy through a cache directory that became
// writable by others (4b), or the victim's ~/.cache/gorun is a link to
// the attacker's 0777 directory (4a): gorun refuses to go on, naming the
// host, the path and why, and the attacker's program never runs.
func TestSSHStagingUnsafeCache(t *testing.T) {
	c := sharedCluster(t)
	victim := testusers.Create(t, "gvictim")
	attacker := testusers.Create(t, "gattack")
	var err error
	// sshd (UsePAM no) refuses a locked account, as a new one's is ("!"):
	// "*" lets no password in either, and is not locked.
	var out []byte
	for try := 0; try < 50; try++ { // useradd elsewhere may hold the lock
		if out, err = exec.Command("usermod", "-p", "*", victim.Name).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("usermod: %v: %s", err, out)
	}
	// sshd reads the hosts' one authorized_keys file as the user logging
	// in: let the victim read it (a public key) for this test.
	keys := filepath.Join(c.Dir, "authorized_keys")
	for p, mode := range map[string]os.FileMode{c.Dir: 0o711, keys: 0o644} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		t.Cleanup(func() { os.Chmod(p, st.Mode().Perm()) })
	}
	// A gorun that is on the head only (the hosts' /tmp is their own).
	dir, err := os.MkdirTemp("/tmp", "gorun-stage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "gorun")
	data, _ := os.ReadFile(gorunBin)
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("/var/tmp", "gorun-attack-") // seen by the hosts too
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	evil, marks := filepath.Join(base, "evil"), filepath.Join(base, "marks")
	for d, owner := range map[string]*testusers.User{evil: attacker, marks: victim} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, int(owner.UID), int(owner.GID))
		os.Chmod(d, 0o777)
	}
	marker := filepath.Join(marks, "ran")
	asAttacker := func(script string, args ...string) {
		t.Helper()
		cmd := attacker.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
		cmd.Env = append(cmd.Env, "FAKE=#!/bin/sh\nid > "+marker+"\nprintf '\\000GORUN-CONTROL fake\\n'\nexec cat >/dev/null\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("attacker: %v: %s", err, out)
		}
	}
	run := func() result {
		t.Helper()
		return runBin(t, bin, 60*time.Second, "--ssh-config", c.SSHConfig, "-H", victim.Name+"@h1", "id", "-un")
	}

	r := run()
	if r.code != 0 || r.stdout != victim.Name+"\n" || !strings.Contains(r.stderr, "using a copy in "+victim.Home+"/.cache/gorun/bin/") {
		t.Fatalf("staged run as %s: exit %d\n%s%s", victim.Name, r.code, r.stdout, r.stderr)
	}
	staged, _ := filepath.Glob(filepath.Join(victim.Home, ".cache", "gorun", "bin", "*", "gorun"))
	if len(staged) != 1 {
		t.Fatalf("staged copies: %q", staged)
	}
	hashDir := filepath.Dir(staged[0])
	for p := hashDir; p != victim.Home; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v (%v), want mode 0700", p, st.Mode(), err)
		}
	}

	for _, tc := range []struct {
		name         string
		attack       func()
		path, reason string // the refusal names the path and says this
	}{
		{"4b: the cache became writable by others and the attacker replaced gorun", func() {
			for p := hashDir; p != filepath.Dir(victim.Home); p = filepath.Dir(p) {
				os.Chmod(p, 0o755)
			}
			os.Chmod(hashDir, 0o777)
			asAttacker(`printf '%s' "$FAKE" > "$1.x" && chmod 755 "$1.x" && mv -f "$1.x" "$1"`, staged[0])
		}, hashDir, "is writable by others"},
		{"4a: ~/.cache/gorun is a link to the attacker's 0777 directory", func() {
			cache := filepath.Join(victim.Home, ".cache", "gorun")
			os.RemoveAll(cache)
			os.Symlink(evil, cache)
			os.Lchown(cache, int(victim.UID), int(victim.GID))
		}, filepath.Join(victim.Home, ".cache", "gorun"), "is a symbolic link"},
	} {
		tc.attack()
		r := run()
		t.Logf("%s: exit %d\n%s", tc.name, r.code, r.stderr)
		if r.code == 0 || !strings.Contains(r.stderr, "h1") || !strings.Contains(r.stderr, tc.path+" "+tc.reason) {
			t.Errorf("%s: exit %d, want a refusal that names h1 and says %q\n%s%s", tc.name, r.code, tc.path+" "+tc.reason, r.stdout, r.stderr)
		}
		if b, err := os.ReadFile(marker); err == nil {
			t.Errorf("%s: the attacker's program ran as %s", tc.name, strings.TrimSpace(string(b)))
			os.Remove(marker)
		}
	}
	if ents, _ := os.ReadDir(evil); len(ents) > 0 {
		t.Errorf("gorun wrote into the attacker's directory: %v", ents)
	}
}
