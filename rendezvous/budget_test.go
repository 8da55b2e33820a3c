package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Budget
		err  string
	}{
		{in: "4096,2MiB", want: Budget{Keys: 4096, Bytes: 2 << 20}},
		{in: "10,100", want: Budget{Keys: 10, Bytes: 100}},
		{in: "1, 3K", want: Budget{Keys: 1, Bytes: 3 << 10}},
		{in: "1048576,1G", want: Budget{Keys: 1 << 20, Bytes: 1 << 30}},
		{in: "7,5M", want: Budget{Keys: 7, Bytes: 5 << 20}},
		{in: "7,9B", want: Budget{Keys: 7, Bytes: 9}},
		{in: "4096", err: "want KEYS,BYTES"},
		{in: "0,1M", err: "not a positive count of keys"},
		{in: "x,1M", err: "not a positive count of keys"},
		{in: "1,0", err: "not a positive size"},
		{in: "1,-5", err: "not a positive size"},
		{in: "1,5T", err: "unit"},
		{in: "1,MiB", err: "not a positive size"},
		{in: "1,99999999999G", err: "not a positive size"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseBudget(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseBudget(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseBudget(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if back, err := ParseBudget(got.String()); err != nil || back != got {
				t.Fatalf("ParseBudget(%q.String() = %q) = %+v, %v", tt.in, got.String(), back, err)
			}
		})
	}
	if s := DefaultRankBudget.String(); s != "4096,2MiB" {
		t.Errorf("DefaultRankBudget = %s", s)
	}
}

// Each local rank has its own budget; the job's counts every key the host
// caches. A put refused changes nothing; one that does not grow what is
// held is always taken.
func TestLocalKVBudgets(t *testing.T) {
	t.Parallel()
	type put struct {
		rank       int
		key, value string
		err        string // in the error; "" = accepted
	}
	tests := []struct {
		name      string
		rank, job Budget
		preload   map[string]string
		puts      []put
	}{
		{
			name: "ranks apart",
			rank: Budget{Keys: 2, Bytes: 1 << 20},
			puts: []put{
				{0, "a", "1", ""}, {0, "b", "1", ""}, {0, "c", "1", "rank 0 would hold 3 keys"},
				{1, "c", "1", ""}, {1, "d", "1", ""}, {1, "e", "1", "rank 1 would hold 3 keys"},
				{0, "a", "2", ""}, // a key put again counts once
			},
		},
		{
			name: "rank bytes",
			rank: Budget{Keys: 100, Bytes: 10},
			puts: []put{
				{0, "k", "123456789", ""}, {0, "k", "1234567890", "rank 0 would hold 11 bytes, over its budget of 100 keys and 10 bytes"},
				{0, "k", "1", ""}, {0, "j", "12345678", "rank 0 would hold 11 bytes"}, {0, "j", "1234567", ""},
			},
		},
		{
			name:    "job keys, the preloaded ones too",
			job:     Budget{Keys: 3, Bytes: 1 << 20},
			preload: map[string]string{"PMI_process_mapping": "(vector,(0,1,2))"},
			puts: []put{
				{0, "a", "1", ""}, {1, "b", "1", ""}, {1, "c", "1", "the job would hold 4 keys, over the job's budget of 3 keys"},
				{0, "b", "2", ""}, // another rank's key, put again: nothing grows
			},
		},
		{
			name: "job bytes",
			job:  Budget{Keys: 100, Bytes: 8},
			puts: []put{{0, "a", "123", ""}, {1, "b", "123", ""}, {1, "c", "1", "the job would hold 10 bytes"}, {1, "a", "12", ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, _ := NewStore(1, StoreOptions{})
			l, err := newLocalKV(st.Member(0, 0), []int{0, 1}, tt.preload)
			if err != nil {
				t.Fatal(err)
			}
			l.setBudgets(tt.rank, tt.job)
			want := map[string]string{}
			for _, p := range tt.puts {
				err := l.put(p.rank, p.key, p.value)
				var be *BudgetError
				switch {
				case p.err == "" && err != nil:
					t.Errorf("put(%d, %q, %q) = %v, want it taken", p.rank, p.key, p.value, err)
				case p.err != "" && (!errors.As(err, &be) || be.Rank != p.rank || be.Key != p.key || !strings.Contains(err.Error(), p.err)):
					t.Errorf("put(%d, %q, %q) = %v, want a *BudgetError saying %q", p.rank, p.key, p.value, err, p.err)
				case p.err == "":
					want[p.key] = p.value
				}
			}
			for k, v := range want {
				if got, ok := l.get(k); got != v || !ok {
					t.Errorf("get(%q) = %q, %v; want %q", k, got, ok, v)
				}
			}
			// What was refused is not sent at the fence.
			go l.barrier(context.Background(), 1)
			if err := l.barrier(context.Background(), 0); err != nil {
				t.Fatal(err)
			}
			for _, k := range st.Keys(0) {
				if _, ok := want[k]; !ok {
					t.Errorf("the fence published %q, which was refused", k)
				}
			}
			if n := len(st.Keys(0)); n != len(want) {
				t.Errorf("the fence published %d keys, want %d", n, len(want))
			}
		})
	}
}

// The head's store holds a generation to the job's budget: a Store.Put
// over it fails, and so does a fence whose puts would go over, for every
// member at once rather than at its timeout.
func TestStoreBudget(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(2, StoreOptions{FenceTimeout: time.Minute, Budget: Budget{Keys: 3, Bytes: 100, Setting: "--kv-job-budget"}})
	if err := st.Put(0, "head", "1"); err != nil {
		t.Fatal(err)
	}
	var be *BudgetError
	if err := st.Put(0, "big", strings.Repeat("x", 100)); !errors.As(err, &be) || !be.Job {
		t.Fatalf("Put over the budget = %v, want a *BudgetError", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Fence(context.Background(), 0, 0, map[string]string{"a": "1"})
		done <- err
	}()
	for st.waiting(0) == 0 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	_, err := st.Fence(context.Background(), 0, 1, map[string]string{"b": "1", "c": "1"})
	if !errors.As(err, &be) || be.Keys != 4 || !strings.Contains(err.Error(), "the job would hold 4 keys, over the job's budget of 3 keys and 100 bytes (--kv-job-budget KEYS,BYTES raises it)") {
		t.Fatalf("fence over the budget = %v", err)
	}
	if err := <-done; !errors.As(err, &be) {
		t.Fatalf("the other member's fence = %v, want the *BudgetError too", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the other member waited %v", d)
	}
	// Within the budget, a generation's fences go on.
	st2, _ := NewStore(1, StoreOptions{Budget: Budget{Keys: 2, Bytes: 100}})
	for i := range 3 {
		kvs, err := st2.Fence(context.Background(), 0, 0, map[string]string{"a": fmt.Sprint(i), "b": "x"})
		if err != nil || kvs["a"] != fmt.Sprint(i) {
			t.Fatalf("fence %d putting the same keys again = %v, %v", i, kvs, err)
		}
	}
}

// A Go rank's Put over its budget fails with the budget named; its
// connection stays up, and the fence and gets go on.
func TestKVBudget(t *testing.T) {
	t.Parallel()
	st, _ := NewStore(1, StoreOptions{FenceTimeout: 10 * time.Second})
	dir, err := SocketDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewKVServer(KVConfig{Secret: testSecret, Ranks: []int{0}, Fencer: st.Member(0, 0),
		RankBudget: Budget{Keys: 10, Bytes: 3 << 20, Setting: "--kv-rank-budget"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Listen(ctx, dir, "kv.sock"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := Dial(ctx, dir+"/kv.sock", testSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	mib := strings.Repeat("x", 1<<20)
	refused := 0
	for i := range 8 {
		err := cl.Put(fmt.Sprint("blob.", i), mib)
		if i < 2 {
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank 0 would hold %d bytes", 3*(1<<20+6))) ||
			!strings.Contains(err.Error(), "over its budget of 10 keys and 3 MiB (--kv-rank-budget KEYS,BYTES raises it)") {
			t.Fatalf("put %d: %v, want it refused naming the budget", i, err)
		}
		refused++
	}
	if err := cl.Put("small", "1"); err != nil {
		t.Fatalf("a small put after the refusals: %v", err)
	}
	if err := cl.Fence(ctx); err != nil {
		t.Fatalf("fence after the refusals: %v", err)
	}
	if v, err := cl.Get("small"); err != nil || v != "1" {
		t.Fatalf("Get(small) = %q, %v", v, err)
	}
	if _, err := cl.Get("blob.2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(blob.2), which was refused: %v", err)
	}
	if refused != 6 {
		t.Fatalf("%d puts refused, want 6", refused)
	}
}

// waiting returns how many members wait at the fence of generation gen.
func (s *Store) waiting(gen int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gens[gen]; g != nil && g.round != nil {
		return len(g.round.arrived)
	}
	return 0
}
