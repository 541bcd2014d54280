package engine

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestSamplerRespectsTopKTopPAndTemperature(t *testing.T) {
	var s sampler
	logits := []float32{0.5, 3, 2.9, -1, 2.95}
	for step := range 200 {
		if got := s.sample(logits, Sampling{Temperature: 5, TopK: 1, Seed: 9, MaxTokens: 1}, History{}, step); got != 1 {
			t.Fatalf("top_k 1 picked %d", got)
		}
		if got := s.sample(logits, Sampling{Temperature: 5, TopP: 0.01, Seed: 9, MaxTokens: 1}, History{}, step); got != 1 {
			t.Fatalf("top_p 0.01 picked %d", got)
		}
		if got := s.sample(logits, Sampling{Temperature: 1, TopK: 3, Seed: uint64(step), MaxTokens: 1}, History{}, step); got != 1 && got != 2 && got != 4 {
			t.Fatalf("top_k 3 picked %d outside the three best", got)
		}
	}
	if got := s.sample(logits, Sampling{MaxTokens: 1}, History{}, 0); got != 1 {
		t.Fatalf("greedy picked %d", got)
	}

	// Two tokens with probabilities 1/4 and 3/4 at temperature 1.
	two := []float32{0, float32(math.Log(3))}
	const n = 20000
	ones := 0
	for step := range n {
		if s.sample(two, Sampling{Temperature: 1, Seed: 1234, MaxTokens: 1}, History{}, step) == 1 {
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

// refDistribution is an independent float64 reference of the sampling
// transformations in vLLM's order: logit_bias, repetition, frequency and
// presence penalties, then greedy argmax or temperature, min_p, top_k,
// top_p. It returns every token's probability (0 for dropped ones).
func refDistribution(logits []float32, p Sampling, h History) []float64 {
	n := len(logits)
	l := make([]float64, n)
	for i, v := range logits {
		l[i] = float64(v)
	}
	for _, b := range p.LogitBias {
		l[b.Token] += float64(b.Bias)
	}
	if rp := float64(p.RepetitionPenalty); rp != 0 && rp != 1 {
		in := map[int32]bool{}
		for _, t := range append(slices.Clone(h.Prompt), h.Output...) {
			in[t] = true
		}
		for t := range in {
			if l[t] > 0 {
				l[t] = l[t] / rp
			} else {
				l[t] = l[t] * rp
			}
		}
	}
	count := map[int32]int{}
	for _, t := range h.Output {
		count[t]++
	}
	for t, c := range count {
		l[t] -= float64(p.FrequencyPenalty)*float64(c) + float64(p.PresencePenalty)
	}
	out := make([]float64, n)
	if p.Temperature == 0 {
		best := 0
		for i := range l {
			if l[i] > l[best] {
				best = i
			}
		}
		out[best] = 1
		return out
	}
	// Softmax of l/T over all tokens.
	m := math.Inf(-1)
	for _, v := range l {
		m = math.Max(m, v/float64(p.Temperature))
	}
	var z float64
	for i, v := range l {
		out[i] = math.Exp(v/float64(p.Temperature) - m)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	keep := make([]bool, n)
	var pmax float64
	for _, v := range out {
		pmax = math.Max(pmax, v)
	}
	for i, v := range out {
		keep[i] = v >= float64(p.MinP)*pmax
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return l[order[a]] > l[order[b]] })
	if p.TopK > 0 {
		for r, i := range order {
			if r >= p.TopK {
				keep[i] = false
			}
		}
	}
	renorm := func() {
		var s float64
		for i, v := range out {
			if keep[i] {
				s += v
			}
		}
		for i := range out {
			if keep[i] {
				out[i] /= s
			} else {
				out[i] = 0
			}
		}
	}
	renorm()
	if p.TopP > 0 && p.TopP < 1 {
		var cum float64
		reached := false
		for _, i := range order {
			if reached {
				keep[i] = false
				continue
			}
			if keep[i] {
				cum += out[i]
				reached = cum >= float64(p.TopP)
			}
		}
		renorm()
	}
	return out
}

func TestDistributionMatchesFloat64Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const vocab = 97
	var s sampler
	cases := []Sampling{
		{Temperature: 1},
		{Temperature: 0.7, LogitBias: []Bias{{3, 5}, {40, -100}, {96, 2.5}}},
		{Temperature: 1.3, RepetitionPenalty: 1.3},
		{Temperature: 0.9, RepetitionPenalty: 0.7},
		{Temperature: 1, FrequencyPenalty: 0.8},
		{Temperature: 1, PresencePenalty: -1.5, FrequencyPenalty: 2},
		{Temperature: 0.8, MinP: 0.1},
		{Temperature: 1.1, TopK: 10, MinP: 0.05},
		{Temperature: 0.6, TopP: 0.8, MinP: 0.02, TopK: 30},
		{Temperature: 1.5, TopP: 0.5, RepetitionPenalty: 1.2, FrequencyPenalty: 0.5, PresencePenalty: 0.3,
			LogitBias: []Bias{{1, 3}, {2, -3}}, MinP: 0.01, TopK: 50},
		{Temperature: 0, FrequencyPenalty: 2, RepetitionPenalty: 1.5, LogitBias: []Bias{{5, 1}}},
	}
	for trial := range 20 {
		logits := make([]float32, vocab)
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 3)
		}
		h := History{}
		for range 30 {
			h.Prompt = append(h.Prompt, int32(r.IntN(vocab)))
		}
		for range trial * 2 {
			// Repeats on purpose: frequency counts them.
			h.Output = append(h.Output, int32(r.IntN(vocab/4)))
		}
		for ci, p := range cases {
			p.MaxTokens = 1
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			want := refDistribution(logits, p, h)
			d := s.distribution(logits, p, h)
			got := make([]float64, vocab)
			for i, id := range d.IDs {
				got[id] = d.Prob(i)
			}
			for id := range vocab {
				if (got[id] == 0) != (want[id] == 0) || math.Abs(got[id]-want[id]) > 1e-12 {
					t.Fatalf("trial %d case %d (%+v): token %d has probability %g, reference %g", trial, ci, p, id, got[id], want[id])
				}
			}
			// The row itself is untouched.
			if d2 := s.distribution(logits, p, h); !slices.Equal(d2.IDs, d.IDs) {
				t.Fatalf("case %d: distribution not a pure function of its inputs", ci)
			}
		}
	}
}

