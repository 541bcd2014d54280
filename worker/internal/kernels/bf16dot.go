package kernels

import (
	"errors"
	"fmt"
	"math"
)

// BF16DotBlock is the column multiple a BF16Dot matrix needs: the kernels
// take 32 elements (one zmm register of bfloat16 pairs) at a time.
const BF16DotBlock = 32

// ErrBF16DotShape reports a matrix that cannot use bf16 products: not
// bfloat16, or rows that are not whole BF16DotBlock runs.
var ErrBF16DotShape = errors.New("kernels: bf16 products need a bf16 matrix whose column count is a multiple of 32")

// BF16Dot returns m (a BF16 matrix) as a BF16Dot matrix over the same
// elements, shared, not copied. Its products round every activation to
// bfloat16 (as F32ToBF16, round to nearest even, but a subnormal becomes
// a zero of its sign, as VCVTNE2PS2BF16 does) and multiply in bfloat16
// pairs, as llama.cpp's bf16 path and the AVX512-BF16 instruction
// VDPBF16PS do; the canonical order of one output element over k
// columns is:
//
//	acc[0..15] = +0
//	for p := 0; p < k/2; p++ {          // the pair of columns 2p, 2p+1
//		l := p % 16
//		acc[l] = ftz(fma(a[2p+1], w[2p+1], acc[l]))
//		acc[l] = ftz(fma(a[2p], w[2p], acc[l]))
//	}
//	v[l] = acc[l] + acc[l+8]           // l < 8
//	s = ((v[0]+v[4]) + (v[2]+v[6])) + ((v[1]+v[5]) + (v[3]+v[7]))
//
// where a and w are the bfloat16 values widened to float32 with
// subnormals read as zero, fma rounds once to float32 (a product of two
// bfloat16 values is exact in float32), and ftz turns a subnormal result
// into a zero of its sign: VDPBF16PS's semantics. The result depends on
// nothing else (batch, tile, thread count, code path), so batch and chunk
// invariance hold as for the exact formats. On CPUs without AVX512-BF16
// a pure-Go loop computes the same bits, many times slower
// (BF16DotAccelerated). It fails with ErrBF16DotShape for a matrix that is
// not BF16 or BF16Dot, or whose column count is not a multiple of
// BF16DotBlock.
func (m *Matrix) BF16Dot() (*Matrix, error) {
	switch {
	case m.format == BF16Dot:
		return m, nil
	case m.format != BF16 || m.cols%BF16DotBlock != 0:
		return nil, fmt.Errorf("%w: %v %d×%d", ErrBF16DotShape, m.format, m.rows, m.cols)
	}
	return &Matrix{format: BF16Dot, rows: m.rows, cols: m.cols, u16: m.u16}, nil
}

// BF16DotAccelerated reports whether BF16Dot products run on the CPU's
// AVX512-BF16 instructions; without them a pure-Go loop computes the same
// bits, many times slower.
func BF16DotAccelerated() bool { return useAsm && useBF16Dot }

// roundBF16Go rounds src to bfloat16 into dst as the BF16Dot products
// read activations: F32ToBF16, with subnormals as zeros of their sign.
func roundBF16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = f32ToBF16(math.Float32bits(ftz32(f)))
	}
}

// bf16Widen is a bfloat16 value as VDPBF16PS reads it: exactly, but a
// subnormal as a zero of its sign.
func bf16Widen(h uint16) float32 {
	return ftz32(math.Float32frombits(uint32(h) << 16))
}

// ftz32 turns a subnormal v into a zero of its sign.
func ftz32(v float32) float32 {
	b := math.Float32bits(v)
	if b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return v
}

// dotBF16Go is the canonical bf16-products dot product of a and w (see
// Matrix.BF16Dot); len(a) is even.
func dotBF16Go(a, w []uint16) float32 {
	w = w[:len(a)]
	var acc [16]float32
	for p := 0; 2*p < len(a); p++ {
		l := p & 15
		acc[l] = ftz32(fma32(bf16Widen(a[2*p+1]), bf16Widen(w[2*p+1]), acc[l]))
		acc[l] = ftz32(fma32(bf16Widen(a[2*p]), bf16Widen(w[2*p]), acc[l]))
	}
	var v [8]float32
	for l := range v {
		v[l] = acc[l] + acc[l+8]
	}
	return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
}

// matMulBF16Go computes c[i*ldc+j] = dotBF16Go(a[i*lda:][:k], w[j*ldw:][:k]).
func matMulBF16Go(c []float32, ldc int, a []uint16, lda int, w []uint16, ldw, m, n, k int) {
	for i := 0; i < m; i++ {
		ai := a[i*lda : i*lda+k]
		for j := 0; j < n; j++ {
			c[i*ldc+j] = dotBF16Go(ai, w[j*ldw:j*ldw+k])
		}
	}
}
