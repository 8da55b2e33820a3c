package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func readTestLines(t testing.TB, name string) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

func TestParsePMILineTranscript(t *testing.T) {
	for _, l := range readTestLines(t, "pmi-requests.txt") {
		want, line, ok := strings.Cut(l, "\t")
		if !ok {
			t.Fatalf("bad testdata line %q", l)
		}
		t.Run(want, func(t *testing.T) {
			m, err := ParsePMILine(line + "\n")
			if err != nil {
				t.Fatalf("ParsePMILine(%q): %v", line, err)
			}
			if m.Cmd != want {
				t.Errorf("ParsePMILine(%q).Cmd = %q, want %q", line, m.Cmd, want)
			}
			if n := len(strings.Fields(line)) - 1; len(m.Args) != n {
				t.Errorf("ParsePMILine(%q) has %d args, want %d", line, len(m.Args), n)
			}
		})
	}
}

func TestParsePMILineArgs(t *testing.T) {
	m, err := ParsePMILine("cmd=put kvsname=k key=-allgather-shm-1-1 value=segments=2\n")
	if err != nil {
		t.Fatal(err)
	}
	if m.Args["key"] != "-allgather-shm-1-1" || m.Args["value"] != "segments=2" || m.Args["kvsname"] != "k" {
		t.Errorf("args = %v", m.Args)
	}
	m, err = ParsePMILine("cmd=abort exitcode=-3")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.Int("exitcode"); err != nil || n != -3 {
		t.Errorf("Int(exitcode) = %d, %v", n, err)
	}
	if _, err := m.Int("missing"); err == nil {
		t.Error("Int of a missing key succeeded")
	}
}

func TestParsePMILineBad(t *testing.T) {
	bad := readTestLines(t, "pmi-bad.txt")
	bad = append(bad, "cmd=init\r", "cmd=init\x00", "cmd=x"+strings.Repeat(" a=b", PMIMaxTokens), "cmd="+strings.Repeat("x", 32))
	for _, l := range bad {
		if m, err := ParsePMILine(l); err == nil {
			t.Errorf("ParsePMILine(%q) = %+v, want an error", l, m)
		} else if !errors.Is(err, ErrPMISyntax) {
			t.Errorf("ParsePMILine(%q) error %v does not wrap ErrPMISyntax", l, err)
		}
	}
}

func FuzzParsePMILine(f *testing.F) {
	for _, l := range readTestLines(f, "pmi-requests.txt") {
		_, line, _ := strings.Cut(l, "\t")
		f.Add(line)
	}
	for _, l := range readTestLines(f, "pmi-bad.txt") {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParsePMILine(line)
		if err != nil {
			return
		}
		if !isPMIName(m.Cmd) {
			t.Fatalf("accepted command name %q", m.Cmd)
		}
		for k, v := range m.Args {
			if k == "" || strings.ContainsAny(k+v, " \n\r\x00") {
				t.Fatalf("bad token %q=%q", k, v)
			}
		}
	})
}

