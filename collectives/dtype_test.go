package collectives

import (
	"math"
	"testing"
)

func TestFloat16RoundTrip(t *testing.T) {
	t.Parallel()
	for i := range 1 << 16 {
		h := Float16(i)
		f := h.Float32()
		back := Float16FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(back.Float32())) || back&0x8000 != h&0x8000 {
				t.Errorf("%#04x: NaN came back as %#04x", i, uint16(back))
			}
			continue
		}
		if back != h {
			t.Errorf("%#04x -> %v -> %#04x", i, f, uint16(back))
		}
	}
}

func TestFloat16Values(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    float32
		want Float16
	}{
		{0, 0},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                         // largest finite
		{65519, 0x7bff},                         // rounds down
		{65520, 0x7c00},                         // the tie rounds to even: Inf
		{float32(math.Inf(1)), 0x7c00},          //
		{1e10, 0x7c00},                          // overflow
		{6.103515625e-05, 0x0400},               // smallest normal
		{5.960464477539063e-08, 0x0001},         // smallest subnormal, 2^-24
		{2.9802322387695312e-08, 0},             // 2^-25: the tie rounds to even, 0
		{2.98023259e-08, 0x0001},                // just above the tie
		{1.4901161193847656e-08, 0},             // 2^-26
		{1 + 1.0/2048, 0x3c00},                  // tie between 1 and its successor: even
		{1 + 3.0/2048, 0x3c02},                  // tie: rounds up to even
		{0.333333343, 0x3555},                   // 1/3
		{-6.097555160522461e-05, 0x83ff},        // largest subnormal
		{6.097555160522461e-05 + 3e-12, 0x03ff}, // still it
	} {
		if got := Float16FromFloat32(tc.f); got != tc.want {
			t.Errorf("Float16FromFloat32(%v) = %#04x, want %#04x", tc.f, uint16(got), uint16(tc.want))
		}
	}
	// Every midpoint between neighbours rounds to the even one; a hair
	// off it rounds to the nearer one.
	for i := range 0x7bff {
		a, b := Float16(i), Float16(i+1)
		mid := float32((float64(a.Float32()) + float64(b.Float32())) / 2) // exact in float32
		even := a
		if a&1 == 1 {
			even = b
		}
		if got := Float16FromFloat32(mid); got != even {
			t.Fatalf("midpoint of %#04x and %#04x: %#04x", i, i+1, uint16(got))
		}
		if got := Float16FromFloat32(math.Nextafter32(mid, 0)); got != a {
			t.Fatalf("below the midpoint of %#04x and %#04x: %#04x", i, i+1, uint16(got))
		}
		if got := Float16FromFloat32(math.Nextafter32(mid, 1e9)); got != b {
			t.Fatalf("above the midpoint of %#04x and %#04x: %#04x", i, i+1, uint16(got))
		}
	}
}

func TestBFloat16(t *testing.T) {
	t.Parallel()
	for i := range 1 << 16 {
		h := BFloat16(i)
		f := h.Float32()
		back := BFloat16FromFloat32(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(back.Float32())) {
				t.Errorf("%#04x: NaN came back as %#04x", i, uint16(back))
			}
			continue
		}
		if back != h {
			t.Errorf("%#04x -> %v -> %#04x", i, f, uint16(back))
		}
	}
	for _, tc := range []struct {
		f    float32
		want BFloat16
	}{
		{1, 0x3f80},
		{1 + 1.0/256, 0x3f80},            // tie: even
		{1 + 3.0/256, 0x3f82},            // tie: up to even
		{1 + 1.0/256 + 1.0/4096, 0x3f81}, // above the tie
		{-3.140625, 0xc049},
		{float32(math.MaxFloat32), 0x7f80}, // rounds to Inf
		{float32(math.NaN()), 0x7fc0},
	} {
		if got := BFloat16FromFloat32(tc.f); got != tc.want {
			t.Errorf("BFloat16FromFloat32(%v) = %#04x, want %#04x", tc.f, uint16(got), uint16(tc.want))
		}
	}
}

func TestReduceKernels(t *testing.T) {
	t.Parallel()
	h := func(v ...float32) []byte {
		s := make([]Float16, len(v))
		for i, x := range v {
			s[i] = Float16FromFloat32(x)
		}
		return asBytes(s)
	}
	b := func(v ...float32) []byte {
		s := make([]BFloat16, len(v))
		for i, x := range v {
			s[i] = BFloat16FromFloat32(x)
		}
		return asBytes(s)
	}
	for _, tc := range []struct {
		name      string
		d         DType
		op        Op
		dst, src  []byte
		want      []byte
		divideBy  int
		wantAfter []byte
	}{
		{"int32 sum wraps", Int32, Sum, asBytes([]int32{math.MaxInt32, -5}), asBytes([]int32{1, 5}), asBytes([]int32{math.MinInt32, 0}), 0, nil},
		{"uint8 prod wraps", Uint8, Prod, []byte{16, 3}, []byte{16, 5}, []byte{0, 15}, 0, nil},
		{"int64 min max", Int64, Min, asBytes([]int64{-3, 9}), asBytes([]int64{4, -9}), asBytes([]int64{-3, -9}), 0, nil},
		{"float64 max", Float64, Max, asBytes([]float64{-3, 9}), asBytes([]float64{4, -9}), asBytes([]float64{4, 9}), 0, nil},
		{"float32 avg", Float32, Avg, asBytes([]float32{1, 2}), asBytes([]float32{2, 2}), asBytes([]float32{3, 4}), 2, asBytes([]float32{1.5, 2})},
		{"uint8 avg over 300", Uint8, Avg, []byte{250}, []byte{5}, []byte{255}, 300, []byte{0}},
		{"int32 avg truncates", Int32, Avg, asBytes([]int32{-7}), asBytes([]int32{0}), asBytes([]int32{-7}), 2, asBytes([]int32{-3})},
		{"float16 sum", FP16, Sum, h(1, 2048), h(0.5, 1), h(1.5, 2048), 0, nil}, // 2049 rounds to even
		{"float16 min negative", FP16, Min, h(-1, 3), h(2, -4), h(-1, -4), 0, nil},
		{"bfloat16 prod", BF16, Prod, b(3, -2), b(0.5, 8), b(1.5, -16), 0, nil},
		{"bfloat16 avg", BF16, Avg, b(1), b(2), b(3), 3, b(1)},
	} {
		reduce(tc.d, tc.op, tc.dst, tc.src)
		if string(tc.dst) != string(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.dst, tc.want)
			continue
		}
		if tc.divideBy > 0 {
			divide(tc.d, tc.dst, tc.divideBy)
			if string(tc.dst) != string(tc.wantAfter) {
				t.Errorf("%s: after the division: got %v, want %v", tc.name, tc.dst, tc.wantAfter)
			}
		}
	}
}

