package output

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// golden is a file of testdata/peers: a description (what the peer was
// run with, when measured), then "-- stdout --", "-- stderr --" and
// "-- file PATH --" sections, each ending where the next starts. The
// files under the directory are exactly those named.
type golden struct {
	stdout, stderr string
	files          map[string]string
}

// readGolden reads testdata/peers/name.
func readGolden(t *testing.T, name string) golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "peers", name))
	if err != nil {
		t.Fatal(err)
	}
	g := golden{files: map[string]string{}}
	var cur *strings.Builder
	flush := func(section string) {
		if cur == nil {
			return
		}
		switch {
		case section == "stdout":
			g.stdout = cur.String()
		case section == "stderr":
			g.stderr = cur.String()
		default:
			g.files[strings.TrimPrefix(section, "file ")] = cur.String()
		}
	}
	section := ""
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "-- "); ok && strings.HasSuffix(name, " --") {
			flush(section)
			section, cur = strings.TrimSuffix(name, " --"), new(strings.Builder)
			continue
		}
		if cur != nil {
			cur.WriteString(line)
		}
	}
	flush(section)
	return g
}

// Each peer's output formats, as testdata/peers holds them: what Open
// MPI's mpirun and Hydra's mpiexec printed and wrote (measured), and
// gorun's own. Every rank prints "out" on stdout and "err" on stderr
// unless the case says otherwise.
func TestPeerFormats(t *testing.T) {
	t.Parallel()
	host := func(r int) string { return "node" + strconv.Itoa(r) }
	tests := []struct {
		golden string
		o      Options
		dir    bool              // Options.Dir is a temporary directory
		pre    map[string]string // files in it before New
		ops    []op              // nil: ranks 0 and 1 print "out" and "err"
	}{
		{golden: "openmpi-tag-output.txt", o: Options{Style: StyleOpenMPI, Tag: true, Ranks: 2}},
		{golden: "openmpi-timestamp-output.txt", o: Options{Style: StyleOpenMPI, Timestamp: true, Ranks: 2}},
		{golden: "openmpi-tag-timestamp-output.txt", o: Options{Style: StyleOpenMPI, Tag: true, Timestamp: true, Ranks: 2}},
		{golden: "openmpi-output-filename.txt", o: Options{Style: StyleOpenMPI, Tee: true, Ranks: 2}, dir: true},
		{golden: "openmpi-output-filename-tagged.txt", o: Options{Style: StyleOpenMPI, Tee: true, Tag: true, Timestamp: true, Ranks: 2}, dir: true},
		{
			golden: "openmpi-output-filename-np10.txt", o: Options{Style: StyleOpenMPI, Tee: true, Ranks: 10}, dir: true,
			pre: map[string]string{"1/rank.00/stdout": "stale\n", "1/rank.05/stderr": "stale\n"},
			ops: []op{{rank: 0, data: "zero\n"}, {rank: 9, data: "nine\n"}},
		},
		{golden: "openmpi-output-filename-nojobid-nocopy.txt", o: Options{Style: StyleOpenMPI, FlatDir: true, Ranks: 2}, dir: true},
		{golden: "hydra-prepend-rank.txt", o: Options{Tag: true, Ranks: 2}},
		{golden: "gorun-tag-output.txt", o: Options{Tag: true, TagHost: true, Host: host, Ranks: 2}},
		{golden: "gorun-timestamp-output.txt", o: Options{Timestamp: true, Ranks: 2}},
		{golden: "gorun-output-filename.txt", o: Options{Ranks: 2}, dir: true, pre: map[string]string{"rank.0/stdout": "old\n"}},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(tc.golden, ".txt"), func(t *testing.T) {
			t.Parallel()
			want := readGolden(t, tc.golden)
			var stdout, stderr syncBuffer
			o := tc.o
			o.Stdout, o.Stderr, o.FlushDelay = &stdout, &stderr, time.Hour
			if tc.dir {
				o.Dir = filepath.Join(t.TempDir(), "out")
				for name, data := range tc.pre {
					p := filepath.Join(o.Dir, name)
					os.MkdirAll(filepath.Dir(p), 0o755)
					if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			m := newMux(t, o)
			m.loc = time.UTC
			ops := tc.ops
			if ops == nil {
				for r := range 2 {
					ops = append(ops, op{rank: r, data: "out\n"}, op{rank: r, s: Stderr, data: "err\n"})
				}
			}
			for _, x := range ops {
				s := cmpOr(x.s, Stdout)
				if err := m.Write(x.rank, s, t1, []byte(x.data)); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if got := stdout.String(); got != want.stdout {
				t.Errorf("stdout = %q, want %q", got, want.stdout)
			}
			if got := stderr.String(); got != want.stderr {
				t.Errorf("stderr = %q, want %q", got, want.stderr)
			}
			if !tc.dir {
				return
			}
			var names []string
			filepath.WalkDir(o.Dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(o.Dir, p)
					names = append(names, rel)
				}
				return err
			})
			var wantNames []string
			for name := range want.files {
				wantNames = append(wantNames, name)
			}
			slices.Sort(names)
			slices.Sort(wantNames)
			if !slices.Equal(names, wantNames) {
				t.Fatalf("files %q, want %q", names, wantNames)
			}
			for name, w := range want.files {
				if got, _ := os.ReadFile(filepath.Join(o.Dir, name)); !bytes.Equal(got, []byte(w)) {
					t.Errorf("%s = %q, want %q", name, got, w)
				}
			}
			if o.Style == StyleOpenMPI {
				fi, err := os.Stat(filepath.Dir(filepath.Join(o.Dir, wantNames[len(wantNames)-1]))) // one the test did not make
				if err != nil || fi.Mode().Perm()&^0o750 != 0 {
					t.Errorf("a rank's directory: %v, %v; want no more than rwxr-x---, as Open MPI makes it", fi.Mode(), err)
				}
			}
		})
	}
}

