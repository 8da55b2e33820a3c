package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

// Failures: every rank gets an error wrapping the right sentinel, naming
// the right rank, well within the timeout, and nothing hangs.

const faultTimeout = 30 * time.Second

// fast is how long a failure may take to reach every rank when no timeout
// is involved: far below faultTimeout.
const fast = 10 * time.Second

func faultOptions(spec string) *collectives.Options {
	o := testOptions(spec)
	o.Timeout = faultTimeout
	return o
}

// checkErrs checks the errors of every rank not in skip: each wraps
// sentinel and, when rank >= 0, is a *PeerError about rank.
func checkErrs(t *testing.T, errs []error, skip map[int]bool, sentinel error, rank int) {
	t.Helper()
	for r, err := range errs {
		if skip[r] {
			continue
		}
		if !errors.Is(err, sentinel) {
			t.Errorf("rank %d: got %v, want an error wrapping %v", r, err, sentinel)
			continue
		}
		var pe *collectives.PeerError
		if rank >= 0 && (!errors.As(err, &pe) || pe.Rank != rank) {
			t.Errorf("rank %d: %v: want a *PeerError about rank %d", r, err, rank)
		}
	}
}

// orNext returns err or, when the call succeeded, the error of the next
// collective: without Options.Strict, a rank that did not depend on the
// failed one learns of the failure there.
func orNext(c *collectives.Communicator, err error) error {
	if err != nil {
		return err
	}
	if err := c.Barrier(context.Background()); err != nil {
		return err
	}
	return errors.New("no error, from the call or the next one")
}

func timed(f func() []error) ([]error, time.Duration) {
	start := time.Now()
	errs := f()
	return errs, time.Since(start)
}

func TestMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type call func(c *collectives.Communicator) error
	ar := func(n int, op collectives.Op) call {
		return func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]float32, n), op)
		}
	}
	cases := []struct {
		name   string
		spec   string
		n      int
		odd    int // the rank that calls oddly
		normal call
		oddity call
		detail string
	}{
		{"count/rd", "allreduce=recursive-doubling", 5, 3, ar(100, collectives.Sum), ar(101, collectives.Sum), "allreduce(10"},
		{"count/ring", "allreduce=ring", 4, 1, ar(1000, collectives.Sum), ar(999, collectives.Sum), "allreduce(99"},
		{"count/rabenseifner", "allreduce=rabenseifner", 8, 0, ar(33, collectives.Sum), ar(0, collectives.Sum), "allreduce(0 float32"},
		{"op", "", 3, 2, ar(10, collectives.Sum), ar(10, collectives.Max), "max"},
		{"dtype", "", 4, 0, ar(10, collectives.Sum), func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]float64, 10), collectives.Sum)
		}, "float64"},
		{"bf16-vs-fp16", "", 2, 1, func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]collectives.BFloat16, 10), collectives.Sum)
		}, func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]collectives.Float16, 10), collectives.Sum)
		}, "float16"},
		{"collective", "", 4, 2, ar(10, collectives.Sum), func(c *collectives.Communicator) error {
			return collectives.Broadcast(ctx, c, make([]float32, 10), 0)
		}, "broadcast"},
		{"barrier-vs-allgather", "", 3, 0, func(c *collectives.Communicator) error { return c.Barrier(ctx) }, func(c *collectives.Communicator) error {
			return collectives.AllGather(ctx, c, make([]int32, 1), make([]int32, 3))
		}, "barrier"},
		{"alltoall-count", "", 3, 1, func(c *collectives.Communicator) error {
			return collectives.AllToAll(ctx, c, make([]int64, 6), make([]int64, 6))
		}, func(c *collectives.Communicator) error {
			return collectives.AllToAll(ctx, c, make([]int64, 9), make([]int64, 9))
		}, "alltoall(9"},
		{"reduce-root-leaf", "reduce=binomial", 4, 3, func(c *collectives.Communicator) error {
			return collectives.Reduce(ctx, c, make([]int32, 4), collectives.Sum, 0)
		}, func(c *collectives.Communicator) error {
			return collectives.Reduce(ctx, c, make([]int32, 5), collectives.Sum, 0)
		}, "reduce(5"},
		{"table", "", 4, 1, ar(100, collectives.Sum), func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]float32, 100), collectives.Sum)
		}, collectives.EnvThresholds},
	}
	for _, tc := range cases {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", tc.name, strict), func(t *testing.T) {
				t.Parallel()
				testMismatch(t, tc.n, tc.odd, strict, func(r int) *collectives.Options {
					opts := faultOptions(tc.spec)
					if tc.name == "table" && r == tc.odd {
						opts = faultOptions("allreduce=ring")
					}
					opts.Strict = strict
					return opts
				}, tc.normal, tc.oddity, tc.detail)
			})
		}
	}
}

