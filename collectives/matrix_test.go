package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
	"github.com/gorun/gorun/internal/testenv"
)

// The correctness matrix: every collective x every algorithm (forced
// through the table, plus the default choice) x every element type x every
// operator x rank counts 1, 2, 3, 4, 5, 8 x lengths 0, 1, odd, large,
// checked against a serial computation; then the hierarchical forms on
// ranks spread over hosts in several layouts.

var (
	rankCounts = []int{1, 2, 3, 4, 5, 8}
	lengths    = []int{0, 1, 37, 1031}
	allOps     = []collectives.Op{collectives.Sum, collectives.Prod, collectives.Min, collectives.Max, collectives.Avg}
)

// arith is the serial arithmetic of an element type.
type arith[T collectives.Element] struct {
	of       func(int) T
	add, mul func(T, T) T
	less     func(T, T) bool
	div      func(T, int) T
}

func arithOf[T collectives.Element]() arith[T] {
	var z T
	switch any(z).(type) {
	case float32:
		return any(arith[float32]{
			of:   func(v int) float32 { return float32(v) },
			add:  func(a, b float32) float32 { return a + b },
			mul:  func(a, b float32) float32 { return a * b },
			less: func(a, b float32) bool { return a < b },
			div:  func(a float32, n int) float32 { return a / float32(n) },
		}).(arith[T])
	case float64:
		return any(arith[float64]{
			of:   func(v int) float64 { return float64(v) },
			add:  func(a, b float64) float64 { return a + b },
			mul:  func(a, b float64) float64 { return a * b },
			less: func(a, b float64) bool { return a < b },
			div:  func(a float64, n int) float64 { return a / float64(n) },
		}).(arith[T])
	case int32:
		return any(arith[int32]{
			of:   func(v int) int32 { return int32(v) },
			add:  func(a, b int32) int32 { return a + b },
			mul:  func(a, b int32) int32 { return a * b },
			less: func(a, b int32) bool { return a < b },
			div:  func(a int32, n int) int32 { return a / int32(n) },
		}).(arith[T])
	case int64:
		return any(arith[int64]{
			of:   func(v int) int64 { return int64(v) },
			add:  func(a, b int64) int64 { return a + b },
			mul:  func(a, b int64) int64 { return a * b },
			less: func(a, b int64) bool { return a < b },
			div:  func(a int64, n int) int64 { return a / int64(n) },
		}).(arith[T])
	case uint8:
		return any(arith[uint8]{
			of:   func(v int) uint8 { return uint8(v) },
			add:  func(a, b uint8) uint8 { return a + b },
			mul:  func(a, b uint8) uint8 { return a * b },
			less: func(a, b uint8) bool { return a < b },
			div:  func(a uint8, n int) uint8 { return uint8(int(a) / n) },
		}).(arith[T])
	case collectives.BFloat16:
		f := collectives.BFloat16FromFloat32
		return any(arith[collectives.BFloat16]{
			of:   func(v int) collectives.BFloat16 { return f(float32(v)) },
			add:  func(a, b collectives.BFloat16) collectives.BFloat16 { return f(a.Float32() + b.Float32()) },
			mul:  func(a, b collectives.BFloat16) collectives.BFloat16 { return f(a.Float32() * b.Float32()) },
			less: func(a, b collectives.BFloat16) bool { return a.Float32() < b.Float32() },
			div:  func(a collectives.BFloat16, n int) collectives.BFloat16 { return f(a.Float32() / float32(n)) },
		}).(arith[T])
	case collectives.Float16:
		f := collectives.Float16FromFloat32
		return any(arith[collectives.Float16]{
			of:   func(v int) collectives.Float16 { return f(float32(v)) },
			add:  func(a, b collectives.Float16) collectives.Float16 { return f(a.Float32() + b.Float32()) },
			mul:  func(a, b collectives.Float16) collectives.Float16 { return f(a.Float32() * b.Float32()) },
			less: func(a, b collectives.Float16) bool { return a.Float32() < b.Float32() },
			div:  func(a collectives.Float16, n int) collectives.Float16 { return f(a.Float32() / float32(n)) },
		}).(arith[T])
	}
	panic("unreachable")
}

