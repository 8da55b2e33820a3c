package peerproc

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

const envTestPeer = "GORUN_PEERPROC_TEST_PEER"

func TestRunPattern(t *testing.T) {
	for _, name := range []string{"TestA", "TestA/b", "TestA/b.c/d+e", "TestA/#01"} {
		re := runPattern(name)
		parts := strings.Split(re, "/")
		for i, want := range strings.Split(name, "/") {
			if !regexp.MustCompile(parts[i]).MatchString(want) {
				t.Errorf("runPattern(%q) part %q does not match %q", name, parts[i], want)
			}
			if regexp.MustCompile(parts[i]).MatchString(want + "x") {
				t.Errorf("runPattern(%q) part %q matches %q", name, parts[i], want+"x")
			}
		}
	}
}

var testConfig = Config{
	Env:           envTestPeer,
	Args:          []string{"-test.timeout=1m"},
	ExitTimeout:   30 * time.Second,
	ExpectTimeout: 30 * time.Second,
}

// TestEcho has the peer answer each "say X" with "echo X", then checks
// that Wait sees it exit cleanly once the control channel is closed.
func TestEcho(t *testing.T) {
	if ctl, ok := Attach(t, testConfig); ok {
		ctl.Say(t, "ready")
		for _, want := range []string{"a", "b c"} {
			if got := ctl.Expect(t, "say"); got != want {
				t.Fatalf("peer got %q, want %q", got, want)
			}
			ctl.Say(t, "echo %s", want)
		}
		ctl.Drain()
		return
	}
	c := Start(t, testConfig)
	c.Ctl.Expect(t, "ready")
	for _, word := range []string{"a", "b c"} {
		c.Ctl.Say(t, "say %s", word)
		if got := c.Ctl.Expect(t, "echo"); got != word {
			t.Fatalf("peer echoes %q, want %q", got, word)
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("Wait: %v\n%s", err, c.Output())
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("second Wait: %v", err)
	}
}

// TestKill kills a peer (of a subtest) that waits on the control channel:
// Wait must report that it did not exit cleanly.
func TestKill(t *testing.T) {
	t.Run("sub/test", func(t *testing.T) {
		if ctl, ok := Attach(t, testConfig); ok {
			ctl.Say(t, "ready")
			ctl.Drain()
			return
		}
		c := Start(t, testConfig)
		c.Ctl.Expect(t, "ready")
		if err := c.Kill(); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if err := c.Wait(); err == nil {
			t.Fatalf("Wait after Kill = nil, want an error")
		}
	})
}

func TestInPeer(t *testing.T) {
	t.Setenv(envTestPeer+"_X", "")
	if InPeer(envTestPeer + "_X") {
		t.Errorf("InPeer with the variable empty = true")
	}
	t.Setenv(envTestPeer+"_X", "TestSomething")
	if !InPeer(envTestPeer + "_X") {
		t.Errorf("InPeer with the variable set = false")
	}
}
