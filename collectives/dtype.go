package collectives

import (
	"fmt"
	"github.com/gorun/gorun/transport"
	"math"
	"unsafe"
)

// BFloat16 is a bfloat16 number (1 sign, 8 exponent, 7 mantissa bits)
// stored in its IEEE bit pattern. Reductions convert to float32, operate,
// and round back to nearest even.
type BFloat16 uint16

// Float16 is an IEEE 754 binary16 number (1 sign, 5 exponent, 10 mantissa
// bits) stored in its bit pattern. Reductions convert to float32, operate,
// and round back to nearest even.
type Float16 uint16

// BFloat16FromFloat32 rounds f to the nearest bfloat16 (ties to even).
// NaN stays NaN, with its sign.
func BFloat16FromFloat32(f float32) BFloat16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and a NaN
		return BFloat16(b>>16 | 0x0040)
	}
	return BFloat16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Float32 returns the value of h as a float32 (exact).
func (h BFloat16) Float32() float32 { return math.Float32frombits(uint32(h) << 16) }

// Float16FromFloat32 rounds f to the nearest binary16 (ties to even),
// giving ±Inf beyond the largest finite value and subnormals or ±0 below
// the smallest normal one. NaN stays NaN, with its sign.
func Float16FromFloat32(f float32) Float16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return Float16(sign | 0x7e00 | uint16(mant>>13))
		}
		return Float16(sign | 0x7c00)
	}
	e := exp - 127 + 15
	if e >= 31 {
		return Float16(sign | 0x7c00)
	}
	if e <= 0 { // subnormal half (or zero)
		shift := uint(14 - e)
		if shift > 24 {
			return Float16(sign)
		}
		m := mant | 0x800000
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return Float16(sign | uint16(r))
	}
	v := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && v&1 == 1) {
		v++ // may carry into the exponent, up to Inf: both are right
	}
	return Float16(sign | uint16(v))
}

// Float32 returns the value of h as a float32 (exact).
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: normalise.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// Element is the set of element types the collectives move and reduce.
// BFloat16 and Float16 are reduced in float32.
type Element interface {
	float32 | float64 | int32 | int64 | uint8 | BFloat16 | Float16
}

// DType names an element type on the wire and in error messages.
type DType uint8

// The element types, in the order of [Element].
const (
	Float32 DType = iota + 1
	Float64
	Int32
	Int64
	Uint8
	BF16
	FP16
)

var dtypeNames = [...]string{"", "float32", "float64", "int32", "int64", "uint8", "bfloat16", "float16"}

// String returns the type's Go-like name ("float32", "bfloat16", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) && d != 0 {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size returns the size of one element in bytes, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case Uint8:
		return 1
	case BF16, FP16:
		return 2
	}
	return 0
}

// DTypeOf returns the DType of T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case BFloat16:
		return BF16
	case Float16:
		return FP16
	}
	panic("unreachable")
}

// Op is a reduction operator.
type Op uint8

// The reduction operators. All are commutative. Avg is Sum followed by a
// division by the number of ranks; for integer types the division
// truncates toward zero and the sum wraps around as the type does (as in
// NCCL).
const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	Avg
)

var opNames = [...]string{"", "sum", "prod", "min", "max", "avg"}

// String returns the operator's name ("sum", "prod", "min", "max", "avg").
func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

func (o Op) valid() bool { return o >= Sum && o <= Avg }

// Bytes views s as bytes, without copying: what DeviceBuffer.Write and
// Read take for a slice of elements.
func Bytes[T Element](s []T) []byte { return asBytes(s) }

