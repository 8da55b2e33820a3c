package output

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a goroutine-safe buffer that counts Write calls.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// hashWriter hashes what is written to it.
type hashWriter struct {
	h hash.Hash
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

// waitFor polls cond until it holds or a deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newMux(t testing.TB, o Options) *Mux {
	t.Helper()
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPassThroughBinary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		size       int
		maxChunk   int
		noNewlines bool
		delay      time.Duration
	}{
		{"100MB random chunks", 100 << 20, 256 << 10, false, time.Hour},
		{"8MB no newlines", 8 << 20, 100 << 10, true, time.Hour},
		{"8MB small chunks concurrent flusher", 8 << 20, 300, false, time.Microsecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := &hashWriter{h: sha256.New()}
			m := newMux(t, Options{Stdout: out, Stderr: io.Discard, FlushDelay: tc.delay})
			rng := rand.New(rand.NewChaCha8([32]byte{1, 2, 3}))
			in := sha256.New()
			buf := make([]byte, tc.maxChunk)
			for left := tc.size; left > 0; {
				n := min(left, 1+rng.IntN(tc.maxChunk))
				p := buf[:n]
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				if tc.noNewlines {
					for i := range p {
						if p[i] == '\n' {
							p[i] = 'x'
						}
					}
				}
				in.Write(p)
				if err := m.Write(0, Stdout, time.Time{}, p); err != nil {
					t.Fatal(err)
				}
				left -= n
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if out.n != int64(tc.size) {
				t.Fatalf("wrote %d bytes, want %d", out.n, tc.size)
			}
			if !bytes.Equal(out.h.Sum(nil), in.Sum(nil)) {
				t.Fatal("output differs from input")
			}
		})
	}
}

// op is one step of a scripted test.
type op struct {
	rank      int
	s         Stream
	data      string
	t         time.Time
	closeRank bool
	waitOut   string // wait until stdout equals this
}

var (
	t1 = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 2*3600))
	t2 = t1.Add(1500 * time.Millisecond)
)

