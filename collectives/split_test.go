package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

func sumOf(ranks []int) int64 {
	var s int64
	for _, r := range ranks {
		s += int64(r + 1)
	}
	return s
}

// allreduceRanks checks an AllReduce over c of each member's world rank+1.
func allreduceRanks(ctx context.Context, c *collectives.Communicator, world int, members []int) error {
	buf := []int64{int64(world + 1), 1}
	if err := collectives.AllReduce(ctx, c, buf, collectives.Sum); err != nil {
		return err
	}
	if buf[0] != sumOf(members) || buf[1] != int64(len(members)) {
		return fmt.Errorf("allreduce over %v gave %v", members, buf)
	}
	return nil
}

func TestSplit(t *testing.T) {
	t.Parallel()
	const n = 8
	f := collectivestest.NewFabric(n, &collectivestest.Options{Hosts: layouts["block"](n)})
	errs := f.Run(testOptions(""), func(c *collectives.Communicator) error {
		ctx := context.Background()
		me := c.Rank()
		// Parity, ranked in reverse.
		par, err := c.Split(ctx, me%2, -me)
		if err != nil {
			return err
		}
		defer par.Close()
		members := []int{6, 4, 2, 0}
		if me%2 == 1 {
			members = []int{7, 5, 3, 1}
		}
		if par.Size() != 4 || members[par.Rank()] != me {
			return fmt.Errorf("parity: rank %d of %d", par.Rank(), par.Size())
		}
		if ch := par.Choose(collectives.CollAllReduce, 8); ch.Algorithm != collectives.AlgoHierarchical {
			return fmt.Errorf("parity communicator spans 2 hosts with 2 ranks each: %v", ch)
		}
		// Halves, with one rank left out.
		color := me / 4
		if me == 5 {
			color = -1
		}
		half, err := c.Split(ctx, color, 0)
		if err != nil {
			return err
		}
		if me == 5 {
			if half != nil {
				return errors.New("a negative color gave a communicator")
			}
		} else {
			defer half.Close()
		}
		// Use all three, interleaved, the child ones concurrently.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Add(2)
		go func() { defer wg.Done(); e1 = allreduceRanks(ctx, par, me, members) }()
		go func() {
			defer wg.Done()
			if half != nil {
				hm := []int{0, 1, 2, 3}
				if me >= 4 {
					hm = []int{4, 6, 7}
				}
				e2 = allreduceRanks(ctx, half, me, hm)
			}
		}()
		wg.Wait()
		if err := errors.Join(e1, e2); err != nil {
			return err
		}
		if err := allreduceRanks(ctx, c, me, []int{0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
			return err
		}
		// Nested: pairs inside the parity communicator.
		pair, err := par.Split(ctx, par.Rank()/2, par.Rank())
		if err != nil {
			return err
		}
		defer pair.Close()
		pm := members[par.Rank()/2*2 : par.Rank()/2*2+2]
		if err := allreduceRanks(ctx, pair, me, pm); err != nil {
			return fmt.Errorf("pair: %w", err)
		}
		// One color: a copy of the parent, with its own order.
		all, err := c.Split(ctx, 0, me)
		if err != nil {
			return err
		}
		defer all.Close()
		if all.Rank() != me || all.Size() != n {
			return fmt.Errorf("copy: rank %d of %d", all.Rank(), all.Size())
		}
		r1 := collectives.AllReduceAsync(ctx, all, make([]float32, 100), collectives.Max)
		if err := allreduceRanks(ctx, c, me, []int{0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
			return err
		}
		return r1.Wait()
	})
	checkErrs(t, errs, nil, nil, -1)
}

func TestSplitMismatch(t *testing.T) {
	t.Parallel()
	f := collectivestest.NewFabric(4, nil)
	errs := f.Run(faultOptions(""), func(c *collectives.Communicator) error {
		if c.Rank() == 3 {
			return orNext(c, c.Barrier(context.Background()))
		}
		_, err := c.Split(context.Background(), 0, 0)
		return orNext(c, err)
	})
	checkErrs(t, errs, nil, collectives.ErrMismatch, -1)
}