// asBytes views s as bytes, without copying.
func asBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// view reinterprets b (whose address must be aligned for T, as every
// buffer in this package is) as a slice of T.
func view[T any](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// alloc returns n bytes aligned for every element type.
func alloc(n int) []byte {
	if n == 0 {
		return nil
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// arena keeps a communicator's scratch buffers from one operation to the
// next (operations on a communicator run one at a time), so that small
// collectives allocate nothing. Buffers above arenaKeep are not kept.
type arena struct {
	bufs [][]byte
	next int
	// shared keeps the scratch in memory a plugin process can map (a
	// world with a plugin), so that it moves without copies; regions
	// holds it, for free.
	shared  bool
	regions []*transport.Region
}

const arenaKeep = 64 << 20

// get returns n bytes of scratch, not zeroed, valid until reset.
func (a *arena) get(n int) []byte {
	if n == 0 {
		return nil
	}
	if a.next < len(a.bufs) && cap(a.bufs[a.next]) >= n {
		b := a.bufs[a.next][:n]
		a.next++
		return b
	}
	var b []byte
	if a.shared && n <= arenaKeep {
		if r, err := transport.Alloc(n); err == nil {
			a.regions = append(a.regions, r)
			b = r.Bytes()[:n]
		}
	}
	if b == nil {
		b = alloc(n)
	}
	switch {
	case n > arenaKeep:
	case a.next < len(a.bufs):
		a.bufs[a.next] = b
		a.next++
	default:
		a.bufs = append(a.bufs, b)
		a.next++
	}
	return b
}

// reset makes every buffer free again.
func (a *arena) reset() { a.next = 0 }

// free releases the shared memory; the arena is not used after.
func (a *arena) free() {
	for _, r := range a.regions {
		r.Close()
	}
	a.regions, a.bufs, a.next = nil, nil, 0
}

// AllocShared returns n elements of memory that other processes can map
// (a transport.Region), which plugin transports and collective plugins
// move without copies, as MPI_Alloc_mem or ncclMemAlloc memory; free
// releases it. Ordinary slices work too, through a copy.
func AllocShared[T Element](n int) (buf []T, free func() error, err error) {
	if n == 0 {
		return nil, func() error { return nil }, nil
	}
	var zero T
	r, err := transport.Alloc(n * int(unsafe.Sizeof(zero)))
	if err != nil {
		return nil, nil, fmt.Errorf("collectives: %w", err)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(r.Bytes()))), n), r.Close, nil
}

type number interface {
	float32 | float64 | int32 | int64 | uint8
}

// reduceInto sets dst[i] = dst[i] op src[i]; Avg reduces as Sum.
func reduceNum[T number](dst, src []T, op Op) {
	src = src[:len(dst)]
	switch op {
	case Sum, Avg:
		for i, v := range src {
			dst[i] += v
		}
	case Prod:
		for i, v := range src {
			dst[i] *= v
		}
	case Min:
		for i, v := range src {
			if v < dst[i] {
				dst[i] = v
			}
		}
	case Max:
		for i, v := range src {
			if v > dst[i] {
				dst[i] = v
			}
		}
	}
}

func reduceHalf[T BFloat16 | Float16](dst, src []T, op Op, from func(T) float32, to func(float32) T) {
	src = src[:len(dst)]
	for i, v := range src {
		a, b := from(dst[i]), from(v)
		switch op {
		case Sum, Avg:
			a += b
		case Prod:
			a *= b
		case Min:
			if b < a {
				a = b
			}
		case Max:
			if b > a {
				a = b
			}
		}
		dst[i] = to(a)
	}
}

// reduce sets dst = dst op src element-wise; both hold elements of type d
// and have the same length. The vector loops (reduceVector) take what
// they can, the scalar ones the rest.
func reduce(d DType, op Op, dst, src []byte) {
	if n := reduceVector(d, op, dst, src); n > 0 {
		dst, src = dst[n:], src[n:len(dst)]
	}
	switch d {
	case Float32:
		reduceNum(view[float32](dst), view[float32](src), op)
	case Float64:
		reduceNum(view[float64](dst), view[float64](src), op)
	case Int32:
		reduceNum(view[int32](dst), view[int32](src), op)
	case Int64:
		reduceNum(view[int64](dst), view[int64](src), op)
	case Uint8:
		reduceNum(dst, src, op)
	case BF16:
		reduceHalf(view[BFloat16](dst), view[BFloat16](src), op, BFloat16.Float32, BFloat16FromFloat32)
	case FP16:
		reduceHalf(view[Float16](dst), view[Float16](src), op, Float16.Float32, Float16FromFloat32)
	}
}

func divNum[T number](s []T, n T) {
	for i := range s {
		s[i] /= n
	}
}

// divide divides every element of b by n (the last step of Avg).
func divide(d DType, b []byte, n int) {
	switch d {
	case Float32:
		divNum(view[float32](b), float32(n))
	case Float64:
		divNum(view[float64](b), float64(n))
	case Int32:
		divNum(view[int32](b), int32(n))
	case Int64:
		divNum(view[int64](b), int64(n))
	case Uint8:
		// n may exceed 255: divide in int.
		for i, v := range b {
			b[i] = uint8(int(v) / n)
		}
	case BF16:
		s := view[BFloat16](b)
		for i, v := range s {
			s[i] = BFloat16FromFloat32(v.Float32() / float32(n))
		}
	case FP16:
		s := view[Float16](b)
		for i, v := range s {
			s[i] = Float16FromFloat32(v.Float32() / float32(n))
		}
	}
}
