package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockedInFenceForDump calls Fence, which cannot complete while the
// other rank is absent: the dump must show this function.
func blockedInFenceForDump(ctx context.Context, cl *Client) error { return cl.Fence(ctx) }

// idleForDump waits on ch, the client making no call at all.
func idleForDump(ch chan struct{}) { <-ch }

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func dialT(t *testing.T, path string, rank int) *Client {
	t.Helper()
	cl, err := Dial(context.Background(), path, testSecret, rank)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestKVDump asks a rank for its goroutines while its client is idle and
// while it waits in a Fence that cannot complete, over its own connection;
// the Fence then completes when the other rank comes.
func TestKVDump(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, s := startKV(t, []int{0, 1}, st.Member(0, 0), nil)
	cl := dialT(t, path, 0)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	idle := make(chan struct{})
	go idleForDump(idle)
	waitFor(t, "idleForDump to wait", func() bool { return goroutinesWith("rendezvous.idleForDump(") })
	dump, err := s.Dump(ctx, 0)
	close(idle)
	if err != nil {
		t.Fatalf("Dump of an idle client: %v", err)
	}
	if !strings.Contains(string(dump), "rendezvous.idleForDump(") || !strings.Contains(string(dump), "goroutine ") {
		t.Errorf("the dump of an idle client does not show idleForDump:\n%s", dump)
	}

	fenced := make(chan error, 1)
	go func() { fenced <- blockedInFenceForDump(ctx, cl) }()
	waitFor(t, "rank 0's fence", func() bool { return s.Ops(0) == 1 })
	dump, err = s.Dump(ctx, 0)
	if err != nil {
		t.Fatalf("Dump during a Fence: %v", err)
	}
	if !strings.Contains(string(dump), "rendezvous.blockedInFenceForDump(") {
		t.Errorf("the dump during a Fence does not show blockedInFenceForDump:\n%s", dump)
	}
	if _, err := s.Progress(ctx, 0); err != nil {
		t.Errorf("Progress during a Fence: %v", err)
	}
	select {
	case err := <-fenced:
		t.Fatalf("Fence returned (%v) without rank 1", err)
	default:
	}
	cl1 := dialT(t, path, 1)
	defer cl1.Close()
	if err := cl1.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-fenced; err != nil {
		t.Fatalf("rank 0's Fence after the dumps: %v", err)
	}
	if err := cl.Put("k", "v"); err != nil {
		t.Errorf("Put after the fence: %v", err)
	}
}

// TestKVProgressOpsFinal: Progress round trip, the zero Progress of a
// client that keeps none, the request count, and the final Progress sent
// with the goodbye.
func TestKVProgressOpsFinal(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, s := startKV(t, []int{0}, st.Member(0, 0), nil)
	cl := dialT(t, path, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p, err := s.Progress(ctx, 0); err != nil || !reflect.DeepEqual(p, Progress{}) {
		t.Errorf("Progress without SetProgress: %+v, %v; want the zero Progress", p, err)
	}
	want := Progress{Calls: 3, Arrivals: []Arrival{
		{Comm: "world", Seq: 1, Op: "allreduce", At: 1000},
		{Comm: "world/1.0", Seq: 1, Op: "barrier", At: 2000},
	}}
	var mu sync.Mutex
	cur := want
	cl.SetProgress(func() Progress { mu.Lock(); defer mu.Unlock(); return cur })
	if p, err := s.Progress(ctx, 0); err != nil || !reflect.DeepEqual(p, want) {
		t.Errorf("Progress: %+v, %v; want %+v", p, err, want)
	}

	cl.Put("a", "1")
	cl.Put("b", "2")
	cl.Get("a")
	cl.Get("nope")
	if err := cl.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.Ops(0); n != 5 {
		t.Errorf("Ops(0) = %d after 2 puts, 2 gets and a fence; want 5", n)
	}
	if n := s.Ops(7); n != 0 {
		t.Errorf("Ops of a rank not served: %d", n)
	}

	if _, ok := s.Final(0); ok {
		t.Error("Final before the goodbye")
	}
	mu.Lock()
	cur.Calls = 4
	fin := cur
	mu.Unlock()
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Final(0); !ok || !reflect.DeepEqual(p, fin) {
		t.Errorf("Final after Close: %+v, %v; want %+v", p, ok, fin)
	}
	if _, err := s.Dump(ctx, 0); !errors.Is(err, ErrNoClient) {
		t.Errorf("Dump after the rank's Close: %v, want ErrNoClient", err)
	}
}

// TestKVNoClient: a rank served here but not connected, and one not
// served here, have no client.
func TestKVNoClient(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	_, s := startKV(t, []int{0, 1}, st.Member(0, 0), nil)
	ctx := context.Background()
	for _, r := range []int{1, 7} {
		if _, err := s.Dump(ctx, r); !errors.Is(err, ErrNoClient) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
			t.Errorf("Dump(%d): %v, want ErrNoClient naming the rank", r, err)
		}
		if _, err := s.Progress(ctx, r); !errors.Is(err, ErrNoClient) {
			t.Errorf("Progress(%d): %v, want ErrNoClient", r, err)
		}
	}
}

// TestKVConcurrentRequests: concurrent Dumps and Progresses of one rank
// each get their own answer, while the rank waits in a Fence.
func TestKVConcurrentRequests(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, s := startKV(t, []int{0, 1}, st.Member(0, 0), nil)
	cl := dialT(t, path, 0)
	defer cl.Close()
	want := Progress{Calls: 42, Arrivals: []Arrival{{Comm: "world", Seq: 42, Op: "allgather", At: 7}}}
	cl.SetProgress(func() Progress { return want })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fenceCtx, stopFence := context.WithCancel(ctx)
	defer stopFence()
	go cl.Fence(fenceCtx)
	waitFor(t, "rank 0's fence", func() bool { return s.Ops(0) == 1 })
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				d, err := s.Dump(ctx, 0)
				if err != nil || !strings.HasPrefix(string(d), "goroutine ") {
					t.Errorf("Dump: %.40q, %v", d, err)
				}
				return
			}
			p, err := s.Progress(ctx, 0)
			if err != nil || !reflect.DeepEqual(p, want) {
				t.Errorf("Progress: %+v, %v", p, err)
			}
		}()
	}
	wg.Wait()
}

