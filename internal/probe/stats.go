package probe

import (
	"math"
	"sort"
)

// KSResult is a two-sample Kolmogorov–Smirnov comparison.
type KSResult struct {
	// D is the largest distance between the two empirical CDFs.
	D float64 `json:"d"`
	// P is the asymptotic p-value of D under "same distribution".
	P float64 `json:"p"`
	// N1, N2 are the sample sizes.
	N1 int `json:"n1"`
	N2 int `json:"n2"`
}

// KSTest compares samples a and b (order does not matter; neither is
// modified). With an empty sample it returns D 0 and P 1: no evidence.
func KSTest(a, b []float64) KSResult {
	r := KSResult{N1: len(a), N2: len(b), P: 1}
	if len(a) == 0 || len(b) == 0 {
		return r
	}
	x := append([]float64(nil), a...)
	y := append([]float64(nil), b...)
	sort.Float64s(x)
	sort.Float64s(y)
	n1, n2 := float64(len(x)), float64(len(y))
	var i, j int
	for i < len(x) && j < len(y) {
		// Step past every copy of the smaller value in both samples, so
		// ties move the two CDFs together.
		v := math.Min(x[i], y[j])
		for i < len(x) && x[i] == v {
			i++
		}
		for j < len(y) && y[j] == v {
			j++
		}
		if d := math.Abs(float64(i)/n1 - float64(j)/n2); d > r.D {
			r.D = d
		}
	}
	ne := n1 * n2 / (n1 + n2)
	sq := math.Sqrt(ne)
	r.P = kolmogorovQ((sq + 0.12 + 0.11/sq) * r.D)
	return r
}

// kolmogorovQ is the Kolmogorov distribution's survival function
// Q(λ) = 2 Σ_{k≥1} (−1)^{k−1} e^{−2k²λ²}, with Stephens' small-sample
// correction applied by the caller.
func kolmogorovQ(lambda float64) float64 {
	if lambda < 0.2 {
		return 1
	}
	var sum float64
	sign := 1.0
	for k := 1; k <= 100; k++ {
		term := sign * math.Exp(-2*float64(k*k)*lambda*lambda)
		sum += term
		if math.Abs(term) < 1e-12 {
			break
		}
		sign = -sign
	}
	return math.Min(1, math.Max(0, 2*sum))
}

// median returns the median of xs (0 for none); xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
