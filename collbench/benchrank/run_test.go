package benchrank

import (
	"context"
	"testing"

	"github.com/gorun/gorun/collbench"
	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

// Every collective, type and operator on 3 ranks, checked: no element is
// wrong, and each size gives one result.
func TestRunChecks(t *testing.T) {
	f := collectivestest.NewFabric(3, nil)
	sizes := []int64{0, 8, 296, 10952}
	errs := f.Run(nil, func(c *collectives.Communicator) error {
		rs, err := Run(context.Background(), c, collbench.Config{Collective: collbench.All, AllTypes: true, Sizes: sizes, Iters: 1, Warmup: -1, Check: true, Root: 2})
		if err != nil {
			return err
		}
		if want := (3*7*5+4*7)*len(sizes) + 1; len(rs) != want {
			t.Errorf("rank %d: %d results, want %d", c.Rank(), len(rs), want)
		}
		for _, r := range rs {
			if r.Errors != 0 {
				t.Errorf("rank %d: %s %s %s of %d B: %d wrong", c.Rank(), r.Collective, r.DType, r.Op, r.Bytes, r.Errors)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// The check finds wrong elements: a buffer that holds only this rank's
// input is not the sum of all ranks'.
func TestVerifyFindsWrong(t *testing.T) {
	f := collectivestest.NewFabric(2, nil)
	errs := f.Run(nil, func(c *collectives.Communicator) error {
		for _, coll := range []string{"allreduce", "allgather", "alltoall", "reducescatter", "sendrecv"} {
			b := &bench[float32]{c: c, cfg: collbench.Config{Collective: coll}, op: collectives.Sum, n: 2, r: c.Rank(), count: 8, per: 4}
			b.send, b.recv = make([]float32, 8), make([]float32, 8)
			if coll == "reducescatter" {
				b.recv = make([]float32, 4)
			}
			b.fill() // and no collective
			if w := b.verify(); w == 0 {
				t.Errorf("%s: verify found nothing wrong in an unreduced buffer", coll)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