// value is rank r's element i for an operator: small integers, so that
// every type reduces them exactly in any order (products stay within
// +-2^8; unsigned and integer types wrap the same way in any order).
func value[T collectives.Element](a arith[T], op collectives.Op, r, i int) T {
	var z T
	_, unsigned := any(z).(uint8)
	if op == collectives.Prod {
		if unsigned {
			return a.of(1 + (r*5+i*3)%3)
		}
		return a.of([]int{1, 2, -1, -2}[(r*5+i*3)%4])
	}
	v := (r*7 + i*3) % 17
	if !unsigned {
		v -= 8
	}
	return a.of(v)
}

func values[T collectives.Element](a arith[T], op collectives.Op, r, lo, hi int) []T {
	s := make([]T, hi-lo)
	for i := range s {
		s[i] = value(a, op, r, lo+i)
	}
	return s
}

// serial reduces element i over n ranks, in rank order.
func serial[T collectives.Element](a arith[T], op collectives.Op, n, i int) T {
	acc := value(a, op, 0, i)
	for r := 1; r < n; r++ {
		v := value(a, op, r, i)
		switch op {
		case collectives.Sum, collectives.Avg:
			acc = a.add(acc, v)
		case collectives.Prod:
			acc = a.mul(acc, v)
		case collectives.Min:
			if a.less(v, acc) {
				acc = v
			}
		case collectives.Max:
			if a.less(acc, v) {
				acc = v
			}
		}
	}
	if op == collectives.Avg {
		acc = a.div(acc, n)
	}
	return acc
}

func compare[T collectives.Element](what string, got []T, want func(i int) T) error {
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%s: element %d of %d is %v, want %v", what, i, len(got), g, w)
		}
	}
	return nil
}