// FuzzPMIServer feeds arbitrary bytes to a PMIServer connection: it must
// answer or close, never panic or hang.
func FuzzPMIServer(f *testing.F) {
	for _, l := range readTestLines(f, "pmi-session.txt") {
		if r, ok := strings.CutPrefix(l, "-> "); ok {
			f.Add([]byte(r + "\n"))
		}
	}
	f.Add([]byte("mcmd=spawn\nnprocs=1\nendcmd\ncmd=get_maxes\n"))
	f.Add([]byte(strings.Repeat("x", 5000)))
	f.Add([]byte("cmd=initack pmiid=0\n"))
	// The bounds of the security review (3f): a multi-line command cut
	// short, and one of more than 4096 lines.
	f.Add([]byte("mcmd=spawn\nnprocs=2\n"))
	f.Add(append([]byte("mcmd=spawn\n"), bytes.Repeat([]byte("arg=1\n"), 5000)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		st, _ := NewStore(1, StoreOptions{FenceTimeout: time.Second})
		s, err := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeConn(context.Background(), a, 0)
		}()
		go func() { // drain replies
			bufio.NewReader(b).WriteTo(discard{})
		}()
		b.SetDeadline(time.Now().Add(5 * time.Second))
		b.Write(in)
		b.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("server did not return after the client closed")
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// pmiClient is a fake MPICH client on one end of a pipe.
type pmiClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func newPMIClient(t *testing.T, c net.Conn) *pmiClient {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &pmiClient{t: t, c: c, r: bufio.NewReader(c)}
}

func (p *pmiClient) send(line string) {
	p.t.Helper()
	if _, err := p.c.Write([]byte(line + "\n")); err != nil {
		p.t.Fatalf("write %q: %v", line, err)
	}
}

func (p *pmiClient) recv() (string, error) {
	l, err := p.r.ReadString('\n')
	return strings.TrimSuffix(l, "\n"), err
}

func (p *pmiClient) call(line string) string {
	p.t.Helper()
	p.send(line)
	r, err := p.recv()
	if err != nil {
		p.t.Fatalf("reply to %q: %v", line, err)
	}
	return r
}

// TestPMIServerSessionReplay replays sessions of one rank (local rank 0 of
// 4, kvsname kvs_gorun_1, PMI_process_mapping (vector,(0,1,4))) from
// testdata: "-> request" lines, each followed by its exact "<- reply"
// lines (none for abort).
func TestPMIServerSessionReplay(t *testing.T) {
	tests := []struct {
		file     string
		rank     Budget
		job      Budget
		want     map[string]string // in the store afterwards
		refusals int               // lines the server logs
	}{
		{file: "pmi-session.txt", want: map[string]string{"-bcast-1-0": "2F6465762F73686D"}},
		{file: "pmi-budget-rank.txt", rank: Budget{Keys: 2, Bytes: 40, Setting: "--kv-rank-budget"},
			want: map[string]string{"a": "x", "c": "shorter", "b": ""}, refusals: 1},
		{file: "pmi-budget-job.txt", job: Budget{Keys: 3, Bytes: 100, Setting: "--kv-job-budget"},
			want: map[string]string{"a": "012345678", "c": "1", "b": "", "d": ""}, refusals: 1},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			st, _ := NewStore(1, StoreOptions{})
			var mu sync.Mutex
			var logged []string
			s, err := NewPMIServer(PMIConfig{Size: 4, Ranks: []int{0}, KVSName: "kvs_gorun_1",
				ProcessMapping: "(vector,(0,1,4))", Fencer: st.Member(0, 0), RankBudget: tt.rank, JobBudget: tt.job,
				Logf: func(format string, args ...any) {
					mu.Lock()
					logged = append(logged, fmt.Sprintf(format, args...))
					mu.Unlock()
				}})
			if err != nil {
				t.Fatal(err)
			}
			a, b := net.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- s.ServeConn(context.Background(), a, 0) }()
			c := newPMIClient(t, b)
			lines := readTestLines(t, tt.file)
			for i := 0; i < len(lines); i++ {
				req, ok := strings.CutPrefix(lines[i], "-> ")
				if !ok {
					t.Fatalf("testdata line %q is not a request", lines[i])
				}
				c.send(req)
				for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "<- ") {
					i++
					got, err := c.recv()
					if want := strings.TrimPrefix(lines[i], "<- "); err != nil || got != want {
						t.Errorf("after %q: got %q (%v), want %q", req, got, err, want)
					}
				}
			}
			b.Close()
			if err := <-errc; err != nil {
				t.Errorf("ServeConn: %v", err)
			}
			for k, want := range tt.want {
				if v, ok := st.Get(0, k); v != want || ok != (want != "") {
					t.Errorf("store has %s = %q, %v; want %q", k, v, ok, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			var refusals []string
			for _, l := range logged {
				if strings.Contains(l, "refused") {
					refusals = append(refusals, l)
				}
			}
			if len(refusals) != tt.refusals {
				t.Errorf("the server logged %d refusals, want %d (the first of each rank): %q", len(refusals), tt.refusals, refusals)
			}
		})
	}
}

func TestPMIServerInitack(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	s, _ := NewPMIServer(PMIConfig{Size: 4, Ranks: []int{2}, Fencer: st.Member(0, 0)})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, l)

	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := newPMIClient(t, conn)
	c.send("cmd=initack pmiid=2")
	var got []string
	for range 4 {
		r, err := c.recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []string{"cmd=initack", "cmd=set size=4", "cmd=set rank=2", "cmd=set debug=0"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("initack replies %q, want %q", got, want)
	}
	if r := c.call("cmd=init pmi_version=1 pmi_subversion=1"); r != "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0" {
		t.Errorf("init reply %q", r)
	}
	if r := c.call("cmd=barrier_in"); r != "cmd=barrier_out" {
		t.Errorf("barrier reply %q", r)
	}

	// An unknown pmiid, and a request before initack, are refused.
	for _, first := range []string{"cmd=initack pmiid=3", "cmd=init pmi_version=1 pmi_subversion=1"} {
		conn2, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c2 := newPMIClient(t, conn2)
		if r := c2.call(first); !strings.Contains(r, "rc=-1") {
			t.Errorf("%q got %q", first, r)
		}
		if _, err := c2.recv(); err == nil {
			t.Errorf("connection stays open after %q", first)
		}
		conn2.Close()
	}
}

func TestPMIServerRobustness(t *testing.T) {
	cases := []struct {
		name, in string
		reply    string // prefix of the expected reply; "" for none
	}{
		{"too long", "cmd=put kvsname=kvs_gorun_0 key=k value=" + strings.Repeat("A", 2000), "cmd=error rc=-1 msg=line_too_long"},
		{"malformed", "hello world", "cmd=error rc=-1 msg=malformed_line"},
		{"binary", "\x00\x01\x02", "cmd=error rc=-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := NewStore(1, StoreOptions{})
			var early []int
			var mu sync.Mutex
			s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0),
				OnEarlyExit: func(r int) { mu.Lock(); early = append(early, r); mu.Unlock() }})
			a, b := net.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- s.ServeConn(context.Background(), a, 0) }()
			c := newPMIClient(t, b)
			go b.Write([]byte(tc.in + "\n"))
			r, _ := c.recv()
			if !strings.HasPrefix(r, tc.reply) {
				t.Errorf("reply %q, want prefix %q", r, tc.reply)
			}
			if _, err := c.recv(); err == nil {
				t.Error("connection not closed")
			}
			if err := <-errc; err == nil {
				t.Error("ServeConn returned no error")
			}
			if len(early) != 0 {
				t.Errorf("OnEarlyExit called for a connection the server closed: %v", early)
			}
		})
	}
}

