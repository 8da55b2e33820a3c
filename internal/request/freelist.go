package request

// FreeList keeps items for reuse: a transport's requests handed back by
// their users and records it is done with. It is not safe for concurrent
// use; its owner's lock guards it. The zero value is empty and ready.
type FreeList[T any] struct{ items []*T }

// maxFree bounds what a free list keeps.
const maxFree = 64

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
	if len(f.items) < maxFree {
		f.items = append(f.items, v)
	}
}
