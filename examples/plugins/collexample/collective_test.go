package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gorun/gorun/plugins/sdk"
)

// lostWithin bounds how long the ranks may take to see a peer go away.
const lostWithin = 5 * time.Second

// group makes size collectives on loopback, as ranks 0 to size-1, joins
// them concurrently and closes them when the test ends.
func group(t *testing.T, size int) []*collective {
	t.Helper()
	cs := make([]*collective, size)
	handles := make([][]byte, size)
	for r := range cs {
		sc, err := newCollective(sdk.Config{Rank: r, Size: size, LocalRank: r})
		if err != nil {
			t.Fatalf("rank %d: newCollective: %v", r, err)
		}
		cs[r] = sc.(*collective)
		t.Cleanup(func() { _ = sc.Close() })
		handles[r] = sc.Handle()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = c.Join(ctx, handles) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Join: %v", r, err)
		}
	}
	return cs
}

// wait polls req, as the SDK's progress loop does, until it is done or
// limit passed.
func wait(t *testing.T, req sdk.Request, limit time.Duration) (n int, err error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, n, err := req.Test()
		if done {
			return n, err
		}
		if time.Now().After(deadline) {
			t.Fatalf("request not done after %v", limit)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func allreduceOp(dtype string, count, rank, size int) sdk.Op {
	return sdk.Op{Kind: "allreduce", DType: dtype, RedOp: "sum", Count: count, Rank: rank, Size: size}
}

// scales are the magnitudes of the test inputs.
var scales = []float64{1e-6, 1e-3, 1, 1e3, 1e6}

// input returns rank's input of count elements of dtype, as bytes: values
// of varied signs and magnitudes, so that the order of the additions shows
// in the rounding.
func input(dtype string, count, rank int) []byte {
	rng := rand.New(rand.NewPCG(uint64(rank), uint64(count)))
	var b []byte
	for range count {
		v := (rng.Float64() - 0.5) * scales[rng.IntN(len(scales))]
		if dtype == "float32" {
			b = binary.NativeEndian.AppendUint32(b, math.Float32bits(float32(v)))
		} else {
			b = binary.NativeEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

// serialSum is the expected result: the element-wise sum of inputs in rank
// order, in dtype's arithmetic, written independently of the plugin's code.
func serialSum(dtype string, inputs [][]byte) []byte {
	out := make([]byte, len(inputs[0]))
	if dtype == "float32" {
		for i := range len(out) / 4 {
			var acc float32
			for r, in := range inputs {
				v := math.Float32frombits(binary.NativeEndian.Uint32(in[4*i:]))
				if r == 0 {
					acc = v
				} else {
					acc += v
				}
			}
			binary.NativeEndian.PutUint32(out[4*i:], math.Float32bits(acc))
		}
		return out
	}
	for i := range len(out) / 8 {
		var acc float64
		for r, in := range inputs {
			v := math.Float64frombits(binary.NativeEndian.Uint64(in[8*i:]))
			if r == 0 {
				acc = v
			} else {
				acc += v
			}
		}
		binary.NativeEndian.PutUint64(out[8*i:], math.Float64bits(acc))
	}
	return out
}

// TestAllreduce checks results bit for bit against a serial sum in rank
// order, for 1 to 4 ranks, both element types, in place and not.
func TestAllreduce(t *testing.T) {
	counts := []int{1, 7, 1000, 1 << 20}
	if testing.Short() {
		counts = counts[:3]
	}
	for size := 1; size <= 4; size++ {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			cs := group(t, size)
			for _, dtype := range []string{"float32", "float64"} {
				for _, count := range counts {
					for _, inPlace := range []bool{false, true} {
						name := fmt.Sprintf("%s/count=%d/inplace=%v", dtype, count, inPlace)
						t.Run(name, func(t *testing.T) {
							runAllreduce(t, cs, dtype, count, inPlace)
						})
					}
				}
			}
		})
	}
}

func runAllreduce(t *testing.T, cs []*collective, dtype string, count int, inPlace bool) {
	t.Helper()
	size := len(cs)
	inputs, want := cases.get(dtype, count, size)
	recvs := make([][]byte, size)
	reqs := make([]sdk.Request, size)
	for r, c := range cs {
		send := bytes.Clone(inputs[r])
		recv := send
		if !inPlace {
			recv = make([]byte, len(send))
		}
		recvs[r] = recv
		req, err := c.Start(allreduceOp(dtype, count, r, size), send, recv)
		if err != nil {
			t.Fatalf("rank %d: Start: %v", r, err)
		}
		reqs[r] = req
	}
	for r, req := range reqs {
		n, err := wait(t, req, 60*time.Second)
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if n != len(want) {
			t.Errorf("rank %d: n = %d, want %d", r, n, len(want))
		}
		if !bytes.Equal(recvs[r], want) {
			t.Errorf("rank %d: result differs from the serial sum (first differing byte %d)", r, firstDiff(recvs[r], want))
		}
	}
}

// caseCache holds the inputs and expected results of TestAllreduce, which
// are costly to make under the race detector and shared by its subtests.
type caseCache struct {
	mu     sync.Mutex
	inputs map[string][]byte // by dtype, count and rank
	sums   map[string][]byte // by dtype, count and size
}

var cases = caseCache{inputs: map[string][]byte{}, sums: map[string][]byte{}}

// get returns the inputs of ranks 0 to size-1 and their serial sum.
func (cc *caseCache) get(dtype string, count, size int) (inputs [][]byte, want []byte) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for r := range size {
		key := fmt.Sprint(dtype, count, r)
		in, ok := cc.inputs[key]
		if !ok {
			in = input(dtype, count, r)
			cc.inputs[key] = in
		}
		inputs = append(inputs, in)
	}
	key := fmt.Sprint(dtype, count, size)
	want, ok := cc.sums[key]
	if !ok {
		want = serialSum(dtype, inputs)
		cc.sums[key] = want
	}
	return inputs, want
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestAllreduceQueued starts several operations on every rank before
// polling any, with the ranks starting them at different moments, and
// checks that they run in order.
func TestAllreduceQueued(t *testing.T) {
	const size, ops = 3, 8
	cs := group(t, size)
	type started struct {
		req        sdk.Request
		recv, want []byte
	}
	all := make([][]started, size)
	wants := make([][]byte, ops)
	for k := range ops {
		dtype := []string{"float32", "float64"}[k%2]
		count := 1 + 37*k
		ins := make([][]byte, size)
		for r := range ins {
			ins[r] = input(dtype, count, r+10*k)
		}
		wants[k] = serialSum(dtype, ins)
		for r, c := range cs {
			recv := make([]byte, len(ins[r]))
			req, err := c.Start(allreduceOp(dtype, count, r, size), ins[r], recv)
			if err != nil {
				t.Fatalf("rank %d op %d: Start: %v", r, k, err)
			}
			all[r] = append(all[r], started{req, recv, wants[k]})
		}
	}
	for r := range all {
		for k, s := range all[r] {
			if _, err := wait(t, s.req, 30*time.Second); err != nil {
				t.Fatalf("rank %d op %d: %v", r, k, err)
			}
			if !bytes.Equal(s.recv, s.want) {
				t.Errorf("rank %d op %d: wrong result", r, k)
			}
		}
	}
}

// TestDeclines checks that everything but an allreduce sum of float32 or
// float64 with at least one element is declined, before and after Join.
func TestDeclines(t *testing.T) {
	declined := []sdk.Op{
		{Kind: "allreduce", DType: "float32", RedOp: "prod", Count: 4},
		{Kind: "allreduce", DType: "float64", RedOp: "max", Count: 4},
		{Kind: "allreduce", DType: "float32", RedOp: "avg", Count: 4},
		{Kind: "allreduce", DType: "int32", RedOp: "sum", Count: 4},
		{Kind: "allreduce", DType: "bfloat16", RedOp: "sum", Count: 4},
		{Kind: "broadcast", DType: "float32", Count: 4},
		{Kind: "reduce", DType: "float32", RedOp: "sum", Count: 4},
		{Kind: "reducescatter", DType: "float64", RedOp: "sum", Count: 4},
		{Kind: "allgather", DType: "float64", Count: 4},
		{Kind: "allreduce", DType: "float32", RedOp: "sum", Count: 0},
		{Kind: "allreduce", DType: "float64", RedOp: "sum", Count: -1},
		{Kind: "allreduce", DType: "float64", RedOp: "sum", Count: math.MaxInt},
	}
	check := func(t *testing.T, c *collective) {
		for _, op := range declined {
			op.Size = 2
			buf := make([]byte, 64)
			req, err := c.Start(op, buf, buf)
			if !errors.Is(err, sdk.ErrDeclined) || req != nil {
				t.Errorf("Start(%+v) = %v, %v; want nil, ErrDeclined", op, req, err)
			}
		}
	}
	t.Run("before Join", func(t *testing.T) {
		sc, err := newCollective(sdk.Config{Rank: -1, Size: -1, LocalRank: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		check(t, sc.(*collective))
	})
	t.Run("after Join", func(t *testing.T) {
		cs := group(t, 2)
		for _, c := range cs {
			check(t, c)
		}
		if got := cs[0].declined.Load(); got != int64(len(declined)) {
			t.Errorf("declined count = %d, want %d", got, len(declined))
		}
		if got := cs[0].ran.Load(); got != 0 {
			t.Errorf("ran count = %d, want 0", got)
		}
	})
}

// TestStartErrors checks Start's errors for an operation it claims but
// cannot run.
func TestStartErrors(t *testing.T) {
	sc, err := newCollective(sdk.Config{Rank: 0, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := sc.(*collective)
	buf := make([]byte, 16)
	if _, err := c.Start(allreduceOp("float32", 4, 0, 2), buf, buf); err == nil || errors.Is(err, sdk.ErrDeclined) {
		t.Errorf("Start before Join: err = %v, want an error other than ErrDeclined", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	cs := group(t, 2)
	if _, err := cs[0].Start(allreduceOp("float32", 4, 1, 2), buf, buf); err == nil {
		t.Error("Start with another rank's op: no error")
	}
	if _, err := cs[0].Start(allreduceOp("float32", 4, 0, 3), buf, buf); err == nil {
		t.Error("Start with another size: no error")
	}
	if _, err := cs[0].Start(allreduceOp("float64", 4, 0, 2), buf, buf); err == nil {
		t.Error("Start with too short buffers: no error")
	}
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := cs[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := cs[0].Start(allreduceOp("float32", 4, 0, 2), buf, buf); !errors.Is(err, sdk.ErrClosed) {
		t.Errorf("Start after Close: err = %v, want ErrClosed", err)
	}
}

// TestJoinErrors checks Join's refusals.
func TestJoinErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	newC := func(rank int) *collective {
		sc, err := newCollective(sdk.Config{Rank: rank, Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sc.Close() })
		return sc.(*collective)
	}

	a := newC(0)
	if err := a.Join(ctx, [][]byte{[]byte("127.0.0.1:1"), []byte("127.0.0.1:2")}); err == nil || !strings.Contains(err.Error(), "not among") {
		t.Errorf("Join without own handle: err = %v", err)
	}
	if err := a.Join(ctx, [][]byte{a.Handle()}); err == nil {
		t.Error("second Join: no error")
	}

	b := newC(1)
	if err := b.Join(ctx, [][]byte{b.Handle(), []byte("127.0.0.1:1")}); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("Join at the wrong place: err = %v", err)
	}

	// Rank 0 dials a closed listener.
	c := newC(0)
	dead := newC(1)
	deadHandle := dead.Handle()
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Join(ctx, [][]byte{c.Handle(), deadHandle}); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("Join with a dead peer: err = %v", err)
	}

	// Rank 1 waits for a rank 0 that never comes, until ctx ends.
	d := newC(1)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := d.Join(short, [][]byte{[]byte("127.0.0.1:1"), d.Handle()}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Join with ctx ending: err = %v, want DeadlineExceeded", err)
	}
}

// TestStrayConnection checks that a connection that does not say hello
// does not stop Join.
func TestStrayConnection(t *testing.T) {
	sc, err := newCollective(sdk.Config{Rank: 1, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	conn, err := net.Dial("tcp4", string(sc.Handle()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	sa, err := newCollective(sdk.Config{Rank: 0, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	handles := [][]byte{sa.Handle(), sc.Handle()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = sa.Join(ctx, handles) })
	if err := sc.Join(ctx, handles); err != nil {
		t.Errorf("rank 1: Join: %v", err)
	}
	wg.Wait()
	if errA != nil {
		t.Errorf("rank 0: Join: %v", errA)
	}
}

// TestPeerLost closes one rank while the others are in an allreduce that
// needs its data, and checks that they fail in bounded time with
// ErrPeerLost naming that rank, that a rank starting the operation later
// fails alike, and that later operations fail at once.
func TestPeerLost(t *testing.T) {
	for _, count := range []int{7, 1 << 20} {
		t.Run(fmt.Sprintf("count=%d", count), func(t *testing.T) {
			const size, lost, late = 4, 2, 1
			cs := group(t, size)
			reqs := make([]sdk.Request, size)
			for _, r := range []int{0, 3} {
				buf := input("float32", count, r)
				req, err := cs[r].Start(allreduceOp("float32", count, r, size), buf, buf)
				if err != nil {
					t.Fatalf("rank %d: Start: %v", r, err)
				}
				reqs[r] = req
			}
			time.Sleep(50 * time.Millisecond)
			if done, _, err := reqs[0].Test(); done {
				t.Fatalf("rank 0 done before all ranks started: %v", err)
			}
			if err := cs[lost].Close(); err != nil {
				t.Fatalf("rank %d: Close: %v", lost, err)
			}
			start := time.Now()
			for _, r := range []int{0, 3} {
				_, err := wait(t, reqs[r], lostWithin)
				checkLost(t, r, err, lost)
			}
			t.Logf("ranks saw rank %d go in %v", lost, time.Since(start))

			// A rank that starts the operation late sees the loss too.
			buf := input("float32", count, late)
			req, err := cs[late].Start(allreduceOp("float32", count, late, size), buf, buf)
			if err != nil {
				t.Fatalf("rank %d: Start: %v", late, err)
			}
			_, err = wait(t, req, lostWithin)
			checkLost(t, late, err, lost)

			// A later operation fails at once, with the same cause.
			req, err = cs[0].Start(allreduceOp("float64", 3, 0, size), make([]byte, 24), make([]byte, 24))
			if err != nil {
				t.Fatalf("rank 0: Start after failure: %v", err)
			}
			_, err = wait(t, req, time.Second)
			checkLost(t, 0, err, lost)
		})
	}
}

func checkLost(t *testing.T, r int, err error, lost int) {
	t.Helper()
	if !errors.Is(err, sdk.ErrPeerLost) {
		t.Errorf("rank %d: err = %v, want ErrPeerLost", r, err)
		return
	}
	if want := fmt.Sprintf("rank %d ", lost); !strings.Contains(err.Error(), want) {
		t.Errorf("rank %d: error %q does not name %q", r, err, want)
	}
}

// TestCloseDuringOperation closes the ranks while their operations are in
// flight or queued: the requests of the rank closed first fail with
// ErrClosed, and every other request completes too.
func TestCloseDuringOperation(t *testing.T) {
	const size, count = 3, 1 << 16
	cs := group(t, size)
	reqs := make([][]sdk.Request, size)
	for r, c := range cs {
		if r == size-1 {
			continue // keeps the others waiting
		}
		for range 3 {
			buf := input("float64", count, r)
			req, err := c.Start(allreduceOp("float64", count, r, size), buf, buf)
			if err != nil {
				t.Fatalf("rank %d: Start: %v", r, err)
			}
			reqs[r] = append(reqs[r], req)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := cs[0].Close(); err != nil {
		t.Fatal(err)
	}
	for i, req := range reqs[0] {
		if _, err := wait(t, req, time.Second); !errors.Is(err, sdk.ErrClosed) {
			t.Errorf("rank 0 request %d: err = %v, want ErrClosed", i, err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range cs[1:] {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
	for i, req := range reqs[1] {
		if _, err := wait(t, req, time.Second); !errors.Is(err, sdk.ErrClosed) && !errors.Is(err, sdk.ErrPeerLost) {
			t.Errorf("rank 1 request %d: err = %v, want ErrClosed or ErrPeerLost", i, err)
		}
	}
}

// TestNoGoroutineLeak checks that Close leaves no goroutine behind, after
// operations that succeeded and after a peer was lost.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, size := range []int{1, 2, 4} {
		cs := joinNoCleanup(t, size)
		for r, c := range cs {
			buf := input("float32", 100, r)
			if _, err := c.Start(allreduceOp("float32", 100, r, size), buf, buf); err != nil {
				t.Fatal(err)
			}
		}
		if size > 1 {
			// The last rank closes while the others are in the operation.
			if err := cs[size-1].Close(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cs {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// joinNoCleanup is group without the test's cleanup, for tests that close
// the collectives themselves.
func joinNoCleanup(t *testing.T, size int) []*collective {
	t.Helper()
	cs := make([]*collective, size)
	handles := make([][]byte, size)
	for r := range cs {
		sc, err := newCollective(sdk.Config{Rank: r, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		cs[r], handles[r] = sc.(*collective), sc.Handle()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = c.Join(ctx, handles) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestLogs checks the lines that show a test of the SDK path that the
// communicator went through the plugin.
func TestLogs(t *testing.T) {
	var out syncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "collexample", Output: &out, Level: hclog.Info})
	cs := make([]*collective, 2)
	handles := make([][]byte, 2)
	for r := range cs {
		sc, err := newCollective(sdk.Config{Rank: r, Size: 2, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		cs[r], handles[r] = sc.(*collective), sc.Handle()
		defer sc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			if err := c.Join(ctx, handles); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	reqs := make([]sdk.Request, 2)
	for r, c := range cs {
		buf := input("float64", 5, r)
		req, err := c.Start(allreduceOp("float64", 5, r, 2), buf, buf)
		if err != nil {
			t.Fatal(err)
		}
		reqs[r] = req
		if _, err := c.Start(sdk.Op{Kind: "broadcast", DType: "float64", Count: 5, Rank: r, Size: 2}, buf, buf); !errors.Is(err, sdk.ErrDeclined) {
			t.Fatalf("broadcast: err = %v, want ErrDeclined", err)
		}
	}
	for _, req := range reqs {
		if _, err := wait(t, req, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	log := out.String()
	for _, want := range []string{"joined: rank=0 size=2", "joined: rank=1 size=2", "closed: rank=0 ran=1 declined=1 failed=0", "closed: rank=1 ran=1 declined=1 failed=0"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// syncBuffer is a bytes.Buffer that several goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHandle checks the listening address: loopback by default, the
// interface's IPv4 address when one is named, an error for an unknown one.
func TestHandle(t *testing.T) {
	sc, err := newCollective(sdk.Config{Rank: -1, Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	host, _, err := net.SplitHostPort(string(sc.Handle()))
	if err != nil || host != "127.0.0.1" {
		t.Errorf("Handle = %q (%v), want 127.0.0.1:port", sc.Handle(), err)
	}

	if _, err := newCollective(sdk.Config{Iface: "=no-such-interface0"}); err == nil {
		t.Error("unknown interface: no error")
	}
	if _, err := newCollective(sdk.Config{Iface: "eth,ib"}); err == nil {
		t.Error("interface list: no error")
	}

	lo := loopbackName(t)
	for _, iface := range []string{lo, "=" + lo} {
		sc, err := newCollective(sdk.Config{Iface: iface})
		if err != nil {
			t.Errorf("Iface %q: %v", iface, err)
			continue
		}
		host, _, err := net.SplitHostPort(string(sc.Handle()))
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() || ip.To4() == nil {
			t.Errorf("Iface %q: Handle = %q, want a loopback IPv4 address", iface, sc.Handle())
		}
		_ = sc.Close()
	}
}

// loopbackName returns the name of an up loopback interface with an IPv4
// address, or skips the test.
func loopbackName(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skip(err)
	}
	for _, fi := range ifs {
		if fi.Flags&net.FlagLoopback == 0 || fi.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := fi.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return fi.Name
			}
		}
	}
	t.Skip("no loopback interface with an IPv4 address")
	return ""
}
