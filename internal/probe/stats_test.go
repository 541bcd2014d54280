package probe

import (
	"math"
	"math/rand/v2"
	"testing"
)

// timings draws n synthetic times to first token in milliseconds: a base
// latency plus right-skewed jitter, the shape real TTFTs have.
func timings(rng *rand.Rand, n int, baseMs, jitterMs float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = baseMs + jitterMs*rng.ExpFloat64() + 0.3*jitterMs*rng.NormFloat64()
	}
	return out
}

// The timing check's statistics detect a 2 ms shift at the configured
// sample size and α with high power, and keep the false-alarm rate near α
// on equal distributions.
func TestKSPowerAndSize(t *testing.T) {
	const (
		trials  = 400
		samples = DefaultTimingSamples
		alpha   = DefaultAlpha
	)
	rng := rand.New(rand.NewPCG(1, 2))
	var detected, falseAlarms int
	for range trials {
		fresh := timings(rng, samples, 20, 2)
		hit := timings(rng, samples, 18, 2)
		if KSTest(hit, fresh).P < alpha {
			detected++
		}
		if KSTest(timings(rng, samples, 20, 2), timings(rng, samples, 20, 2)).P < alpha {
			falseAlarms++
		}
	}
	if power := float64(detected) / trials; power < 0.9 {
		t.Errorf("power against a 2 ms shift = %.3f, want >= 0.9", power)
	}
	// With α = 0.01 and 400 trials the expected count is 4; 12 would be
	// far in the tail of Binomial(400, 0.01) (p < 0.001).
	if falseAlarms > 12 {
		t.Errorf("%d false alarms in %d trials at α=%g", falseAlarms, trials, alpha)
	}
}

func TestKSKnownValues(t *testing.T) {
	same := []float64{1, 2, 3, 4, 5}
	if r := KSTest(same, same); r.D != 0 || r.P != 1 {
		t.Errorf("identical samples: %+v", r)
	}
	a := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	b := []float64{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	r := KSTest(a, b)
	if r.D != 1 {
		t.Errorf("disjoint samples: D = %v, want 1", r.D)
	}
	// Exact two-sided p for D=1, n=m=10 is 2/C(20,10) ≈ 1.1e-5; the
	// asymptotic formula with Stephens' correction is within an order.
	if r.P > 1e-3 {
		t.Errorf("disjoint samples: P = %g, want < 1e-3", r.P)
	}
	// Ties across the samples move both CDFs together.
	if r := KSTest([]float64{1, 1, 2}, []float64{1, 1, 2}); r.D != 0 {
		t.Errorf("tied samples: D = %v", r.D)
	}
	if r := KSTest(nil, a); r.P != 1 {
		t.Errorf("empty sample: %+v", r)
	}
	if q := kolmogorovQ(1.36); math.Abs(q-0.05) > 0.002 {
		t.Errorf("Q(1.36) = %v, want ≈ 0.05", q)
	}
}
