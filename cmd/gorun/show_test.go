package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/jobrecord"
)

// TestShow prints the record under testdata/record as gorun show does,
// and compares it with testdata/record/show.txt; -v and --json, before or
// after DIR, print the verbose text and the record.
func TestShow(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "record")
	want, err := os.ReadFile(filepath.Join(dir, "show.txt"))
	if err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, 30*time.Second, nil, "show", dir)
	if r.code != 0 || r.stderr != "" || r.stdout != string(want) {
		t.Errorf("gorun show %s: exit %d, stderr %q, stdout\n%s\nwant\n%s", dir, r.code, r.stderr, r.stdout, want)
	}

	rec, err := jobrecord.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var verbose strings.Builder
	rec.Format(&verbose, true)
	for _, args := range [][]string{{"show", "-v", dir}, {"show", dir, "--verbose"}} {
		if r := runGorun(t, 30*time.Second, nil, args...); r.code != 0 || r.stdout != verbose.String() {
			t.Errorf("gorun %s: exit %d, stdout\n%s\nwant what Format prints verbosely\n%s", strings.Join(args, " "), r.code, r.stdout, verbose.String())
		}
	}

	r = runGorun(t, 30*time.Second, nil, "show", "--json", dir)
	var back jobrecord.Record
	if err := json.Unmarshal([]byte(r.stdout), &back); err != nil || r.code != 0 || back.JobID != "c0ffee12" || back.FirstFailure == nil || back.FirstFailure.Rank != 1 {
		t.Errorf("gorun show --json %s: exit %d, %v; got\n%s", dir, r.code, err, r.stdout)
	}
}

// TestShowErrors checks that gorun show names the file it could not read,
// and why, with exit status 1; and that a missing DIR is a usage error.
func TestShowErrors(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	corrupt := filepath.Join(tmp, "corrupt")
	os.Mkdir(corrupt, 0o700)
	os.WriteFile(filepath.Join(corrupt, "record.json"), []byte("{\"format\": 1,\n \"hosts\": [}\n"), 0o600)
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"missing", []string{"show", filepath.Join(tmp, "nope")}, 1, []string{filepath.Join(tmp, "nope", "record.json"), "does not exist"}},
		{"corrupt", []string{"show", corrupt}, 1, []string{filepath.Join(corrupt, "record.json") + ":2:12", "invalid character"}},
		{"no dir", []string{"show"}, 2, []string{"want one DIR"}},
		{"two dirs", []string{"show", "a", "b"}, 2, []string{"want one DIR"}},
	} {
		r := runGorun(t, 30*time.Second, nil, tt.args...)
		for _, w := range tt.want {
			if r.code != tt.code || !strings.Contains(r.stderr, w) {
				t.Errorf("%s: gorun %s: exit %d, stderr %q; want exit %d and %q", tt.name, strings.Join(tt.args, " "), r.code, r.stderr, tt.code, w)
			}
		}
	}
}
