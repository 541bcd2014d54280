package main

import "fmt"

// bf16Shapes lists the bf16-products micro-kernels, rows of A × rows of
// W: at most 24 accumulators, so the A rows, two W registers and the
// reduction's two temporaries fit in the 32 zmm registers.
var bf16Shapes = [][2]int{{4, 6}, {4, 1}, {3, 8}, {3, 1}, {2, 8}, {2, 1}, {1, 8}, {1, 1}}

// evex0F38 emits a 512-bit EVEX.0F38.W0 instruction with register
// operands (dst, a in vvvv, b in r/m; registers 0-31), no mask, as bytes:
// Go's assembler does not know AVX512-BF16. pp is the implied prefix
// (0b10 F3, 0b11 F2).
func (g *gen) evex0F38(name string, pp, opcode, dst, a, b int) {
	inv := func(v, bit int) int { return (v>>bit&1 ^ 1) }
	p1 := inv(dst, 3)<<7 | inv(b, 4)<<6 | inv(b, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p2 := (^a&15)<<3 | 1<<2 | pp
	p3 := 0b10<<5 | inv(a, 4)<<3
	modrm := 0b11<<6 | (dst&7)<<3 | b&7
	g.p("\tBYTE $0x62; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x // %s %s, %s, %s",
		p1, p2, p3, opcode, modrm, name, z(b), z(a), z(dst))
}

// dpbf16 emits VDPBF16PS zmm(dst) += zmm(a)·zmm(b) (EVEX.512.F3.0F38.W0
// 52 /r). For each 32-bit lane l it adds a[2l+1]·b[2l+1] to dst[l],
// rounds, then adds a[2l]·b[2l] and rounds again (bf16 products are
// exact in float32), with bf16 subnormals read as zero and a subnormal
// sum flushed to zero.
func (g *gen) dpbf16(dst, a, b int) { g.evex0F38("VDPBF16PS", 0b10, 0x52, dst, a, b) }

// roundBF16 emits roundBF16x32(dst *uint16, src *float32, n int): dst[i]
// = src[i] rounded to bfloat16 for i < n, a positive multiple of 32, by
// VCVTNE2PS2BF16 (EVEX.512.F2.0F38.W0 72 /r: the 16 floats of b to the
// low half of dst, those of a to the high half; round to nearest even,
// subnormals to zero, NaNs quieted).
func (g *gen) roundBF16() {
	const name = "roundBF16x32"
	g.p("// func %s(dst *uint16, src *float32, n int)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ src+8(FP), SI")
	g.p("\tMOVQ n+16(FP), BX")
	g.p("\tSHRQ $5, BX")
	g.p("\tJZ %s_done", name)
	g.p("%s_loop:", name)
	g.p("\tVMOVUPS (SI), Z0")
	g.p("\tVMOVUPS 64(SI), Z1")
	g.evex0F38("VCVTNE2PS2BF16", 0b11, 0x72, 2, 1, 0)
	g.p("\tVMOVDQU32 Z2, (DI)")
	g.p("\tADDQ $128, SI")
	g.p("\tADDQ $64, DI")
	g.p("\tDECQ BX")
	g.p("\tJNZ %s_loop", name)
	g.done(name)
}

// gemmBF16 emits gemm<m>x<cols>p(c *float32, ldc int, a *uint16, lda int,
// w *uint16, ldw int, k int, tiles int): the bf16-products gemm of m rows
// of A (bf16) against tiles of cols rows of W (bf16), the package's
// bf16-products canonical order: one zmm accumulator per output element
// (lane l holds the pairs p ≡ l mod 16 of elements 2p, 2p+1), then
// lanes l and l+8 added and the 8-lane tree. lda and ldw are in
// elements; k must be a positive multiple of 32 (no tail).
func (g *gen) gemmBF16(m, cols int) {
	name := fmt.Sprintf("gemm%dx%dp", m, cols)
	aRegs := []string{"R8", "R9", "R10", "R11"}[:m]
	// R12 walks k along the tile's first W row; R13 = ldw, R14 = 3·ldw,
	// DX = 5·ldw, CX = 7·ldw (bytes).
	rows := []string{"(R12)", "(R12)(R13*1)", "(R12)(R13*2)", "(R12)(R14*1)", "(R12)(R13*4)", "(R12)(DX*1)", "(R12)(R14*2)", "(R12)(CX*1)"}
	acc := func(i, j int) int { return i*cols + j }
	const za, zw, tmp, scratch = 24, 28, 30, 31
	const wBase, wStep, tilesLeft = 0, 8, 16
	g.p("// func %s(c *float32, ldc int, a unsafe.Pointer, lda int, w unsafe.Pointer, ldw int, k int, tiles int)", name)
	g.p("TEXT ·%s(SB), NOSPLIT, $24-64", name)
	g.p("\tMOVQ c+0(FP), DI")
	g.p("\tMOVQ ldc+8(FP), SI")
	g.p("\tSHLQ $2, SI")
	g.p("\tMOVQ a+16(FP), %s", aRegs[0])
	g.p("\tMOVQ lda+24(FP), BX")
	g.p("\tSHLQ $1, BX")
	for i := 1; i < m; i++ {
		g.p("\tLEAQ (%s)(BX*1), %s", aRegs[i-1], aRegs[i])
	}
	if cols > 1 {
		g.p("\tVMOVDQU32 ·reduceOrder(SB), %s", z(scratch))
		g.p("\tMOVL $0x3f, AX")
		g.p("\tKMOVW AX, K1")
	}
	g.p("\tMOVQ w+32(FP), R12")
	g.p("\tMOVQ R12, %d(SP)", wBase)
	g.p("\tMOVQ ldw+40(FP), BX")
	g.p("\tSHLQ $1, BX")
	g.p("\tMOVQ BX, R13")
	g.p("\tLEAQ (BX)(BX*2), R14")
	g.p("\tLEAQ (BX)(BX*4), DX")
	g.p("\tLEAQ (R14)(BX*4), CX")
	g.p("\tIMULQ $%d, BX", cols)
	g.p("\tMOVQ BX, %d(SP)", wStep)
	g.p("\tMOVQ tiles+56(FP), BX")
	g.p("\tMOVQ BX, %d(SP)", tilesLeft)
	g.p("\tTESTQ BX, BX")
	g.p("\tJZ %s_done", name)
	g.p("%s_tile:", name)
	g.p("\tMOVQ %d(SP), R12", wBase)
	for i := 0; i < m*cols; i++ {
		g.p("\tVPXORD %s, %s, %s", z(i), z(i), z(i))
	}
	g.p("\tXORQ AX, AX")
	g.p("\tMOVQ k+48(FP), BX")
	g.p("\tSHRQ $5, BX")
	g.p("%s_loop:", name)
	for i := 0; i < m; i++ {
		g.p("\tVMOVDQU32 (%s)(AX*1), %s", aRegs[i], z(za+i))
	}
	for j := 0; j < cols; j++ {
		w := zw + j%2
		g.p("\tVMOVDQU32 %s, %s", rows[j], z(w))
		for i := 0; i < m; i++ {
			g.dpbf16(acc(i, j), za+i, w)
		}
	}
	g.p("\tADDQ $64, AX")
	g.p("\tADDQ $64, R12")
	g.p("\tDECQ BX")
	g.p("\tJNZ %s_loop", name)
	if m > 3 {
		g.p("\tLEAQ (SI)(SI*2), BX")
	}
	rowAddr := []string{"(DI)", "(DI)(SI*1)", "(DI)(SI*2)", "(DI)(BX*1)"}
	for i := 0; i < m; i++ {
		if cols == 1 {
			a := acc(i, 0)
			g.p("\tVEXTRACTF32X8 $1, %s, %s", z(a), y(tmp))
			g.p("\tVADDPS %s, %s, %s", y(tmp), y(a), y(a))
			g.reduceEVEX(a, scratch)
			g.p("\tVMOVSS %s, %s", x(a), rowAddr[i])
			continue
		}
		// Lanes l and l+8 of outputs 2q and 2q+1 added side by side into
		// output 2q's register, the layout reduceRow512 takes.
		var row []int
		for q := 0; q < cols/2; q++ {
			a, b := acc(i, 2*q), acc(i, 2*q+1)
			g.p("\tVSHUFF32X4 $0x44, %s, %s, %s", z(b), z(a), z(tmp))
			g.p("\tVSHUFF32X4 $0xee, %s, %s, Z29", z(b), z(a))
			g.p("\tVADDPS Z29, %s, %s", z(tmp), z(a))
			row = append(row, a)
		}
		g.reduceRow512(row, [6]int{24, 25, 26, 27, 28, 29}, scratch, rowAddr[i])
	}
	g.p("\tADDQ $%d, DI", 4*cols)
	g.p("\tMOVQ %d(SP), R12", wStep)
	g.p("\tADDQ R12, %d(SP)", wBase)
	g.p("\tDECQ %d(SP)", tilesLeft)
	g.p("\tJNZ %s_tile", name)
	g.done(name)
}
