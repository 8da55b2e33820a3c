package netrank

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/netcheck"
)

// measurePair measures this rank's pair with peer: the round trip (timed
// by the lower rank; 0 on the other), then the bandwidth from the lower
// rank to the higher, then back, each the fastest of cfg.Repeats
// transfers. It returns the rate from this rank to peer, in Gbit/s, and
// the round trip in microseconds.
func measurePair(ctx context.Context, c *collectives.Communicator, cfg netcheck.Config, peer int) (gbps, rttus float64, err error) {
	lower := c.Rank() < peer
	if rttus, err = pingPong(ctx, c, cfg.Pings, peer, lower); err != nil {
		return 0, 0, fmt.Errorf("round trip: %w", err)
	}
	for _, sending := range []bool{lower, !lower} {
		for range cfg.Repeats {
			if sending {
				var g float64
				g, err = send(ctx, c, cfg, peer)
				gbps = max(gbps, g)
			} else {
				err = receive(ctx, c, cfg, peer)
			}
			if err != nil {
				return 0, 0, fmt.Errorf("bandwidth: %w", err)
			}
		}
	}
	return gbps, rttus, nil
}

// pingPong times pings 8-byte round trips, after a few untimed ones, and
// returns the median in microseconds on the lower rank (0 on the other).
func pingPong(ctx context.Context, c *collectives.Communicator, pings, peer int, lower bool) (float64, error) {
	const warmup = 3
	buf := []int64{0}
	times := make([]float64, 0, pings)
	for i := range warmup + pings {
		start := time.Now()
		if lower {
			if err := collectives.Send(ctx, c, buf, peer, tagPing); err != nil {
				return 0, err
			}
		}
		if err := collectives.Recv(ctx, c, buf, peer, tagPing); err != nil {
			return 0, err
		}
		if !lower {
			if err := collectives.Send(ctx, c, buf, peer, tagPing); err != nil {
				return 0, err
			}
			continue
		}
		if i >= warmup {
			times = append(times, float64(time.Since(start).Nanoseconds())/1e3)
		}
	}
	if len(times) == 0 {
		return 0, nil
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// unknown, in a chunk's header, says the sender has not yet chosen its
// last chunk.
const unknown = math.MaxUint64

// send sends chunks to peer until cfg.Duration has passed or
// cfg.MaxBytes are sent, and returns the rate from its first chunk to
// peer's acknowledgement of the last. Peer acknowledges every chunk, and
// no more than Window chunks are ever unacknowledged: the bytes in flight
// (in the kernels' buffers too) are bounded, so that a slow link's
// transfer ends soon after cfg.Duration rather than when its buffers
// drain. Each chunk's first 8 bytes are the index of the last chunk once
// the sender has chosen it (Window-1 chunks on, so that the receiver,
// which keeps Window receives posted, posts none too many), else
// unknown.
func send(ctx context.Context, c *collectives.Communicator, cfg netcheck.Config, peer int) (float64, error) {
	w, size := uint64(cfg.Window), cfg.ChunkBytes
	bufs := make([][]uint8, w)
	for i := range bufs {
		bufs[i] = make([]uint8, size)
	}
	reqs := make([]*collectives.Request, w)
	ack := []uint8{0}
	var last uint64 = unknown
	start := time.Now()
	for i := uint64(0); last == unknown || i <= last; i++ {
		k := i % w
		if reqs[k] != nil {
			if err := reqs[k].Wait(); err != nil {
				return 0, err
			}
			if err := collectives.Recv(ctx, c, ack, peer, tagAck); err != nil {
				return 0, fmt.Errorf("acknowledgement of chunk %d: %w", i-w, err)
			}
		}
		if last == unknown && (time.Since(start) >= cfg.Duration || int64(i+w)*int64(size) >= cfg.MaxBytes) {
			last = i + w - 1
		}
		binary.LittleEndian.PutUint64(bufs[k], last)
		reqs[k] = collectives.SendAsync(ctx, c, bufs[k], peer, tagData)
	}
	for i := range min(w, last+1) {
		if err := reqs[(last+1+i)%w].Wait(); err != nil {
			return 0, err
		}
		if err := collectives.Recv(ctx, c, ack, peer, tagAck); err != nil {
			return 0, fmt.Errorf("acknowledgement: %w", err)
		}
	}
	secs := time.Since(start).Seconds()
	return float64(last+1) * float64(size) * 8 / secs / 1e9, nil
}

// receive receives send's chunks from peer, keeping Window receives
// posted, and acknowledges each.
func receive(ctx context.Context, c *collectives.Communicator, cfg netcheck.Config, peer int) error {
	w, size := uint64(cfg.Window), cfg.ChunkBytes
	bufs := make([][]uint8, w)
	reqs := make([]*collectives.Request, w)
	for i := range bufs {
		bufs[i] = make([]uint8, size)
		reqs[i] = collectives.RecvAsync(ctx, c, bufs[i], peer, tagData)
	}
	ack := []uint8{1}
	var last uint64 = unknown
	for j := uint64(0); last == unknown || j <= last; j++ {
		k := j % w
		if err := reqs[k].Wait(); err != nil {
			return err
		}
		if h := binary.LittleEndian.Uint64(bufs[k]); last == unknown && h != unknown {
			if h < j || h >= j+w {
				return fmt.Errorf("chunk %d names %d as the last: want %d to %d", j, h, j, j+w-1)
			}
			last = h
		}
		if next := j + w; last == unknown || next <= last {
			reqs[k] = collectives.RecvAsync(ctx, c, bufs[k], peer, tagData)
		}
		if err := collectives.Send(ctx, c, ack, peer, tagAck); err != nil {
			return fmt.Errorf("acknowledging chunk %d: %w", j, err)
		}
	}
	return nil
}
