package kernels

import (
	"fmt"
	"math"
)

// Dot returns the canonical dot product of a and b (see the package doc).
// It panics if the lengths differ.
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("kernels: Dot of lengths %d and %d", len(a), len(b)))
	}
	if len(a) == 0 {
		return 0
	}
	return dot(a, b)
}

// MatMulT computes C = A·Wᵀ: C is m×n, A is m×k, W is n×k, all row-major
// and contiguous (W in the [out_features, in_features] layout of Hugging
// Face weights). Each C[i][j] equals Dot(A[i,:], W[j,:]) bit for bit.
// c must not overlap a or w. It runs on the calling goroutine;
// Pool.MatMulT spreads it over threads. It panics if a slice is shorter
// than its shape or a dimension is negative.
func MatMulT(c, a, w []float32, m, n, k int) {
	checkMatMulT(c, a, w, m, n, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	matMulT(c, n, a, k, w, k, m, n, k)
}

func checkMatMulT(c, a, w []float32, m, n, k int) {
	if m < 0 || n < 0 || k < 0 || !fits(m, n, len(c)) || !fits(m, k, len(a)) || !fits(n, k, len(w)) {
		panic(fmt.Sprintf("kernels: MatMulT m=%d n=%d k=%d with len(c)=%d len(a)=%d len(w)=%d",
			m, n, k, len(c), len(a), len(w)))
	}
}

// DotStrided computes dst[t] = Dot(x, rows[t*stride:][:len(x)]) for every
// t < len(dst): the dot products of x with rows that lie stride elements
// apart, such as the keys of one attention head in a KV page. Each result
// is bit-identical to Dot, but several rows run at once, which hides the
// latency of a single reduction chain. It panics if rows is too short or
// stride is negative.
func DotStrided(dst, x, rows []float32, stride int) {
	if len(dst) == 0 {
		return
	}
	checkStrided("DotStrided", len(dst), len(x), len(rows), stride)
	if len(x) == 0 {
		clear(dst)
		return
	}
	matMulT(dst, 0, x, len(x), rows, stride, 1, len(dst), len(x))
}

// MatMulTStrided computes C = A·Wᵀ for an m×k A (contiguous) and n rows
// of W that lie ldw elements apart, writing row i of C at c[i*ldc:][:n]:
// each C[i][j] equals Dot(A[i,:], W[j,:]) bit for bit — such as the
// scores of a tile of attention queries against the keys of one head in a
// KV page. c must not overlap a or w. It panics if a slice is too short
// for its shape.
func MatMulTStrided(c []float32, ldc int, a []float32, m, k int, w []float32, n, ldw int) {
	if m <= 0 || n <= 0 {
		return
	}
	if ldc < n || !fits(m-1, ldc, len(c)-n) || !fits(m, k, len(a)) {
		panic(fmt.Sprintf("kernels: MatMulTStrided m=%d n=%d k=%d ldc=%d with len(c)=%d len(a)=%d",
			m, n, k, ldc, len(c), len(a)))
	}
	checkStrided("MatMulTStrided", n, k, len(w), ldw)
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	matMulT(c, ldc, a, k, w, ldw, m, n, k)
}

// AxpyStrided is len(alpha) successive Axpy calls, in order:
// Axpy(alpha[t], rows[t*stride:][:len(y)], y) for t = 0, 1, … — such as
// the weighted sum of the values of one attention head in a KV page. The
// result is bit-identical to those calls, but y stays in registers. y must
// not overlap rows. It panics if rows is too short or stride is negative.
func AxpyStrided(y, alpha, rows []float32, stride int) {
	if len(alpha) == 0 || len(y) == 0 {
		return
	}
	checkStrided("AxpyStrided", len(alpha), len(y), len(rows), stride)
	axpyRows(y, alpha, rows, stride)
}

// AxpyTile is m AxpyStrided calls over the same rows: for i < m,
// AxpyStrided(y[i*ldy:][:width], alpha[i*lda:][:count], rows, stride),
// each output bit-identical to that call, but each row is read once for
// all m outputs — such as the probabilities·V product of a tile of
// attention queries over one KV page. y must not overlap rows or alpha.
// It panics if a slice is too short for its shape.
func AxpyTile(y []float32, m, width, ldy int, alpha []float32, count, lda int, rows []float32, stride int) {
	if m <= 0 || width <= 0 || count <= 0 {
		return
	}
	if ldy < width || lda < count || !fits(m-1, ldy, len(y)-width) || !fits(m-1, lda, len(alpha)-count) {
		panic(fmt.Sprintf("kernels: AxpyTile m=%d width=%d count=%d ldy=%d lda=%d with len(y)=%d len(alpha)=%d",
			m, width, count, ldy, lda, len(y), len(alpha)))
	}
	checkStrided("AxpyTile", count, width, len(rows), stride)
	axpyTile(y, m, width, ldy, alpha, count, lda, rows, stride)
}

// fits reports whether count×width (both >= 0) is at most length, without
// overflowing.
func fits(count, width, length int) bool {
	return width == 0 || count <= length/width
}

// checkStrided checks that count rows of width elements, stride apart,
// fit in rowsLen elements (count > 0).
func checkStrided(name string, count, width, rowsLen, stride int) {
	if stride < 0 || width > rowsLen || !fits(count-1, stride, rowsLen-width) {
		panic(fmt.Sprintf("kernels: %s of %d rows of %d with stride %d over %d elements",
			name, count, width, stride, rowsLen))
	}
}

// Axpy computes y[i] = fma(alpha, x[i], y[i]) (one rounding per element).
// x and y must not overlap. It panics if the lengths differ.
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("kernels: Axpy of lengths %d and %d", len(x), len(y)))
	}
	if len(x) == 0 {
		return
	}
	axpy(alpha, x, y)
}

