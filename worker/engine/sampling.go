package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/warden-ai/warden/worker/internal/kernels"
)

// Sampling holds one request's decoding parameters.
type Sampling struct {
	// Temperature 0 selects greedy decoding (argmax; lowest id wins ties).
	Temperature float32
	// TopP keeps the smallest set of most likely tokens whose probability
	// mass reaches TopP; 0 or 1 disables it.
	TopP float32
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// Seed makes sampling reproducible: the draw for output token i is a
	// pure function of (Seed, i).
	Seed uint64
	// MaxTokens is the most tokens to generate (at least 1).
	MaxTokens int
	// StopTokens end generation when sampled, in addition to the engine's
	// EOS ids unless IgnoreEOS is set.
	StopTokens []int32
	// IgnoreEOS keeps generating past EOS (benchmarks).
	IgnoreEOS bool
	// Constraint, when set, starts the structured-output constraint of
	// each sequence submitted with these parameters (called once per
	// sequence, so sequences never share one).
	Constraint func() Constraint
	// Logprobs asks for every sampled token's log probability and its
	// TopLogprobs (0..MaxTopLogprobs) most likely alternatives, in
	// Event.Logprobs (logprobs.go).
	Logprobs    bool
	TopLogprobs int
	// Speculate turns n-gram speculative decoding on or off for this
	// request; nil follows Config.Speculation.On. It never changes the
	// output, only how many tokens a step may emit (speculate.go).
	Speculate *bool
}

// ErrInvalidSampling reports sampling parameters outside their domain.
var ErrInvalidSampling = errors.New("engine: invalid sampling parameters")

// Validate checks the parameters' domains.
func (s Sampling) Validate() error {
	switch {
	case s.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens must be >= 1, got %d", ErrInvalidSampling, s.MaxTokens)
	case s.Temperature < 0 || math.IsNaN(float64(s.Temperature)) || math.IsInf(float64(s.Temperature), 0):
		return fmt.Errorf("%w: temperature must be finite and >= 0, got %v", ErrInvalidSampling, s.Temperature)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(float64(s.TopP)):
		return fmt.Errorf("%w: top_p must be in [0, 1], got %v", ErrInvalidSampling, s.TopP)
	case s.TopK < 0:
		return fmt.Errorf("%w: top_k must be >= 0, got %d", ErrInvalidSampling, s.TopK)
	case s.TopLogprobs < 0 || s.TopLogprobs > MaxTopLogprobs || (s.TopLogprobs > 0 && !s.Logprobs):
		return fmt.Errorf("%w: top_logprobs must be in [0, %d] and needs logprobs, got %d", ErrInvalidSampling, MaxTopLogprobs, s.TopLogprobs)
	}
	return nil
}

// uniform returns the draw in [0, 1) for output token `step` of a request
// seeded with seed. It is counter-based (splitmix64 of seed and step) so a
// prefill worker can sample token 0 and a decode worker continue from
// token 1 without sharing generator state.
func uniform(seed uint64, step int) float64 {
	z := seed + 0x9E3779B97F4A7C15*uint64(step+1)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// sampler holds reusable scratch space so sampling does not allocate per
// token. One sampler serves one goroutine.
type sampler struct {
	idx   []int32
	probs []float64
}

// sample picks the next token from logits for output position step.
func (s *sampler) sample(logits []float32, p Sampling, step int) int32 {
	if p.Temperature == 0 {
		return int32(max(kernels.ArgMax(logits), 0))
	}
	n := len(logits)
	if cap(s.idx) < n {
		s.idx = make([]int32, n)
		s.probs = make([]float64, n)
	}
	idx := s.idx[:n]
	for i := range idx {
		idx[i] = int32(i)
	}
	// Candidates in a total order (logit descending, id ascending) so the
	// result does not depend on the sort algorithm.
	slices.SortFunc(idx, func(a, b int32) int {
		la, lb := logits[a], logits[b]
		switch {
		case la != la && lb != lb:
		case la != la: // NaN sorts last
			return 1
		case lb != lb:
			return -1
		case la != lb:
			return cmp.Compare(lb, la)
		}
		return cmp.Compare(a, b)
	})
	k := n
	if p.TopK > 0 && p.TopK < k {
		k = p.TopK
	}
	probs := s.probs[:k]
	maxLogit := float64(logits[idx[0]])
	var sum float64
	for i := 0; i < k; i++ {
		l := float64(logits[idx[i]])
		if l != l {
			probs[i] = 0
			continue
		}
		probs[i] = math.Exp((l - maxLogit) / float64(p.Temperature))
		sum += probs[i]
	}
	if p.TopP > 0 && p.TopP < 1 {
		var mass float64
		cut := k
		for i := 0; i < k; i++ {
			mass += probs[i] / sum
			if mass >= float64(p.TopP) {
				cut = i + 1
				break
			}
		}
		k = cut
		sum = 0
		for i := 0; i < k; i++ {
			sum += probs[i]
		}
	}
	target := uniform(p.Seed, step) * sum
	var acc float64
	for i := 0; i < k; i++ {
		acc += probs[i]
		if target < acc {
			return idx[i]
		}
	}
	return idx[k-1]
}
