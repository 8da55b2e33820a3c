package collectives_test

import (
	"context"
	"fmt"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

// Four ranks, as goroutines over the in-memory fabric, sum their vectors.
func Example() {
	f := collectivestest.NewFabric(4, nil)
	f.Run(nil, func(c *collectives.Communicator) error {
		buf := []float32{float32(c.Rank()), 1}
		if err := collectives.AllReduce(context.Background(), c, buf, collectives.Sum); err != nil {
			return err
		}
		if c.Rank() == 0 {
			fmt.Println(buf)
		}
		return nil
	})
	// Output: [6 4]
}

// Computation overlaps communication: start the operation, compute, wait.
func ExampleAllReduceAsync() {
	f := collectivestest.NewFabric(2, nil)
	f.Run(nil, func(c *collectives.Communicator) error {
		grads := []float64{1, 2, 3}
		req := collectives.AllReduceAsync(context.Background(), c, grads, collectives.Avg)
		// ... compute the next layer's gradients here ...
		if err := req.Wait(); err != nil {
			return err
		}
		if c.Rank() == 1 {
			fmt.Println(grads)
		}
		return nil
	})
	// Output: [1 2 3]
}

func ExampleThresholds() {
	t := collectives.DefaultThresholds()
	if err := t.Set("allreduce@inter=recursive-doubling<=64KiB,ring"); err != nil {
		panic(err)
	}
	fmt.Println(t.Tiers(collectives.CollAllReduce, collectives.InterHost))
	fmt.Println(t.Select(collectives.CollAllReduce, collectives.InterHost, 16, 100<<10))
	fmt.Println(t.Select(collectives.CollAllReduce, collectives.IntraHost, 16, 100<<10))
	// Output:
	// [recursive-doubling<=64KiB ring]
	// ring
	// rabenseifner
}

func ExampleCommunicator_Choose() {
	// Rank 0 of 8 ranks on two hosts.
	f := collectivestest.NewFabric(8, &collectivestest.Options{Hosts: []int{0, 0, 0, 0, 1, 1, 1, 1}})
	c, err := collectives.New(f.Endpoint(0), 0, 8, &collectives.Options{Thresholds: collectives.DefaultThresholds()})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for _, size := range []int64{4 << 10, 64 << 20} {
		ch := c.Choose(collectives.CollAllReduce, size)
		fmt.Println(ch.Algorithm, ch.Phases[0].Algorithm, ch.Phases[1].Algorithm, ch.Phases[2].Algorithm)
	}
	// Output:
	// hierarchical binomial recursive-doubling binomial
	// hierarchical recursive-halving ring ring
}