// Attack 3f of the security review, the PMI-1 server's bounds: a line
// that never ends is refused after one buffer (the server reads 4 KiB of
// it, not the 1 MiB sent), and a multi-line command that never ends is
// refused after 4096 lines. net.Pipe is unbuffered, so what the client
// could write is exactly what the server read.
func TestPMIServerBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    []byte
		reply string // prefix of the reply; "" = none
		err   string // in ServeConn's error
		most  int    // bytes the server may read
	}{
		{"1 MiB line", bytes.Repeat([]byte("x"), 1<<20), "cmd=error rc=-1 msg=line_too_long", "PMI line longer than 1024 bytes", 8 << 10},
		{"endless mcmd", append([]byte("mcmd=spawn\n"), bytes.Repeat([]byte("arg=1\n"), 1<<20)...), "", "mcmd=spawn block without endcmd", 64 << 10},
		{"long mcmd line", append([]byte("mcmd=spawn\n"), bytes.Repeat([]byte("y"), 1<<20)...), "", "line too long", 8 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, _ := NewStore(1, StoreOptions{})
			s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0)})
			a, b := net.Pipe()
			errc := make(chan error, 1)
			go func() { errc <- s.ServeConn(context.Background(), a, 0) }()
			replies := make(chan string, 1)
			go func() {
				r, _ := bufio.NewReader(b).ReadString('\n')
				replies <- r
			}()
			b.SetDeadline(time.Now().Add(10 * time.Second))
			n, _ := b.Write(tt.in)
			if n > tt.most {
				t.Errorf("the server read %d bytes; want at most %d", n, tt.most)
			}
			select {
			case err := <-errc:
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("ServeConn: %v, want %q", err, tt.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server did not end the connection")
			}
			if r := <-replies; !strings.HasPrefix(r, tt.reply) {
				t.Errorf("reply %q, want %q", r, tt.reply)
			}
		})
	}
}