func TestBlockRange(t *testing.T) {
	t.Parallel()
	for _, count := range []int{0, 1, 7, 8, 1031} {
		for _, n := range []int{1, 2, 3, 8} {
			next := 0
			for i := range n {
				lo, hi := BlockRange(count, n, i)
				if lo != next || hi < lo || hi-lo > count/n+1 || hi-lo < count/n {
					t.Errorf("BlockRange(%d, %d, %d) = %d, %d", count, n, i, lo, hi)
				}
				next = hi
			}
			if next != count {
				t.Errorf("%d into %d: blocks end at %d", count, n, next)
			}
		}
	}
}

func TestHeader(t *testing.T) {
	t.Parallel()
	h := header{class: classData, kind: CollReduce, dtype: BF16, op: Max, algo: AlgoChain, phase: 2, root: 5, seq: 1 << 31, count: 1 << 40, step: 77}
	b := make([]byte, hdrLen)
	h.put(b)
	got, ok := parseHeader(b)
	if !ok || got != h {
		t.Fatalf("round trip: %+v, %v", got, ok)
	}
	if d := h.mismatch(got); d != "" {
		t.Errorf("same header: %s", d)
	}
	other := h
	other.count++
	if d := h.mismatch(other); d == "" {
		t.Error("count difference not seen")
	}
	other = h
	other.algo = AlgoBinomial
	if d := h.mismatch(other); d == "" {
		t.Error("algorithm difference not seen")
	}
	b[0] = 0
	if _, ok := parseHeader(b); ok {
		t.Error("bad magic accepted")
	}
	m := ctrlMsg{typ: ctrlAbort, code: codeMismatch, subject: 3, seq: 9, detail: string(make([]byte, 1000))}
	enc := m.encode()
	if len(enc) > EagerBytes {
		t.Errorf("control message of %d bytes", len(enc))
	}
	if back, ok := decodeCtrl(enc); !ok || back.subject != 3 || back.seq != 9 || back.code != codeMismatch {
		t.Errorf("control round trip: %+v", back)
	}
}

// reduce's vector loops (reduceVector, SSE2 on amd64) give, bit for bit,
// what the scalar loops give, for every type and operator, at every
// length around their 64-byte turns, with NaNs, infinities, negative zeros
// and wrapping integers among the values.
func TestReduceVectorMatchesScalar(t *testing.T) {
	t.Parallel()
	special := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, 1e-40, 3.5e38, -1.25}
	fill := func(b []byte, seed int) {
		for i := range b {
			b[i] = byte(i*131 + seed*17 + i*i)
		}
	}
	for _, d := range []DType{Float32, Float64, Int32, Int64, Uint8} {
		for _, op := range []Op{Sum, Prod, Min, Max, Avg} {
			size := d.Size()
			for n := 0; n <= 300; n += size {
				dst, src := make([]byte, n), make([]byte, n)
				fill(dst, n)
				fill(src, n+1)
				for i := 0; i*size < n && i < len(special); i++ {
					switch d {
					case Float32:
						view[float32](dst)[i] = float32(special[i])
						view[float32](src)[i] = float32(special[(i+3)%len(special)])
					case Float64:
						view[float64](dst)[i] = special[i]
						view[float64](src)[i] = special[(i+3)%len(special)]
					}
				}
				want := append([]byte(nil), dst...)
				switch d { // the scalar loops alone
				case Float32:
					reduceNum(view[float32](want), view[float32](src), op)
				case Float64:
					reduceNum(view[float64](want), view[float64](src), op)
				case Int32:
					reduceNum(view[int32](want), view[int32](src), op)
				case Int64:
					reduceNum(view[int64](want), view[int64](src), op)
				case Uint8:
					reduceNum(want, src, op)
				}
				reduce(d, op, dst, src)
				if string(dst) != string(want) {
					t.Fatalf("%v %v over %d bytes: the vector loops differ from the scalar ones", d, op, n)
				}
			}
		}
	}
}

func BenchmarkReduceFloat32Sum4KiB(b *testing.B) {
	dst, src := make([]byte, 4096), make([]byte, 4096)
	b.SetBytes(4096)
	for range b.N {
		reduce(Float32, Sum, dst, src)
	}
}
