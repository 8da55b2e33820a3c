package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorun/gorun/internal/testenv"
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

// measured is what runMeasured saw of a gorun run.
type measured struct {
	code    int
	stderr  string
	peakKiB int64 // the largest VmHWM of the head and its agent, polled while they ran and as they reported it
}

// runMeasured runs the shared gorun binary (built without the race
// detector, so that its memory is what users get) with args, stdin and
// stdout, and watches the peak resident memory (VmHWM) of the head and of
// its agent in /proc while they run; it adds --summary-json, where gorun
// reports the same measure at its end.
func runMeasured(t *testing.T, stdin io.Reader, stdout io.Writer, args ...string) measured {
	t.Helper()
	if err := buildShared(); err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(t.TempDir(), "summary.json")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gorunBin, append([]string{"--summary-json", summary}, args...)...)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var m measured
	peak := func(pid int) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.peakKiB = max(m.peakKiB, n)
			}
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	sawAgent := false
poll:
	for {
		select {
		case err = <-done:
			break poll
		case <-time.After(20 * time.Millisecond):
		}
		peak(cmd.Process.Pid)
		for _, pid := range childPIDs(cmd.Process.Pid) {
			if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == gorunBin {
				sawAgent = true
				peak(pid)
			}
		}
	}
	m.stderr = stderr.String()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("gorun %v did not finish\n%s", args, m.stderr)
	case errors.As(err, &ee):
		m.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("gorun %v: %v", args, err)
	}
	var s launcher.Summary
	if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &s) != nil || len(s.Agents) != 1 || !sawAgent {
		t.Fatalf("--summary-json: %v (saw the agent: %v)\n%s", err, sawAgent, m.stderr)
	}
	m.peakKiB = max(m.peakKiB, s.HeadMaxRSS, s.Agents[0].MaxRSS)
	return m
}

// byteCounter counts the bytes written to it that are a, b, or neither.
type byteCounter struct{ a, b, other int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	a, b := bytes.Count(p, []byte("a")), bytes.Count(p, []byte("b"))
	c.a, c.b, c.other = c.a+int64(a), c.b+int64(b), c.other+int64(len(p)-a-b)
	return len(p), nil
}

// Attack 8a of the security review: ranks that print 256 MiB each without
// a newline (one rank; two with --tag-output, where a partial line is
// held for its tag): every byte arrives, and neither the head nor the
// agent grows past 64 MiB (about 15 MiB is usual; a gorun that held the
// line would need 256 MiB).
func TestOutputWithoutNewlineBounded(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "two ranks print 256 MiB each")
	const size = 256 << 20
	script := `c=a; [ "$GORUN_RANK" = 1 ] && c=b; head -c ` + strconv.Itoa(size) + ` /dev/zero | tr '\0' $c; sleep 0.5`
	for _, tt := range []struct {
		name string
		args []string
		a, b int64
	}{
		{"np 1", []string{"-np", "1"}, size, 0},
		{"np 2 tagged", []string{"-np", "2", "--tag-output"}, size, size},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out byteCounter
			m := runMeasured(t, nil, &out, append(tt.args, "sh", "-c", script)...)
			if m.code != 0 || out.a != tt.a || out.b != tt.b {
				t.Fatalf("exit %d, %d bytes of rank 0 and %d of rank 1 (want %d and %d)\n%s", m.code, out.a, out.b, tt.a, tt.b, m.stderr)
			}
			if m.peakKiB > 64<<10 {
				t.Errorf("a gorun process grew to %d MiB", m.peakKiB>>10)
			}
			t.Logf("peak VmHWM %d KiB; %d bytes of tags and newlines", m.peakKiB, out.other)
		})
	}
}

// offer yields n bytes of 'x' and counts what was taken.
type offer struct {
	n     int64
	taken atomic.Int64
}

func (o *offer) Read(p []byte) (int, error) {
	left := o.n - o.taken.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), left)]
	for i := range p {
		p[i] = 'x'
	}
	o.taken.Add(int64(len(p)))
	return len(p), nil
}

// Attack 8b of the security review: 1 GiB offered on gorun's stdin to a
// rank that never reads it. gorun takes no more than its window (a few
// MiB, of which the rank's pipe holds 64 KiB) while the rank lives, and
// neither the head nor the agent grows past 64 MiB.
func TestStdinNotReadBounded(t *testing.T) {
	t.Parallel()
	in := &offer{n: 1 << 30}
	var taken atomic.Int64
	out := &lineWatcher{on: "waited\n", do: func() { taken.Store(in.taken.Load()) }}
	m := runMeasured(t, in, out, "-np", "1", "sh", "-c", `sleep 2; echo waited; sleep 0.5`)
	if m.code != 0 || taken.Load() == 0 {
		t.Fatalf("exit %d, took %d bytes of stdin by the rank's end\n%s", m.code, taken.Load(), m.stderr)
	}
	if taken.Load() > 16<<20 {
		t.Errorf("gorun took %d MiB of stdin that the rank never read", taken.Load()>>20)
	}
	if m.peakKiB > 64<<10 {
		t.Errorf("a gorun process grew to %d MiB", m.peakKiB>>10)
	}
	t.Logf("took %d KiB of the 1 GiB while the rank lived (%d KiB in all); peak VmHWM %d KiB", taken.Load()>>10, in.taken.Load()>>10, m.peakKiB)
}

// lineWatcher calls do once when what it is written contains on.
type lineWatcher struct {
	on   string
	do   func()
	seen bytes.Buffer
	once sync.Once
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.seen.Write(p)
	if strings.Contains(w.seen.String(), w.on) {
		w.once.Do(w.do)
	}
	return len(p), nil
}