func TestPMIServerSpawnRefused(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0)})
	a, b := net.Pipe()
	go s.ServeConn(context.Background(), a, 0)
	c := newPMIClient(t, b)
	go b.Write([]byte("mcmd=spawn\nnprocs=2\nexecname=/bin/true\nendcmd\n"))
	if r, err := c.recv(); err != nil || r != "cmd=spawn_result rc=-1 msg=not_supported" {
		t.Errorf("spawn reply %q, %v", r, err)
	}
	if r := c.call("cmd=get_appnum"); r != "cmd=appnum appnum=0" {
		t.Errorf("stream out of sync after spawn: %q", r)
	}
	b.Close()
}

// TestPMIServerEarlyExitFailsBarrier: rank 1 closes before finalize while
// rank 0 waits in a barrier; rank 0's barrier fails (connection closed) at
// once, and OnEarlyExit names rank 1.
func TestPMIServerEarlyExitFailsBarrier(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	early := make(chan int, 2)
	fenceErr := make(chan error, 2)
	s, _ := NewPMIServer(PMIConfig{Size: 2, Ranks: []int{0, 1}, Fencer: st.Member(0, 0),
		OnEarlyExit:  func(r int) { early <- r },
		OnFenceError: func(err error) { fenceErr <- err }})
	a0, b0 := net.Pipe()
	a1, b1 := net.Pipe()
	go s.ServeConn(context.Background(), a0, 0)
	go s.ServeConn(context.Background(), a1, 1)
	c0, c1 := newPMIClient(t, b0), newPMIClient(t, b1)
	c1.call("cmd=init pmi_version=1 pmi_subversion=1")
	c0.send("cmd=barrier_in")
	time.Sleep(20 * time.Millisecond)
	b1.Close()
	if r, err := c0.recv(); err == nil {
		t.Errorf("rank 0 got %q instead of a closed connection", r)
	}
	if r := <-early; r != 1 {
		t.Errorf("OnEarlyExit(%d), want 1", r)
	}
	if err := <-fenceErr; !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("fence error %v does not name rank 1", err)
	}
	select {
	case r := <-early:
		t.Errorf("OnEarlyExit(%d) called for the dropped rank", r)
	case <-time.After(50 * time.Millisecond):
	}
	s.Close()
}

func TestPMIServerAbort(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	type ab struct {
		rank, code int
		msg        string
	}
	got := make(chan ab, 1)
	s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0),
		OnAbort:     func(r, c int, m string) { got <- ab{r, c, m} },
		OnEarlyExit: func(r int) { t.Errorf("OnEarlyExit(%d) after abort", r) }})
	a, b := net.Pipe()
	errc := make(chan error, 1)
	go func() { errc <- s.ServeConn(context.Background(), a, 0) }()
	c := newPMIClient(t, b)
	c.send("cmd=abort exitcode=7 error_msg=application called MPI_Abort")
	if g := <-got; g.rank != 0 || g.code != 7 || g.msg != "application called MPI_Abort" {
		t.Errorf("OnAbort%+v", g)
	}
	// No reply: the connection stays open and silent.
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if r, err := c.recv(); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reply to abort: %q, %v", r, err)
	}
	b.Close()
	if err := <-errc; err != nil {
		t.Errorf("ServeConn: %v", err)
	}
}

