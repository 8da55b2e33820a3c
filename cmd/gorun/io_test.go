package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun/gorun/launcher"
)

// 100 MB of random bytes from one rank arrive byte for byte.
func TestOutputLossless(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "blob")
	blob := make([]byte, 100<<20)
	rand.Read(blob)
	if err := os.WriteFile(f, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, 120*time.Second, nil, "-np", "1", "cat", f)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if len(r.stdout) != len(blob) || sha256.Sum256([]byte(r.stdout)) != sha256.Sum256(blob) {
		t.Fatalf("got %d bytes, want %d identical bytes", len(r.stdout), len(blob))
	}
}

// Lines of many ranks stay whole, tagged at their start, in order per rank.
func TestTaggedLines(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 60*time.Second, nil, "-np", "4", "--tag-output", "sh", "-c",
		`i=0; while [ $i -lt 300 ]; do printf 'rank %s line %s ' $RANK $i; printf 'end\n'; i=$((i+1)); done`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	line := regexp.MustCompile(`^\[(\d)\] rank (\d) line (\d+) end$`)
	next := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for _, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] {
			t.Fatalf("mangled line %q", l)
		}
		if want := next[m[1]]; m[3] != itoa(want) {
			t.Fatalf("rank %s: line %s, want %d", m[1], m[3], want)
		}
		next[m[1]]++
	}
	if len(lines) != 1200 {
		t.Fatalf("%d lines, want 1200", len(lines))
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// A prompt without a newline shows up while the rank still runs.
func TestPartialLineFlushed(t *testing.T) {
	t.Parallel()
	cmd := gorunCommand(t.Context(), "-np", "1", "sh", "-c", `printf 'password: '; sleep 10`)
	var out bytes.Buffer
	cmd.Stdout = &lockedWriter{w: &out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(6 * time.Second)
	for !strings.Contains(cmd.Stdout.(*lockedWriter).String(), "password: ") {
		if time.Now().After(deadline) {
			t.Fatal("the prompt did not appear within 6 s while the rank waited 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStdinToRankZero(t *testing.T) {
	t.Parallel()
	in := bytes.Repeat([]byte("line of input\n"), 200000) // 2.8 MB, many windows
	r := runGorun(t, 60*time.Second, in, "-np", "3", "sh", "-c", `if [ "$RANK" = 0 ]; then cat; else cat; echo "rank $RANK read EOF at once" >&2; fi`)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if r.stdout != string(in) {
		t.Fatalf("rank 0 got %d bytes of stdin, want %d (and nobody else any)", len(r.stdout), len(in))
	}
	if strings.Count(r.stderr, "read EOF at once") != 2 {
		t.Fatalf("other ranks: %s", r.stderr)
	}
}

func TestOutputFilename(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runGorun(t, 30*time.Second, nil, "-np", "2", "--output-filename", dir, "sh", "-c", `echo out-$RANK; echo err-$RANK >&2`)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q: %s", r.code, r.stdout, r.stderr)
	}
	for _, rank := range []string{"0", "1"} {
		for _, s := range []string{"out", "err"} {
			name := map[string]string{"out": "stdout", "err": "stderr"}[s]
			b, err := os.ReadFile(filepath.Join(dir, "rank."+rank, name))
			if err != nil || string(b) != s+"-"+rank+"\n" {
				t.Errorf("rank.%s/%s = %q, %v", rank, name, b, err)
			}
		}
	}
}

func TestTimestampOutput(t *testing.T) {
	t.Parallel()
	r := runGorun(t, 30*time.Second, nil, "-np", "1", "--timestamp-output", "echo", "hello")
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z hello\n$`).MatchString(r.stdout) {
		t.Fatalf("stdout %q", r.stdout)
	}
}

// A rank's --output-filename file that cannot be written fails the job,
// naming the file, instead of losing the rank's output in silence; gorun's
// own messages reach its stderr in this mode too.
func TestOutputFilenameUnwritable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A directory where rank 1's stdout should be: no one can open it, root
	// neither.
	bad := filepath.Join(dir, "rank.1", "stdout")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	r := runGorun(t, 60*time.Second, nil, "-np", "2", "--output-filename", dir, "sh", "-c", `echo out-$RANK; sleep 20`)
	if r.code != launcher.ExitLaunch {
		t.Errorf("exit %d, want %d", r.code, launcher.ExitLaunch)
	}
	if w := "rank 1's stdout is lost: open " + bad + ": is a directory (--output-filename)"; !strings.Contains(r.stderr, w) {
		t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
	}
	if r.elapsed > 15*time.Second {
		t.Errorf("took %v: the job was not stopped", r.elapsed)
	}
	// A failing rank is reported on gorun's stderr in this mode too.
	r = runGorun(t, 60*time.Second, nil, "-np", "2", "--output-filename", t.TempDir(), "sh", "-c", `exit 3`)
	if r.code != 3 || !strings.Contains(r.stderr, "exited with code 3") {
		t.Errorf("a failing rank: exit %d\n%s", r.code, r.stderr)
	}
}
