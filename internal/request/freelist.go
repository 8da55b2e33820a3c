package request

// FreeList keeps items for reuse: a transport's requests handed back by
// their users and records it is done with, a communicator's transfers.
// It is not a sync.Pool, whose contents the garbage collector (and the
// race detector, at random) throws away: its owner in steady state
// allocates nothing. It is not safe for concurrent use; its owner's lock
// guards it. The zero value is empty and ready.
type FreeList[T any] struct {
	// Max bounds the items kept; 0 means DefaultFreeMax.
	Max   int
	items []*T
}

// DefaultFreeMax is what a FreeList keeps at most unless told otherwise.
const DefaultFreeMax = 64

// Get returns a kept item, or a new one.
func (f *FreeList[T]) Get() *T {
	n := len(f.items)
	if n == 0 {
		return new(T)
	}
	v := f.items[n-1]
	f.items[n-1] = nil
	f.items = f.items[:n-1]
	return v
}

// Put keeps v, unless the list holds enough already.
func (f *FreeList[T]) Put(v *T) {
	if limit := f.Max; len(f.items) < limit || (limit == 0 && len(f.items) < DefaultFreeMax) {
		f.items = append(f.items, v)
	}
}
