package output

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Mux clock that tests move.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newClockMux returns a Mux whose deadlines and windows follow a fake clock;
// expire writes what is due.
func newClockMux(t testing.TB, o Options) (*Mux, *fakeClock) {
	t.Helper()
	m := newMux(t, o)
	c := &fakeClock{t: t1}
	m.mu.Lock()
	m.now = c.now
	m.mu.Unlock()
	return m, c
}

// wait moves the clock by d and writes what is due then, as the flusher
// would.
func (m *Mux) wait(c *fakeClock, d time.Duration) {
	c.advance(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(c.now())
}

func TestAppendRanks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, "0-7"},
		{[]int{0, 2, 4, 5, 6}, "0,2,4-6"},
		{[]int{3}, "3"},
		{[]int{0, 1}, "0,1"},
		{[]int{0, 1, 2, 5, 7, 8, 9, 10, 12, 13}, "0-2,5,7-10,12,13"},
		{[]int{9, 11, 13}, "9,11,13"},
	} {
		if got := string(appendRanks(nil, tc.ranks)); got != tc.want {
			t.Errorf("appendRanks(%v) = %q, want %q", tc.ranks, got, tc.want)
		}
	}
}

// mop is one step of a scripted merge test.
type mop struct {
	rank   int
	s      Stream
	data   string
	t      time.Time
	close  bool          // CloseRank(rank)
	wait   time.Duration // move the clock and write what is due
	notice string        // Notice(notice)
	ranks  int           // SetRanks(ranks)
	out    *string       // stdout so far must be this
}

func so(s string) *string { return &s }

