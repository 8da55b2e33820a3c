package testenv

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// fakeT records how a helper ended a test. Skip and Fatalf end the
// goroutine, as the real ones do; any other method of testing.TB panics
// (the embedded interface is nil), so a helper cannot use one unseen.
type fakeT struct {
	testing.TB
	ended string // "", "skip" or "fatal"
	msg   string
	logs  []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Skip(args ...any) { f.end("skip", fmt.Sprint(args...)) }

func (f *fakeT) Fatalf(format string, args ...any) { f.end("fatal", fmt.Sprintf(format, args...)) }

func (f *fakeT) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeT) end(how, msg string) {
	f.ended, f.msg = how, msg
	runtime.Goexit()
}

// run calls helper with a fakeT on a goroutine of its own, so that Skip
// and Fatalf end only that goroutine, and returns the fakeT.
func run(helper func(testing.TB)) *fakeT {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		helper(f)
	}()
	<-done
	return f
}

// setShort sets -test.short for the rest of the test.
func setShort(t *testing.T, short bool) {
	t.Helper()
	old := flag.Lookup("test.short").Value.String()
	if err := flag.Set("test.short", fmt.Sprint(short)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flag.Set("test.short", old) })
}

// Each helper skips where CI is unset and fails where it is set, saying
// why, or lets the test go on when nothing is missing. Not parallel: it
// sets CI and -test.short.
func TestDecisions(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const none = "gorun-testenv-no-such-tool"
	root := os.Geteuid() == 0
	// ifRoot is want when this test runs as root, and else a skip (CI
	// unset) or a failure (CI set) about root.
	ifRoot := func(want, missing string) string {
		if root {
			return want
		}
		return missing
	}
	for _, tc := range []struct {
		name   string
		ci     string
		short  bool
		helper func(testing.TB)
		ended  string // "" (went on), "skip" or "fatal"
		msg    string // in the message, when the test ended
	}{
		{"Missing", "", false, func(t testing.TB) { Missing(t, "lstopo is gone") }, "skip", "lstopo is gone"},
		{"Missing/CI", "1", false, func(t testing.TB) { Missing(t, "lstopo is gone") }, "fatal", "lstopo is gone (CI is set"},
		{"Missing/CI=true", "true", true, func(t testing.TB) { Missing(t, "x") }, "fatal", "CI is set"},
		{"NeedTool/found", "1", false, func(t testing.TB) {
			if p := NeedTool(t, self, "none"); p != self {
				t.Fatalf("NeedTool returned %q, want %q", p, self)
			}
		}, "", ""},
		{"NeedTool/missing", "", false, func(t testing.TB) { NeedTool(t, none, "pkg-a pkg-b") }, "skip", none + " is not installed (apt-get install pkg-a pkg-b)"},
		{"NeedTool/missing/CI", "1", false, func(t testing.TB) { NeedTool(t, none, "pkg-a") }, "fatal", none + " is not installed (apt-get install pkg-a) (CI is set"},
		{"HaveTool/found", "", false, func(t testing.TB) {
			if p, ok := HaveTool(t, self, "none"); p != self || !ok {
				t.Fatalf("HaveTool returned %q, %v; want %q, true", p, ok, self)
			}
		}, "", ""},
		{"HaveTool/missing", "", false, func(t testing.TB) {
			if p, ok := HaveTool(t, none, "pkg-a"); p != "" || ok {
				t.Fatalf("HaveTool returned %q, %v; want \"\", false", p, ok)
			}
		}, "", ""},
		{"HaveTool/missing/CI", "1", false, func(t testing.TB) { HaveTool(t, none, "pkg-a") }, "fatal", "apt-get install pkg-a"},
		{"SkipShort", "", true, func(t testing.TB) { SkipShort(t, "slow") }, "skip", "-short: slow"},
		{"SkipShort/long", "", false, func(t testing.TB) { SkipShort(t, "slow") }, "", ""},
		{"SkipShort/CI", "1", true, func(t testing.TB) { SkipShort(t, "slow") }, "", ""},
		{"NeedRoot/short", "", true, func(t testing.TB) { NeedRoot(t, "to make users") }, "skip", "-short: it needs root to make users"},
		{"NeedRoot", "", false, func(t testing.TB) { NeedRoot(t, "to make users") }, ifRoot("", "skip"), "it needs root to make users"},
		{"NeedRoot/CI", "1", true, func(t testing.TB) { NeedRoot(t, "to make users") }, ifRoot("", "fatal"), "it needs root to make users (CI is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			setShort(t, tc.short)
			f := run(tc.helper)
			if f.ended != tc.ended || tc.ended != "" && !strings.Contains(f.msg, tc.msg) {
				t.Errorf("ended %q with %q; want %q with a message containing %q", f.ended, f.msg, tc.ended, tc.msg)
			}
		})
	}
}

// HaveTool says what it goes on without.
func TestHaveToolLogs(t *testing.T) {
	t.Setenv("CI", "")
	f := run(func(t testing.TB) { HaveTool(t, "gorun-testenv-no-such-tool", "pkg-a") })
	if len(f.logs) != 1 || !strings.Contains(f.logs[0], "apt-get install pkg-a") {
		t.Errorf("logs %q; want one line naming the package", f.logs)
	}
}
