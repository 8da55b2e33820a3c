package collectives

// The SSE2 loops of reduce_amd64.s: dst = dst OP src over n bytes, n a
// multiple of 64.

//go:noescape
func addF32(dst, src *byte, n int)

//go:noescape
func mulF32(dst, src *byte, n int)

//go:noescape
func addF64(dst, src *byte, n int)

//go:noescape
func mulF64(dst, src *byte, n int)

//go:noescape
func addI32(dst, src *byte, n int)

//go:noescape
func addI64(dst, src *byte, n int)

//go:noescape
func addU8(dst, src *byte, n int)

// reduceVector reduces the longest prefix of dst and src (of elements of
// type d) that is a multiple of 64 bytes with SSE2, where it has a loop
// for d and op, and returns how many bytes it did. Each lane computes
// what Go's scalar code computes (IEEE single or double precision adds
// and multiplies, wrapping integer adds), so results are bit for bit the
// same.
func reduceVector(d DType, op Op, dst, src []byte) int {
	n := len(dst) &^ 63
	if n == 0 {
		return 0
	}
	sum := op == Sum || op == Avg
	switch {
	case d == Float32 && sum:
		addF32(&dst[0], &src[0], n)
	case d == Float32 && op == Prod:
		mulF32(&dst[0], &src[0], n)
	case d == Float64 && sum:
		addF64(&dst[0], &src[0], n)
	case d == Float64 && op == Prod:
		mulF64(&dst[0], &src[0], n)
	case d == Int32 && sum:
		addI32(&dst[0], &src[0], n)
	case d == Int64 && sum:
		addI64(&dst[0], &src[0], n)
	case d == Uint8 && sum:
		addU8(&dst[0], &src[0], n)
	default:
		return 0
	}
	return n
}
