// Package tagq keeps first-in first-out queues per message tag: the posted
// receives and the unexpected messages of a transport's matching engine.
package tagq

// Queues is a set of FIFO queues keyed by tag. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type Queues[T any] struct {
	m     map[uint64]*fifo[T]
	n     int
	spare []*fifo[T] // emptied queues, for the next tags: tags change often (a collective's carries its call)
}

// maxSpare bounds the emptied queues kept for reuse.
const maxSpare = 16

type fifo[T any] struct {
	items []T
	head  int
}

// Push appends v to tag's queue.
func (q *Queues[T]) Push(tag uint64, v T) {
	if q.m == nil {
		q.m = make(map[uint64]*fifo[T])
	}
	f := q.m[tag]
	if f == nil {
		if n := len(q.spare); n > 0 {
			f = q.spare[n-1]
			q.spare[n-1] = nil
			q.spare = q.spare[:n-1]
		} else {
			f = &fifo[T]{}
		}
		q.m[tag] = f
	}
	f.items = append(f.items, v)
	q.n++
}

// Pop removes and returns the head of tag's queue.
func (q *Queues[T]) Pop(tag uint64) (v T, ok bool) {
	f := q.m[tag]
	if f == nil {
		return v, false
	}
	v = f.items[f.head]
	var zero T
	f.items[f.head] = zero
	f.head++
	q.n--
	if f.head == len(f.items) {
		delete(q.m, tag) // an emptied queue costs nothing
		if len(q.spare) < maxSpare {
			f.items, f.head = f.items[:0], 0
			q.spare = append(q.spare, f)
		}
	} else if f.head > 32 && f.head*2 > len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
	return v, true
}

// Peek returns the head of tag's queue without removing it.
func (q *Queues[T]) Peek(tag uint64) (v T, ok bool) {
	f := q.m[tag]
	if f == nil {
		return v, false
	}
	return f.items[f.head], true
}

// Len returns the number of queued items over all tags.
func (q *Queues[T]) Len() int { return q.n }

// Drain removes every item, calling f for each (in no particular order of
// tags, in order within a tag).
func (q *Queues[T]) Drain(f func(T)) {
	m := q.m
	q.m, q.n = nil, 0
	for _, fi := range m {
		for _, v := range fi.items[fi.head:] {
			f(v)
		}
	}
}
