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
