package tagq

import "testing"

func TestQueues(t *testing.T) {
	var q Queues[int]
	if _, ok := q.Pop(1); ok {
		t.Fatal("Pop from an empty set")
	}
	for i := range 100 {
		q.Push(uint64(i%3), i)
	}
	if q.Len() != 100 {
		t.Fatalf("Len = %d", q.Len())
	}
	for tag := range 3 {
		if v, ok := q.Peek(uint64(tag)); !ok || v != tag {
			t.Fatalf("Peek(%d) = %d, %v", tag, v, ok)
		}
		for i := tag; i < 100; i += 3 {
			if v, ok := q.Pop(uint64(tag)); !ok || v != i {
				t.Fatalf("Pop(%d) = %d, %v; want %d", tag, v, ok, i)
			}
		}
		if _, ok := q.Pop(uint64(tag)); ok {
			t.Fatalf("tag %d not empty", tag)
		}
	}
	if q.Len() != 0 || len(q.m) != 0 {
		t.Fatalf("Len = %d, %d queues left", q.Len(), len(q.m))
	}
	q.Push(5, 1)
	q.Push(5, 2)
	var got []int
	q.Drain(func(v int) { got = append(got, v) })
	if len(got) != 2 || got[0] != 1 || q.Len() != 0 {
		t.Fatalf("Drain gave %v", got)
	}
}
