package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// expInputs returns n float32s over the whole range the exponential
// meets: near zero, the ±88/±104 float32 limits, the ±700 vector limits,
// beyond them, signed zeros, infinities, NaN and subnormals.
func expInputs(r *rand.Rand, n int) []float32 {
	edges := []float32{0, float32(math.Copysign(0, -1)), 88.7, -88.7, 103.9, -103.9, 110, -110,
		700, -700, 700.0001, -700.0001, 709.8, -745.2, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(1)}
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(4) {
		case 0:
			v[i] = edges[r.IntN(len(edges))]
		case 1:
			v[i] = float32(r.NormFloat64() * 5)
		case 2:
			v[i] = float32((r.Float64()*2 - 1) * 800)
		default:
			v[i] = float32(r.NormFloat64() * 50)
		}
	}
	return v
}

// TestVectorExpPaths: Softmax and SiLUMul give the same bits with the
// vector exponential as with the scalar one, on every input, including the
// groups the vector code hands back to the scalar code.
func TestVectorExpPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + r.IntN(200) // several 32-element groups of the AVX-512 kernels, and tails
		x := expInputs(r, n)
		if trial%2 == 0 { // mostly finite rows, as attention scores are
			for i := range x {
				if x[i] != x[i] || math.IsInf(float64(x[i]), 0) {
					x[i] = float32(r.NormFloat64())
				}
			}
		}
		up := randVec(r, n, trial%5 == 0)
		what := fmt.Sprintf("trial %d n=%d", trial, n)
		// Each runs on the front of a buffer 32 elements longer, whose
		// rest must come back untouched: the masked tails write nothing
		// past n.
		guarded := func(f func(s []float32)) []float32 {
			buf := append(append([]float32(nil), x...), make([]float32, 32)...)
			for i := n; i < len(buf); i++ {
				buf[i] = -7
			}
			f(buf[:n])
			return buf
		}
		asm, pure := bothPaths(func() []float32 { return guarded(Softmax) })
		sameSlices(t, what+" Softmax", asm, pure)
		asm, pure = bothPaths(func() []float32 { return guarded(func(g []float32) { SiLUMul(g, up) }) })
		sameSlices(t, what+" SiLUMul", asm, pure)
	}
}

// TestVectorExpAccuracy checks softmaxExp against math.Exp on a dense
// sweep of its domain (the contract's error bound, a few float64 ulps, is
// far below float32 rounding, so the float32 results agree).
func TestVectorExpAccuracy(t *testing.T) {
	var x []float32
	for v := -120.0; v <= 0; v += 0.0137 {
		x = append(x, float32(v))
	}
	got := append([]float32(nil), x...)
	softmaxExp(got, 0)
	for i, v := range x {
		want := math.Exp(float64(v))
		if d := math.Abs(float64(got[i]) - want); d > want*1.2e-7 && d > 1.5e-45 {
			t.Fatalf("exp(%v) = %v, math.Exp %v", v, got[i], want)
		}
	}
}

// TestMaxOf: the vector maximum is the scalar one on rows of every length
// around its 64- and 16-element steps, with NaNs (the first one is
// returned), infinities and signed zeros (a zero maximum may have either
// sign).
func TestMaxOf(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	for trial := 0; trial < 3000; trial++ {
		n := 1 + r.IntN(200)
		x := expInputs(r, n)
		if trial%3 != 0 {
			for i := range x {
				if x[i] != x[i] {
					x[i] = float32(math.Copysign(0, float64(r.IntN(2)-1)))
				}
			}
		}
		if trial%7 == 0 { // all at or below zero
			for i := range x {
				x[i] = -float32(math.Abs(float64(x[i])))
			}
		}
		got, want := maxOf(x), maxOfGo(x)
		if !same(got, want) && !(got == 0 && want == 0) {
			t.Fatalf("trial %d n=%d: maxOf = %v, scalar %v", trial, n, got, want)
		}
	}
}