// exercise runs coll on every type and (for reductions) every operator,
// mixing blocking and asynchronous calls, and checks each result.
func exercise[T collectives.Element](ctx context.Context, c *collectives.Communicator, coll collectives.Collective, length int) error {
	a := arithOf[T]()
	n, me := c.Size(), c.Rank()
	typ := collectives.DTypeOf[T]()
	var checks []func() error
	var reqs []*collectives.Request
	async := false
	do := func(blocking func() error, start func() *collectives.Request) error {
		async = !async
		if async {
			reqs = append(reqs, start())
			return nil
		}
		return blocking()
	}
	ops := allOps
	if coll == collectives.CollBroadcast || coll == collectives.CollAllGather || coll == collectives.CollAllToAll {
		ops = []collectives.Op{collectives.Sum}
	}
	for k, op := range ops {
		what := fmt.Sprintf("%s %s %s", coll, typ, op)
		switch coll {
		case collectives.CollAllReduce:
			buf := values(a, op, me, 0, length)
			if err := do(func() error { return collectives.AllReduce(ctx, c, buf, op) },
				func() *collectives.Request { return collectives.AllReduceAsync(ctx, c, buf, op) }); err != nil {
				return err
			}
			checks = append(checks, func() error { return compare(what, buf, func(i int) T { return serial(a, op, n, i) }) })
		case collectives.CollBroadcast:
			root := (k + length) % n
			buf := make([]T, length)
			if me == root {
				buf = values(a, op, root, 0, length)
			}
			if err := do(func() error { return collectives.Broadcast(ctx, c, buf, root) },
				func() *collectives.Request { return collectives.BroadcastAsync(ctx, c, buf, root) }); err != nil {
				return err
			}
			checks = append(checks, func() error { return compare(what, buf, func(i int) T { return value(a, op, root, i) }) })
		case collectives.CollReduce:
			root := (k + length) % n
			buf := values(a, op, me, 0, length)
			if err := do(func() error { return collectives.Reduce(ctx, c, buf, op, root) },
				func() *collectives.Request { return collectives.ReduceAsync(ctx, c, buf, op, root) }); err != nil {
				return err
			}
			checks = append(checks, func() error {
				if me != root {
					return compare(what+" (non-root unchanged)", buf, func(i int) T { return value(a, op, me, i) })
				}
				return compare(what, buf, func(i int) T { return serial(a, op, n, i) })
			})
		case collectives.CollAllGather:
			lo, hi := collectives.BlockRange(length, n, me)
			send := values(a, op, me, lo, hi)
			recv := make([]T, length)
			if err := do(func() error { return collectives.AllGather(ctx, c, send, recv) },
				func() *collectives.Request { return collectives.AllGatherAsync(ctx, c, send, recv) }); err != nil {
				return err
			}
			checks = append(checks, func() error {
				if err := compare(what+" (send unchanged)", send, func(i int) T { return value(a, op, me, lo+i) }); err != nil {
					return err
				}
				return compare(what, recv, func(i int) T {
					for r := range n {
						if l, h := collectives.BlockRange(length, n, r); i >= l && i < h {
							return value(a, op, r, i)
						}
					}
					panic("no owner")
				})
			})
		case collectives.CollReduceScatter:
			lo, hi := collectives.BlockRange(length, n, me)
			send := values(a, op, me, 0, length)
			recv := make([]T, hi-lo)
			if err := do(func() error { return collectives.ReduceScatter(ctx, c, send, recv, op) },
				func() *collectives.Request { return collectives.ReduceScatterAsync(ctx, c, send, recv, op) }); err != nil {
				return err
			}
			checks = append(checks, func() error {
				if err := compare(what+" (send unchanged)", send, func(i int) T { return value(a, op, me, i) }); err != nil {
					return err
				}
				return compare(what, recv, func(i int) T { return serial(a, op, n, lo+i) })
			})
		case collectives.CollAllToAll:
			send := values(a, op, me, 0, n*length)
			recv := make([]T, n*length)
			if err := do(func() error { return collectives.AllToAll(ctx, c, send, recv) },
				func() *collectives.Request { return collectives.AllToAllAsync(ctx, c, send, recv) }); err != nil {
				return err
			}
			checks = append(checks, func() error {
				// Block j of recv is rank j's block me.
				return compare(what, recv, func(i int) T { j, k := i/max(length, 1), i%max(length, 1); return value(a, op, j, me*length+k) })
			})
		case collectives.CollBarrier:
			if err := do(func() error { return c.Barrier(ctx) }, func() *collectives.Request { return c.BarrierAsync(ctx) }); err != nil {
				return err
			}
		}
	}
	if err := collectives.WaitAll(reqs...); err != nil {
		return err
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// sendRecv passes messages around the ring, blocking and asynchronous.
func sendRecv[T collectives.Element](ctx context.Context, c *collectives.Communicator, length int) error {
	n, me := c.Size(), c.Rank()
	if n == 1 {
		return nil
	}
	a := arithOf[T]()
	right, left := (me+1)%n, (me+n-1)%n
	in1, in2 := make([]T, length), make([]T, length)
	r1 := collectives.RecvAsync(ctx, c, in1, left, 7)
	r2 := collectives.RecvAsync(ctx, c, in2, left, 7)
	s1 := collectives.SendAsync(ctx, c, values(a, collectives.Sum, me, 0, length), right, 7)
	if err := collectives.Send(ctx, c, values(a, collectives.Sum, me, 1, length+1), right, 7); err != nil {
		return err
	}
	if err := collectives.WaitAll(r1, r2, s1); err != nil {
		return err
	}
	if err := compare("recv 1", in1, func(i int) T { return value(a, collectives.Sum, left, i) }); err != nil {
		return err
	}
	return compare("recv 2", in2, func(i int) T { return value(a, collectives.Sum, left, i+1) })
}

type exerciser = func(context.Context, *collectives.Communicator, collectives.Collective, int) error

var (
	everyType = []exerciser{
		exercise[float32], exercise[float64], exercise[int32], exercise[int64], exercise[uint8],
		exercise[collectives.BFloat16], exercise[collectives.Float16],
	}
	// someTypes are enough where the types are not the question: one of
	// each kind (float, integer, wrapping unsigned, reduced in float32).
	someTypes = []exerciser{exercise[float64], exercise[int32], exercise[uint8], exercise[collectives.BFloat16]}
)

func exerciseAll(ctx context.Context, c *collectives.Communicator, coll collectives.Collective, length int, types []exerciser) error {
	for _, f := range types {
		if err := f(ctx, c, coll, length); err != nil {
			return err
		}
	}
	return nil
}

// testOptions uses small pipeline units so that "large" lengths go through
// many chunks, and a timeout short enough for a broken test to fail.
func testOptions(spec string) *collectives.Options {
	thr := collectives.DefaultThresholds()
	if err := thr.Set(spec); err != nil {
		panic(err)
	}
	return &collectives.Options{Timeout: time.Minute, Thresholds: thr, ChunkBytes: 128, SegmentBytes: 96, Window: 2}
}

func runMatrix(t *testing.T, name string, coll collectives.Collective, spec string, hosts func(n int) []int, wantAlgo collectives.Algorithm, counts []int, types []exerciser) {
	for _, n := range counts {
		for _, length := range lengths {
			t.Run(fmt.Sprintf("%s/n=%d/len=%d", name, n, length), func(t *testing.T) {
				t.Parallel()
				var h []int
				if hosts != nil {
					h = hosts(n)
				}
				// An eager limit just above the header and the departure message
				// makes nearly every data message wait for its receiver, as large
				// ones do on a real transport: an algorithm that depends on
				// buffering deadlocks here.
				f := collectivestest.NewFabric(n, &collectivestest.Options{Hosts: h, EagerBytes: 40})
				errs := f.Run(testOptions(spec), func(c *collectives.Communicator) error {
					if wantAlgo != collectives.AlgoNone && n > 1 {
						if got := c.Choose(coll, 64).Algorithm; got != wantAlgo {
							return fmt.Errorf("Choose gives %s, want %s", got, wantAlgo)
						}
					}
					return exerciseAll(context.Background(), c, coll, length, types)
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

func TestCollectives(t *testing.T) {
	t.Parallel()
	for coll := range collectives.CollBarrier + 1 {
		runMatrix(t, coll.String()+"/default", coll, "", nil, collectives.AlgoNone, rankCounts, everyType)
		for _, algo := range coll.Algorithms() {
			if len(coll.Algorithms()) == 1 {
				break
			}
			runMatrix(t, coll.String()+"/"+algo.String(), coll, fmt.Sprintf("%s=%s", coll, algo), nil, algo, rankCounts, everyType)
		}
	}
}

func TestSendRecv(t *testing.T) {
	t.Parallel()
	for _, n := range rankCounts {
		for _, length := range lengths {
			t.Run(fmt.Sprintf("n=%d/len=%d", n, length), func(t *testing.T) {
				t.Parallel()
				f := collectivestest.NewFabric(n, nil)
				errs := f.Run(testOptions(""), func(c *collectives.Communicator) error {
					ctx := context.Background()
					for _, fn := range []func(context.Context, *collectives.Communicator, int) error{
						sendRecv[float32], sendRecv[float64], sendRecv[int32], sendRecv[int64], sendRecv[uint8],
						sendRecv[collectives.BFloat16], sendRecv[collectives.Float16],
					} {
						if err := fn(ctx, c, length); err != nil {
							return err
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// Host layouts for the hierarchical forms.
var layouts = map[string]func(n int) []int{
	"block": func(n int) []int { // the first half of the ranks on host 0
		h := make([]int, n)
		for r := range h {
			h[r] = r * 2 / n
		}
		return h
	},
	"roundrobin2": func(n int) []int {
		h := make([]int, n)
		for r := range h {
			h[r] = r % 2
		}
		return h
	},
	"roundrobin3": func(n int) []int { // uneven hosts for most n
		h := make([]int, n)
		for r := range h {
			h[r] = 10 + r%3
		}
		return h
	},
}

func TestHierarchical(t *testing.T) {
	t.Parallel()
	// The shard forms need hosts with equal rank counts (block and
	// roundrobin2 give them for 4 and 8 ranks); the others are also run on
	// uneven hosts.
	even, uneven := []string{"block", "roundrobin2"}, []string{"block", "roundrobin3"}
	variants := []struct {
		name    string
		coll    collectives.Collective
		spec    string
		layouts []string
	}{
		{"leader-rd", collectives.CollAllReduce, "allreduce@inter=recursive-doubling;reduce@intra=binomial;broadcast@intra=binomial", uneven},
		{"leader-rab", collectives.CollAllReduce, "allreduce@inter=rabenseifner;reduce@intra=chain;broadcast@intra=binary-tree", even},
		{"leader-pipelined", collectives.CollAllReduce, "allreduce@inter=recursive-doubling;reduce@intra=reducescatter-gather;broadcast@intra=scatter-allgather", uneven},
		{"shard-ring", collectives.CollAllReduce, "allreduce@inter=ring;reducescatter@intra=ring;allgather@intra=ring;reduce@intra=binary-tree;broadcast@intra=chain", uneven},
		{"shard-halving", collectives.CollAllReduce, "allreduce@inter=ring;reducescatter@intra=recursive-halving;allgather@intra=bruck", even},
		{"shard-doubling", collectives.CollAllReduce, "allreduce@inter=ring;reducescatter@intra=recursive-halving;allgather@intra=recursive-doubling", even},
		{"bcast-a", collectives.CollBroadcast, "broadcast@inter=binomial;broadcast@intra=chain", uneven},
		{"bcast-b", collectives.CollBroadcast, "broadcast@inter=scatter-allgather;broadcast@intra=binary-tree", even},
		{"reduce-a", collectives.CollReduce, "reduce@intra=binomial;reduce@inter=chain", uneven},
		{"reduce-b", collectives.CollReduce, "reduce@intra=reducescatter-gather;reduce@inter=binary-tree", even},
	}
	for _, v := range variants {
		for _, lname := range v.layouts {
			// With 1 or 2 ranks no layout is hierarchical.
			runMatrix(t, v.name+"/"+lname, v.coll, v.spec, layouts[lname], collectives.AlgoNone, []int{3, 4, 5, 8}, someTypes)
		}
	}
}

// TestLarge runs the default choices on lengths above every threshold,
// with the default pipeline units.
func TestLarge(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "large messages")
	const length = 1<<18 + 3 // 1 MiB of float32: above every threshold
	cases := []struct {
		name  string
		n     int
		spec  string
		hosts func(int) []int
	}{
		{"ring/8", 8, "allreduce=ring", nil},
		{"rabenseifner/5", 5, "allreduce=rabenseifner", nil},
		{"recursive-doubling/3", 3, "allreduce=recursive-doubling", nil},
		{"hierarchical/8", 8, "", layouts["block"]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h []int
			if tc.hosts != nil {
				h = tc.hosts(tc.n)
			}
			f := collectivestest.NewFabric(tc.n, &collectivestest.Options{Hosts: h})
			thr := collectives.DefaultThresholds()
			if err := thr.Set(tc.spec); err != nil {
				t.Fatal(err)
			}
			errs := f.Run(&collectives.Options{Thresholds: thr, Timeout: time.Minute}, func(c *collectives.Communicator) error {
				a := arithOf[float32]()
				buf := values(a, collectives.Sum, c.Rank(), 0, length)
				if err := collectives.AllReduce(context.Background(), c, buf, collectives.Sum); err != nil {
					return err
				}
				if err := compare("allreduce", buf, func(i int) float32 { return serial(a, collectives.Sum, c.Size(), i) }); err != nil {
					return err
				}
				root := c.Size() - 1
				if c.Rank() != root {
					clear(buf)
				}
				if err := collectives.Broadcast(context.Background(), c, buf, root); err != nil {
					return err
				}
				return compare("broadcast", buf, func(i int) float32 { return serial(a, collectives.Sum, c.Size(), i) })
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

var _ = errors.Is