// TestKVSilentClient: a client that claims to answer but never does makes
// Dump return ctx's error, in time.
func TestKVSilentClient(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	path, s := startKV(t, []int{0}, st.Member(0, 0), nil)
	c := rawHello(t, path, "0", featAnswers)
	go bytesDrain(c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Dump(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dump of a silent client: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Dump of a silent client returned after %v", d)
	}
}

// rawHello connects to path and says hello as rank with features (none
// for an older gorun's client), returning the connection after the OK.
func rawHello(t *testing.T, path, rank string, features ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(encodeFrame(opHello, append([]string{string(testSecret), rank}, features...)...)); err != nil {
		t.Fatal(err)
	}
	if p, err := readFrame(c, 4096); err != nil || p[0] != opOK {
		t.Fatalf("hello: %q, %v", p, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// TestKVOlderClient: a client of an older gorun (no features, a goodbye
// without Progress) is served as before and gets no request.
func TestKVOlderClient(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{})
	early := make(chan int, 1)
	path, s := startKV(t, []int{0}, st.Member(0, 0), func(r int) { early <- r })
	c := rawHello(t, path, "0")
	if _, err := s.Dump(context.Background(), 0); !errors.Is(err, ErrNoClient) {
		t.Errorf("Dump of an older client: %v, want ErrNoClient", err)
	}
	c.Write(encodeFrame(opPut, "k", "v"))
	if p, err := readFrame(c, 4096); err != nil || p[0] != opOK {
		t.Fatalf("put: %q, %v", p, err)
	}
	c.Write(encodeFrame(opBye))
	if p, err := readFrame(c, 4096); err != nil || p[0] != opOK {
		t.Fatalf("bye: %q, %v", p, err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond)
	select {
	case r := <-early:
		t.Errorf("an older client's goodbye reported as the early exit of rank %d", r)
	default:
	}
	if _, ok := s.Final(0); ok {
		t.Error("Final of a goodbye without Progress")
	}
}

// TestKVClientOlderServer: against a server of an older gorun, which
// refuses a hello with features, Dial says hello again without them, and
// Close says goodbye without Progress.
func TestKVClientOlderServer(t *testing.T) {
	t.Parallel()
	dir, err := SocketDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", dir+"/old.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	byes := make(chan int, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					p, err := readFrame(c, 4096)
					if err != nil {
						return
					}
					op, f, _ := decodeFrame(p)
					switch {
					case op == opHello && len(f) != 2: // as an older server's decodeFrame
						c.Write(encodeFrame(opErr, msgHelloExpected))
						return
					case op == opBye:
						byes <- len(f)
						c.Write(encodeFrame(opOK))
						return
					default:
						c.Write(encodeFrame(opOK))
					}
				}
			}()
		}
	}()
	cl, err := Dial(context.Background(), dir+"/old.sock", testSecret, 0)
	if err != nil {
		t.Fatalf("Dial of an older server: %v", err)
	}
	cl.SetProgress(func() Progress { return Progress{Calls: 1} })
	if err := cl.Put("k", "v"); err != nil {
		t.Error(err)
	}
	cl.Close()
	if n := <-byes; n != 0 {
		t.Errorf("goodbye to an older server with %d fields, want 0", n)
	}
}

// TestKVClientGoroutines: Close ends the client's goroutines and the
// server's for its connection; a client whose Fence stopped waiting still
// answers until then.
func TestKVClientGoroutines(t *testing.T) {
	st, _ := NewStore(1, StoreOptions{})
	path, s := startKV(t, []int{0, 1}, st.Member(0, 0), nil)
	cl := dialT(t, path, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Dump(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer fcancel()
	if err := cl.Fence(fctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fence: %v, want deadline exceeded", err)
	}
	if err := cl.Put("k", "v"); err == nil {
		t.Error("Put after an abandoned Fence succeeded")
	}
	if _, err := s.Progress(ctx, 0); err != nil {
		t.Errorf("Progress after an abandoned Fence: %v", err)
	}
	if !goroutinesWith("rendezvous.(*Client).read") {
		t.Fatal("no reader goroutine to look for")
	}
	cl.Close()
	waitFor(t, "the client's and its connection's goroutines to end", func() bool {
		return !goroutinesWith("rendezvous.(*Client)", "rendezvous.(*kvConn)", "rendezvous.(*KVServer).ServeConn")
	})
}

// goroutinesWith reports whether a goroutine's stack mentions any of
// names.
func goroutinesWith(names ...string) bool {
	buf := make([]byte, 1<<20)
	all := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "goroutinesWith") {
			continue
		}
		for _, n := range names {
			if strings.Contains(g, n) {
				return true
			}
		}
	}
	return false
}

func TestStacksTruncated(t *testing.T) {
	t.Parallel()
	b := stacks(1000)
	if len(b) != 1000 || !strings.Contains(string(b), "truncated") {
		t.Errorf("stacks(1000): %d bytes ending %q", len(b), b[max(0, len(b)-80):])
	}
	if b := stacks(MaxDump); strings.Contains(string(b), "... truncated") || !strings.Contains(string(b), "TestStacksTruncated") {
		t.Errorf("stacks(MaxDump) truncated or without this test's goroutine")
	}
}

func TestMarshalProgressLimit(t *testing.T) {
	t.Parallel()
	p := Progress{Calls: 9}
	for i := range 100 {
		p.Arrivals = append(p.Arrivals, Arrival{Comm: "world", Seq: uint64(i + 1), Op: "barrier", At: int64(i)})
	}
	b := marshalProgress(p, 1000)
	if len(b) > 1000 || !strings.Contains(string(b), `"seq":100,`) || strings.Contains(string(b), `"seq":1,`) {
		t.Errorf("marshalProgress(limit 1000): %d bytes %s; want the newest arrivals within the limit", len(b), b)
	}
	if b := marshalProgress(p, 10); string(b) != `{"calls":9}` {
		t.Errorf("marshalProgress(limit 10) = %s", b)
	}
}
