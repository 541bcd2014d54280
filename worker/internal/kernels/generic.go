package kernels

import (
	"encoding/binary"
	"math"
)

// Pure-Go reference implementations. They define the results: the
// assembly must match them bit for bit, and they run wherever it cannot.

// dotGo is the canonical dot product of the package doc.
func dotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var acc [8]float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		acc[0] = fma32(a[i], b[i], acc[0])
		acc[1] = fma32(a[i+1], b[i+1], acc[1])
		acc[2] = fma32(a[i+2], b[i+2], acc[2])
		acc[3] = fma32(a[i+3], b[i+3], acc[3])
		acc[4] = fma32(a[i+4], b[i+4], acc[4])
		acc[5] = fma32(a[i+5], b[i+5], acc[5])
		acc[6] = fma32(a[i+6], b[i+6], acc[6])
		acc[7] = fma32(a[i+7], b[i+7], acc[7])
	}
	for ; i < len(a); i++ {
		acc[i&7] = fma32(a[i], b[i], acc[i&7])
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

// matMulTGo computes c[i*ldc+j] = dotGo(a[i*lda:][:k], w[j*ldw:][:k]).
func matMulTGo(c []float32, ldc int, a []float32, lda int, w []float32, ldw, m, n, k int) {
	for i := 0; i < m; i++ {
		ai := a[i*lda : i*lda+k]
		ci := c[i*ldc : i*ldc+n]
		for j := range ci {
			ci[j] = dotGo(ai, w[j*ldw:j*ldw+k])
		}
	}
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] = fma32(alpha, v, y[i])
	}
}

// axpyRowsGo is len(alpha) successive Axpy calls, one per row.
func axpyRowsGo(y, alpha, rows []float32, stride int) {
	for t, a := range alpha {
		axpyGo(a, rows[t*stride:t*stride+len(y)], y)
	}
}

func scaleGo(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func addGo(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		dst[i] = a[i] + b[i]
	}
}

// mulScaleGo computes out[i] = (x[i]*s) * w[i], two float32 roundings.
func mulScaleGo(out, x, w []float32, s float32) {
	x, w = x[:len(out)], w[:len(out)]
	for i := range out {
		out[i] = float32(x[i]*s) * w[i]
	}
}

// matMul16Go is matMulTGo with W in F16 or BF16 (f), each row widened
// exactly first.
func matMul16Go(c []float32, ldc int, a []float32, lda int, w []uint16, f Format, ldw, m, n, k int) {
	// A widened W row; on the stack up to 4096 columns, so that a decode
	// step (LoRA's bf16 factors, a 16-bit model off amd64) allocates
	// nothing.
	var stack [4096]float32
	row := stack[:min(k, len(stack))]
	if k > len(stack) {
		row = make([]float32, k)
	}
	for j := 0; j < n; j++ {
		if f == BF16 {
			BF16ToF32(row, w[j*ldw:j*ldw+k])
		} else {
			F16ToF32(row, w[j*ldw:j*ldw+k])
		}
		for i := 0; i < m; i++ {
			c[i*ldc+j] = dotGo(a[i*lda:i*lda+k], row)
		}
	}
}

// q8DotGo is the canonical Q8 dot product of the quantized row a (Q8
// blocks one after another) with a W row whose block b holds its weights
// at w[b·stride:] and its float32 scale at w[b·stride+scaleAt:]: per
// block, d = wd·ad (float32) and for lane l the exact integer sum p of the
// four products of elements 4l..4l+3, accumulated as
// acc[l] = fma(float32(p), d, acc[l]); then the canonical tree.
func q8DotGo(a, w []byte, stride, scaleAt int) float32 {
	var acc [8]float32
	for b := range len(a) / Q8BlockBytes {
		ab, wb := a[b*Q8BlockBytes:], w[b*stride:]
		d := math.Float32frombits(binary.LittleEndian.Uint32(wb[scaleAt:])) * q8Scale(ab)
		for l := range 8 {
			var p int32
			for t := 4 * l; t < 4*l+4; t++ {
				p += int32(int8(ab[t])) * int32(int8(wb[t]))
			}
			acc[l] = fma32(float32(p), d, acc[l])
		}
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

// q8GroupsGo computes c[j] = q8DotGo(a, row j of w) for j < len(c), w in
// the Q8 group layout (see q8GroupRows).
func q8GroupsGo(c []float32, a, w []byte) {
	groupBytes := q8GroupRows * len(a)
	for j := range c {
		r := j % q8GroupRows
		c[j] = q8DotGo(a, w[j/q8GroupRows*groupBytes+r*Q8Block:], q8GroupBlockBytes, (q8GroupRows-r)*Q8Block+4*r)
	}
}

// axpyTileGo is m axpyRowsGo calls (see AxpyTile).
func axpyTileGo(y []float32, m, width, ldy int, alpha []float32, count, lda int, rows []float32, stride int) {
	for i := 0; i < m; i++ {
		axpyRowsGo(y[i*ldy:i*ldy+width], alpha[i*lda:i*lda+count], rows, stride)
	}
}

// scaleF64Go sets x[i] = float32(float64(x[i]) * s).
func scaleF64Go(x []float32, s float64) {
	for i, e := range x {
		x[i] = float32(float64(e) * s)
	}
}

// softmaxExpGo sets x[i] = float32(exp(float64(x[i] - mx))).
func softmaxExpGo(x []float32, mx float32) {
	for i, v := range x {
		x[i] = float32(exp(float64(v - mx)))
	}
}

// siluMulGo sets gate[i] = float32(d / (1 + exp(-d))) * up[i] with
// d = float64(gate[i]).
func siluMulGo(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		d := float64(g)
		s := float32(d / (1 + exp(-d)))
		gate[i] = s * up[i]
	}
}
