// Package memcontract is the contract of device memory (sdk.Memory) that
// sdktest.RunMemory checks in a plugin's own tests and gorun plugins test
// checks through the plugin processes: allocations, copies in and out and
// on the device, bounds, reductions against the CPU, and (between two
// processes) export and import.
package memcontract

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"testing"
)

// Mem is device memory as the contract drives it: sdk.Memory, or a rank's
// plugins.Memory with a context.
type Mem interface {
	Alloc(n int) (uint64, error)
	Free(p uint64) error
	Write(p uint64, off int, src []byte) error
	Read(dst []byte, p uint64, off int) error
	Export(p uint64) ([]byte, error)
	Import(handle []byte) (uint64, error)
	Copy(dst uint64, dstOff int, src uint64, srcOff int, n int) error
	Reduce(op, dtype string, dst uint64, dstOff int, src uint64, srcOff int, count int) error
}

// Run runs the contract. open makes one rank's memory; when processes is
// set, each call's memory lives in a process of its own, and the export
// and import between two of them are checked too (a CUDA process cannot
// import its own export).
func Run(t *testing.T, open func(t *testing.T) Mem, processes bool) {
	t.Run("RoundTrip", func(t *testing.T) { roundTrip(t, open(t)) })
	t.Run("Bounds", func(t *testing.T) { bounds(t, open(t)) })
	t.Run("Copy", func(t *testing.T) { copies(t, open(t)) })
	t.Run("Reduce", func(t *testing.T) { reduce(t, open(t)) })
	if processes {
		t.Run("ExportImport", func(t *testing.T) { exportImport(t, open(t), open(t)) })
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13+i>>9) ^ seed
	}
	return b
}

func alloc(t *testing.T, m Mem, n int) uint64 {
	t.Helper()
	p, err := m.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	t.Cleanup(func() { m.Free(p) })
	return p
}

func write(t *testing.T, m Mem, p uint64, off int, b []byte) {
	t.Helper()
	if err := m.Write(p, off, b); err != nil {
		t.Fatalf("Write of %d bytes at %d: %v", len(b), off, err)
	}
}

func read(t *testing.T, m Mem, p uint64, off, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := m.Read(b, p, off); err != nil {
		t.Fatalf("Read of %d bytes at %d: %v", n, off, err)
	}
	return b
}

// roundTrip: what is written is read back, whole and at offsets.
func roundTrip(t *testing.T, m Mem) {
	for _, n := range []int{1, 4093, 1<<20 + 7} {
		p := alloc(t, m, n)
		want := pattern(n, byte(n))
		write(t, m, p, 0, want)
		if got := read(t, m, p, 0, n); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back differs", n)
		}
		if n > 10 {
			write(t, m, p, 3, []byte{1, 2, 3, 4})
			if got := read(t, m, p, 2, 6); !bytes.Equal(got, []byte{want[2], 1, 2, 3, 4, want[7]}) {
				t.Errorf("%d bytes: a write at offset 3 reads back as %v", n, got)
			}
		}
	}
}

// bounds: reads and writes past an allocation's end, and frees of what
// is not allocated, are errors (not a crash).
func bounds(t *testing.T, m Mem) {
	p, err := m.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(p, 60, make([]byte, 8)); err == nil {
		t.Error("a write past the end succeeded")
	}
	if err := m.Read(make([]byte, 65), p, 0); err == nil {
		t.Error("a read past the end succeeded")
	}
	if err := m.Free(p); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if err := m.Free(p); err == nil {
		t.Error("a second Free succeeded")
	}
}

// copies: between allocations and inside one.
func copies(t *testing.T, m Mem) {
	const n = 300_001
	a, b := alloc(t, m, n), alloc(t, m, n)
	want := pattern(n, 7)
	write(t, m, a, 0, want)
	if err := m.Copy(b, 0, a, 0, n); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if got := read(t, m, b, 0, n); !bytes.Equal(got, want) {
		t.Fatal("a copied allocation differs")
	}
	if err := m.Copy(b, 10, a, 1000, 100); err != nil {
		t.Fatalf("Copy at offsets: %v", err)
	}
	if got := read(t, m, b, 10, 100); !bytes.Equal(got, want[1000:1100]) {
		t.Error("a copy at offsets differs")
	}
	if err := m.Copy(b, n-10, a, 0, 11); err == nil {
		t.Error("a copy past the end succeeded")
	}
}

