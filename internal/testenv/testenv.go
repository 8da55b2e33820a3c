// Package testenv decides what a test does when this machine lacks
// something it needs: root, a program, a Debian package, a running
// fixture. The test skips, saying what is missing and how to get it,
// except where the CI environment variable is set (to anything but ""):
// there it fails, because CI must run every test rather than skip one
// quietly. The same package keeps the slow tests out of -short runs
// (make test-short), with the same exception for CI.
//
// It is the one place that makes these decisions, as Go's own
// internal/testenv is for the standard library (MustHaveExec and the
// like). Helpers that know what their tests need (testhosts.Need,
// slurmtest.Need, testusers.Need, the need of a test file) check it and
// call [Missing], [NeedRoot] or [NeedTool]; none reads CI itself.
//
// The package is for tests: it imports testing, and it never installs
// anything (scripts/test-deps.sh does, as root).
package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ci reports whether the CI environment variable is set to anything but
// "": then a test that cannot run fails instead of skipping, and -short
// skips nothing.
func ci() bool {
	return os.Getenv("CI") != ""
}

// Missing ends t because this machine lacks what why describes (say what
// is missing and how to install it, as "lstopo is not installed (apt-get
// install hwloc)"): t fails where the CI variable is set and is skipped
// otherwise. Either way the test goes no further.
func Missing(t testing.TB, why string) {
	t.Helper()
	if ci() {
		t.Fatalf("%s (CI is set: this test must run)", why)
	}
	t.Skip(why)
}

// NeedRoot ends t through [Missing] unless this process runs as root
// (effective uid 0); why says what the test needs root for ("to create
// users"). In -short mode it ends t through [SkipShort] even as root, so
// that `make test-short` runs the same tests for root and for anyone
// else.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	SkipShort(t, "it needs root "+why)
	if os.Geteuid() != 0 {
		Missing(t, "it needs root "+why)
	}
}

// NeedTool returns the path of the program tool (a name looked up in PATH,
// or a path), or ends t through [Missing] when there is none, naming the
// Debian packages that install it (debianPackages, separated by blanks, as
// apt-get install takes them).
func NeedTool(t testing.TB, tool, debianPackages string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		Missing(t, toolMissing(tool, debianPackages))
	}
	return path
}

// HaveTool is [NeedTool] for a test that can go on without tool, doing
// less: it returns tool's path and true, or, when there is none, fails t
// where the CI variable is set, and otherwise logs what is missing and
// returns "" and false.
func HaveTool(t testing.TB, tool, debianPackages string) (string, bool) {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err == nil {
		return path, true
	}
	why := toolMissing(tool, debianPackages)
	if ci() {
		t.Fatalf("%s (CI is set: this test must run with it)", why)
	}
	t.Logf("%s: going on without it", why)
	return "", false
}

func toolMissing(tool, debianPackages string) string {
	return tool + " is not installed (apt-get install " + debianPackages + ")"
}

// SkipShort skips t in -short mode (go test -short, make test-short),
// saying why it is left out (slow, or needing root or a fixture that takes
// seconds to start), except where the CI variable is set: CI runs every
// test.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && !ci() {
		t.Skip("-short: " + why)
	}
}

// StartReady starts cmd, waits up to limit for the first line it prints,
// which must be ready (a fixture that says it is in place, such as a flood
// that holds its connections), and kills it when t ends.
func StartReady(t testing.TB, cmd *exec.Cmd, ready string, limit time.Duration) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != ready {
			t.Fatalf("%s said %q, not %q", cmd.Path, l, ready)
		}
	case <-time.After(limit):
		t.Fatalf("%s did not say %q within %v", cmd.Path, ready, limit)
	}
}
