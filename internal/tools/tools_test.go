package tools

import (
	"bytes"
	"strings"
	"testing"
)

// gorun-tools' commands exit 0, or 2 for a usage error or a plugin not
// found, with one "gorun:" line that says what is wrong.
func TestMainExits(t *testing.T) {
	t.Setenv("GORUN_COLL_THRESHOLDS", "")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // in standard output
		stderr string // in standard error
	}{
		{[]string{"thresholds"}, 0, "allreduce", ""},
		{[]string{"thresholds", "allreduce=ring"}, 0, "ring", ""},
		{[]string{"thresholds", "allreduce=nosuch"}, 2, "", "gorun: bench: "},
		{[]string{"preflight"}, 2, "", "gorun: preflight: want one plugin"},
		{[]string{"preflight", "--plugin-dir", t.TempDir(), "nosuch"}, 2, "", "gorun: --plugin-check: "},
		{[]string{"plugins", "test"}, 2, "", "gorun: plugins test: want one plugin"},
		{[]string{"plugins", "list", "--plugin-dir", t.TempDir(), "--json"}, 0, `"dirs"`, ""},
		{[]string{"nosuch"}, 2, "", "gorun: nosuch: no such command"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"gorun-tools"}, tc.args...), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("gorun-tools %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.code, stdout.String(), stderr.String())
		}
	}
}
