package probe

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
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

// pairOnLoadedMachine draws one pair of times to first token in
// milliseconds on a machine whose load varies from moment to moment: both
// probes of a pair share the moment's slowdown (up to 10×), each has its
// own jitter, and the fresh probe pays prefillMs more than the primed one.
func pairOnLoadedMachine(rng *rand.Rand, prefillMs float64) (primed, fresh float64) {
	load := 1 + 9*rng.Float64()
	primed = load * (10 + 4*rng.ExpFloat64())
	fresh = load * (10 + prefillMs + 4*rng.ExpFloat64())
	return primed, fresh
}

// winRate estimates how often the primed probe wins a pair.
func winRate(rng *rand.Rand, prefillMs float64) float64 {
	wins := 0
	for range 10000 {
		if p, f := pairOnLoadedMachine(rng, prefillMs); p < f {
			wins++
		}
	}
	return float64(wins) / 10000
}

// runSPRT runs the timing check's sequential test on draws of pair, as
// run.timing does, and returns its decision and the rounds it took.
func runSPRT(rng *rand.Rand, prefillMs float64) (int, int) {
	var s sprt
	for round := 1; round <= DefaultTimingSamples; round++ {
		s.add(pairOnLoadedMachine(rng, prefillMs))
		if round >= timingMinRounds {
			if d := s.decide(DefaultAlpha); d != 0 {
				return d, round
			}
		}
	}
	return 0, DefaultTimingSamples
}

// The sequential sign test concludes within its bound whatever the load:
// without a channel it passes (a false finding far rarer than 1 in 1000
// runs, by Wald's bound α/(1−β)), and so it does with a slight benign bias
// (the primed probe faster in 59% of pairs: warden's healthy runs showed
// 61%); through a cache whose hit saves 8 ms of a 10 ms prefill — under
// load changing tenfold — it finds the channel; all in 12 to 22 rounds on
// average, fewer than 1 in 200 undecided after DefaultTimingSamples.
func TestSequentialTimingTest(t *testing.T) {
	const trials = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name      string
		prefillMs float64
		want      int
	}{{"no channel", 0, -1}, {"slight bias", 0.8, -1}, {"channel", 8, 1}} {
		var right, wrong, undecided, rounds int
		for range trials {
			d, n := runSPRT(rng, tc.prefillMs)
			rounds += n
			switch d {
			case tc.want:
				right++
			case 0:
				undecided++
			default:
				wrong++
			}
		}
		t.Logf("%s: %d right, %d wrong, %d undecided in %d trials; %.1f rounds on average; primed faster in %.0f%% of pairs", tc.name, right, wrong, undecided, trials, float64(rounds)/trials, 100*winRate(rng, tc.prefillMs))
		// Wald: P(wrong) ≤ α/(1−β) ≈ 0.0001 without a channel; 8 of 2000
		// is far in the tail of anything near that.
		if wrong > 8 {
			t.Errorf("%s: %d wrong decisions in %d trials", tc.name, wrong, trials)
		}
		if undecided > trials/200 {
			t.Errorf("%s: %d of %d trials undecided after %d rounds", tc.name, undecided, trials, DefaultTimingSamples)
		}
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

// Streams overlap when their content flowed at the same time; with two
// keys only pairs across keys count.
func TestOverlappingPairs(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	flows := []streamFlow{
		{key: 0, first: at(0), end: at(10)},
		{key: 0, first: at(5), end: at(15)},  // overlaps the first, same key: not counted
		{key: 1, first: at(12), end: at(20)}, // overlaps the second only
		{key: 1, first: at(20), end: at(30)}, // starts as the third ends: no overlap
	}
	if n := overlappingPairs(flows); n != 1 {
		t.Errorf("%d overlapping pairs across keys, want 1", n)
	}
	if n := overlappingPairs(flows[:2]); n != 1 {
		t.Errorf("one key: %d overlapping pairs, want 1", n)
	}
}