func TestProcessMapping(t *testing.T) {
	for _, tc := range []struct {
		counts []int
		want   string
	}{
		{[]int{4}, "(vector,(0,1,4))"},
		{[]int{1}, "(vector,(0,1,1))"},
		{[]int{2, 2}, "(vector,(0,2,2))"},
		{[]int{1, 3}, "(vector,(0,1,1),(1,1,3))"},
		{[]int{4, 4, 2}, "(vector,(0,2,4),(2,1,2))"},
		{[]int{2, 0, 2}, "(vector,(0,2,2))"},
	} {
		got, err := ProcessMapping(tc.counts)
		if err != nil || got != tc.want {
			t.Errorf("ProcessMapping(%v) = %q, %v; want %q", tc.counts, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		nodeOf []int
		want   string
	}{
		{[]int{0, 1, 0, 1}, "(vector,(0,2,1))"},
		{[]int{0, 1, 2, 0, 1, 2}, "(vector,(0,3,1))"},
		{[]int{0, 1, 0}, "(vector,(0,2,1),(0,1,1))"},
		{[]int{0, 0, 1, 1, 0, 0, 1, 1}, "(vector,(0,2,2))"},
	} {
		got, err := ProcessMappingOf(tc.nodeOf)
		if err != nil || got != tc.want {
			t.Errorf("ProcessMappingOf(%v) = %q, %v; want %q", tc.nodeOf, got, err, tc.want)
		}
	}
	if _, err := ProcessMapping(nil); err == nil {
		t.Error("ProcessMapping(nil) succeeded")
	}
	if _, err := ProcessMapping([]int{-1}); err == nil {
		t.Error("ProcessMapping([-1]) succeeded")
	}
}

// TestParseProcessMapping checks the parser against MPICH's reading of the
// values in ../reference (wrap-around included) and round-trips placements.
func TestParseProcessMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		size int
		want []int
	}{
		{"(vector,(0,1,4))", 4, []int{0, 0, 0, 0}},
		{"(vector,(0,2,2))", 4, []int{0, 0, 1, 1}},
		{"(vector,(0,3,1))", 7, []int{0, 1, 2, 0, 1, 2, 0}},
		{"(vector,(0,1,1),(1,1,3))", 4, []int{0, 1, 1, 1}},
	} {
		got, err := ParseProcessMapping(tc.in, tc.size)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseProcessMapping(%q, %d) = %v, %v; want %v", tc.in, tc.size, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "(vector)", "(vector,(0,1))", "(vector,(0,0,1))", "(vector,(0,1,-1))", "vector,(0,1,1)", "(vector,(0,1,1)", "(vector,(0,1,1)x)"} {
		if got, err := ParseProcessMapping(bad, 4); err == nil {
			t.Errorf("ParseProcessMapping(%q) = %v, want an error", bad, got)
		}
	}
	for _, nodeOf := range [][]int{{0}, {0, 0, 1, 1, 2}, {0, 1, 0, 1}, {0, 1, 1, 2, 2, 2}} {
		m, err := ProcessMappingOf(nodeOf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseProcessMapping(m, len(nodeOf))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(nodeOf) {
			t.Errorf("round trip of %v through %q gave %v, %v", nodeOf, m, got, err)
		}
	}
}

// FuzzParseProcessMapping: any input gives nodes or an error, never a
// panic, and the nodes always number size ranks.
func FuzzParseProcessMapping(f *testing.F) {
	f.Add("(vector,(0,2,2))", 4)
	f.Add("(vector,(0,1,1),(1,1,3))", 9)
	f.Fuzz(func(t *testing.T, s string, size int) {
		size = size%5000 + 1
		if size <= 0 {
			size = -size + 1
		}
		got, err := ParseProcessMapping(s, size)
		if err == nil && len(got) != size {
			t.Fatalf("%q: %d nodes for %d ranks", s, len(got), size)
		}
	})
}

// TestPMIServerOps counts a rank's PMI commands, answered or not.
func TestPMIServerOps(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0)})
	a, b := net.Pipe()
	go s.ServeConn(context.Background(), a, 0)
	c := newPMIClient(t, b)
	c.call("cmd=init pmi_version=1 pmi_subversion=1")
	c.call("cmd=get_maxes")
	c.call("cmd=put kvsname=kvs_gorun_0 key=k value=v")
	c.call("cmd=barrier_in")
	c.call("cmd=get kvsname=kvs_gorun_0 key=k")
	c.call("cmd=bogus")
	if n := s.Ops(0); n != 6 {
		t.Errorf("Ops(0) = %d after 6 commands", n)
	}
	if n := s.Ops(1); n != 0 {
		t.Errorf("Ops of a rank not served: %d", n)
	}
	b.Close()
	s.Close()
}