func testMismatch(t *testing.T, n, odd int, strict bool, opts func(r int) *collectives.Options, normal, oddity func(*collectives.Communicator) error, detail string) {
	ctx := context.Background()
	f := collectivestest.NewFabric(n, nil)
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := collectives.New(f.Endpoint(r), r, n, opts(r))
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			if r == odd {
				errs[r] = oddity(c)
			} else {
				errs[r] = normal(c)
			}
			if !strict {
				errs[r] = orNext(c, errs[r])
			}
			// The communicator stays broken.
			if err := c.Barrier(ctx); err == nil || !errors.Is(err, collectives.ErrMismatch) {
				errs[r] = fmt.Errorf("barrier after the failure: %v", err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > fast {
		t.Errorf("took %v", d)
	}
	checkErrs(t, errs, nil, collectives.ErrMismatch, -1)
	found := false
	for _, err := range errs {
		if err != nil && strings.Contains(err.Error(), detail) {
			found = true
		}
	}
	if !found {
		t.Errorf("no error mentions %q: %v", detail, errs)
	}
}

// With Options.Strict, even two ranks that both believe they are the root
// of a small broadcast are caught, by every rank.
func TestStrictRoot(t *testing.T) {
	t.Parallel()
	f := collectivestest.NewFabric(3, nil)
	opts := faultOptions("")
	opts.Strict = true
	errs := f.Run(opts, func(c *collectives.Communicator) error {
		root := 0
		if c.Rank() == 2 {
			root = 2
		}
		return collectives.Broadcast(context.Background(), c, make([]uint8, 4), root)
	})
	checkErrs(t, errs, nil, collectives.ErrMismatch, -1)
	// And a correct sequence still works with it.
	errs = collectivestest.NewFabric(5, nil).Run(opts, func(c *collectives.Communicator) error {
		return exerciseAll(context.Background(), c, collectives.CollAllReduce, 37, someTypes)
	})
	checkErrs(t, errs, nil, nil, -1)
}

func TestPeerFailures(t *testing.T) {
	t.Parallel()
	cases := []peerFailure{
		{name: "leaves-before", n: 4, victim: 2, act: func(f *collectivestest.Fabric, c *collectives.Communicator) error {
			return c.Close()
		}},
		{name: "leaves-during/ring", spec: "allreduce=ring", n: 5, victim: 0, act: func(f *collectivestest.Fabric, c *collectives.Communicator) error {
			time.Sleep(50 * time.Millisecond) // the others are waiting by now
			return c.Close()
		}},
		{name: "endpoint-closes", n: 3, victim: 1, act: func(f *collectivestest.Fabric, c *collectives.Communicator) error {
			time.Sleep(50 * time.Millisecond)
			return f.Endpoint(1).Close()
		}},
		{name: "killed-waiting", n: 8, victim: 5, act: func(f *collectivestest.Fabric, c *collectives.Communicator) error {
			time.Sleep(50 * time.Millisecond)
			f.Kill(5)
			return nil
		}},
		{name: "dies-first-send/rd", spec: "allreduce=recursive-doubling", n: 5, victim: 4, killAfter: 0},
		{name: "dies-mid/ring", spec: "allreduce=ring", n: 8, victim: 3, killAfter: 7},
		{name: "dies-mid/rabenseifner", spec: "allreduce=rabenseifner", n: 6, victim: 1, killAfter: 2},
		{name: "dies-mid/hierarchical", spec: "allreduce@inter=ring", n: 8, victim: 6, killAfter: 5},
	}
	for _, tc := range cases {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", tc.name, strict), func(t *testing.T) {
				t.Parallel()
				testPeerFailure(t, tc, strict)
			})
		}
	}
}

type peerFailure struct {
	name   string
	spec   string
	n      int
	victim int
	// act runs on the victim instead of the collective; nil: it takes
	// part, and KillAfter strikes after killAfter sends.
	act       func(f *collectivestest.Fabric, c *collectives.Communicator) error
	killAfter int
}

