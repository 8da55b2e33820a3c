package rendezvous

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// wireFencer is an agent's Fencer whose fence crosses a socket to a "head"
// goroutine, the puts as JSON and the answer as the encoded Published
// block, the way gorun's control frames carry them (one message per host
// per fence), so that the benchmark pays for encoding and a hop.
type wireFencer struct {
	mu  sync.Mutex
	enc *json.Encoder
	dec *json.Decoder
}

type wireReply struct {
	KVs []byte // EncodePublished
	Err string
}

func (w *wireFencer) Fence(_ context.Context, puts map[string]string) (*Published, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(puts); err != nil {
		return nil, err
	}
	var r wireReply
	if err := w.dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.Err != "" {
		return nil, fmt.Errorf("%s", r.Err)
	}
	return DecodePublished(r.KVs)
}

// serveWire is the head's end of one host's wire: each message is a fence.
func serveWire(st *Store, member int, c net.Conn) {
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	for gen := 0; ; {
		var puts map[string]string
		if err := dec.Decode(&puts); err != nil {
			return
		}
		kvs, err := st.FenceMany(context.Background(), gen, []int{member}, puts)
		r := wireReply{KVs: EncodePublished(kvs)}
		if err != nil {
			r.Err = err.Error()
		}
		if enc.Encode(r) != nil {
			return
		}
	}
}

// BenchmarkFence1000Ranks16Agents: 1,000 simulated ranks, spread over 16
// agents (KVServers on unix sockets, each with its own wire to the head's
// Store), each put a 64-byte value, fence, and get 8 other ranks' values.
// It reports the median put and get latencies seen by a rank while all
// ranks work at once (put-us, get-us: on a small machine mostly queueing),
// the same for one rank alone (put1-us, get1-us), and the time from the
// first rank entering the fence to the last one leaving it (fence-us).
func BenchmarkFence1000Ranks16Agents(b *testing.B) {
	const ranks, agents, gets = 1000, 16, 8
	st, err := NewStore(agents, StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := SocketDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	clients := make([]*Client, ranks)
	for a := range agents {
		var local []int
		for r := a; r < ranks; r += agents {
			local = append(local, r)
		}
		agentEnd, headEnd := net.Pipe()
		go serveWire(st, a, headEnd)
		f := &wireFencer{enc: json.NewEncoder(agentEnd), dec: json.NewDecoder(agentEnd)}
		srv, err := NewKVServer(KVConfig{Secret: testSecret, Ranks: local, Fencer: f})
		if err != nil {
			b.Fatal(err)
		}
		name := "a" + strconv.Itoa(a) + ".sock"
		if _, err := srv.Listen(ctx, dir, name); err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		for _, r := range local {
			if clients[r], err = Dial(ctx, filepath.Join(dir, name), testSecret, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	value := string(make([]byte, 64))
	var puts, getsLat []time.Duration
	var fences []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var first, last time.Time
		enter := make([]time.Time, ranks)
		for r, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("i%d.r%d", i, r)
				t0 := time.Now()
				if err := c.Put(key, value); err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				enter[r] = t1
				if err := c.Fence(ctx); err != nil {
					b.Error(err)
					return
				}
				t2 := time.Now()
				var gl []time.Duration
				for g := 1; g <= gets; g++ {
					t := time.Now()
					if _, err := c.Get(fmt.Sprintf("i%d.r%d", i, (r+g*97)%ranks)); err != nil {
						b.Error(err)
						return
					}
					gl = append(gl, time.Since(t))
				}
				mu.Lock()
				puts = append(puts, t1.Sub(t0))
				getsLat = append(getsLat, gl...)
				if last.Before(t2) {
					last = t2
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		first = enter[0]
		for _, t := range enter {
			if !t.IsZero() && t.Before(first) {
				first = t
			}
		}
		fences = append(fences, last.Sub(first))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Microseconds())
	}
	// The same operations by one rank while the others are idle: the
	// latency of the protocol itself, not of a queue of 1,000 ranks on
	// this machine's cores.
	var idlePut, idleGet []time.Duration
	for k := range 200 {
		t0 := time.Now()
		if err := clients[0].Put("idle."+strconv.Itoa(k), value); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := clients[0].Get("i0.r1"); err != nil {
			b.Fatal(err)
		}
		idlePut, idleGet = append(idlePut, t1.Sub(t0)), append(idleGet, time.Since(t1))
	}
	b.ReportMetric(med(puts), "put-us")
	b.ReportMetric(med(fences), "fence-us")
	b.ReportMetric(med(getsLat), "get-us")
	b.ReportMetric(med(idlePut), "put1-us")
	b.ReportMetric(med(idleGet), "get1-us")
	for _, c := range clients {
		c.Close()
	}
}