func TestMergeScripted(t *testing.T) {
	t.Parallel()
	const w = DefaultMergeWindow
	x8 := make([]mop, 8)
	for r := range x8 {
		x8[r] = mop{rank: r, data: "epoch 1 loss 0.31\n"}
	}
	long := strings.Repeat("y", MaxPartial+10) + "\n"
	tests := []struct {
		name    string
		o       Options
		ops     []mop
		wantOut string
		wantErr string
	}{
		{
			name:    "8 ranks alike: one line at once",
			o:       Options{Ranks: 8},
			ops:     append(x8, mop{out: so("[0-7] epoch 1 loss 0.31\n")}),
			wantOut: "[0-7] epoch 1 loss 0.31\n",
		},
		{
			name:    "8 ranks alike, tagged",
			o:       Options{Ranks: 8, Tag: true},
			ops:     append(x8, mop{out: so("[0-7] epoch 1 loss 0.31\n")}),
			wantOut: "[0-7] epoch 1 loss 0.31\n",
		},
		{
			name: "a missing rank holds the line for the window",
			o:    Options{Ranks: 8},
			ops: append(x8[:7:7], mop{out: so("")}, mop{wait: w - time.Millisecond}, mop{out: so("")},
				mop{wait: time.Millisecond}, mop{out: so("[0-6] epoch 1 loss 0.31\n")}),
			wantOut: "[0-6] epoch 1 loss 0.31\n",
		},
		{
			name: "a rank that ended does not hold a line back",
			o:    Options{Ranks: 8},
			ops: append([]mop{{rank: 7, close: true}, {rank: 2, close: true}}, append(x8[:2:2],
				append(x8[3:7:7], mop{out: so("[0,1,3-6] epoch 1 loss 0.31\n")})...)...),
			wantOut: "[0,1,3-6] epoch 1 loss 0.31\n",
		},
		{
			name: "a rank that ends while a line waits for it",
			o:    Options{Ranks: 3},
			ops: []mop{{rank: 0, data: "x\n"}, {rank: 1, data: "x\n"}, {out: so("")},
				{rank: 2, close: true}, {out: so("[0,1] x\n")}},
			wantOut: "[0,1] x\n",
		},
		{
			// Migrant review P9: a line no other rank printed alike
			// still says whose it is.
			name: "different lines tagged with their rank",
			o:    Options{Ranks: 3},
			ops: []mop{{rank: 0, data: "a\n"}, {rank: 1, data: "b\n"}, {rank: 2, data: "c\n"},
				{out: so("")}, {wait: w}, {out: so("[0] a\n[1] b\n[2] c\n")}},
			wantOut: "[0] a\n[1] b\n[2] c\n",
		},
		{
			name: "a straggler's line past the window is tagged",
			o:    Options{Ranks: 4},
			ops: []mop{{rank: 0, data: "epoch 1 loss 0.31\n"}, {rank: 1, data: "epoch 1 loss 0.31\n"},
				{rank: 3, data: "epoch 1 loss 0.31\n"}, {wait: w}, {out: so("[0,1,3] epoch 1 loss 0.31\n")},
				{rank: 2, data: "epoch 1 loss 0.31\n"}, {wait: w}},
			wantOut: "[0,1,3] epoch 1 loss 0.31\n[2] epoch 1 loss 0.31\n",
		},
		{
			name:    "a straggler's line, host tags",
			o:       Options{Ranks: 2, Tag: true, TagHost: true, Host: func(r int) string { return "node" + strconv.Itoa(r) }},
			ops:     []mop{{rank: 0, data: "x\n"}, {wait: w}, {rank: 1, data: "x\n"}, {rank: 1, close: true}},
			wantOut: "[node0:0] x\n[node1:1] x\n",
		},
		{
			name: "only some ranks waited for",
			o:    Options{Ranks: 8, Only: []int{4, 5}},
			ops: []mop{{rank: 4, data: "x\n"}, {out: so("")}, {rank: 5, data: "x\n"}, {out: so("[4,5] x\n")},
				{rank: 5, close: true}, {rank: 4, data: "y\n"}, {out: so("[4,5] x\n[4] y\n")}},
			wantOut: "[4,5] x\n[4] y\n",
		},
		{
			name:    "Open MPI's style: single lines take its tag",
			o:       Options{Ranks: 2, Style: StyleOpenMPI},
			ops:     []mop{{rank: 0, data: "x\n"}, {rank: 1, data: "x\n"}, {rank: 1, data: "y\n"}, {wait: w}},
			wantOut: "[0,1] x\n[1,1]<stdout>:y\n",
		},
		{
			name:    "different lines tagged as without merging",
			o:       Options{Ranks: 3, Tag: true},
			ops:     []mop{{rank: 0, data: "a\n"}, {rank: 1, data: "b\n"}, {rank: 2, data: "c\n"}},
			wantOut: "[0] a\n[1] b\n[2] c\n",
		},
		{
			name: "host tags for one rank, ranks for several",
			o:    Options{Ranks: 3, TagHost: true, Host: func(r int) string { return "node" + strconv.Itoa(r) }},
			ops: []mop{{rank: 0, data: "a\n"}, {rank: 1, data: "x\n"}, {rank: 2, data: "x\n"},
				{rank: 0, data: "x\n"}},
			wantOut: "[node0:0] a\n[0-2] x\n",
		},
		{
			name: "each rank keeps its order",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "a\nb\n"}, {rank: 1, data: "b\n"}, {rank: 1, data: "a\n"},
				{wait: w}},
			wantOut: "[0] a\n[0,1] b\n[1] a\n",
		},
		{
			name: "a lagging rank joins the oldest line it can",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "a\nb\nc\na\n"}, {out: so("")}, {rank: 1, data: "a\nb\n"},
				{out: so("[0,1] a\n[0,1] b\n")}, {rank: 1, data: "c\na\n"}},
			wantOut: "[0,1] a\n[0,1] b\n[0,1] c\n[0,1] a\n",
		},
		{
			name: "a lagging rank's own line moves before the line it joins",
			o:    Options{Ranks: 2, Tag: true},
			ops: []mop{{rank: 0, data: "step 0\nmine 0\nstep 1\nmine 1\n"}, {rank: 1, data: "step 0\n"},
				{out: so("[0,1] step 0\n")}, {rank: 1, data: "theirs 0\nstep 1\n"}, {wait: w}},
			wantOut: "[0,1] step 0\n[0] mine 0\n[1] theirs 0\n[0,1] step 1\n[0] mine 1\n",
		},
		{
			name: "a moved line does not hold back the line it passed",
			o:    Options{Ranks: 3},
			ops: []mop{{rank: 0, data: "x\n"}, {wait: w / 2}, {rank: 1, data: "y\nx\n"}, {wait: w/2 - time.Millisecond},
				{out: so("")}, {wait: time.Millisecond}, {out: so("[1] y\n[0,1] x\n")}},
			wantOut: "[1] y\n[0,1] x\n",
		},
		{
			name: "a line a rank repeats is not merged with itself",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: ".\n.\n.\n"}, {rank: 1, data: ".\n"}, {out: so("[0,1] .\n")},
				{wait: w}},
			wantOut: "[0,1] .\n[0] .\n[0] .\n",
		},
		{
			name: "lines in chunks",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "hel"}, {rank: 1, data: "hello\nwor"}, {rank: 0, data: "lo\nworld\n"},
				{rank: 1, data: "ld\n"}},
			wantOut: "[0,1] hello\n[0,1] world\n",
		},
		{
			name: "stderr merged apart",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "x\n"}, {rank: 1, s: Stderr, data: "x\n"}, {rank: 1, data: "x\n"},
				{rank: 0, s: Stderr, data: "x\n"}, {out: so("[0,1] x\n")}},
			wantOut: "[0,1] x\n",
			wantErr: "[0,1] x\n",
		},
		{
			name: "a stderr line waits, stdout goes on behind it",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, s: Stderr, data: "warning\n"}, {rank: 0, data: "x\n"}, {rank: 1, data: "x\n"},
				{out: so("")}, {wait: w}, {out: so("[0,1] x\n")}},
			wantOut: "[0,1] x\n",
			wantErr: "[0] warning\n",
		},
		{
			name:    "timestamp of the first line",
			o:       Options{Ranks: 2, Timestamp: true},
			ops:     []mop{{rank: 1, data: "x\n", t: t1}, {rank: 0, data: "x\n", t: t2}},
			wantOut: t1.UTC().Format(TimestampLayout) + " [0,1] x\n",
		},
		{
			name:    "unknown number of ranks: the window decides",
			ops:     []mop{{rank: 0, data: "x\n"}, {rank: 1, data: "x\n"}, {out: so("")}, {wait: w}},
			wantOut: "[0,1] x\n",
		},
		{
			name: "SetRanks completes a line",
			ops: []mop{{rank: 0, data: "x\n"}, {rank: 1, data: "x\n"}, {out: so("")}, {ranks: 2},
				{out: so("[0,1] x\n")}},
			wantOut: "[0,1] x\n",
		},
		{
			name:    "a rank alone is not held",
			o:       Options{Ranks: 1},
			ops:     []mop{{data: "a\nb\n"}, {out: so("[0] a\n[0] b\n")}},
			wantOut: "[0] a\n[0] b\n",
		},
		{
			name:    "the last rank running is not held",
			o:       Options{Ranks: 2},
			ops:     []mop{{rank: 1, close: true}, {data: "a\n"}, {out: so("[0] a\n")}},
			wantOut: "[0] a\n",
		},
		{
			name: "a restarted rank is waited for again",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "x\n"}, {rank: 0, close: true}, {rank: 1, data: "x\n"},
				{out: so("[0,1] x\n")}, {rank: 0, data: "z\n"}, {out: so("[0,1] x\n")}, {rank: 1, data: "z\n"},
				{out: so("[0,1] x\n[0,1] z\n")}},
			wantOut: "[0,1] x\n[0,1] z\n",
		},
		{
			name: "a flushed partial line comes after the rank's waiting lines",
			o:    Options{Ranks: 2, Tag: true},
			ops: []mop{{rank: 0, data: "a\nprompt> "}, {wait: DefaultFlushDelay},
				{out: so("[0] a\n[0] prompt> ")}, {rank: 1, data: "a\n"}, {rank: 0, data: "yes\n"}, {wait: w}},
			wantOut: "[0] a\n[0] prompt> yes\n[1] a\n",
		},
		{
			name: "the rest of a flushed partial line is not merged",
			o:    Options{Ranks: 2, Tag: true},
			ops: []mop{{rank: 0, data: "ab"}, {wait: DefaultFlushDelay}, {rank: 0, data: "c\n"},
				{rank: 1, data: "c\n"}, {wait: w}},
			wantOut: "[0] abc\n[1] c\n",
		},
		{
			name: "a merged line starts a line of its own",
			o:    Options{Ranks: 3},
			ops: []mop{{rank: 2, data: "prompt> "}, {wait: DefaultFlushDelay}, {rank: 0, data: "x\n"},
				{rank: 1, data: "x\n"}, {wait: w}, {rank: 2, data: "yes\n"}},
			wantOut: "[2] prompt> \n[0,1] x\n[2] yes\n",
		},
		{
			name: "an overlong line passes, after the rank's waiting lines",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "a\n"}, {rank: 0, data: long}, {out: so("[0] a\n[0] " + long)},
				{rank: 1, data: "a\n"}, {rank: 1, data: "b\n"}, {wait: w}},
			wantOut: "[0] a\n[0] " + long + "[1] a\n[1] b\n",
		},
		{
			name: "an overlong partial line passes, after the rank's waiting lines",
			o:    Options{Ranks: 2, Tag: true},
			ops: []mop{{rank: 0, data: "a\n"}, {rank: 0, data: long[:MaxPartial+1]}, {rank: 0, data: "\n"},
				{rank: 1, data: "\n"}},
			wantOut: "[0] a\n[0] " + long[:MaxPartial+1] + "\n[1] \n",
		},
		{
			name: "CloseRank writes the partial line after the rank's waiting lines",
			o:    Options{Ranks: 3, Tag: true},
			ops: []mop{{rank: 0, data: "a\n"}, {rank: 1, data: "a\nlast words"}, {rank: 1, close: true},
				{out: so("[0,1] a\n[1] last words\n")}, {rank: 2, data: "a\n"}, {wait: w}},
			wantOut: "[0,1] a\n[1] last words\n[2] a\n",
		},
		{
			name: "a notice comes after the lines that arrived before it",
			o:    Options{Ranks: 2},
			ops: []mop{{rank: 0, data: "x\n"}, {rank: 0, s: Stderr, data: "Traceback\n"},
				{notice: "gorun: rank 0 failed\n"}, {out: so("[0] x\n")}},
			wantOut: "[0] x\n",
			wantErr: "[0] Traceback\ngorun: rank 0 failed\n",
		},
		{
			name:    "Close writes what waits",
			o:       Options{Ranks: 4},
			ops:     []mop{{rank: 0, data: "x\ny\n"}, {rank: 1, data: "x\n"}, {rank: 2, data: "tail"}},
			wantOut: "[0,1] x\n[0] y\n[2] tail\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr syncBuffer
			o := tc.o
			o.Merge, o.Stdout, o.Stderr = true, &stdout, &stderr
			m, c := newClockMux(t, o)
			for i, op := range tc.ops {
				switch {
				case op.close:
					m.CloseRank(op.rank)
				case op.wait > 0:
					m.wait(c, op.wait)
				case op.notice != "":
					m.Notice(op.notice)
				case op.ranks > 0:
					m.SetRanks(op.ranks)
				case op.out != nil:
					if got := stdout.String(); got != *op.out {
						t.Fatalf("step %d: stdout = %.200q, want %.200q", i, got, *op.out)
					}
				default:
					s := op.s
					if s == 0 {
						s = Stdout
					}
					if err := m.Write(op.rank, s, op.t, []byte(op.data)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if got := stdout.String(); got != tc.wantOut {
				t.Errorf("stdout = %.300q, want %.300q", got, tc.wantOut)
			}
			if got := stderr.String(); got != tc.wantErr {
				t.Errorf("stderr = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

// Past the bound on lines or bytes held, the oldest lines are written
// early: whole, in order, none lost.
func TestMergeBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		maxLines int
		maxBytes int
		text     string
	}{
		{"lines", 10, mergeMaxBytes, "line"},
		{"bytes", mergeMaxLines, 10 << 10, strings.Repeat("z", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout syncBuffer
			m, _ := newClockMux(t, Options{Merge: true, Ranks: 2, Stdout: &stdout, MergeWindow: time.Hour})
			m.mu.Lock()
			m.mg.maxLines, m.mg.maxBytes = tc.maxLines, tc.maxBytes
			m.mu.Unlock()
			var want strings.Builder
			for i := range 100 {
				line := fmt.Sprintf("%s %d\n", tc.text, i)
				want.WriteString("[0] " + line)
				if err := m.Write(0, Stdout, time.Time{}, []byte(line)); err != nil {
					t.Fatal(err)
				}
				m.mu.Lock()
				lines, size := m.mg.lines, m.mg.bytes
				m.mu.Unlock()
				if lines > tc.maxLines || size > tc.maxBytes {
					t.Fatalf("after line %d: %d lines, %d bytes held", i, lines, size)
				}
			}
			if got := stdout.String(); len(got) < want.Len()/2 || !strings.HasPrefix(want.String(), got) {
				t.Fatalf("before Close: %d bytes, want the first of %d in order", len(got), want.Len())
			}
			m.Close()
			if got := stdout.String(); got != want.String() {
				t.Fatalf("got %d bytes, want %d", len(got), want.Len())
			}
		})
	}
}

// mergedLine is a line of merged output: "[ranks] text" or a timestamp
// first.
var mergedLine = regexp.MustCompile(`^(?:\S+Z )?\[([0-9,\-]+)\] (.*)$`)

// expandRanks parses a rank list as appendRanks writes it.
func expandRanks(t testing.TB, list string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a || isRange && b-a < 2 {
			t.Fatalf("bad rank list %q", list)
		}
		for r := a; r <= b; r++ {
			if len(out) > 0 && r <= out[len(out)-1] {
				t.Fatalf("rank list %q not sorted", list)
			}
			out = append(out, r)
		}
	}
	return out
}

// expandOutput returns each rank's lines in tagged merged output, with the
// number of output lines.
func expandOutput(t testing.TB, out string) (map[int][]string, int) {
	t.Helper()
	got := map[int][]string{}
	lines := strings.Split(out, "\n")
	if lines[len(lines)-1] != "" {
		t.Fatalf("output ends inside a line: %q", lines[len(lines)-1])
	}
	lines = lines[:len(lines)-1]
	for _, l := range lines {
		sub := mergedLine.FindStringSubmatch(l)
		if sub == nil {
			t.Fatalf("line without ranks: %q", l)
		}
		for _, r := range expandRanks(t, sub[1]) {
			got[r] = append(got[r], sub[2])
		}
	}
	return got, len(lines)
}

// mergeRun is one random job for the merge property: each rank's lines
// per stream, written in random chunks, ranks interleaved at random, the
// clock moving at random.
type mergeRun struct {
	ranks, lines int
	knownRanks   bool // Options.Ranks set
	closeRanks   bool // CloseRank at each rank's end
	window       time.Duration
	alphabet     int // distinct texts a line is drawn from
}

// check runs r with the random source rng and checks that expanding the
// output's rank lists gives each rank's lines exactly, in order.
func (r mergeRun) check(t testing.TB, rng *rand.Rand) (outLines, inLines int) {
	t.Helper()
	var stdout, stderr syncBuffer
	o := Options{Merge: true, Tag: true, Stdout: &stdout, Stderr: &stderr, MergeWindow: r.window, FlushDelay: time.Hour}
	if r.knownRanks {
		o.Ranks = r.ranks
	}
	m, c := newClockMux(t, o)
	type rankIn struct {
		data [3][]byte
		want [3][]string
	}
	in := make([]rankIn, r.ranks)
	for k := range in {
		for i := range r.lines {
			s := Stdout
			if rng.IntN(4) == 0 {
				s = Stderr
			}
			text := "step " + strconv.Itoa(i)
			if rng.IntN(3) == 0 {
				text = "word " + strconv.Itoa(rng.IntN(r.alphabet))
			}
			if rng.IntN(8) == 0 {
				text = "rank " + strconv.Itoa(k) + " " + text
			}
			in[k].data[s] = append(in[k].data[s], text+"\n"...)
			in[k].want[s] = append(in[k].want[s], text)
			inLines++
		}
	}
	left := 0
	for k := range in {
		if len(in[k].data[Stdout])+len(in[k].data[Stderr]) > 0 {
			left++
		} else if r.closeRanks {
			m.CloseRank(k)
		}
	}
	for left > 0 {
		k := rng.IntN(r.ranks)
		s := Stream(1 + rng.IntN(2))
		d := in[k].data[s]
		if len(d) == 0 {
			if len(in[k].data[3-s]) == 0 {
				continue
			}
			s = 3 - s
			d = in[k].data[s]
		}
		n := min(len(d), 1+rng.IntN(40))
		if err := m.Write(k, s, t1, d[:n]); err != nil {
			t.Fatal(err)
		}
		in[k].data[s] = d[n:]
		m.mu.Lock()
		err := m.mg.invariants()
		m.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if len(in[k].data[Stdout])+len(in[k].data[Stderr]) == 0 {
			left--
			if r.closeRanks {
				m.CloseRank(k)
			}
		}
		if rng.IntN(20) == 0 {
			m.wait(c, time.Duration(rng.Int64N(int64(r.window))))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Stream{Stdout, Stderr} {
		out := stdout.String()
		if s == Stderr {
			out = stderr.String()
		}
		got, n := expandOutput(t, out)
		outLines += n
		for k := range in {
			if !slices.Equal(got[k], in[k].want[s]) {
				t.Fatalf("%+v: rank %d's %s: got %d lines, want %d\ngot  %q\nwant %q", r, k, s, len(got[k]), len(in[k].want[s]), got[k], in[k].want[s])
			}
			delete(got, k)
		}
		for k := range got {
			t.Fatalf("lines of rank %d, which printed nothing", k)
		}
	}
	return outLines, inLines
}

// Random interleavings of random lines from many ranks: expanding the
// merged output gives every rank's lines, exactly and in order.
func TestMergeProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	var merged bool
	for i := range 300 {
		r := mergeRun{
			ranks:      1 + rng.IntN(12),
			lines:      rng.IntN(60),
			knownRanks: rng.IntN(4) != 0,
			closeRanks: rng.IntN(2) == 0,
			window:     time.Duration(1+rng.IntN(500)) * time.Millisecond,
			alphabet:   1 + rng.IntN(4),
		}
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			out, in := r.check(t, rng)
			merged = merged || out < in
		})
	}
	if !merged {
		t.Fatal("no run merged any line")
	}
}

// FuzzMerge is the merge property for a fuzzer's choice of job and order.
func FuzzMerge(f *testing.F) {
	f.Add(uint64(1), uint8(8), uint8(20), uint8(3))
	f.Add(uint64(2), uint8(1), uint8(5), uint8(0))
	f.Fuzz(func(t *testing.T, seed uint64, ranks, lines, flags uint8) {
		r := mergeRun{
			ranks:      1 + int(ranks%16),
			lines:      int(lines % 64),
			knownRanks: flags&1 != 0,
			closeRanks: flags&2 != 0,
			window:     time.Duration(1+flags>>2) * time.Millisecond,
			alphabet:   1 + int(flags>>4),
		}
		r.check(t, rand.New(rand.NewPCG(seed, uint64(flags))))
	})
}

// Ranks in lockstep from goroutines, with the real clock and a short
// window: every rank's lines arrive once, in order, and many merged.
func TestMergeConcurrent(t *testing.T) {
	t.Parallel()
	const ranks, lines = 8, 2000
	var stdout syncBuffer
	m := newMux(t, Options{Merge: true, Tag: true, Ranks: ranks, Stdout: &stdout, MergeWindow: 5 * time.Millisecond,
		FlushDelay: time.Hour})
	var wg sync.WaitGroup
	want := make([][]string, ranks)
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer m.CloseRank(r)
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			var data []byte
			for i := range lines {
				text := "step " + strconv.Itoa(i)
				if i%2 == 1 {
					text = "rank " + strconv.Itoa(r) + " line " + strconv.Itoa(i)
				}
				data = append(data, text+"\n"...)
				want[r] = append(want[r], text)
			}
			for len(data) > 0 {
				n := min(len(data), 1+rng.IntN(300))
				if err := m.Write(r, Stdout, time.Time{}, data[:n]); err != nil {
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
	got, n := expandOutput(t, stdout.String())
	for r := range ranks {
		if !slices.Equal(got[r], want[r]) {
			t.Fatalf("rank %d: %d lines, want %d", r, len(got[r]), len(want[r]))
		}
	}
	t.Logf("%d lines of %d ranks in %d output lines", ranks*lines, ranks, n)
	if n >= ranks*lines {
		t.Errorf("%d output lines for %d input lines: nothing merged", n, ranks*lines)
	}
}

// invariants checks the merger's structure: labels grow along the queue,
// every chain and text list is in queue order, no group holds a rank
// twice, and the counts add up.
func (mg *merger) invariants() error {
	n, lines := 0, 0
	var prev *group
	for g := mg.head; g != nil; g = g.next {
		if g.prev != prev || prev != nil && prev.label >= g.label {
			return fmt.Errorf("queue broken at %q", g.text)
		}
		seen := map[int]bool{}
		for _, r := range g.ranks {
			if seen[r] {
				return fmt.Errorf("group %q holds rank %d twice", g.text, r)
			}
			seen[r] = true
		}
		lines += len(g.ranks)
		prev = g
		n++
	}
	if mg.tail != prev {
		return fmt.Errorf("tail is not the last group")
	}
	for k, q := range mg.chains {
		for i := 1; i < q.len(); i++ {
			if q.at(i-1).label >= q.at(i).label {
				return fmt.Errorf("chain of %v out of order at %d: %q then %q", k, i, q.at(i-1).text, q.at(i).text)
			}
		}
	}
	for _, m := range mg.byText[1:] {
		for text, l := range m {
			for i := 1; i < len(l); i++ {
				if l[i-1].label >= l[i].label {
					return fmt.Errorf("list of %q out of order", text)
				}
			}
		}
	}
	if lines != mg.lines {
		return fmt.Errorf("%d lines counted, %d held", mg.lines, lines)
	}
	return nil
}

// Groups put between the same two again and again relabel the queue and
// keep their order.
func TestMergeRelabel(t *testing.T) {
	t.Parallel()
	mg := newMerger(time.Hour, 2, nil)
	first, last := &group{text: "first"}, &group{text: "last"}
	mg.insert(first, nil)
	mg.insert(last, first)
	var want []*group
	for i := range 200 {
		g := &group{text: strconv.Itoa(i)}
		mg.insert(g, first) // each goes right after first
		want = append([]*group{g}, want...)
	}
	want = append(append([]*group{first}, want...), last)
	var got []*group
	for g := mg.head; g != nil; g = g.next {
		if g.prev != nil && g.prev.label >= g.label {
			t.Fatalf("labels out of order at %q: %d then %d", g.text, g.prev.label, g.label)
		}
		got = append(got, g)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("queue out of order")
	}
	if last.label == 2*labelGap {
		t.Fatalf("last's label %d: the queue was never relabelled", last.label)
	}
}

// BenchmarkMuxMerge writes the same chunk of whole lines from 16 ranks in
// turn: with Merge the lines of all 16 become one; "apart" gives each rank
// lines of its own, which wait until the bound on lines held pushes them
// out.
func BenchmarkMuxMerge(b *testing.B) {
	const ranks = 16
	var base []byte
	for i := 0; len(base) < 4096; i++ {
		base = fmt.Appendf(base, "step %6d loss=%.6f acc=%.4f some more text here\n", i, 1/float64(i+1), float64(i%100)/100)
	}
	for _, bc := range []struct {
		name  string
		merge bool
		apart bool
	}{
		{"plain", false, false},
		{"merge/alike", true, false},
		{"merge/apart", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			chunks := make([][]byte, ranks)
			for r := range chunks {
				chunks[r] = base
				if bc.apart {
					chunks[r] = bytes.ReplaceAll(base, []byte("step"), []byte("rank"+strconv.Itoa(r)))
				}
			}
			m := newMux(b, Options{Tag: true, Merge: bc.merge, Ranks: ranks, Stdout: io.Discard, Stderr: io.Discard})
			defer m.Close()
			b.SetBytes(int64(ranks * len(base)))
			now := time.Now()
			for b.Loop() {
				for r := range ranks {
					m.Write(r, Stdout, now, chunks[r])
				}
			}
		})
	}
}

// The flusher writes a line alone once its window passes, with the real
// clock, also after other lines went out complete.
func TestMergeWindowFlusher(t *testing.T) {
	t.Parallel()
	var stdout syncBuffer
	m := newMux(t, Options{Merge: true, Ranks: 2, Stdout: &stdout, MergeWindow: 30 * time.Millisecond})
	defer m.Close()
	start := time.Now()
	m.Write(0, Stdout, start, []byte("a\n"))
	m.Write(1, Stdout, start, []byte("a\n"))
	if got := stdout.String(); got != "[0,1] a\n" {
		t.Fatalf("stdout = %q, want the line of both at once", got)
	}
	m.Write(0, Stdout, start, []byte("b\n"))
	waitFor(t, "rank 0's line alone", func() bool { return stdout.String() == "[0,1] a\n[0] b\n" })
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("rank 0's line alone came after %v, before its window", d)
	}
}
