package collectives_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/collectives"
	"github.com/gorun/gorun/collectives/collectivestest"
	"github.com/gorun/gorun/rendezvous"
)

// runProgress runs fn on every rank of an n-rank fabric and returns each
// rank's Progress after fn.
func runProgress(t *testing.T, n int, fn func(c *collectives.Communicator) error) map[int]rendezvous.Progress {
	t.Helper()
	f := collectivestest.NewFabric(n, nil)
	var mu sync.Mutex
	byRank := map[int]rendezvous.Progress{}
	errs := f.Run(nil, func(c *collectives.Communicator) error {
		err := fn(c)
		mu.Lock()
		byRank[c.Rank()] = c.Progress()
		mu.Unlock()
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return byRank
}

// TestStragglerNamed: rank 2 sleeps before each of 10 all-reduces, and
// Stragglers over the ranks' Progress names it last in all 10, each time
// by at least the sleep. So that it is at least the sleep however the
// goroutines are scheduled, rank 2 starts its sleep once the others told
// it (by a Send, which makes no arrival) that they entered the call.
func TestStragglerNamed(t *testing.T) {
	t.Parallel()
	const n, slow, sleep, calls = 4, 2, 20 * time.Millisecond, 10
	ctx := context.Background()
	byRank := runProgress(t, n, func(c *collectives.Communicator) error {
		buf, note := []float64{1}, []byte{0}
		for range calls {
			if c.Rank() != slow {
				req := collectives.AllReduceAsync(ctx, c, buf, collectives.Sum) // entered when it returns
				if err := collectives.Send(ctx, c, note, slow, 0); err != nil {
					return err
				}
				if err := req.Wait(); err != nil {
					return err
				}
				continue
			}
			for r := range n {
				if r != slow {
					if err := collectives.Recv(ctx, c, note, r, 0); err != nil {
						return err
					}
				}
			}
			time.Sleep(sleep)
			if err := collectives.AllReduce(ctx, c, buf, collectives.Sum); err != nil {
				return err
			}
		}
		return nil
	})
	for r, p := range byRank {
		wantCalls := uint64(2 * calls) // an all-reduce and a send each time
		if r == slow {
			wantCalls = n * calls // an all-reduce and n-1 receives
		}
		if p.Calls != wantCalls || len(p.Arrivals) != calls {
			t.Fatalf("rank %d: %d calls, %d arrivals; want %d and %d", r, p.Calls, len(p.Arrivals), wantCalls, calls)
		}
		for i, a := range p.Arrivals {
			if a.Comm != "world" || a.Seq != uint64(i+1) || a.Op != "allreduce" {
				t.Errorf("rank %d: arrival %d is %+v", r, i, a)
			}
		}
	}
	rep := rendezvous.Stragglers(byRank)
	t.Log(rep)
	if rep.Calls != calls || rep.Rank != slow || rep.Last[slow] != calls {
		t.Errorf("Stragglers: %d calls compared, rank %d last in %d; want rank %d last in all %d", rep.Calls, rep.Rank, rep.Last[rep.Rank], slow, calls)
	}
	if rep.MedianLag < sleep || rep.Recent.Last != slow || rep.Recent.Lag < sleep || rep.Recent.Seq != calls {
		t.Errorf("Stragglers: median lag %v, most recent call %+v; want rank %d late by %v or more in call #%d", rep.MedianLag, rep.Recent, slow, sleep, calls)
	}
}

// TestProgressSplit: the communicators of a Split get a name that all
// their ranks agree on and no other communicator has; sends and receives
// count as calls without arrivals.
func TestProgressSplit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	byRank := runProgress(t, 4, func(c *collectives.Communicator) error {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		sub, err := c.Split(ctx, c.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		if err := sub.Barrier(ctx); err != nil {
			return err
		}
		buf := []int32{1}
		if c.Rank() == 0 {
			return collectives.Send(ctx, c, buf, 1, 5)
		}
		if c.Rank() == 1 {
			return collectives.Recv(ctx, c, buf, 0, 5)
		}
		return nil
	})
	for r, p := range byRank {
		want := []rendezvous.Arrival{
			{Comm: "world", Seq: 1, Op: "barrier"},
			{Comm: "world", Seq: 2, Op: "split"},
			{Comm: fmt.Sprintf("world/2.%d", r%2), Seq: 1, Op: "barrier"},
		}
		got := slices.Clone(p.Arrivals)
		for i := range got {
			if got[i].At == 0 || i > 0 && got[i].At < got[i-1].At {
				t.Errorf("rank %d: arrival %d at %d, after %d", r, i, got[i].At, got[i-1].At)
			}
			got[i].At = 0
		}
		if !slices.Equal(got, want) {
			t.Errorf("rank %d: arrivals %+v, want %+v", r, got, want)
		}
		wantCalls := uint64(3) // ranks 0 and 1 also sent or received
		if r < 2 {
			wantCalls++
		}
		if p.Calls != wantCalls {
			t.Errorf("rank %d: %d calls, want %d", r, p.Calls, wantCalls)
		}
	}
	if rep := rendezvous.Stragglers(byRank); rep.Calls != 4 {
		t.Errorf("Stragglers compared %d calls, want 4 (2 of the world, 1 of each half)", rep.Calls)
	}
}

// TestProgressRing: the Progress holds the most recent ProgressArrivals
// calls, oldest first, and counts them all.
func TestProgressRing(t *testing.T) {
	t.Parallel()
	const calls = collectives.ProgressArrivals + 100
	byRank := runProgress(t, 2, func(c *collectives.Communicator) error {
		for range calls {
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	for r, p := range byRank {
		if p.Calls != calls || len(p.Arrivals) != collectives.ProgressArrivals ||
			p.Arrivals[0].Seq != 101 || p.Arrivals[len(p.Arrivals)-1].Seq != calls {
			t.Errorf("rank %d: %d calls, %d arrivals from #%d to #%d", r, p.Calls, len(p.Arrivals), p.Arrivals[0].Seq, p.Arrivals[len(p.Arrivals)-1].Seq)
		}
	}
}

// TestProgressReported: InitWith over gorun's rendezvous client has the
// client report the world's Progress: the agent's KVServer asks for it
// while the ranks run, and has it from their goodbyes after.
func TestProgressReported(t *testing.T) {
	t.Parallel()
	const n = 2
	secret := []byte("0123456789abcdef-progress")
	st, _ := rendezvous.NewStore(1, rendezvous.StoreOptions{})
	srv, err := rendezvous.NewKVServer(rendezvous.KVConfig{Secret: secret, Ranks: []int{0, 1}, Fencer: st.Member(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := rendezvous.SocketDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := srv.Listen(ctx, dir, "kv.sock"); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ready := make(chan struct{}, n)
	asked := make(chan struct{})
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kv, err := rendezvous.Dial(ctx, filepath.Join(dir, "kv.sock"), secret, r)
			if err != nil {
				t.Error(err)
				return
			}
			defer kv.Close()
			c, err := collectives.InitWith(ctx, collectives.Setup{Rank: r, Size: n, Hosts: 1, KV: kv, Transport: "shm", LocalRank: r}, nil)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for range 3 {
				if err := c.Barrier(ctx); err != nil {
					t.Error(err)
				}
			}
			ready <- struct{}{}
			<-asked
			c.Barrier(ctx)
		}()
	}
	for range n {
		<-ready
	}
	for r := range n {
		p, err := srv.Progress(ctx, r)
		if err != nil || p.Calls != 3 || len(p.Arrivals) != 3 || p.Arrivals[2].Seq != 3 {
			t.Errorf("rank %d's progress while it runs: %+v, %v; want 3 barriers", r, p, err)
		}
	}
	close(asked)
	wg.Wait()
	for r := range n {
		if p, ok := srv.Final(r); !ok || p.Calls != 4 {
			t.Errorf("rank %d's final progress: %+v, %v; want 4 calls", r, p, ok)
		}
	}
}
