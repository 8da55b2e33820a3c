//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/gorun/gorun/transport"
)

// Record types. Data ring (sender to receiver): eager messages, RTS, DATA
// chunks; control ring (receiver to sender): CTS and FIN.
const (
	recPad   = 1 // nothing up to the end of the ring
	recEager = 2 // a=tag b=seq c=size, the message as payload
	recRTS   = 3 // a=tag b=seq c=size, payload empty or {region id, offset}
	recData  = 4 // a=seq b=offset, a chunk of the message as payload
	recCTS   = 5 // a=seq b=bytes to send
	recFIN   = 6 // a=seq: the receiver read a zero-copy message

	recHdr   = 32
	recAlign = 64
)

// ring is one direction of a ring of records in shared memory: a 32-byte
// header (type, payload length, three fields) then the payload, each record
// 64-byte aligned; head and tail count bytes since the start and live in
// their own cache lines. One process produces, the other consumes; a
// record is visible once head passes it and free once tail does.
type ring struct {
	mem  []byte
	mask uint64
	head *uint64 // written by the producer only
	tail *uint64 // written by the consumer only
	pos  uint64  // this side's own index: head (producer) or tail (consumer)
}

func align(n uint64) uint64 { return (n + recAlign - 1) &^ (recAlign - 1) }

// maxPayload is the largest payload put accepts; it keeps a record small
// enough to fit in an empty ring wherever the ring's index stands.
func (r *ring) maxPayload() int { return len(r.mem)/4 - recHdr }

func (r *ring) putHdr(off uint64, typ uint32, n int, a, b, c uint64) {
	h := r.mem[off : off+recHdr]
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint64(h[8:], a)
	binary.LittleEndian.PutUint64(h[16:], b)
	binary.LittleEndian.PutUint64(h[24:], c)
}

// put appends a record and publishes it; it reports false, changing
// nothing, when the ring has no room for it yet (or ever: a payload over
// maxPayload).
func (r *ring) put(typ uint32, a, b, c uint64, payload []byte) bool {
	if len(payload) > r.maxPayload() {
		return false
	}
	size := uint64(len(r.mem))
	need := align(recHdr + uint64(len(payload)))
	free := size - (r.pos - atomic.LoadUint64(r.tail))
	off := r.pos & r.mask
	if size-off < need {
		if free < size-off+need {
			return false
		}
		r.putHdr(off, recPad, 0, 0, 0, 0)
		r.pos += size - off
		off = 0
	} else if free < need {
		return false
	}
	r.putHdr(off, typ, len(payload), a, b, c)
	copy(r.mem[off+recHdr:], payload)
	r.pos += need
	atomic.StoreUint64(r.head, r.pos)
	return true
}

// rec is a record read from a ring; its payload points into the ring and
// is valid until release.
type rec struct {
	typ     uint32
	a, b, c uint64
	payload []byte
	size    uint64 // bytes the record takes in the ring
}

// next returns the next record, if the producer published one. It skips
// padding, and fails on a record that cannot be (the peer wrote garbage).
func (r *ring) next() (rec, bool, error) {
	size := uint64(len(r.mem))
	for {
		head := atomic.LoadUint64(r.head)
		if head == r.pos {
			return rec{}, false, nil
		}
		if head-r.pos > size || head < r.pos {
			return rec{}, false, fmt.Errorf("%w: ring head %d, tail %d, size %d", transport.ErrProtocol, head, r.pos, size)
		}
		off := r.pos & r.mask
		h := r.mem[off : off+recHdr]
		x := rec{
			typ: binary.LittleEndian.Uint32(h[0:]),
			a:   binary.LittleEndian.Uint64(h[8:]),
			b:   binary.LittleEndian.Uint64(h[16:]),
			c:   binary.LittleEndian.Uint64(h[24:]),
		}
		n := uint64(binary.LittleEndian.Uint32(h[4:]))
		if x.typ == recPad {
			r.pos += size - off
			atomic.StoreUint64(r.tail, r.pos)
			continue
		}
		x.size = align(recHdr + n)
		if n > uint64(r.maxPayload()) || off+x.size > size || x.size > head-r.pos {
			return rec{}, false, fmt.Errorf("%w: ring record of type %d with %d bytes at %d", transport.ErrProtocol, x.typ, n, r.pos)
		}
		x.payload = r.mem[off+recHdr : off+recHdr+n]
		return x, true, nil
	}
}

// release frees the record that next returned last.
func (r *ring) release(x rec) {
	r.pos += x.size
	atomic.StoreUint64(r.tail, r.pos)
}

// pending reports whether the producer published records not yet taken.
func (r *ring) pending() bool { return atomic.LoadUint64(r.head) != r.pos }
