package collectives

import (
	"sync"
	"testing"
)

// BenchmarkProgressArrive measures what recording an arrival adds to a
// collective call.
func BenchmarkProgressArrive(b *testing.B) {
	var l progressLog
	name := worldName
	for i := range b.N {
		l.arrive(&name, uint32(i), CollAllReduce)
	}
}

// TestProgressConcurrent copies the log while goroutines record into it
// (for the race detector) and checks that every copy is whole: arrivals
// in order, each with its own fields.
func TestProgressConcurrent(t *testing.T) {
	t.Parallel()
	var l progressLog
	names := []string{"a", "b"}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				l.arrive(&names[g], uint32(i), Collective(g))
			}
		}()
	}
	for range 200 {
		p := l.progress()
		for _, a := range p.Arrivals {
			if (a.Comm == "a") != (a.Op == "allreduce") || a.Comm != "a" && a.Op != "broadcast" {
				t.Fatalf("a torn arrival: %+v", a)
			}
		}
		if len(p.Arrivals) > ProgressArrivals {
			t.Fatalf("%d arrivals", len(p.Arrivals))
		}
	}
	wg.Wait()
	if p := l.progress(); p.Calls != 40000 || len(p.Arrivals) != ProgressArrivals {
		t.Errorf("%d calls, %d arrivals", p.Calls, len(p.Arrivals))
	}
}

// An arrival whose writer fell a whole ring behind (a later arrival wrote
// its slot first) leaves that later one in place: the log keeps the
// latest ProgressArrivals arrivals, none left out.
func TestProgressLateWriter(t *testing.T) {
	var l progressLog
	a, b := "late", "later"
	l.arrivals.Store(ProgressArrivals + 1)
	for i := uint64(1); i <= ProgressArrivals; i++ {
		l.write(i, int64(i), &b, uint32(i), CollBroadcast)
	}
	l.write(0, 0, &a, 0, CollAllReduce) // arrival 0's writer, late
	p := l.progress()
	if len(p.Arrivals) != ProgressArrivals || p.Arrivals[len(p.Arrivals)-1].Seq != ProgressArrivals || p.Arrivals[len(p.Arrivals)-1].Comm != "later" {
		t.Errorf("%d arrivals, the last %+v", len(p.Arrivals), p.Arrivals[len(p.Arrivals)-1])
	}
}