// In a job of several programs (MPMD) each rank's PMI_Get_appnum is its
// program's index; a rank AppNums lacks gets AppNum.
func TestPMIServerAppNums(t *testing.T) {
	st, _ := NewStore(3, StoreOptions{})
	s, err := NewPMIServer(PMIConfig{Size: 3, Ranks: []int{0, 1, 2}, Fencer: st.Member(0, 0), AppNum: 7, AppNums: map[int]int{0: 0, 1: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for rank, want := range []string{"appnum=0", "appnum=1", "appnum=7"} {
		a, b := net.Pipe()
		go s.ServeConn(context.Background(), a, rank)
		c := newPMIClient(t, b)
		if r := c.call("cmd=get_appnum"); r != "cmd=appnum "+want {
			t.Errorf("rank %d: get_appnum: %q, want %q", rank, r, "cmd=appnum "+want)
		}
		b.Close()
	}
}

// A PMI_Spawn_multiple of two programs comes as two mcmd=spawn blocks
// (totspawns=2): Spawn gets both at once, with their arguments (spaces
// kept), infos and the preput keys, and the rank one answer after the
// last block; a refusal's reason travels as one token.
func TestPMIServerSpawn(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	got := make(chan PMISpawn, 2)
	fail := ""
	s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0),
		Spawn: func(rank int, sp PMISpawn) error {
			got <- sp
			if fail != "" {
				return errors.New(fail)
			}
			return nil
		}})
	a, b := net.Pipe()
	go s.ServeConn(context.Background(), a, 0)
	c := newPMIClient(t, b)
	block := func(i int, exe string, args ...string) string {
		s := fmt.Sprintf("mcmd=spawn\nnprocs=%d\nexecname=%s\ntotspawns=2\nspawnssofar=%d\n", i+1, exe, i+1)
		for k, a := range args {
			s += fmt.Sprintf("arg%d=%s\n", k+1, a)
		}
		return s + fmt.Sprintf("argcnt=%d\npreput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$port#1\ninfo_num=1\ninfo_key_0=wdir\ninfo_val_0=/tmp\nendcmd\n", len(args))
	}
	go b.Write([]byte(block(0, "/bin/a", "one arg", "two") + block(1, "/bin/b")))
	if r, err := c.recv(); err != nil || r != "cmd=spawn_result rc=0" {
		t.Fatalf("spawn reply %q, %v", r, err)
	}
	sp := <-got
	want := PMISpawn{Apps: []PMISpawnApp{{Exec: "/bin/a", Args: []string{"one arg", "two"}, NProcs: 1, Info: [][2]string{{"wdir", "/tmp"}}},
		{Exec: "/bin/b", NProcs: 2, Info: [][2]string{{"wdir", "/tmp"}}}}, Preput: map[string]string{"PARENT_ROOT_PORT_NAME": "tag#0$port#1"}}
	if !reflect.DeepEqual(sp, want) {
		t.Errorf("Spawn got %+v\nwant %+v", sp, want)
	}
	fail = "gorun does not serve the info key arch=sparc"
	go b.Write([]byte("mcmd=spawn\nnprocs=1\nexecname=/bin/a\nendcmd\n"))
	if r, err := c.recv(); err != nil || r != "cmd=spawn_result rc=-1 msg=gorun_does_not_serve_the_info_key_arch=sparc" {
		t.Errorf("refused spawn reply %q, %v", r, err)
	}
	<-got
	if r := c.call("cmd=get_appnum"); r != "cmd=appnum appnum=0" {
		t.Errorf("stream out of sync after spawn: %q", r)
	}
	b.Close()
}

// Name publishing goes to Names; its answers are Hydra's.
func TestPMIServerNames(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	names := map[string]string{}
	s, _ := NewPMIServer(PMIConfig{Size: 1, Ranks: []int{0}, Fencer: st.Member(0, 0),
		Names: func(rank int, op, service, port string) (string, error) {
			switch op {
			case "publish":
				names[service] = port
			case "lookup":
				if p, ok := names[service]; ok {
					return p, nil
				}
				return "", fmt.Errorf("%s is not published", service)
			case "unpublish":
				delete(names, service)
			}
			return "", nil
		}})
	a, b := net.Pipe()
	go s.ServeConn(context.Background(), a, 0)
	c := newPMIClient(t, b)
	for _, x := range [][2]string{
		{"cmd=publish_name service=svc port=p#1", "cmd=publish_result info=ok rc=0 msg=success"},
		{"cmd=lookup_name service=svc", "cmd=lookup_result port=p#1 info=ok rc=0 msg=success"},
		{"cmd=unpublish_name service=svc", "cmd=unpublish_result info=ok rc=0 msg=success"},
		{"cmd=lookup_name service=svc", "cmd=lookup_result rc=-1 msg=svc_is_not_published"},
	} {
		if r := c.call(x[0]); r != x[1] {
			t.Errorf("%s: %q, want %q", x[0], r, x[1])
		}
	}
	b.Close()
}
