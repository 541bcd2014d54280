package engine

import (
	"math"
	"testing"
)

func TestSamplerRespectsTopKTopPAndTemperature(t *testing.T) {
	var s sampler
	logits := []float32{0.5, 3, 2.9, -1, 2.95}
	for step := range 200 {
		if got := s.sample(logits, Sampling{Temperature: 5, TopK: 1, Seed: 9, MaxTokens: 1}, step); got != 1 {
			t.Fatalf("top_k 1 picked %d", got)
		}
		if got := s.sample(logits, Sampling{Temperature: 5, TopP: 0.01, Seed: 9, MaxTokens: 1}, step); got != 1 {
			t.Fatalf("top_p 0.01 picked %d", got)
		}
		if got := s.sample(logits, Sampling{Temperature: 1, TopK: 3, Seed: uint64(step), MaxTokens: 1}, step); got != 1 && got != 2 && got != 4 {
			t.Fatalf("top_k 3 picked %d outside the three best", got)
		}
	}
	if got := s.sample(logits, Sampling{MaxTokens: 1}, 0); got != 1 {
		t.Fatalf("greedy picked %d", got)
	}

	// Two tokens with probabilities 1/4 and 3/4 at temperature 1.
	two := []float32{0, float32(math.Log(3))}
	const n = 20000
	ones := 0
	for step := range n {
		if s.sample(two, Sampling{Temperature: 1, Seed: 1234, MaxTokens: 1}, step) == 1 {
			ones++
		}
	}
	if frac := float64(ones) / n; math.Abs(frac-0.75) > 0.02 {
		t.Fatalf("sampled the likelier token %.3f of the time, want 0.75", frac)
	}
}

func TestUniformIsAPureFunctionOfSeedAndStep(t *testing.T) {
	if uniform(1, 5) != uniform(1, 5) {
		t.Fatal("uniform is not deterministic")
	}
	if uniform(1, 5) == uniform(2, 5) || uniform(1, 5) == uniform(1, 6) {
		t.Fatal("uniform ignores its seed or step")
	}
	for i := range 1000 {
		if u := uniform(uint64(i), i); u < 0 || u >= 1 {
			t.Fatalf("uniform(%d) = %v outside [0, 1)", i, u)
		}
	}
}
