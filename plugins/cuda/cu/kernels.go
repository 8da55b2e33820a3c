package cu

import (
	"fmt"
	"strings"
)

// PTX returns the module of the reductions: one kernel per operation and
// element type, gorun_OP_TYPE (OP sum, min or max; TYPE f32, f16 or
// bf16), each taking (dst, src, n) and setting dst[i] = OP(dst[i],
// src[i]) for i < n in a grid-stride loop. Half-precision elements are
// widened to float32, combined, and rounded back to nearest even (bf16 by
// its bits, as the conversion instructions for it need sm_90). The target
// is sm_52 with PTX ISA 7.0, which the driver compiles for whatever GPU
// it runs on.
func PTX() string {
	var b strings.Builder
	b.WriteString(".version 7.0\n.target sm_52\n.address_size 64\n")
	for _, dtype := range DTypes {
		for _, op := range Ops {
			name, size, _ := kernelName(op, dtype)
			writeKernel(&b, name, op, dtype, size)
		}
	}
	return b.String()
}

var ptxOp = map[string]string{"sum": "add.f32", "min": "min.f32", "max": "max.f32"}

func writeKernel(b *strings.Builder, name, op, dtype string, size int) {
	shift := map[int]int{4: 2, 2: 1}[size]
	fmt.Fprintf(b, `
.visible .entry %s(
	.param .u64 dst,
	.param .u64 src,
	.param .u64 n
)
{
	.reg .pred %%p;
	.reg .b32 %%r<8>;
	.reg .b64 %%rd<10>;
	.reg .f32 %%f<4>;
	.reg .b16 %%h<4>;

	ld.param.u64 %%rd1, [dst];
	ld.param.u64 %%rd2, [src];
	ld.param.u64 %%rd3, [n];
	cvta.to.global.u64 %%rd1, %%rd1;
	cvta.to.global.u64 %%rd2, %%rd2;
	mov.u32 %%r1, %%ctaid.x;
	mov.u32 %%r2, %%ntid.x;
	mov.u32 %%r3, %%tid.x;
	mul.wide.u32 %%rd4, %%r1, %%r2;
	cvt.u64.u32 %%rd5, %%r3;
	add.u64 %%rd4, %%rd4, %%rd5;
	mov.u32 %%r4, %%nctaid.x;
	mul.wide.u32 %%rd6, %%r4, %%r2;
LOOP:
	setp.ge.u64 %%p, %%rd4, %%rd3;
	@%%p bra DONE;
	shl.b64 %%rd7, %%rd4, %d;
	add.u64 %%rd8, %%rd1, %%rd7;
	add.u64 %%rd9, %%rd2, %%rd7;
`, name, shift)
	switch dtype {
	case "float32":
		fmt.Fprintf(b, `	ld.global.f32 %%f1, [%%rd8];
	ld.global.f32 %%f2, [%%rd9];
	%s %%f3, %%f1, %%f2;
	st.global.f32 [%%rd8], %%f3;
`, ptxOp[op])
	case "float16":
		fmt.Fprintf(b, `	ld.global.b16 %%h1, [%%rd8];
	ld.global.b16 %%h2, [%%rd9];
	cvt.f32.f16 %%f1, %%h1;
	cvt.f32.f16 %%f2, %%h2;
	%s %%f3, %%f1, %%f2;
	cvt.rn.f16.f32 %%h3, %%f3;
	st.global.b16 [%%rd8], %%h3;
`, ptxOp[op])
	case "bfloat16":
		fmt.Fprintf(b, `	ld.global.b16 %%h1, [%%rd8];
	ld.global.b16 %%h2, [%%rd9];
	cvt.u32.u16 %%r5, %%h1;
	shl.b32 %%r5, %%r5, 16;
	mov.b32 %%f1, %%r5;
	cvt.u32.u16 %%r5, %%h2;
	shl.b32 %%r5, %%r5, 16;
	mov.b32 %%f2, %%r5;
	%s %%f3, %%f1, %%f2;
	mov.b32 %%r5, %%f3;
	shr.u32 %%r6, %%r5, 16;
	and.b32 %%r6, %%r6, 1;
	add.u32 %%r6, %%r6, 32767;
	add.u32 %%r5, %%r5, %%r6;
	shr.u32 %%r5, %%r5, 16;
	cvt.u16.u32 %%h3, %%r5;
	st.global.b16 [%%rd8], %%h3;
`, ptxOp[op])
	}
	b.WriteString(`	add.u64 %rd4, %rd4, %rd6;
	bra LOOP;
DONE:
	ret;
}
`)
}
