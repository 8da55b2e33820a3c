// Package testusers creates throwaway local users for the tests that
// attack gorun as another user of the same machine (a victim running a
// job, an attacker beside it), and removes them when the test ends.
//
// It needs root and useradd/userdel (Debian's passwd package). Without
// them a test skips, saying why, except where the CI variable is set:
// there it fails, so that CI always runs the attacks (package
// internal/testenv decides). Under -short the tests skip even as root.
package testusers

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
)

// User is a throwaway user.
type User struct {
	Name     string
	UID, GID uint32
	Home     string
}

// Credential makes a child process run as u (exec.Cmd.SysProcAttr).
func (u *User) Credential() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
}

// Env is a minimal environment for a process of u: HOME, USER, LOGNAME,
// PATH.
func (u *User) Env() []string {
	return []string{"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name,
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
}

// Command returns cmd set to run as u with u's minimal environment.
func (u *User) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = u.Credential()
	cmd.Env = u.Env()
	cmd.Dir = u.Home
	return cmd
}

// Need skips t, or fails it where CI is set (package testenv decides),
// unless this process may create users: it runs as root and has useradd
// and userdel. In -short mode it skips t even as root.
func Need(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "to create throwaway users")
	for _, tool := range []string{"useradd", "userdel"} {
		testenv.NeedTool(t, tool, "passwd")
	}
}

// useradd and userdel take a lock on /etc/passwd and fail when another is
// running: one at a time in this process, retried across processes.
var (
	mu   sync.Mutex
	made int // users made by this process, for unique names
)

// Create makes a user whose name starts with prefix (at most 16
// characters, [a-z0-9-]), with a home directory of its own (mode 0700),
// and removes the user, its home and every process of it when t ends.
func Create(t testing.TB, prefix string) *User {
	t.Helper()
	Need(t)
	mu.Lock()
	defer mu.Unlock()
	made++
	name := fmt.Sprintf("%s%d-%d", prefix, os.Getpid()%100000, made)
	if len(name) > 31 {
		t.Fatalf("testusers: name %q is too long", name)
	}
	run(t, "useradd", "--create-home", "--shell", "/bin/sh", "--user-group", name)
	t.Cleanup(func() {
		exec.Command("pkill", "-KILL", "-u", name).Run()
		mu.Lock()
		defer mu.Unlock()
		run(t, "userdel", "--remove", "--force", name)
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("testusers: %v", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if err := os.Chmod(u.HomeDir, 0o700); err != nil {
		t.Fatalf("testusers: %v", err)
	}
	return &User{Name: name, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
}

// run runs a user administration command, retrying while another holds
// the lock on /etc/passwd (exit status 10 or "cannot lock").
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	var out []byte
	var err error
	for try := 0; try < 50; try++ {
		out, err = exec.Command(name, args...).CombinedOutput()
		if err == nil {
			return
		}
		if !strings.Contains(string(out), "lock") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("testusers: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
}

// Dir makes directory p (and its parents) with mode, past the umask, for
// the trees whose owners and modes a test checks, and returns p.
func Dir(t testing.TB, p string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}
