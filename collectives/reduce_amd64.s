#include "textflag.h"

// Each function sets dst[i] = dst[i] OP src[i] over n bytes, n a multiple
// of 64, 64 bytes (four 16-byte SSE2 registers) a turn. SSE2 is amd64's
// baseline: no CPU check is needed.
#define REDUCE64(OP) \
	MOVQ dst+0(FP), DI \
	MOVQ src+8(FP), SI \
	MOVQ n+16(FP), CX \
	TESTQ CX, CX \
	JZ done \
loop: \
	MOVOU 0(DI), X0 \
	MOVOU 16(DI), X1 \
	MOVOU 32(DI), X2 \
	MOVOU 48(DI), X3 \
	MOVOU 0(SI), X4 \
	MOVOU 16(SI), X5 \
	MOVOU 32(SI), X6 \
	MOVOU 48(SI), X7 \
	OP X4, X0 \
	OP X5, X1 \
	OP X6, X2 \
	OP X7, X3 \
	MOVOU X0, 0(DI) \
	MOVOU X1, 16(DI) \
	MOVOU X2, 32(DI) \
	MOVOU X3, 48(DI) \
	ADDQ $64, DI \
	ADDQ $64, SI \
	SUBQ $64, CX \
	JNZ loop \
done: \
	RET

// func addF32(dst, src *byte, n int)
TEXT ·addF32(SB), NOSPLIT, $0-24
	REDUCE64(ADDPS)

// func mulF32(dst, src *byte, n int)
TEXT ·mulF32(SB), NOSPLIT, $0-24
	REDUCE64(MULPS)

// func addF64(dst, src *byte, n int)
TEXT ·addF64(SB), NOSPLIT, $0-24
	REDUCE64(ADDPD)

// func mulF64(dst, src *byte, n int)
TEXT ·mulF64(SB), NOSPLIT, $0-24
	REDUCE64(MULPD)

// func addI32(dst, src *byte, n int)
TEXT ·addI32(SB), NOSPLIT, $0-24
	REDUCE64(PADDL)

// func addI64(dst, src *byte, n int)
TEXT ·addI64(SB), NOSPLIT, $0-24
	REDUCE64(PADDQ)

// func addU8(dst, src *byte, n int)
TEXT ·addU8(SB), NOSPLIT, $0-24
	REDUCE64(PADDB)