func TestScripted(t *testing.T) {
	t.Parallel()
	host := func(r int) string { return "node" + strconv.Itoa(r/2) }
	tests := []struct {
		name       string
		o          Options
		ops        []op
		wantOut    string
		wantErr    string
		wantWrites int // stdout Write calls before Close; 0: don't check
	}{
		{
			name:    "untagged interleaved partial chunks",
			ops:     []op{{data: "hel"}, {rank: 1, data: "wor"}, {data: "lo\nab"}, {rank: 1, data: "ld\n"}, {data: "c\n"}},
			wantOut: "hello\nworld\nabc\n",
		},
		{
			name:       "untagged one write per chunk",
			ops:        []op{{data: "a\nb\nc"}},
			wantOut:    "a\nb\nc",
			wantWrites: 1,
		},
		{
			name:    "untagged CloseRank adds no newline",
			ops:     []op{{data: "a\nprompt"}, {closeRank: true}},
			wantOut: "a\nprompt",
		},
		{
			name:       "tagged lines batched",
			o:          Options{Tag: true},
			ops:        []op{{rank: 3, data: "a\nb\nc"}},
			wantOut:    "[3] a\n[3] b\n[3] c\n",
			wantWrites: 1,
		},
		{
			name:    "tagged interleaved partial chunks",
			o:       Options{Tag: true},
			ops:     []op{{data: "hel"}, {rank: 1, data: "wor"}, {data: "lo\nab"}, {rank: 1, data: "ld\n"}, {data: "c\n"}},
			wantOut: "[0] hello\n[1] world\n[0] abc\n",
		},
		{
			name:    "tag host",
			o:       Options{TagHost: true, Host: host},
			ops:     []op{{rank: 3, data: "x\n"}},
			wantOut: "[node1:3] x\n",
		},
		{
			name: "mid-line prompt interrupted",
			o:    Options{Tag: true, FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "prompt> "}, {waitOut: "[0] prompt> "},
				{rank: 1, data: "hi\n"},
				{data: "yes\n"},
			},
			wantOut: "[0] prompt> \n[1] hi\n[0] yes\n",
		},
		{
			// Documented (gorun(1) OUTPUT, README): untagged bytes pass
			// through, so another rank's line continues a flushed partial one.
			name: "untagged flushed partial line continued by another rank",
			o:    Options{FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "partial-"}, {waitOut: "partial-"},
				{rank: 1, data: "full\n"},
				{data: "rest\n"},
			},
			wantOut: "partial-full\nrest\n",
		},
		{
			name: "owner continues its line",
			o:    Options{Tag: true, FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "abc"}, {waitOut: "[0] abc"},
				{data: "def\nx\n"},
			},
			wantOut: "[0] abcdef\n[0] x\n",
		},
		{
			name: "stderr does not break stdout line",
			o:    Options{Tag: true, FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "abc"}, {waitOut: "[0] abc"},
				{rank: 1, s: Stderr, data: "err\n"},
				{data: "def\n"},
			},
			wantOut: "[0] abcdef\n",
			wantErr: "[1] err\n",
		},
		{
			name:    "tagged CloseRank ends line",
			o:       Options{Tag: true},
			ops:     []op{{data: "abc"}, {rank: 1, data: "x"}, {closeRank: true}, {rank: 1, data: "y\n"}},
			wantOut: "[0] abc\n[1] xy\n",
		},
		{
			name: "tagged CloseRank after flush",
			o:    Options{Tag: true, FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "abc"}, {waitOut: "[0] abc"}, {closeRank: true},
				{data: "new\n"},
			},
			wantOut: "[0] abc\n[0] new\n",
		},
		{
			name:    "Close ends tagged partial lines",
			o:       Options{Tag: true},
			ops:     []op{{rank: 1, data: "b"}, {data: "a"}},
			wantOut: "[0] a\n[1] b\n",
		},
		{
			name:    "timestamp uses given time",
			o:       Options{Timestamp: true, Tag: true},
			ops:     []op{{data: "a\nb", t: t1}, {data: "c\n", t: t2}, {data: "d\n", t: t2}},
			wantOut: "2024-05-06T05:08:09.123456Z [0] a\n2024-05-06T05:08:09.123456Z [0] bc\n2024-05-06T05:08:10.623456Z [0] d\n",
		},
		{
			name: "timestamp without tag, continuation after interruption",
			o:    Options{Timestamp: true, FlushDelay: 20 * time.Millisecond},
			ops: []op{
				{data: "p", t: t1}, {waitOut: "2024-05-06T05:08:09.123456Z p"},
				{rank: 1, data: "x\n", t: t1},
				{data: "q\n", t: t2},
			},
			wantOut: "2024-05-06T05:08:09.123456Z p\n2024-05-06T05:08:09.123456Z x\n2024-05-06T05:08:10.623456Z q\n",
		},
		{
			name: "long partial line flows without waiting",
			o:    Options{Tag: true},
			ops: []op{
				{data: strings.Repeat("a", 40<<10)}, {data: strings.Repeat("a", 40<<10)},
				{waitOut: "[0] " + strings.Repeat("a", 80<<10)},
				{data: "b\n"},
			},
			wantOut: "[0] " + strings.Repeat("a", 80<<10) + "b\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr syncBuffer
			o := tc.o
			o.Stdout, o.Stderr = &stdout, &stderr
			if o.FlushDelay == 0 {
				o.FlushDelay = time.Hour
			}
			m := newMux(t, o)
			for _, x := range tc.ops {
				switch {
				case x.waitOut != "":
					waitFor(t, fmt.Sprintf("stdout %.40q", x.waitOut), func() bool { return stdout.String() == x.waitOut })
				case x.closeRank:
					if err := m.CloseRank(x.rank); err != nil {
						t.Fatal(err)
					}
				default:
					s := x.s
					if s == 0 {
						s = Stdout
					}
					if err := m.Write(x.rank, s, x.t, []byte(x.data)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.wantWrites != 0 && stdout.Writes() != tc.wantWrites {
				t.Errorf("%d stdout writes, want %d", stdout.Writes(), tc.wantWrites)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if got := stdout.String(); got != tc.wantOut {
				t.Errorf("stdout = %.200q, want %.200q", got, tc.wantOut)
			}
			if got := stderr.String(); got != tc.wantErr {
				t.Errorf("stderr = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestWriteCopies(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	m := newMux(t, Options{Stdout: &out, Stderr: io.Discard, FlushDelay: time.Hour})
	p := []byte("abc")
	m.Write(0, Stdout, time.Time{}, p)
	copy(p, "xyz")
	m.Write(0, Stdout, time.Time{}, []byte("\n"))
	m.Close()
	if got := out.String(); got != "abc\n" {
		t.Fatalf("got %q", got)
	}
}

// TestConcurrentLinesWhole writes lines from many ranks in random partial
// chunks, one goroutine per rank, and checks that output lines are whole and
// in order per rank. Even ranks write stdout, odd ranks stderr.
func TestConcurrentLinesWhole(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		tag        bool
		sameWriter bool
	}{
		{"untagged", false, false},
		{"tagged", true, false},
		{"tagged same writer", true, true},
		{"untagged same writer", false, true},
	}
	const ranks, lines = 8, 2000
	lineRE := regexp.MustCompile(`^(?:\[(\d+)\] )?rank=(\d+) seq=(\d+) x*\n$`)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr syncBuffer
			o := Options{Tag: tc.tag, Stdout: &stdout, Stderr: &stderr, FlushDelay: time.Hour}
			if tc.sameWriter {
				o.Stderr = &stdout
			}
			m := newMux(t, o)
			var wg sync.WaitGroup
			for r := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), 1))
					var data []byte
					for i := range lines {
						data = fmt.Appendf(data, "rank=%d seq=%d %s\n", r, i, strings.Repeat("x", rng.IntN(200)))
					}
					s := Stream(1 + r%2)
					for len(data) > 0 {
						n := min(len(data), 1+rng.IntN(64))
						if err := m.Write(r, s, time.Time{}, data[:n]); err != nil {
							t.Error(err)
						}
						data = data[n:]
					}
				}()
			}
			wg.Wait()
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			next := make([]int, ranks)
			for _, line := range strings.SplitAfter(stdout.String()+stderr.String(), "\n") {
				if line == "" {
					continue
				}
				sub := lineRE.FindStringSubmatch(line)
				if sub == nil {
					t.Fatalf("malformed line %q", line)
				}
				r, _ := strconv.Atoi(sub[2])
				seq, _ := strconv.Atoi(sub[3])
				if tc.tag && sub[1] != sub[2] {
					t.Fatalf("wrong tag in %q", line)
				}
				if !tc.tag && sub[1] != "" {
					t.Fatalf("unexpected tag in %q", line)
				}
				if r >= ranks || seq != next[r] {
					t.Fatalf("line %q out of order", line)
				}
				next[r]++
			}
			for r, n := range next {
				if n != lines {
					t.Errorf("rank %d: %d lines, want %d", r, n, lines)
				}
			}
		})
	}
}

