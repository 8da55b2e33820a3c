package transporttest

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// fill writes a pattern that depends on seed and on every 8-byte word's
// offset, so that misplaced or repeated chunks show.
func fill(buf []byte, seed uint64) {
	words, tail := asWords(buf)
	for i := range words {
		words[i] = word(seed, i)
	}
	base := 8 * len(words)
	for i := range tail {
		tail[i] = patternByte(seed, base+i)
	}
}

// patternByte is byte k of the pattern: byte k%8 of word k/8, little
// endian, so that any prefix of a filled buffer holds the same bytes.
func patternByte(seed uint64, k int) byte { return byte(word(seed, k/8) >> (8 * (k % 8))) }

// check returns an error naming the first byte of buf that differs from
// fill's pattern.
func check(buf []byte, seed uint64) error {
	words, tail := asWords(buf)
	for i, w := range words {
		if w != word(seed, i) {
			var want [8]byte
			binary.LittleEndian.PutUint64(want[:], word(seed, i))
			for j := range 8 {
				if buf[8*i+j] != want[j] {
					return fmt.Errorf("byte %d of %d is %#x, want %#x", 8*i+j, len(buf), buf[8*i+j], want[j])
				}
			}
		}
	}
	base := 8 * len(words)
	for i, b := range tail {
		if want := patternByte(seed, base+i); b != want {
			return fmt.Errorf("byte %d of %d is %#x, want %#x", base+i, len(buf), b, want)
		}
	}
	return nil
}

func word(seed uint64, i int) uint64 {
	return (seed+1)*0x9e3779b97f4a7c15 ^ uint64(i)*0xbf58476d1ce4e5b9
}

// asWords views the 8-byte aligned head of buf as words (when buf itself
// is aligned; otherwise everything is tail).
func asWords(buf []byte) ([]uint64, []byte) {
	if len(buf) < 8 || uintptr(unsafe.Pointer(unsafe.SliceData(buf)))%8 != 0 {
		return nil, buf
	}
	n := len(buf) / 8
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(buf))), n), buf[8*n:]
}