func TestPenaltiesUseEachDistinctTokenOnce(t *testing.T) {
	var s sampler
	logits := []float32{2, 2, 2, -1}
	// Token 0 repeated in prompt and output: repetition divides it once.
	h := History{Prompt: []int32{0, 0, 3}, Output: []int32{0, 3, 3}}
	p := Sampling{Temperature: 0, RepetitionPenalty: 2, FrequencyPenalty: 0.25, PresencePenalty: 0.5, MaxTokens: 1}
	s.distribution(logits, p, h)
	want := []float64{2.0/2 - 0.25 - 0.5, 2, 2, -1*2 - 0.5 - 0.5}
	if !slices.Equal(s.adj[:4], want) {
		t.Fatalf("adjusted logits %v, want %v", s.adj[:4], want)
	}
	// The scratch counts are clean for the next call.
	if slices.ContainsFunc(s.counts, func(c int32) bool { return c != 0 }) {
		t.Fatalf("counts left dirty: %v", s.counts)
	}
}

func TestLogitBiasForcesGreedyAndSampledTokens(t *testing.T) {
	var s sampler
	logits := []float32{5, 1, 0, -2}
	for step := range 50 {
		for _, temp := range []float32{0, 1, 2} {
			p := Sampling{Temperature: temp, Seed: uint64(step), MaxTokens: 1, LogitBias: []Bias{{2, 100}}}
			if got := s.sample(logits, p, History{}, step); got != 2 {
				t.Fatalf("temperature %v: +100 bias on token 2 sampled %d", temp, got)
			}
		}
	}
}

func TestValidateRejectsBadSamplingExtensions(t *testing.T) {
	for _, p := range []Sampling{
		{MaxTokens: 1, PresencePenalty: 2.5},
		{MaxTokens: 1, FrequencyPenalty: -2.01},
		{MaxTokens: 1, RepetitionPenalty: -1},
		{MaxTokens: 1, RepetitionPenalty: float32(math.Inf(1))},
		{MaxTokens: 1, MinP: 1.5},
		{MaxTokens: 1, LogitBias: []Bias{{3, 1}, {3, 2}}},
		{MaxTokens: 1, LogitBias: []Bias{{4, 1}, {3, 2}}},
		{MaxTokens: 1, LogitBias: []Bias{{-1, 1}}},
		{MaxTokens: 1, LogitBias: []Bias{{1, 101}}},
		{MaxTokens: 1, LogitBias: make([]Bias, MaxLogitBias+1)},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalidSampling) {
			t.Errorf("%+v: Validate = %v", p, err)
		}
	}
}

// BenchmarkDistribution compares a sampled token's cost without and with
// every control, on a Qwen-sized vocabulary with a 2000-token prompt and
// 500 output tokens of history (ratios in the same run, no assertions).
func BenchmarkDistribution(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const vocab = 151936
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
	}
	h := History{Prompt: make([]int32, 2000), Output: make([]int32, 500)}
	for i := range h.Prompt {
		h.Prompt[i] = int32(r.IntN(vocab))
	}
	for i := range h.Output {
		h.Output[i] = int32(r.IntN(vocab))
	}
	bias := make([]Bias, 100)
	for i := range bias {
		bias[i] = Bias{Token: int32(i * 1000), Bias: 1}
	}
	for _, c := range []struct {
		name string
		p    Sampling
	}{
		{"greedy", Sampling{MaxTokens: 1}},
		{"greedy-penalties", Sampling{MaxTokens: 1, FrequencyPenalty: 1, PresencePenalty: 1, RepetitionPenalty: 1.2, LogitBias: bias}},
		{"sampled", Sampling{Temperature: 0.8, TopP: 0.95, MaxTokens: 1}},
		{"sampled-all", Sampling{Temperature: 0.8, TopP: 0.95, TopK: 50, MinP: 0.05, MaxTokens: 1,
			FrequencyPenalty: 1, PresencePenalty: 1, RepetitionPenalty: 1.2, LogitBias: bias}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var s sampler
			for i := 0; b.Loop(); i++ {
				s.sample(logits, c.p, h, i)
			}
		})
	}
}