// TestConcurrentFlusherTags writes random partial chunks from many ranks with
// a tiny FlushDelay, so partial lines are flushed and interrupted all the
// time, and checks that every output line starts with a tag and each rank's
// bytes arrive in order (modulo the newlines inserted on interruption).
func TestConcurrentFlusherTags(t *testing.T) {
	t.Parallel()
	const ranks = 6
	var stdout syncBuffer
	m := newMux(t, Options{Tag: true, Stdout: &stdout, Stderr: io.Discard, FlushDelay: 50 * time.Microsecond})
	want := make([]string, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			var all []byte
			for range 3000 {
				p := make([]byte, 1+rng.IntN(20))
				for i := range p {
					p[i] = "ab\n"[rng.IntN(3)]
				}
				all = append(all, p...)
				if err := m.Write(r, Stdout, time.Time{}, p); err != nil {
					t.Error(err)
				}
				if rng.IntN(10) == 0 {
					time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
				}
			}
			want[r] = strings.ReplaceAll(string(all), "\n", "")
		}()
	}
	wg.Wait()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	got := make([]strings.Builder, ranks)
	for _, line := range strings.SplitAfter(stdout.String(), "\n") {
		if line == "" {
			continue
		}
		var r int
		if _, err := fmt.Sscanf(line, "[%d] ", &r); err != nil || r < 0 || r >= ranks {
			t.Fatalf("line without tag: %q", line)
		}
		rest := strings.TrimPrefix(line, "["+strconv.Itoa(r)+"] ")
		if strings.Contains(rest, "[") {
			t.Fatalf("tag inside line: %q", line)
		}
		got[r].WriteString(strings.TrimSuffix(rest, "\n"))
	}
	for r := range ranks {
		if got[r].String() != want[r] {
			t.Errorf("rank %d: bytes differ (got %d, want %d)", r, got[r].Len(), len(want[r]))
		}
	}
}

func TestFlushDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		delay time.Duration
		min   time.Duration
	}{
		{"20ms", 20 * time.Millisecond, 20 * time.Millisecond},
		{"default", 0, DefaultFlushDelay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out syncBuffer
			m := newMux(t, Options{Stdout: &out, Stderr: io.Discard, FlushDelay: tc.delay})
			defer m.Close()
			start := time.Now()
			m.Write(0, Stdout, time.Time{}, []byte("line\nprompt"))
			if got := out.String(); got != "line\n" {
				t.Fatalf("before delay: %q", got)
			}
			waitFor(t, "partial line", func() bool { return out.String() == "line\nprompt" })
			if d := time.Since(start); d < tc.min {
				t.Errorf("flushed after %v, want >= %v", d, tc.min)
			}
			// A second partial line is flushed too (the flusher re-arms).
			m.Write(1, Stdout, time.Time{}, []byte("!"))
			waitFor(t, "second partial line", func() bool { return out.String() == "line\nprompt!" })
		})
	}
}

// lineWriter records whether any Write call ended mid-line.
type lineWriter struct {
	mu      sync.Mutex
	midLine int
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > 0 && p[len(p)-1] != '\n' {
		w.midLine++
	}
	return len(p), nil
}

// TestFlushDelayRestarts checks that the delay counts from the start of each
// partial line: a rank that keeps completing lines, with every chunk ending
// mid-line, never has a partial line flushed.
func TestFlushDelayRestarts(t *testing.T) {
	t.Parallel()
	w := &lineWriter{}
	m := newMux(t, Options{Stdout: w, Stderr: io.Discard, FlushDelay: 200 * time.Millisecond})
	m.Write(0, Stdout, time.Time{}, []byte("a"))
	for start := time.Now(); time.Since(start) < 600*time.Millisecond; {
		time.Sleep(time.Millisecond)
		m.Write(0, Stdout, time.Time{}, []byte("b\na"))
	}
	m.Write(0, Stdout, time.Time{}, []byte("\n"))
	m.Close()
	if w.midLine != 0 {
		t.Errorf("%d writes ended mid-line", w.midLine)
	}
}

func TestDir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		timestamp bool
	}{
		{"plain", false},
		{"timestamp", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "out")
			var stdout syncBuffer
			rng := rand.New(rand.NewPCG(7, 7))
			want := map[string][]byte{}
			for cycle := range 2 {
				m := newMux(t, Options{Dir: dir, Timestamp: tc.timestamp, Tag: true, Stdout: &stdout, Stderr: &stdout})
				for i := range 200 {
					r, s := rng.IntN(3), Stream(1+rng.IntN(2))
					name := filepath.Join(dir, "rank."+strconv.Itoa(r), s.String())
					var p []byte
					if tc.timestamp {
						p = fmt.Appendf(nil, "c%d i%d\npart", cycle, i)
					} else {
						p = make([]byte, rng.IntN(5000))
						for j := range p {
							p[j] = byte(rng.Uint32())
						}
					}
					tm := t1.Add(time.Duration(i) * time.Second)
					if tc.timestamp {
						w := want[name]
						ts := tm.UTC().Format(TimestampLayout) + " "
						if len(w) == 0 || w[len(w)-1] == '\n' {
							w = append(w, ts...)
						}
						w = append(w, fmt.Sprintf("c%d i%d\n%spart", cycle, i, ts)...)
						want[name] = w
					} else {
						want[name] = append(want[name], p...)
					}
					if err := m.Write(r, s, tm, p); err != nil {
						t.Fatal(err)
					}
					if i == 100 {
						if err := m.CloseRank(r); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			}
			for name, w := range want {
				got, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, w) {
					t.Errorf("%s: %d bytes differ from the %d written", name, len(got), len(w))
				}
				fi, _ := os.Stat(name)
				if fi.Mode().Perm()&0o711 != 0o600 {
					t.Errorf("%s: mode %v", name, fi.Mode())
				}
			}
			if stdout.String() != "" {
				t.Errorf("gorun stdout got %q in dir mode", stdout.String())
			}
		})
	}
}

// In directory mode a rank's file that cannot be opened is reported by
// Write once, naming the file, and the other files go on; gorun's own
// notices still reach its stderr.
func TestDirErrorsAndNotices(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A directory where rank 1's stdout should be: open fails, even as root.
	bad := filepath.Join(dir, "rank.1", "stdout")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	m := newMux(t, Options{Dir: dir, Stdout: &stdout, Stderr: &stderr, SameTerminal: true})
	err := m.Write(1, Stdout, t1, []byte("lost\n"))
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Write to an unopenable file = %v, want an error naming %s", err, bad)
	}
	if err := m.Write(1, Stdout, t1, []byte("lost too\n")); err != nil {
		t.Fatalf("the second Write reported the error again: %v", err)
	}
	if err := m.Write(0, Stdout, t1, []byte("kept\n")); err != nil {
		t.Fatal(err)
	}
	m.Notice("gorun: job failed\n")
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "rank.0", "stdout")); string(b) != "kept\n" {
		t.Errorf("rank.0/stdout = %q, %v", b, err)
	}
	if stderr.String() != "gorun: job failed\n" || stdout.String() != "" {
		t.Errorf("gorun's stderr got %q and stdout %q; want the notice on stderr alone", stderr.String(), stdout.String())
	}
}