func testPeerFailure(t *testing.T, tc peerFailure, strict bool) {
	ctx := context.Background()
	var hosts []int
	if strings.Contains(tc.name, "hierarchical") {
		hosts = layouts["block"](tc.n)
	}
	f := collectivestest.NewFabric(tc.n, &collectivestest.Options{Hosts: hosts})
	opts := faultOptions(tc.spec)
	opts.Strict = strict
	errs, d := timed(func() []error {
		return f.Run(opts, func(c *collectives.Communicator) error {
			// One good collective first, so that some ranks know each other
			// already and some do not.
			if err := collectives.AllReduce(ctx, c, make([]int32, 3), collectives.Sum); err != nil {
				return fmt.Errorf("first allreduce: %w", err)
			}
			if c.Rank() == tc.victim {
				if tc.act != nil {
					return tc.act(f, c)
				}
				f.KillAfter(tc.victim, tc.killAfter)
			}
			err := collectives.AllReduce(ctx, c, make([]float32, 1000), collectives.Sum)
			if !strict && c.Rank() != tc.victim {
				err = orNext(c, err)
			}
			return err
		})
	})
	if d > fast {
		t.Errorf("took %v", d)
	}
	checkErrs(t, errs, map[int]bool{tc.victim: true}, collectives.ErrPeerGone, tc.victim)
	if tc.act == nil && !errors.Is(errs[tc.victim], collectivestest.ErrKilled) {
		t.Errorf("victim: got %v, want ErrKilled", errs[tc.victim])
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	const n, late = 4, 3
	f := collectivestest.NewFabric(n, nil)
	opts := faultOptions("")
	opts.Timeout = 300 * time.Millisecond
	errs, d := timed(func() []error {
		return f.Run(opts, func(c *collectives.Communicator) error {
			if c.Rank() == late {
				time.Sleep(time.Second)
			}
			return collectives.AllReduce(context.Background(), c, make([]float64, 100), collectives.Sum)
		})
	})
	checkErrs(t, errs, nil, collectives.ErrTimeout, -1)
	if d > time.Second+fast {
		t.Errorf("took %v", d)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	const n, slow, impatient = 4, 3, 0
	f := collectivestest.NewFabric(n, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		ctx := context.Background()
		switch c.Rank() {
		case slow:
			time.Sleep(300 * time.Millisecond)
		case impatient:
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
		}
		err := collectives.AllReduce(ctx, c, make([]int64, 10), collectives.Sum)
		if c.Rank() != impatient {
			err = orNext(c, err)
		}
		return err
	})
	if !errors.Is(errs[impatient], context.DeadlineExceeded) {
		t.Errorf("impatient rank: %v", errs[impatient])
	}
	checkErrs(t, errs, map[int]bool{impatient: true}, collectives.ErrAborted, impatient)
}

func TestInvalidArgument(t *testing.T) {
	t.Parallel()
	const n, bad = 3, 1
	ctx := context.Background()
	f := collectivestest.NewFabric(n, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		root := 0
		if c.Rank() == bad {
			root = 7
		}
		err := collectives.Broadcast(ctx, c, make([]float32, 3), root)
		if c.Rank() != bad {
			err = orNext(c, err)
		}
		return err
	})
	if !errors.Is(errs[bad], collectives.ErrInvalid) {
		t.Errorf("rank %d: %v", bad, errs[bad])
	}
	checkErrs(t, errs, map[int]bool{bad: true}, collectives.ErrAborted, bad)

	// Lengths that do not fit together fail the same way.
	for _, call := range []func(c *collectives.Communicator) error{
		func(c *collectives.Communicator) error {
			return collectives.AllGather(ctx, c, make([]int32, 2), make([]int32, 3))
		},
		func(c *collectives.Communicator) error {
			return collectives.ReduceScatter(ctx, c, make([]int32, 3), make([]int32, 2), collectives.Sum)
		},
		func(c *collectives.Communicator) error {
			return collectives.AllToAll(ctx, c, make([]int32, 4), make([]int32, 4))
		},
		func(c *collectives.Communicator) error {
			return collectives.AllReduce(ctx, c, make([]int32, 4), collectives.Op(9))
		},
	} {
		errs := collectivestest.NewFabric(n, nil).Run(faultOptions(""), call)
		checkErrs(t, errs, nil, collectives.ErrInvalid, -1)
	}
}

func TestSendRecvErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := collectivestest.NewFabric(3, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		switch c.Rank() {
		case 0:
			if err := collectives.Send(ctx, c, make([]float32, 10), 1, 5); err != nil {
				return err
			}
			if err := collectives.Send(ctx, c, make([]float32, 10), 1, 6); err != nil {
				return err
			}
			if err := collectives.Send(ctx, c, make([]float32, 10), 0, 6); !errors.Is(err, collectives.ErrInvalid) {
				return fmt.Errorf("send to self: %v", err)
			}
			if err := collectives.Send(ctx, c, make([]float32, 10), 1, -1); !errors.Is(err, collectives.ErrInvalid) {
				return fmt.Errorf("negative tag: %v", err)
			}
			f.Kill(2)
			if err := collectives.Recv(ctx, c, make([]float32, 10), 2, 0); !errors.Is(err, collectives.ErrPeerGone) {
				return fmt.Errorf("recv from a dead rank: %v", err)
			}
		case 1:
			err := collectives.Recv(ctx, c, make([]float32, 12), 0, 5)
			if !errors.Is(err, collectives.ErrMismatch) || !strings.Contains(err.Error(), "10 float32") {
				return fmt.Errorf("length mismatch: %v", err)
			}
			err = collectives.Recv(ctx, c, make([]int32, 10), 0, 6)
			if !errors.Is(err, collectives.ErrMismatch) {
				return fmt.Errorf("type mismatch: %v", err)
			}
			// A failed Recv does not break the communicator.
			return c.Barrier(ctx)
		}
		return nil
	})
	for r, err := range errs[:2] {
		if r == 1 && errors.Is(err, collectives.ErrPeerGone) {
			continue // the barrier needs rank 2, which died
		}
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestAsyncOverlaps(t *testing.T) {
	t.Parallel()
	f := collectivestest.NewFabric(3, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		ctx := context.Background()
		if c.Rank() == 2 {
			time.Sleep(100 * time.Millisecond)
		}
		a := make([]float32, 5000)
		b := make([]int32, 7)
		for i := range a {
			a[i] = 1
		}
		ra := collectives.AllReduceAsync(ctx, c, a, collectives.Sum)
		rb := collectives.BroadcastAsync(ctx, c, b, 1)
		if c.Rank() == 0 {
			if done, _ := ra.Test(); done {
				return errors.New("the allreduce completed before rank 2 called it")
			}
		}
		// Compute meanwhile; then wait, in any order.
		if err := rb.Wait(); err != nil {
			return err
		}
		<-ra.Done()
		if err := ra.Wait(); err != nil {
			return err
		}
		if a[4999] != 3 {
			return fmt.Errorf("got %v", a[4999])
		}
		return nil
	})
	checkErrs(t, errs, nil, nil, -1)
}

func TestCloseInFlight(t *testing.T) {
	t.Parallel()
	f := collectivestest.NewFabric(2, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		ctx := context.Background()
		if c.Rank() == 1 {
			return nil // never takes part; Run closes it
		}
		r := collectives.AllReduceAsync(ctx, c, make([]float32, 10), collectives.Sum)
		r2 := collectives.AllReduceAsync(ctx, c, make([]float32, 10), collectives.Sum)
		time.Sleep(20 * time.Millisecond)
		c.Close()
		if err := r.Wait(); !errors.Is(err, collectives.ErrClosed) && !errors.Is(err, collectives.ErrPeerGone) {
			return fmt.Errorf("in flight: %v", err)
		}
		if err := r2.Wait(); err == nil {
			return errors.New("queued: no error")
		}
		if err := c.Barrier(ctx); !errors.Is(err, collectives.ErrClosed) {
			return fmt.Errorf("after Close: %v", err)
		}
		return c.Close()
	})
	checkErrs(t, errs, nil, nil, -1)
}

// A rank that did its part and went away (its process exited without
// closing its communicator) is not a failure for the ranks that still
// finish the operation.
func TestPeerExitsAfterItsPart(t *testing.T) {
	t.Parallel()
	f := collectivestest.NewFabric(4, nil)
	errs := f.Run(faultOptions("broadcast=chain"), func(c *collectives.Communicator) error {
		ctx := context.Background()
		buf := make([]int32, 5)
		if c.Rank() == 0 {
			buf[4] = 42
			if err := collectives.Broadcast(ctx, c, buf, 0); err != nil {
				return err
			}
			return f.Endpoint(0).Close()
		}
		time.Sleep(50 * time.Millisecond)
		if err := collectives.Broadcast(ctx, c, buf, 0); err != nil {
			return err
		}
		if buf[4] != 42 {
			return fmt.Errorf("got %v", buf)
		}
		// The next collective needs rank 0, which is gone.
		if err := c.Barrier(ctx); !errors.Is(err, collectives.ErrPeerGone) {
			return fmt.Errorf("barrier without rank 0: %v", err)
		}
		return nil
	})
	checkErrs(t, errs, nil, nil, -1)
}
