package jobrecord

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestFormat prints the records under testdata and compares what Format
// prints, with and without verbose, with the golden files beside them
// (NAME.txt and NAME-v.txt); go test -update rewrites those. secrets.json
// is a record that an older gorun wrote with its command line in clear:
// it prints redacted.
func TestFormat(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"failed", "hang", "secrets"} {
		r, err := Read(filepath.Join("testdata", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, verbose := range []bool{false, true} {
			golden := filepath.Join("testdata", name+".txt")
			if verbose {
				golden = filepath.Join("testdata", name+"-v.txt")
			}
			var b strings.Builder
			if err := r.Format(&b, verbose); err != nil {
				t.Fatal(err)
			}
			if *update {
				os.WriteFile(golden, []byte(b.String()), 0o644)
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if b.String() != string(want) {
				t.Errorf("Format(%s, verbose %v) =\n%s\nwant (%s)\n%s", name, verbose, b.String(), golden, want)
			}
		}
	}
}

// TestWriteRead writes a record and reads it back whole; the files are
// the user's alone and no temporary file is left.
func TestWriteRead(t *testing.T) {
	t.Parallel()
	r, err := Read(filepath.Join("testdata", "failed.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "runs", "7")
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Times come back in a zone of their own offset: compare instants.
	if !back.Start.Equal(r.Start) || !back.Phases[1].Start.Equal(r.Phases[1].Start) {
		t.Errorf("times: %v, %v back; want %v, %v", back.Start, back.Phases[1].Start, r.Start, r.Phases[1].Start)
	}
	a, _ := json.Marshal(r)
	b, _ := json.Marshal(back)
	if string(a) != string(b) {
		t.Errorf("read back differs:\n%s\nwant\n%s", b, a)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the record's directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	if !reflect.DeepEqual(names, []string{JSONFile, TextFile}) {
		t.Errorf("the record's directory holds %q, want %s and %s only", names, JSONFile, TextFile)
	}
	text, _ := os.ReadFile(filepath.Join(dir, TextFile))
	var v strings.Builder
	r.Format(&v, true)
	if string(text) != v.String() {
		t.Errorf("%s is not what Format prints verbosely:\n%s", TextFile, text)
	}
	// Write again over it: the new record replaces the old.
	r.ExitCode = 1
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	if back, err := Read(filepath.Join(dir, JSONFile)); err != nil || back.ExitCode != 1 {
		t.Errorf("Read of the file itself after a second Write: exit code %v, %v; want 1", back, err)
	}
}

// TestReadErrors checks that what Read refuses is named: the file, and
// where in it.
func TestReadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	put := func(name, text string) string {
		d := filepath.Join(dir, name)
		os.Mkdir(d, 0o700)
		os.WriteFile(filepath.Join(d, JSONFile), []byte(text), 0o600)
		return d
	}
	for _, tt := range []struct {
		name, dir string
		want      []string
	}{
		{"missing", filepath.Join(dir, "nope"), []string{filepath.Join(dir, "nope", JSONFile), "does not exist"}},
		{"not json", put("corrupt", "{\n  \"format\": 1,\n  \"job_id\": oops\n}\n"), []string{filepath.Join(dir, "corrupt", JSONFile) + ":3:13", "invalid character"}},
		{"wrong type", put("type", `{"format": "one"}`), []string{filepath.Join(dir, "type", JSONFile) + ":1:16", "cannot unmarshal string"}},
		{"no format", put("noformat", `{"job_id": "x"}`), []string{filepath.Join(dir, "noformat", JSONFile), "no format version"}},
		{"newer", put("newer", `{"format": 99}`), []string{filepath.Join(dir, "newer", JSONFile), "format 99, newer"}},
	} {
		_, err := Read(tt.dir)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Read(%s) = %v, want an error with %q", tt.name, tt.dir, err, w)
			}
		}
	}
}

// TestDiffEnv fills the hosts' differences from the head's environment
// and drops their own.
func TestDiffEnv(t *testing.T) {
	t.Parallel()
	r := &Record{Head: &HostInfo{Env: []string{"A=1", "B=2"}}, Hosts: []HostInfo{
		{Host: "a", Env: []string{"A=1", "B=2"}},
		{Host: "b", Env: []string{"A=1", "C=3"}},
		{Host: "lost"},
	}}
	r.DiffEnv()
	if d := r.Hosts[0].EnvDiff; d == nil || !d.Empty() || r.Hosts[0].Env != nil {
		t.Errorf("host a: %+v", r.Hosts[0])
	}
	if d := r.Hosts[1].EnvDiff; d == nil || !reflect.DeepEqual(*d, EnvDiff{Added: []string{"C=3"}, Removed: []string{"B"}}) {
		t.Errorf("host b: diff %+v", d)
	}
	if r.Hosts[2].EnvDiff != nil {
		t.Errorf("a host without an environment got a difference: %+v", r.Hosts[2].EnvDiff)
	}
}
