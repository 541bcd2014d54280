package kernels

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestMatMulTStridedEqualsDot: every element of a strided product is Dot
// of its row and column bit for bit, on every path.
func TestMatMulTStridedEqualsDot(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for trial := 0; trial < 150; trial++ {
		m, n, k := 1+r.IntN(13), 1+r.IntN(20), 1+r.IntN(100)
		if trial%2 == 0 {
			k = 8 * (1 + r.IntN(16))
		}
		ldw, ldc := k+r.IntN(3*k), n+r.IntN(5)
		a, w := randVec(r, m*k, trial%4 == 0), randVec(r, (n-1)*ldw+k, trial%4 == 0)
		run := func() []float32 {
			c := make([]float32, (m-1)*ldc+n)
			MatMulTStrided(c, ldc, a, m, k, w, n, ldw)
			return c
		}
		what := fmt.Sprintf("m=%d n=%d k=%d ldw=%d", m, n, k, ldw)
		asm, pure := bothPaths(run)
		sameSlices(t, what+" asm vs Go", asm, pure)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				if want := Dot(a[i*k:(i+1)*k], w[j*ldw:j*ldw+k]); !same(asm[i*ldc+j], want) {
					t.Fatalf("%s: C[%d][%d] = %v, Dot %v", what, i, j, asm[i*ldc+j], want)
				}
			}
		}
	}
}

// TestAxpyTileEqualsAxpyStrided: each output of AxpyTile is its own
// AxpyStrided call bit for bit, with and without the AVX-512 kernels and
// in pure Go, for widths on and off the kernels' 16- and 64-float steps.
func TestAxpyTileEqualsAxpyStrided(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	for trial := 0; trial < 200; trial++ {
		m, width, count := 1+r.IntN(13), 1+r.IntN(150), 1+r.IntN(20)
		if trial%3 == 0 {
			width = 16 * (1 + r.IntN(9))
		}
		ldy, lda, stride := width+r.IntN(4), count+r.IntN(4), width+r.IntN(2*width)
		y0 := randVec(r, (m-1)*ldy+width, trial%5 == 0)
		alpha := randVec(r, (m-1)*lda+count, trial%5 == 0)
		rows := randVec(r, (count-1)*stride+width, trial%5 == 0)
		run := func() []float32 {
			y := append([]float32(nil), y0...)
			AxpyTile(y, m, width, ldy, alpha, count, lda, rows, stride)
			return y
		}
		want := append([]float32(nil), y0...)
		for i := 0; i < m; i++ {
			AxpyStrided(want[i*ldy:i*ldy+width], alpha[i*lda:i*lda+count], rows, stride)
		}
		what := fmt.Sprintf("m=%d width=%d count=%d", m, width, count)
		asm, pure := bothPaths(run)
		sameSlices(t, what+" vs AxpyStrided", asm, want)
		sameSlices(t, what+" Go vs AxpyStrided", pure, want)
		saved := use512
		use512 = false
		sameSlices(t, what+" AVX2 vs AxpyStrided", run(), want)
		use512 = saved
	}
}

// softmaxScalar is Softmax's documented expression, one element at a
// time.
func softmaxScalar(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx || v != v {
			mx = v
		}
	}
	var acc [32]float64
	for i, v := range x {
		x[i] = float32(exp(float64(v - mx)))
		acc[i%32] += float64(x[i])
	}
	var s [8]float64
	for l := range s {
		s[l] = (acc[l] + acc[l+16]) + (acc[l+8] + acc[l+24])
	}
	inv := 1 / (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7])))
	for i, e := range x {
		x[i] = float32(float64(e) * inv)
	}
}

// TestSoftmaxRowsEqualsSoftmax: SoftmaxRows gives each row Softmax's bits,
// whatever the rows' lengths and neighbours, on every path.
func TestSoftmaxRowsEqualsSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	for trial := 0; trial < 100; trial++ {
		rows := make([][]float32, r.IntN(10))
		for i := range rows {
			rows[i] = randVec(r, r.IntN(70), trial%4 == 0)
			for j := range rows[i] {
				rows[i][j] *= 8 // a range where exp underflows for some
			}
		}
		want := make([][]float32, len(rows))
		for i, x := range rows {
			want[i] = append([]float32(nil), x...)
			softmaxScalar(want[i])
		}
		run := func() [][]float32 {
			got := make([][]float32, len(rows))
			for i, x := range rows {
				got[i] = append([]float32(nil), x...)
			}
			SoftmaxRows(got)
			return got
		}
		asm, pure := bothPaths(run)
		for i, x := range rows {
			one := append([]float32(nil), x...)
			Softmax(one)
			sameSlices(t, fmt.Sprintf("trial %d row %d Softmax", trial, i), one, want[i])
			sameSlices(t, fmt.Sprintf("trial %d row %d", trial, i), asm[i], want[i])
			sameSlices(t, fmt.Sprintf("trial %d row %d Go", trial, i), pure[i], want[i])
		}
	}
}

// TestScaleF64MatchesScalar: the vector scaling is the scalar float64
// product rounded to float32, lane by lane.
func TestScaleF64MatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(67, 68))
	for _, s := range []float64{1, 1.0 / 3, 1e-300, 7.25e30, math.Inf(1), math.NaN(), 0} {
		x := randVec(r, 37, true)
		got := append([]float32(nil), x...)
		scaleF64(got, s)
		for i, v := range x {
			if want := float32(float64(v) * s); !same(got[i], want) {
				t.Fatalf("scaleF64(%v) by %v = %v, want %v", v, s, got[i], want)
			}
		}
	}
}

// TestSumF64: the AVX-512 sum gives the Go order's bits on rows of every
// length around its 32-element steps, reads nothing past the row (a NaN
// sits there), and is accurate: within a few float64 ulps of the exact
// sum of nonnegative elements.
func TestSumF64(t *testing.T) {
	r := rand.New(rand.NewPCG(69, 70))
	for n := 0; n <= 200; n++ {
		buf := make([]float32, n+32)
		for i := range buf[:n] {
			buf[i] = float32(r.ExpFloat64()) * float32(math.Ldexp(1, r.IntN(40)-20))
		}
		for i := n; i < len(buf); i++ {
			buf[i] = float32(math.NaN())
		}
		x := buf[:n]
		got, want := sumF64(x), sumF64Go(x)
		if math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("n=%d: sumF64 = %v, Go order %v", n, got, want)
		}
		exact := new(big.Float).SetPrec(256)
		for _, v := range x {
			exact.Add(exact, big.NewFloat(float64(v)))
		}
		e, _ := exact.Float64()
		if math.Abs(got-e) > 4*float64(n)*0x1p-53*e {
			t.Fatalf("n=%d: sumF64 = %v, exact %v", n, got, e)
		}
	}
}
