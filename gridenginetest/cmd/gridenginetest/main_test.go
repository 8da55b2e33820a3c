package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{{}, {"frob"}, {"--state", dir, "up", "x"}, {"--state", dir, "up", "1", "2"},
		{"--state", dir, "up", "--slots", "0"}, {"--state", dir, "down", "extra"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("gridenginetest %s: exit status %d, want 2 (stderr %q)", strings.Join(args, " "), code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--state", dir, "down"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "nothing to do") {
		t.Errorf("down of no cluster: exit status %d, %q %q", code, stdout.String(), stderr.String())
	}
	if code := run([]string{"--state", dir, "env"}, &stdout, &stderr); code != 1 {
		t.Errorf("env of no cluster: exit status %d, want 1", code)
	}
}