// Encode turns small integers (|x| <= 256) into dtype's bytes, exactly.
func Encode(dtype string, xs []float32) []byte {
	var out []byte
	for _, x := range xs {
		switch dtype {
		case "float32":
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
		case "bfloat16":
			out = binary.LittleEndian.AppendUint16(out, uint16(math.Float32bits(x)>>16))
		case "float16":
			out = binary.LittleEndian.AppendUint16(out, half(x))
		}
	}
	return out
}

// half is x, a small integer, as IEEE 754 binary16.
func half(x float32) uint16 {
	if x == 0 {
		return 0
	}
	var sign uint16
	if x < 0 {
		sign, x = 0x8000, -x
	}
	v := uint32(x)
	e := bits.Len32(v) - 1 // 2^e <= v
	mant := (v << (10 - e)) & 0x3ff
	return sign | uint16(e+15)<<10 | uint16(mant)
}

// reduce: every type and operator on the device gives what the CPU does.
func reduce(t *testing.T, m Mem) {
	const count = 1001
	a, b := make([]float32, count), make([]float32, count)
	for i := range a {
		a[i], b[i] = float32(i%17-8), float32((i*5)%13-6)
	}
	for _, dtype := range []string{"float32", "float16", "bfloat16"} {
		size := map[string]int{"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
		for _, op := range []string{"sum", "min", "max"} {
			want := make([]float32, count)
			for i := range want {
				switch op {
				case "sum":
					want[i] = a[i] + b[i]
				case "min":
					want[i] = min(a[i], b[i])
				case "max":
					want[i] = max(a[i], b[i])
				}
			}
			// dst at an offset of one element, src at two.
			dst, src := alloc(t, m, (count+1)*size), alloc(t, m, (count+2)*size)
			write(t, m, dst, size, Encode(dtype, a))
			write(t, m, src, 2*size, Encode(dtype, b))
			if err := m.Reduce(op, dtype, dst, size, src, 2*size, count); err != nil {
				t.Fatalf("Reduce(%s, %s): %v", op, dtype, err)
			}
			if got := read(t, m, dst, size, count*size); !bytes.Equal(got, Encode(dtype, want)) {
				t.Errorf("Reduce(%s, %s) differs from the CPU's", op, dtype)
			}
		}
	}
	p := alloc(t, m, 64)
	if err := m.Reduce("sum", "int32", p, 0, p, 0, 4); err == nil {
		t.Error("a reduction on int32 succeeded")
	}
}

// exportImport: what one process exports, another maps, reads, reduces
// from and writes, and the first sees the writes.
func exportImport(t *testing.T, a, b Mem) {
	const n = 64 << 10
	pa := alloc(t, a, n)
	want := pattern(n, 3)
	write(t, a, pa, 0, want)
	h, err := a.Export(pa)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	peer, err := b.Import(h)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	pb := alloc(t, b, n)
	if err := b.Copy(pb, 0, peer, 0, n); err != nil {
		t.Fatalf("Copy from an import: %v", err)
	}
	if got := read(t, b, pb, 0, n); !bytes.Equal(got, want) {
		t.Fatal("what the importer copied differs from what the exporter wrote")
	}
	write(t, b, pb, 0, Encode("float32", []float32{1, 2}))
	if err := b.Copy(peer, 8, pb, 0, 8); err != nil {
		t.Fatalf("Copy to an import: %v", err)
	}
	if got := read(t, a, pa, 8, 8); !bytes.Equal(got, Encode("float32", []float32{1, 2})) {
		t.Error("the exporter does not see what the importer wrote")
	}
	if err := b.Free(peer); err != nil {
		t.Errorf("Free of an import: %v", err)
	}
}
