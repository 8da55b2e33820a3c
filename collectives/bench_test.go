package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
)

// BenchmarkAllReduce measures each AllReduce algorithm over the in-memory
// fabric, reporting nccl-tests' bus bandwidth (algbw * 2(n-1)/n). The
// fabric copies through memory, so the numbers compare algorithms and
// overheads, not networks.
func BenchmarkAllReduce(b *testing.B) {
	const n = 4
	for _, algo := range collectives.CollAllReduce.Algorithms() {
		for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%s", algo, collectives.FormatSize(int64(size))), func(b *testing.B) {
				thr := collectives.DefaultThresholds()
				if err := thr.Set("allreduce=" + algo.String()); err != nil {
					b.Fatal(err)
				}
				f := collectivestest.NewFabric(n, nil)
				b.SetBytes(int64(size))
				b.ResetTimer()
				errs := f.Run(&collectives.Options{Thresholds: thr}, func(c *collectives.Communicator) error {
					buf := make([]float32, size/4)
					for range b.N {
						if err := collectives.AllReduce(context.Background(), c, buf, collectives.Sum); err != nil {
							return err
						}
					}
					return nil
				})
				b.StopTimer()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
				algbw := float64(size) * float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(algbw*2*(n-1)/n/1e9, "busGB/s")
			})
		}
	}
}

// BenchmarkAllReduceLatency8B measures the latency of an 8-byte AllReduce
// (one float64) among 4 ranks over the in-memory fabric: the fixed cost of
// a collective call, which bookkeeping such as the arrival record adds to.
func BenchmarkAllReduceLatency8B(b *testing.B) {
	f := collectivestest.NewFabric(4, nil)
	b.ResetTimer()
	errs := f.Run(nil, func(c *collectives.Communicator) error {
		buf := make([]float64, 1)
		for range b.N {
			if err := collectives.AllReduce(context.Background(), c, buf, collectives.Sum); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