// cmpOr is s, or def when s is 0.
func cmpOr(s, def Stream) Stream {
	if s == 0 {
		return def
	}
	return s
}

// A restarted job (CloseRank, then the rank writes again) continues
// Open MPI's files rather than emptying them again, and an unwritable
// directory is an error from New that names it.
func TestOpenMPIFilesRestartAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var sink syncBuffer
	m := newMux(t, Options{Style: StyleOpenMPI, Dir: dir, Tee: true, Ranks: 1, Stdout: &sink, Stderr: &sink})
	m.Write(0, Stdout, t1, []byte("gen 0\n"))
	m.CloseRank(0)
	m.Write(0, Stdout, t1, []byte("gen 1\n"))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "1", "rank.0", "stdout")); string(got) != "gen 0\ngen 1\n" {
		t.Errorf("after a restart rank.0/stdout = %q", got)
	}
	if sink.String() != "gen 0\ngen 1\n" {
		t.Errorf("terminal = %q", sink.String())
	}

	// A file where rank 0's directory goes.
	bad := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(bad, "1"), 0o755)
	os.WriteFile(filepath.Join(bad, "1", "rank.0"), nil, 0o644)
	if _, err := New(Options{Style: StyleOpenMPI, Dir: bad, Ranks: 1}); err == nil || !strings.Contains(err.Error(), filepath.Join(bad, "1", "rank.0")) {
		t.Errorf("New with rank.0 a file = %v, want an error naming it", err)
	}
	// SetRanks makes the files of the ranks New did not.
	dir = t.TempDir()
	m = newMux(t, Options{Style: StyleOpenMPI, Dir: dir, Stdout: &sink, Stderr: &sink})
	if err := m.SetRanks(3); err != nil {
		t.Fatal(err)
	}
	m.Close()
	for r := range 3 {
		if _, err := os.Stat(filepath.Join(dir, "1", "rank."+strconv.Itoa(r), "stderr")); err != nil {
			t.Error(err)
		}
	}
}

// With Tee, a rank's file failing is a *FileError, gorun's own output
// failing is not: the head stops the job for the first only.
func TestTeeErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "1", "rank.1", "stdout"), 0o755) // a directory where the file goes
	w := &errWriter{limit: 0}
	m := newMux(t, Options{Style: StyleOpenMPI, Dir: dir, Tee: true, Stdout: w, Stderr: w})
	err := m.Write(1, Stdout, t1, []byte("x\n"))
	var fe *FileError
	if !errors.As(err, &fe) || fe.Rank != 1 || fe.Stream != Stdout {
		t.Errorf("Write to a bad file and a broken terminal = %v, want a *FileError for rank 1's stdout", err)
	}
	err = m.Write(0, Stdout, t1, []byte("y\n"))
	if err != nil {
		t.Errorf("a second Write = %v, want nothing: each error is reported once", err)
	}
	m.Close()
	m = newMux(t, Options{Style: StyleOpenMPI, Dir: t.TempDir(), Tee: true, Stdout: &errWriter{}, Stderr: io.Discard})
	if err := m.Write(0, Stdout, t1, []byte("y\n")); err == nil || errors.As(err, &fe) {
		t.Errorf("Write with the terminal broken = %v, want an error that is no *FileError", err)
	}
	m.Close()
}
