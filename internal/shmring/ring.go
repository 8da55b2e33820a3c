// Package shmring is a single-producer, single-consumer ring of records in
// memory that two processes share: the ring under gorun's shared-memory
// transport and under the plugin data plane. A record is a 32-byte header
// (type, payload length, three 64-bit fields) followed by its payload, each
// record 64-byte aligned. The producer and the consumer each own one index
// (bytes since the start); a record is visible once the head passes it and
// its room is free once the tail does.
package shmring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/gorun/gorun/transport"
)

const (
	// Pad is the record type that fills the rest of the ring before a
	// record that would not fit; the consumer skips it. Users' record
	// types start above it.
	Pad = 1
	// Hdr is the size of a record header.
	Hdr = 32
	// Align is the alignment of every record.
	Align = 64
)

// Ring is one side's view of a ring: the memory, the two shared indices,
// and this side's own position.
type Ring struct {
	mem  []byte
	mask uint64
	head *uint64 // written by the producer only
	tail *uint64 // written by the consumer only
	pos  uint64  // head (producer) or tail (consumer) as this side knows it
}

// New returns a view of the ring in mem (a power of two in size) whose
// head and tail indices live at head and tail (each in its own cache line
// of shared memory). A producer's position starts at *head, a consumer's
// at *tail.
func New(mem []byte, head, tail *uint64, consumer bool) *Ring {
	if len(mem) == 0 || len(mem)&(len(mem)-1) != 0 {
		panic(fmt.Sprintf("shmring: size %d is not a power of two", len(mem)))
	}
	r := &Ring{mem: mem, mask: uint64(len(mem) - 1), head: head, tail: tail}
	if consumer {
		r.pos = atomic.LoadUint64(tail)
	} else {
		r.pos = atomic.LoadUint64(head)
	}
	return r
}

func align(n uint64) uint64 { return (n + Align - 1) &^ (Align - 1) }

// MaxPayload is the largest payload Put accepts; it keeps a record small
// enough to fit in an empty ring wherever the ring's index stands.
func (r *Ring) MaxPayload() int { return len(r.mem)/4 - Hdr }

func (r *Ring) putHdr(off uint64, typ uint32, n int, a, b, c uint64) {
	h := r.mem[off : off+Hdr]
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint64(h[8:], a)
	binary.LittleEndian.PutUint64(h[16:], b)
	binary.LittleEndian.PutUint64(h[24:], c)
}

// Reserve makes room for a record of typ with an n-byte payload and
// returns the payload's memory for the caller to fill, then Commit; it
// reports false, changing nothing, when the ring has no room yet (or
// ever: n over MaxPayload). Nothing is visible to the consumer before
// Commit.
func (r *Ring) Reserve(typ uint32, a, b, c uint64, n int) ([]byte, bool) {
	if n > r.MaxPayload() || n < 0 {
		return nil, false
	}
	size := uint64(len(r.mem))
	need := align(Hdr + uint64(n))
	free := size - (r.pos - atomic.LoadUint64(r.tail))
	off := r.pos & r.mask
	if size-off < need {
		if free < size-off+need {
			return nil, false
		}
		r.putHdr(off, Pad, 0, 0, 0, 0)
		r.pos += size - off
		off = 0
	} else if free < need {
		return nil, false
	}
	r.putHdr(off, typ, n, a, b, c)
	r.pos += need
	return r.mem[off+Hdr : off+Hdr+uint64(n)], true
}

// Commit publishes the records reserved since the last Commit.
func (r *Ring) Commit() { atomic.StoreUint64(r.head, r.pos) }

// Put appends a record with a copy of payload and publishes it; it
// reports false, changing nothing, when the ring has no room for it yet.
func (r *Ring) Put(typ uint32, a, b, c uint64, payload []byte) bool {
	p, ok := r.Reserve(typ, a, b, c, len(payload))
	if !ok {
		return false
	}
	copy(p, payload)
	r.Commit()
	return true
}

// Rec is a record read from a ring; its Payload points into the ring and
// is valid until Release.
type Rec struct {
	Type    uint32
	A, B, C uint64
	Payload []byte
	size    uint64 // bytes the record takes in the ring
}

// Next returns the next record, if the producer published one. It skips
// padding, and fails on a record that cannot be (the other process wrote
// garbage).
func (r *Ring) Next() (Rec, bool, error) {
	size := uint64(len(r.mem))
	for {
		head := atomic.LoadUint64(r.head)
		if head == r.pos {
			return Rec{}, false, nil
		}
		if head-r.pos > size || head < r.pos {
			return Rec{}, false, fmt.Errorf("%w: ring head %d, tail %d, size %d", transport.ErrProtocol, head, r.pos, size)
		}
		off := r.pos & r.mask
		h := r.mem[off : off+Hdr]
		x := Rec{
			Type: binary.LittleEndian.Uint32(h[0:]),
			A:    binary.LittleEndian.Uint64(h[8:]),
			B:    binary.LittleEndian.Uint64(h[16:]),
			C:    binary.LittleEndian.Uint64(h[24:]),
		}
		n := uint64(binary.LittleEndian.Uint32(h[4:]))
		if x.Type == Pad {
			r.pos += size - off
			atomic.StoreUint64(r.tail, r.pos)
			continue
		}
		x.size = align(Hdr + n)
		if n > uint64(r.MaxPayload()) || off+x.size > size || x.size > head-r.pos {
			return Rec{}, false, fmt.Errorf("%w: ring record of type %d with %d bytes at %d", transport.ErrProtocol, x.Type, n, r.pos)
		}
		x.Payload = r.mem[off+Hdr : off+Hdr+n]
		return x, true, nil
	}
}

// Release frees the record that Next returned last.
func (r *Ring) Release(x Rec) {
	r.pos += x.size
	atomic.StoreUint64(r.tail, r.pos)
}

// Pending reports whether the producer published records not yet taken.
func (r *Ring) Pending() bool { return atomic.LoadUint64(r.head) != r.pos }

// Head returns the producer's published index: bytes written since the
// ring's start.
func (r *Ring) Head() uint64 { return atomic.LoadUint64(r.head) }
