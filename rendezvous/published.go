package rendezvous

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
)

// Published is what one fence published: key-values sorted by key, kept in
// the one encoded block that crossed the wire. Decoding it indexes the
// block (an offset per entry) instead of building a map, so that a host
// pays microseconds, not milliseconds, for a fence of a hundred thousand
// ranks, and the agents of a launch tree pass the block on as it came.
//
// The encoding: a uvarint count, then per entry a uvarint key length, the
// key, a uvarint value length and the value, keys strictly ascending.
type Published struct {
	b    []byte
	offs []uint32 // where each entry starts in b
	size int64    // the keys' and values' bytes
}

// ErrPublished is wrapped by DecodePublished's errors.
var ErrPublished = errors.New("rendezvous: bad published key-values")

// EncodePublished encodes kvs (see Published).
func EncodePublished(kvs map[string]string) []byte {
	keys := make([]string, 0, len(kvs))
	n := binary.MaxVarintLen64
	for k, v := range kvs {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	sort.Strings(keys)
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := kvs[k]
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// DecodePublished indexes an encoded block, which it keeps: the caller
// must not change b afterwards. It checks every length and the order of
// the keys.
func DecodePublished(b []byte) (*Published, error) {
	if len(b) > 1<<32-1 {
		return nil, fmt.Errorf("%w: %d bytes", ErrPublished, len(b))
	}
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: bad count", ErrPublished)
	}
	p := &Published{b: b, offs: make([]uint32, 0, count)}
	off := n
	var prev []byte
	for i := range count {
		start := off
		k, next, err := field(b, off)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d's key: %w", ErrPublished, i, err)
		}
		var v []byte
		if v, next, err = field(b, next); err != nil {
			return nil, fmt.Errorf("%w: entry %d's value: %w", ErrPublished, i, err)
		}
		if i > 0 && string(k) <= string(prev) {
			return nil, fmt.Errorf("%w: entry %d: keys out of order", ErrPublished, i)
		}
		p.size += int64(len(k) + len(v))
		prev, off = k, next
		p.offs = append(p.offs, uint32(start))
	}
	if off != len(b) {
		return nil, fmt.Errorf("%w: %d bytes after the last entry", ErrPublished, len(b)-off)
	}
	return p, nil
}

// field reads one length-prefixed field at off.
func field(b []byte, off int) ([]byte, int, error) {
	l, n := binary.Uvarint(b[off:])
	if n <= 0 {
		return nil, 0, errors.New("bad length")
	}
	off += n
	if l > uint64(len(b)-off) {
		return nil, 0, errors.New("cut short")
	}
	return b[off : off+int(l)], off + int(l), nil
}

// NewPublished is the Published of kvs (for a fence answered in process).
func NewPublished(kvs map[string]string) *Published {
	p, err := DecodePublished(EncodePublished(kvs))
	if err != nil {
		panic(err) // EncodePublished's output always decodes
	}
	return p
}

// entry returns entry i's key and value.
func (p *Published) entry(i int) (k, v []byte) {
	k, next, _ := field(p.b, int(p.offs[i]))
	v, _, _ = field(p.b, next)
	return k, v
}

// Get returns key's value.
func (p *Published) Get(key string) (string, bool) {
	v, ok := p.get(key)
	return string(v), ok
}

// get returns key's value as a slice of the block.
func (p *Published) get(key string) ([]byte, bool) {
	if p == nil {
		return nil, false
	}
	i, found := slices.BinarySearchFunc(p.offs, key, func(off uint32, key string) int {
		k, _, _ := field(p.b, int(off))
		switch {
		case string(k) < key:
			return -1
		case string(k) > key:
			return 1
		}
		return 0
	})
	if !found {
		return nil, false
	}
	_, v := p.entry(i)
	return v, true
}

// Len is the number of key-values.
func (p *Published) Len() int {
	if p == nil {
		return 0
	}
	return len(p.offs)
}

// All yields every key-value in key order.
func (p *Published) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := range p.Len() {
			k, v := p.entry(i)
			if !yield(string(k), string(v)) {
				return
			}
		}
	}
}

// Bytes is the encoded block.
func (p *Published) Bytes() []byte { return p.b }
