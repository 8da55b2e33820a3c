package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStoreFenceMerges(t *testing.T) {
	st, err := NewStore(3, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(0, "head", "h"); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Get(0, "head"); ok {
		t.Error("Put visible before the fence")
	}
	var wg sync.WaitGroup
	res := make([]map[string]string, 3)
	for m := 0; m < 3; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := st.Fence(context.Background(), 0, m, map[string]string{fmt.Sprint("k", m): fmt.Sprint(m)})
			if err != nil {
				t.Error(err)
			}
			res[m] = r
		}()
	}
	wg.Wait()
	for m, r := range res {
		if len(r) != 4 || r["k0"] != "0" || r["k2"] != "2" || r["head"] != "h" {
			t.Errorf("member %d got %v", m, r)
		}
	}
	if v, ok := st.Get(0, "k1"); !ok || v != "1" {
		t.Errorf("Get(k1) = %q, %v", v, ok)
	}
	if _, ok := st.Get(1, "k1"); ok {
		t.Error("generation 1 sees generation 0's key")
	}
	// The second fence delivers only what is new.
	for m := 0; m < 3; m++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			puts := map[string]string{}
			if m == 1 {
				puts["late"] = "x"
			}
			r, err := st.Fence(context.Background(), 0, m, puts)
			if err != nil || len(r) != 1 || r["late"] != "x" {
				t.Errorf("second fence, member %d: %v, %v", m, r, err)
			}
		}()
	}
	wg.Wait()
	if st.Fences(0) != 2 {
		t.Errorf("Fences = %d", st.Fences(0))
	}
}

func TestStoreFenceTimeoutNamesMissing(t *testing.T) {
	st, _ := NewStore(4, StoreOptions{FenceTimeout: 50 * time.Millisecond})
	errs := make(chan error, 2)
	for _, m := range []int{0, 2} {
		go func() { _, err := st.Fence(context.Background(), 0, m, nil); errs <- err }()
	}
	for range 2 {
		err := <-errs
		var te *FenceTimeoutError
		if !errors.As(err, &te) || fmt.Sprint(te.Missing) != "[1 3]" {
			t.Errorf("error %v, want a timeout naming members 1 and 3", err)
		}
	}
}

func TestStoreLeaveFailsWaiters(t *testing.T) {
	st, _ := NewStore(3, StoreOptions{})
	errs := make(chan error, 2)
	for _, m := range []int{0, 1} {
		go func() { _, err := st.Fence(context.Background(), 5, m, nil); errs <- err }()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	st.Leave(5, 2, "exit code 3")
	for range 2 {
		err := <-errs
		var le *MemberLeftError
		if !errors.As(err, &le) || le.Member != 2 || !strings.Contains(err.Error(), "exit code 3") {
			t.Errorf("error %v, want member 2 left", err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waiters failed after %v", d)
	}
	// Later fences of that generation fail at once; other generations work.
	if _, err := st.Fence(context.Background(), 5, 0, nil); err == nil {
		t.Error("fence after Leave succeeded")
	}
	st1, _ := NewStore(1, StoreOptions{})
	st1.Leave(0, 0, "x")
	if _, err := st1.Fence(context.Background(), 1, 0, nil); err != nil {
		t.Errorf("generation 1 after a leave in generation 0: %v", err)
	}
}

func TestStoreContextCancelFailsRound(t *testing.T) {
	st, _ := NewStore(3, StoreOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, err := st.Fence(ctx, 0, 0, nil); errs <- err }()
	go func() { _, err := st.Fence(context.Background(), 0, 1, nil); errs <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	for range 2 {
		if err := <-errs; err == nil {
			t.Error("fence succeeded")
		}
	}
}

func TestStoreLimitsAndMisuse(t *testing.T) {
	st, _ := NewStore(2, StoreOptions{MaxKeyLen: 4, MaxValueLen: 8, FenceTimeout: time.Second})
	if err := st.Put(0, "toolong", "v"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("long key: %v", err)
	}
	if err := st.Put(0, "k", "123456789"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("long value: %v", err)
	}
	if err := st.Put(0, "", "v"); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := st.Fence(context.Background(), 0, 2, nil); err == nil {
		t.Error("member out of range accepted")
	}
	if _, err := st.Fence(context.Background(), 0, 0, map[string]string{"k": "123456789"}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("long value in fence: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := st.Fence(context.Background(), 0, 0, nil); done <- err }()
	time.Sleep(20 * time.Millisecond)
	if _, err := st.Fence(context.Background(), 0, 0, nil); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("double arrival: %v", err)
	}
	st.Forget(0)
	if err := <-done; err == nil {
		t.Error("Forget left a waiter succeeding")
	}
	if _, err := NewStore(0, StoreOptions{}); err == nil {
		t.Error("NewStore(0) succeeded")
	}
}

// A local barrier that some ranks never reach fails after the timeout for
// the ranks that did arrive, and names the missing ones, once.
func TestLocalBarrierTimeout(t *testing.T) {
	t.Parallel()
	st, err := NewStore(1, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported [][]int
	l, err := newLocalKV(st.Member(0, 0), []int{4, 5, 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.watch = fenceWatch{Timeout: 50 * time.Millisecond, OnTimeout: func(m []int) {
		mu.Lock()
		reported = append(reported, m)
		mu.Unlock()
	}}
	start := time.Now()
	err = l.barrier(context.Background(), 5)
	var te *LocalFenceTimeoutError
	if !errors.As(err, &te) || fmt.Sprint(te.Missing) != "[4 6]" {
		t.Fatalf("barrier: %v, want a timeout naming ranks 4 and 6", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("failed after %v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(reported) != "[[4 6]]" {
		t.Errorf("reported %v, want [[4 6]]", reported)
	}
	// A complete barrier does not time out later.
	l2, _ := newLocalKV(st.Member(1, 0), []int{1}, nil)
	l2.watch = fenceWatch{Timeout: 20 * time.Millisecond, OnTimeout: func([]int) { t.Error("a complete barrier timed out") }}
	if err := l2.barrier(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
}