// errWriter fails with EPIPE after limit bytes.
type errWriter struct {
	mu    sync.Mutex
	limit int
	n     int
}

func (w *errWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n+len(p) > w.limit {
		return 0, syscall.EPIPE
	}
	w.n += len(p)
	return len(p), nil
}

func TestStdoutErrorDoesNotBlock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tag  bool
	}{
		{"untagged", false},
		{"tagged", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr syncBuffer
			m := newMux(t, Options{Tag: tc.tag, Stdout: &errWriter{limit: 1000}, Stderr: &stderr, FlushDelay: time.Millisecond})
			var errs, wantErr []string
			var mu sync.Mutex
			var wg sync.WaitGroup
			for r := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := Stream(1 + r%2)
					for i := range 1000 {
						err := m.Write(r, s, time.Time{}, fmt.Appendf(nil, "r%d line %d\n", r, i))
						if err != nil {
							mu.Lock()
							errs = append(errs, err.Error())
							mu.Unlock()
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("writers blocked")
			}
			if err := m.Close(); err != nil {
				errs = append(errs, err.Error())
			}
			wantErr = append(wantErr, syscall.EPIPE.Error())
			if strings.Join(errs, ";") != strings.Join(wantErr, ";") {
				t.Errorf("errors %q, want EPIPE once", errs)
			}
			if n := strings.Count(stderr.String(), "\n"); n != 2000 {
				t.Errorf("stderr has %d lines, want 2000", n)
			}
			if err := m.Write(0, Stdout, time.Time{}, []byte("x")); !errors.Is(err, ErrClosed) {
				t.Errorf("Write after Close = %v", err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("second Close = %v", err)
			}
		})
	}
}

func BenchmarkMux(b *testing.B) {
	var chunk []byte
	for i := 0; len(chunk) < 4096; i++ {
		chunk = fmt.Appendf(chunk, "step %6d loss=%.6f acc=%.4f some more text here\n", i, 1/float64(i+1), float64(i%100)/100)
	}
	chunk = chunk[:4096] // ends mid-line, as real chunks do
	for _, bc := range []struct {
		name string
		o    Options
		par  bool
	}{
		{"untagged", Options{}, false},
		{"tagged", Options{Tag: true}, false},
		{"tagged+timestamp", Options{Tag: true, Timestamp: true}, false},
		{"untagged/parallel", Options{}, true},
		{"tagged/parallel", Options{Tag: true}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := bc.o
			o.Stdout, o.Stderr = io.Discard, io.Discard
			m := newMux(b, o)
			defer m.Close()
			b.SetBytes(int64(len(chunk)))
			now := time.Now()
			if bc.par {
				var next sync.Mutex
				rank := 0
				b.RunParallel(func(pb *testing.PB) {
					next.Lock()
					r := rank
					rank++
					next.Unlock()
					for pb.Next() {
						m.Write(r, Stdout, now, chunk)
					}
				})
				return
			}
			for b.Loop() {
				m.Write(0, Stdout, now, chunk)
			}
		})
	}
}

// gorun's own messages start on a line of their own, on stderr and, when
// both reach one screen, after a line a rank left open on stdout.
func TestNotice(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	m, err := New(Options{Stdout: &out, Stderr: &errb, FlushDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.Write(0, Stderr, time.Now(), []byte("Traceback (most"))
	m.CloseRank(0)
	m.Notice("gorun: restarting\n")
	m.Close()
	m.Notice("gorun: summary\n")
	if got, want := errb.String(), "Traceback (most\ngorun: restarting\ngorun: summary\n"; got != want {
		t.Fatalf("stderr = %q, want %q", got, want)
	}

	var screen bytes.Buffer
	m, _ = New(Options{Stdout: &screen, Stderr: &screen, SameTerminal: true})
	m.Write(1, Stdout, time.Now(), []byte("prompt> "))
	m.CloseRank(1)
	m.Notice("gorun: done\n")
	m.Close()
	if got, want := screen.String(), "prompt> \ngorun: done\n"; got != want {
		t.Fatalf("screen = %q, want %q", got, want)
	}
}
