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
	matMulT(c, n, a, w, k, m, n, k)
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
	matMulT(dst, 0, x, rows, stride, 1, len(dst), len(x))
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
//	sum  = e[0] + e[1] + … in index order, in float64
//	x[i] = float32(float64(e[i]) / sum)
//
// Elements equal to -Inf get 0 (masked positions). If x contains a NaN or
// +Inf, or every element is -Inf, the result is all NaN. An empty x is
// left alone.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx || v != v {
			mx = v
		}
	}
	softmaxExp(x, mx)
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	for i, e := range x {
		x[i] = float32(float64(e) / sum)
	}
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
