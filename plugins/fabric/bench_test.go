package main

import (
	"fmt"
	"testing"

	"github.com/gorun/gorun/plugins/sdk"
)

var benchSizes = []int{8, 4 << 10, 1 << 20}

// benchBufs returns a send and a receive buffer of n bytes, from Go memory
// or registered (memfd, zero-copy) memory.
func benchBufs(b *testing.B, a, c sdk.Transport, n int, registered bool) (sbuf []byte, sreg sdk.Registration, rbuf []byte, rreg sdk.Registration) {
	if !registered {
		return make([]byte, n), nil, make([]byte, n), nil
	}
	sbuf, sreg = alloc(b, a, n)
	rbuf, rreg = alloc(b, c, n)
	return
}

func spin(b *testing.B, r sdk.Request) {
	for {
		ok, _, err := r.Test()
		if ok {
			if err != nil {
				b.Fatal(err)
			}
			return
		}
	}
}

// BenchmarkPingPong measures round trips (one message each way) with
// tcp;ofi_rxm on loopback; one goroutine drives both transports.
func BenchmarkPingPong(b *testing.B) {
	for _, n := range benchSizes {
		for _, registered := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/registered=%v", n, registered), func(b *testing.B) {
				x, y := newT(b, "tcp;ofi_rxm"), newT(b, "tcp;ofi_rxm")
				xy, yRecv := connect(b, x, y)
				yx, xRecv := connect(b, y, x)
				xs, xsr, xr, xrr := benchBufs(b, x, x, n, registered)
				ys, ysr, yr, yrr := benchBufs(b, y, y, n, registered)
				b.SetBytes(int64(2 * n))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					r1, err := yRecv.Recv(yr, yrr)
					if err != nil {
						b.Fatal(err)
					}
					s1, err := xy.Send(xs, xsr)
					if err != nil {
						b.Fatal(err)
					}
					spin(b, r1)
					spin(b, s1)
					r2, err := xRecv.Recv(xr, xrr)
					if err != nil {
						b.Fatal(err)
					}
					s2, err := yx.Send(ys, ysr)
					if err != nil {
						b.Fatal(err)
					}
					spin(b, r2)
					spin(b, s2)
				}
			})
		}
	}
}

// BenchmarkBandwidth streams messages one way with up to 16 sends in
// flight, the receiver posting one receive at a time as the SDK does.
func BenchmarkBandwidth(b *testing.B) {
	const window = 16
	for _, n := range benchSizes {
		for _, registered := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/registered=%v", n, registered), func(b *testing.B) {
				x, y := newT(b, "tcp;ofi_rxm"), newT(b, "tcp;ofi_rxm")
				sc, rc := connect(b, x, y)
				sbuf, sreg, rbuf, rreg := benchBufs(b, x, y, n, registered)
				b.SetBytes(int64(n))
				b.ResetTimer()
				var inflight []sdk.Request
				var recv sdk.Request
				sent, got := 0, 0
				for got < b.N {
					for sent < b.N && len(inflight) < window {
						r, err := sc.Send(sbuf, sreg)
						if err != nil {
							b.Fatal(err)
						}
						inflight = append(inflight, r)
						sent++
					}
					if recv == nil {
						r, err := rc.Recv(rbuf, rreg)
						if err != nil {
							b.Fatal(err)
						}
						recv = r
					}
					if ok, _, err := recv.Test(); ok {
						if err != nil {
							b.Fatal(err)
						}
						recv = nil
						got++
					}
					for len(inflight) > 0 {
						ok, _, err := inflight[0].Test()
						if !ok {
							break
						}
						if err != nil {
							b.Fatal(err)
						}
						inflight = inflight[1:]
					}
				}
				for _, r := range inflight {
					spin(b, r)
				}
			})
		}
	}
}