// Scale computes x[i] = x[i] * s.
func Scale(x []float32, s float32) {
	if len(x) == 0 {
		return
	}
	scale(x, s)
}

// Add computes dst[i] = a[i] + b[i]. dst may be a or b, but must not
// otherwise overlap them. It panics if the lengths differ.
func Add(dst, a, b []float32) {
	if len(a) != len(dst) || len(b) != len(dst) {
		panic(fmt.Sprintf("kernels: Add of lengths %d, %d and %d", len(dst), len(a), len(b)))
	}
	if len(dst) == 0 {
		return
	}
	add(dst, a, b)
}

// RMSNorm computes out = x / rms(x) * weight, in float32, as:
//
//	ss   = Dot(x, x)                    // canonical order
//	mean = ss / float32(len(x))
//	inv  = 1 / sqrt(mean + eps)         // float32 add, correctly rounded float32 sqrt, float32 divide
//	out[i] = (x[i] * inv) * weight[i]   // two float32 multiplications
//
// out may be x, but must not otherwise overlap x or weight. It panics if
// the lengths differ.
func RMSNorm(out, x, weight []float32, eps float32) {
	if len(x) != len(out) || len(weight) != len(out) {
		panic(fmt.Sprintf("kernels: RMSNorm of lengths %d, %d and %d", len(out), len(x), len(weight)))
	}
	if len(x) == 0 {
		return
	}
	mean := dot(x, x) / float32(len(x))
	// float32(math.Sqrt(float64(v))) is the correctly rounded float32
	// square root: double rounding is harmless for sqrt from 53 to 24 bits.
	inv := 1 / float32(math.Sqrt(float64(mean+eps)))
	mulScale(out, x, weight, inv)
}

// SiLUMul computes gate[i] = silu(gate[i]) * up[i], where
//
//	silu(g) = float32(float64(g) / (1 + exp(-float64(g))))
//
// with exp the package's deterministic float64 exponential, followed by one
// float32 multiplication by up[i]. It panics if the lengths differ.
func SiLUMul(gate, up []float32) {
	if len(gate) != len(up) {
		panic(fmt.Sprintf("kernels: SiLUMul of lengths %d and %d", len(gate), len(up)))
	}
	siluMul(gate, up[:len(gate)])
}

// Softmax replaces x with softmax(x), computed as:
//
//	mx   = the largest element (float32 comparisons)
//	e[i] = float32(exp(float64(x[i] - mx)))   // float32 subtraction, float64 exp
//	acc[i mod 32] += float64(e[i])             // in index order, from +0
//	s[l] = (acc[l] + acc[l+16]) + (acc[l+8] + acc[l+24])   // l = 0..7
//	sum  = ((s[0]+s[4]) + (s[2]+s[6])) + ((s[1]+s[5]) + (s[3]+s[7]))
//	x[i] = float32(float64(e[i]) * (1 / sum))  // float64 reciprocal and product
//
// The 32 partial sums are the lanes of four 8-lane float64 registers, so
// the additions of a long row do not wait on one another. Elements equal
// to -Inf get 0 (masked positions). If x contains a NaN or +Inf, or every
// element is -Inf, the result is all NaN. An empty x is left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	softmaxExp(x, maxOf(x))
	scaleF64(x, 1/sumF64(x))
}

// SoftmaxRows applies Softmax to every row. Rows may have different
// lengths; they must not overlap.
func SoftmaxRows(rows [][]float32) {
	for _, x := range rows {
		Softmax(x)
	}
}

// maxOfGo is Softmax's mx: the largest element, or the first NaN.
func maxOfGo(x []float32) float32 {
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx || v != v {
			mx = v
		}
	}
	return mx
}

// sumF64Go is Softmax's sum of e, one element at a time.
func sumF64Go(x []float32) float64 {
	var acc [32]float64
	for i, v := range x {
		acc[i%32] += float64(v)
	}
	var s [8]float64
	for l := range s {
		s[l] = (acc[l] + acc[l+16]) + (acc[l+8] + acc[l+24])
	}
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
}

// ArgMax returns the index of the largest element of x; the lowest index
// wins ties (-0 and +0 tie). A NaN counts as larger than every number, so
// the first NaN wins if there is one. It returns -1 for an empty x.
func ArgMax(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	best := 0
	for i, v := range x {
		if v != v {
			return i
		}
		if v > x[best] {
			best = i
		}
	}
	return best
}

// MatMulTMatrix is MatMulTStrided for a weight Matrix in F32, F16 or
// BF16: row i of C (at c[i*ldc:][:w.Rows()]) is A[i,:]·Wᵀ for an m×k A
// (k = w.Cols(), contiguous), each element equal to Dot(A[i,:], row j of
// W widened to float32) bit for bit. It runs on the calling goroutine —
// inside a Pool loop's task, say — and panics for a Q8 or BF16Dot
// matrix (their activations need preparing: Pool.MatMulTW) or a slice too
// short for its shape.
func MatMulTMatrix(c []float32, ldc int, a []float32, m int, w *Matrix) {
	n, k := w.rows, w.cols
	if m <= 0 || n <= 0 {
		return
	}
	if w.format == Q8 || w.format == BF16Dot || ldc < n || !fits(m-1, ldc, len(c)-n) || !fits(m, k, len(a)) {
		panic(fmt.Sprintf("kernels: MatMulTMatrix of a %v %d×%d matrix, m=%d ldc=%d with len(c)=%d len(a)=%d",
			w.format, n, k, m, ldc, len(c), len(a)))
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	if w.format == F32 {
		matMulT(c, ldc, a, k, w.f32, k, m, n, k)
		return
	}
	matMul16(c, ldc, a, k, w.u16, w.format, k, m, n, k)
}
