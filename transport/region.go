package transport

import (
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Region is memory that other processes can map: an anonymous memory file
// (memfd) mapped into this process. Communication buffers allocated with
// Alloc can be registered by a shared-memory transport without copies, and
// handed to a plugin process by file descriptor.
//
// A Region is not Go heap memory: its bytes stay where they are until Close,
// and Go pointers must not be stored in it.
type Region struct {
	id   uint64
	fd   int
	mem  []byte
	once sync.Once
	err  error
}

var regionIDs atomic.Uint64

// regions indexes the live Regions by address, for FindRegion.
var regions struct {
	sync.RWMutex
	byAddr []*Region // sorted by start address
}

// Bytes returns the region's memory. It must not be used after Close.
func (r *Region) Bytes() []byte { return r.mem }

// Len returns the region's size in bytes.
func (r *Region) Len() int { return len(r.mem) }

// FD returns the memory file's descriptor, valid until Close. Pass it to
// another process (SCM_RIGHTS, ExtraFiles) to share the memory; do not
// close it.
func (r *Region) FD() int { return r.fd }

// ID returns a number that identifies the region among this process's
// regions; IDs are not reused.
func (r *Region) ID() uint64 { return r.id }

// Close unmaps the region and closes its file. Any use of its Bytes after
// Close faults; mappings made by other processes stay valid. Close is
// idempotent.
func (r *Region) Close() error {
	r.once.Do(func() {
		regions.Lock()
		for i, x := range regions.byAddr {
			if x == r {
				regions.byAddr = append(regions.byAddr[:i], regions.byAddr[i+1:]...)
				break
			}
		}
		regions.Unlock()
		r.err = freeRegion(r)
	})
	return r.err
}

// FindRegion returns the live Region that contains buf and buf's offset in
// it, or ok == false when buf is not inside one Region.
func FindRegion(buf []byte) (r *Region, off int, ok bool) {
	if len(buf) == 0 {
		return nil, 0, false
	}
	b := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	regions.RLock()
	defer regions.RUnlock()
	i := sort.Search(len(regions.byAddr), func(i int) bool {
		return regionStart(regions.byAddr[i]) > b
	})
	if i == 0 {
		return nil, 0, false
	}
	r = regions.byAddr[i-1]
	if !Contains(r.mem, buf) {
		return nil, 0, false
	}
	return r, int(b - regionStart(r)), true
}

func regionStart(r *Region) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))) }

func addRegion(r *Region) {
	regions.Lock()
	defer regions.Unlock()
	i := sort.Search(len(regions.byAddr), func(i int) bool {
		return regionStart(regions.byAddr[i]) > regionStart(r)
	})
	regions.byAddr = append(regions.byAddr, nil)
	copy(regions.byAddr[i+1:], regions.byAddr[i:])
	regions.byAddr[i] = r
}
