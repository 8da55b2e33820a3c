package collectives_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/transport"
)

// memKV is a rendezvous store for ranks that are goroutines of one
// process: the real transports are under test here, not the store (which
// the tests in cmd/gorun exercise through gorun itself).
type memKV struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	kv    map[string]string
	in    int
	round int
}

func newMemKV(n int) *memKV {
	m := &memKV{n: n, kv: map[string]string{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *memKV) Put(k, v string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kv[k] = v
	return nil
}

func (m *memKV) Get(k string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.kv[k]
	if !ok {
		return "", fmt.Errorf("%s: not found", k)
	}
	return v, nil
}

func (m *memKV) Fence(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	round := m.round
	m.in++
	if m.in == m.n {
		m.in, m.round = 0, m.round+1
		m.cond.Broadcast()
	}
	for m.round == round {
		m.cond.Wait()
	}
	return nil
}

// world starts n ranks as goroutines, each connected by InitWith with the
// given transport choice and hosts, runs f on each, closes them, and
// returns each rank's error.
func world(t *testing.T, n int, tr string, hosts []int, opts *collectives.Options, f func(c *collectives.Communicator) error) []error {
	t.Helper()
	return worldWith(t, n, collectives.Setup{Transport: tr}, hosts, opts, f)
}

// worldWith is world with more of the Setup (a plugin, a fallback): every
// rank gets s with its own place filled in.
func worldWith(t *testing.T, n int, s collectives.Setup, hosts []int, opts *collectives.Options, f func(c *collectives.Communicator) error) []error {
	t.Helper()
	kv := newMemKV(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s := s
			// Loopback only: tests never listen on another interface.
			s.Rank, s.Size, s.KV, s.Iface, s.LocalRank = r, n, kv, "=lo", -1
			if hosts != nil {
				s.Host = hosts[r]
			}
			c, err := collectives.InitWith(ctx, s, opts)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = f(c)
			c.Close()
		}()
	}
	wg.Wait()
	return errs
}

// TestInitTransports runs every collective over the real transports:
// shared memory only, TCP only, and both with ranks on several (pretended)
// hosts, so that the hierarchical forms mix them.
func TestInitTransports(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		n         int
		transport string
		hosts     []int
		want      string
	}{
		{"shm/4", 4, "", nil, "shm"},
		{"shm/3", 3, "shm", nil, "shm"},
		{"tcp/3", 3, "tcp", nil, "tcp"},
		{"mixed/5", 5, "auto", []int{0, 0, 1, 1, 2}, "shm+tcp"},
		{"one", 1, "", nil, "self"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := world(t, tc.n, tc.transport, tc.hosts, &collectives.Options{Timeout: time.Minute}, func(c *collectives.Communicator) error {
				if got := c.Transports(); got != tc.want && !(c.Rank() == 4 && got == "tcp") {
					return fmt.Errorf("transports %q, want %q", got, tc.want)
				}
				ctx := context.Background()
				for coll := range collectives.CollBarrier + 1 {
					// 0, 1, odd, and above the combining limit.
					for _, length := range []int{0, 1, 37, 5000} {
						if err := exerciseAll(ctx, c, coll, length, someTypes); err != nil {
							return fmt.Errorf("%s, %d elements: %w", coll, length, err)
						}
					}
					// Above the transports' eager limit, in chunks, and
					// whole messages above TCP's striping size.
					if err := exercise[float32](ctx, c, coll, 300_007); err != nil {
						return fmt.Errorf("%s, 300007 elements: %w", coll, err)
					}
				}
				return sendRecv[float32](ctx, c, 700_001)
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestInitEveryType runs every element type and operator over shared
// memory and TCP at once.
func TestInitEveryType(t *testing.T) {
	t.Parallel()
	errs := world(t, 4, "auto", []int{0, 0, 1, 1}, nil, func(c *collectives.Communicator) error {
		for _, coll := range []collectives.Collective{collectives.CollAllReduce, collectives.CollReduceScatter} {
			for _, length := range []int{3, 4099} {
				if err := exerciseAll(context.Background(), c, coll, length, everyType); err != nil {
					return err
				}
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

// TestInitMismatch checks that a mismatched call is detected over the real
// transports too, on both sides of the combining limit.
func TestInitMismatch(t *testing.T) {
	t.Parallel()
	for _, length := range []int{10, 100_000} {
		for _, tr := range []string{"shm", "tcp"} {
			t.Run(fmt.Sprintf("%s/%d", tr, length), func(t *testing.T) {
				t.Parallel()
				errs := world(t, 3, tr, nil, &collectives.Options{Timeout: 20 * time.Second}, func(c *collectives.Communicator) error {
					n := length
					if c.Rank() == 2 {
						n = 2*length + 1
					}
					buf := make([]float32, n)
					err := collectives.AllReduce(context.Background(), c, buf, collectives.Sum)
					if err == nil {
						err = c.Barrier(context.Background())
					}
					return err
				})
				for r, err := range errs {
					if !errors.Is(err, collectives.ErrMismatch) {
						t.Errorf("rank %d: %v, want a mismatch", r, err)
					}
				}
			})
		}
	}
}

func TestInitInvalid(t *testing.T) {
	for _, s := range []collectives.Setup{
		{Rank: 2, Size: 2},
		{Rank: 0, Size: 2},
		{Rank: 0, Size: 2, KV: newMemKV(2), Transport: "ib"},
	} {
		if _, err := collectives.InitWith(context.Background(), s, nil); !errors.Is(err, collectives.ErrInvalid) {
			t.Errorf("InitWith(%+v) = %v, want ErrInvalid", s, err)
		}
	}
	t.Setenv("GORUN_RANK", "")
	if _, err := collectives.Init(context.Background(), nil); err == nil {
		t.Error("Init outside gorun succeeded")
	}
}

// pair connects two ranks of this process over transport tr ("shm" or
// "tcp", over loopback) with InitWith. It returns nil, having reported
// the error, when they could not connect.
func pair(tb testing.TB, tr string) []*collectives.Communicator {
	kv := newMemKV(2)
	comms := make([]*collectives.Communicator, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = collectives.InitWith(context.Background(), collectives.Setup{Rank: r, Size: 2, KV: kv, Transport: tr, Iface: "=lo"}, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Error(err)
		return nil
	}
	return comms
}

// BenchmarkInitAllReduce measures AllReduce between two ranks of this
// process over the real shared-memory and TCP (loopback) transports.
func BenchmarkInitAllReduce(b *testing.B) {
	for _, tr := range []string{"shm", "tcp"} {
		for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%s", tr, collectives.FormatSize(int64(size))), func(b *testing.B) {
				comms := pair(b, tr)
				if comms == nil {
					return
				}
				var wg sync.WaitGroup
				b.SetBytes(int64(size))
				b.ResetTimer()
				for r := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]float32, size/4)
						for range b.N {
							if err := collectives.AllReduce(context.Background(), comms[r], buf, collectives.Sum); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				for _, c := range comms {
					c.Close()
				}
			})
		}
	}
}

// initEach runs InitWith in n ranks at once, each with the Setup that
// setup returns for it (its Rank, Size and KV filled in here), closes the
// communicators that came up and returns each rank's error.
func initEach(n int, limit time.Duration, setup func(r int) collectives.Setup) []error {
	kv := newMemKV(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			s := setup(r)
			s.Rank, s.Size, s.KV = r, n, kv
			c, err := collectives.InitWith(ctx, s, nil)
			if err == nil {
				c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errs
}

// Ranks that disagree on the transport fail at Init with an error that
// says so, instead of waiting for a connection that never comes.
func TestInitTransportDisagreement(t *testing.T) {
	t.Parallel()
	errs := initEach(2, 20*time.Second, func(r int) collectives.Setup {
		return collectives.Setup{Hosts: 1, Transport: []string{"tcp", "auto"}[r], Iface: "=lo"}
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 (host 0) has no tcp address: it did not listen on tcp") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

func TestParseTransport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want transport.Mode
		err  string
	}{
		{"", transport.ModeAuto, ""},
		{"auto", transport.ModeAuto, ""},
		{"tcp", transport.ModeTCP, ""},
		{"shm", transport.ModeSHM, ""},
		{"plugin", transport.ModePlugin, ""},
		{"ib", 0, `"ib": want auto, tcp, shm or plugin`},
		{"TCP", 0, `"TCP": want auto, tcp, shm or plugin`},
	} {
		got, err := collectives.ParseTransport(tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseTransport(%q) = %v, want error %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseTransport(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	_, err := collectives.InitWith(context.Background(), collectives.Setup{Rank: 0, Size: 2, KV: newMemKV(2), Transport: "ib"}, nil)
	if want := `collectives: invalid argument: init: transport "ib": want auto, tcp, shm or plugin (GORUN_COLL_TRANSPORT)`; err == nil || err.Error() != want {
		t.Errorf("InitWith with transport ib: %v, want %q", err, want)
	}
}

// Options.Logger receives InitWith's warnings, word for word as they used
// to reach standard error.
func TestInitLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := log.New(&buf, "", 0)
	missing := filepath.Join(t.TempDir(), "gorun-plugin-nothere")
	errs := worldWith(t, 2, collectives.Setup{Plugin: missing, Fallback: "tcp"}, []int{0, 1}, &collectives.Options{Logger: logger}, func(c *collectives.Communicator) error {
		if got := c.Transports(); got != "tcp" {
			return fmt.Errorf("transports %q, want tcp", got)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	slices.Sort(lines)
	if len(lines) != 2 {
		t.Fatalf("logged %q, want a line per rank", buf.String())
	}
	for r, l := range lines {
		prefix := fmt.Sprintf("gorun: rank %d: ", r)
		if !strings.HasPrefix(l, prefix) || !strings.Contains(l, "gorun-plugin-nothere") || !strings.HasSuffix(l, "; going on over tcp (--transport-fallback tcp)") {
			t.Errorf("line %q, want %q, the plugin, and the fallback", l, prefix)
		}
	}
}

// A small AllReduce between two ranks, over shared memory and over TCP,
// allocates nothing in steady state: no task, context, message, transfer
// or transport request per call (each is reused), so that the garbage
// collector never runs because of collectives.
func TestSteadyStateNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		tr   string
		size int
	}{{"shm", 8}, {"shm", 4 << 10}, {"tcp", 8}, {"tcp", 4 << 10}} {
		size := tc.size
		t.Run(tc.tr+"/"+collectives.FormatSize(int64(size)), func(t *testing.T) {
			comms := pair(t, tc.tr)
			if comms == nil {
				return
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			const warm, runs = 200, 2000
			bufs := [2][]float32{make([]float32, size/4), make([]float32, size/4)}
			call := func(r int) error {
				return collectives.AllReduce(context.Background(), comms[r], bufs[r], collectives.Sum)
			}
			peerErr := make(chan error, 1)
			go func() {
				var err error
				for range warm + runs + 1 { // AllocsPerRun calls once more, to warm up
					if err = call(1); err != nil {
						break
					}
				}
				peerErr <- err
			}()
			for range warm {
				if err := call(0); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			allocs := testing.AllocsPerRun(runs, func() {
				if e := call(0); e != nil && err == nil {
					err = e
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-peerErr; err != nil {
				t.Fatal(err)
			}
			if allocs != 0 {
				t.Errorf("%v allocations per AllReduce of %d bytes over %s (both ranks), want 0", allocs, size, tc.tr)
			}
		})
	}
}
