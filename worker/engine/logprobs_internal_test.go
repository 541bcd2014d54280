package engine

import (
	"math"
	"testing"
)

func TestLogprobsTopOrderTiesAndNonFinite(t *testing.T) {
	var s logprobScratch
	nan := float32(math.NaN())
	logits := []float32{1, 3, nan, 3, float32(math.Inf(-1)), 2, -1}
	lp := s.logprobs(logits, 4, 4)
	var sum float64
	for _, l := range []float64{1, 3, 3, 2, -1} {
		sum += math.Exp(l - 3)
	}
	ls := math.Log(sum)
	if lp.Logprob != NoLogprob {
		t.Fatalf("logprob of a -Inf logit: %v, want %v", lp.Logprob, NoLogprob)
	}
	want := []TopLogprob{{1, 3 - 3 - ls}, {3, 3 - 3 - ls}, {5, 2 - 3 - ls}, {0, 1 - 3 - ls}}
	if len(lp.Top) != len(want) {
		t.Fatalf("top %v, want %v", lp.Top, want)
	}
	for i := range want {
		if lp.Top[i] != want[i] {
			t.Fatalf("top %v, want %v", lp.Top, want)
		}
	}
	if got := s.logprobs([]float32{0, 0}, 1, 5); len(got.Top) != 2 || got.Logprob != math.Log(0.5) {
		t.Fatalf("two equal logits: %+v", got)
	}
}
