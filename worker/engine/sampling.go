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
//
// A token is drawn from the distribution the transformations below make
// of a logits row, in vLLM's order (Distribution):
//
//  1. LogitBias is added to the logits;
//  2. the penalties: RepetitionPenalty on every token of the prompt and the
//     output (a positive logit divided by it, a negative one multiplied),
//     then FrequencyPenalty times the token's count in the output and
//     PresencePenalty once for a token the output holds;
//  3. Temperature 0 takes the argmax of those logits (greedy); otherwise
//     they are divided by Temperature and softmaxed;
//  4. MinP drops tokens less likely than MinP times the likeliest one;
//  5. TopK keeps the K likeliest, then TopP the smallest most likely set
//     whose mass reaches TopP;
//  6. the token is drawn with the counter-based uniform of (Seed, step).
type Sampling struct {
	// Temperature 0 selects greedy decoding (argmax; lowest id wins ties).
	Temperature float32
	// TopP keeps the smallest set of most likely tokens whose probability
	// mass reaches TopP; 0 or 1 disables it.
	TopP float32
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// MinP, in [0, 1], drops tokens whose probability is below MinP times
	// the likeliest token's (after temperature); 0 disables it.
	MinP float32
	// PresencePenalty and FrequencyPenalty, in [-2, 2], lower the logit
	// of a token the output already holds: by PresencePenalty once, and by
	// FrequencyPenalty per occurrence. Only output tokens count.
	PresencePenalty  float32
	FrequencyPenalty float32
	// RepetitionPenalty (> 0; 0 and 1 disable it) scales the logit of
	// every token that appears in the prompt or the output: divided when
	// positive, multiplied when not, so above 1 discourages repeats.
	RepetitionPenalty float32
	// LogitBias is added to the listed tokens' logits before anything
	// else: at most MaxLogitBias entries, tokens ascending and distinct,
	// each bias finite in [-100, 100].
	LogitBias []Bias
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
	// PromptLogprobs asks for the log probability and rank of every
	// prompt token after the first, given the tokens before it, with the
	// PromptTopLogprobs (0..MaxTopLogprobs) most likely tokens at its
	// position, in an EventPromptLogprobs (promptlogprobs.go). Such a
	// sequence computes its whole prompt: it takes no prefix-cache hit
	// and cannot be Prefilled.
	PromptLogprobs    bool
	PromptTopLogprobs int
	// Speculate turns n-gram speculative decoding on or off for this
	// request; nil follows Config.Speculation.On. It never changes the
	// output, only how many tokens a step may emit (speculate.go).
	Speculate *bool
}

// Bias is one entry of Sampling.LogitBias.
type Bias struct {
	Token int32
	Bias  float32
}

// Bounds of the sampling parameters.
const (
	// MaxLogitBias is the most LogitBias entries a request may carry.
	MaxLogitBias = 1024
	// MaxBias bounds each bias's magnitude, as OpenAI's logit_bias does.
	MaxBias = 100
	// MaxPenalty bounds the presence and frequency penalties' magnitude.
	MaxPenalty = 2
)

// ErrInvalidSampling reports sampling parameters outside their domain.
var ErrInvalidSampling = errors.New("engine: invalid sampling parameters")

// Validate checks the parameters' domains; token ids against the
// vocabulary are the engine's to check (it knows its size).
func (s Sampling) Validate() error {
	bad := func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }
	switch {
	case s.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens must be >= 1, got %d", ErrInvalidSampling, s.MaxTokens)
	case s.Temperature < 0 || bad(s.Temperature):
		return fmt.Errorf("%w: temperature must be finite and >= 0, got %v", ErrInvalidSampling, s.Temperature)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(float64(s.TopP)):
		return fmt.Errorf("%w: top_p must be in [0, 1], got %v", ErrInvalidSampling, s.TopP)
	case s.TopK < 0:
		return fmt.Errorf("%w: top_k must be >= 0, got %d", ErrInvalidSampling, s.TopK)
	case s.MinP < 0 || s.MinP > 1 || math.IsNaN(float64(s.MinP)):
		return fmt.Errorf("%w: min_p must be in [0, 1], got %v", ErrInvalidSampling, s.MinP)
	case bad(s.PresencePenalty) || math.Abs(float64(s.PresencePenalty)) > MaxPenalty:
		return fmt.Errorf("%w: presence_penalty must be in [-2, 2], got %v", ErrInvalidSampling, s.PresencePenalty)
	case bad(s.FrequencyPenalty) || math.Abs(float64(s.FrequencyPenalty)) > MaxPenalty:
		return fmt.Errorf("%w: frequency_penalty must be in [-2, 2], got %v", ErrInvalidSampling, s.FrequencyPenalty)
	case s.RepetitionPenalty < 0 || bad(s.RepetitionPenalty):
		return fmt.Errorf("%w: repetition_penalty must be finite and > 0, got %v", ErrInvalidSampling, s.RepetitionPenalty)
	case len(s.LogitBias) > MaxLogitBias:
		return fmt.Errorf("%w: logit_bias has %d entries, at most %d", ErrInvalidSampling, len(s.LogitBias), MaxLogitBias)
	case s.TopLogprobs < 0 || s.TopLogprobs > MaxTopLogprobs || (s.TopLogprobs > 0 && !s.Logprobs):
		return fmt.Errorf("%w: top_logprobs must be in [0, %d] and needs logprobs, got %d", ErrInvalidSampling, MaxTopLogprobs, s.TopLogprobs)
	case s.PromptTopLogprobs < 0 || s.PromptTopLogprobs > MaxTopLogprobs || (s.PromptTopLogprobs > 0 && !s.PromptLogprobs):
		return fmt.Errorf("%w: prompt top logprobs must be in [0, %d] and need prompt logprobs, got %d", ErrInvalidSampling, MaxTopLogprobs, s.PromptTopLogprobs)
	}
	for i, b := range s.LogitBias {
		switch {
		case b.Token < 0 || (i > 0 && b.Token <= s.LogitBias[i-1].Token):
			return fmt.Errorf("%w: logit_bias tokens must be distinct, ascending and >= 0 (entry %d: %d)", ErrInvalidSampling, i, b.Token)
		case bad(b.Bias) || math.Abs(float64(b.Bias)) > MaxBias:
			return fmt.Errorf("%w: logit_bias of token %d must be in [-100, 100], got %v", ErrInvalidSampling, b.Token, b.Bias)
		}
	}
	return nil
}

// usesHistory reports whether the distribution depends on the tokens
// before the position (the penalties).
func (s Sampling) usesHistory() bool {
	return s.PresencePenalty != 0 || s.FrequencyPenalty != 0 || s.repetition()
}

func (s Sampling) repetition() bool { return s.RepetitionPenalty != 0 && s.RepetitionPenalty != 1 }

// History is what the penalties read at a position: the sequence's prompt
// and the tokens it generated before the position.
type History struct {
	Prompt, Output []int32
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
	idx []int32
	// Radix sort scratch (order).
	keys, keys2 []uint64
	idx2        []int32
	buckets     []int32
	probs       []float64
	adj         []float64 // the logits after bias and penalties
	counts      []int32   // output token counts, all zero between calls
	seen        []uint32  // repetition marks: seen[t] == epoch
	epoch       uint32
}

// Distribution is the distribution a token is drawn from: IDs in draw
// order (probability descending, then id ascending) with their unnormalised
// Weights, which sum to Sum; a greedy one holds the argmax alone. It
// aliases the sampler's scratch space, valid until its next call.
type Distribution struct {
	IDs     []int32
	Weights []float64
	Sum     float64
}

// Prob is the probability of the i-th candidate.
func (d Distribution) Prob(i int) float64 { return d.Weights[i] / d.Sum }

// draw picks the candidate u in [0, 1) falls on.
func (d Distribution) draw(u float64) int32 {
	target := u * d.Sum
	var acc float64
	for i, w := range d.Weights {
		acc += w
		if target < acc {
			return d.IDs[i]
		}
	}
	return d.IDs[len(d.IDs)-1]
}

// sample picks the next token from logits for output position step, h
// being the sequence's history at that position.
func (s *sampler) sample(logits []float32, p Sampling, h History, step int) int32 {
	return s.distribution(logits, p, h).draw(uniform(p.Seed, step))
}

// distribution applies p's transformations (see Sampling) to a logits row
// of a sequence whose history is h. The row itself is left as it is.
func (s *sampler) distribution(logits []float32, p Sampling, h History) Distribution {
	n := len(logits)
	if cap(s.idx) < n {
		s.idx = make([]int32, n)
		s.probs = make([]float64, n)
		s.adj = make([]float64, n)
	}
	if p.Temperature == 0 && len(p.LogitBias) == 0 && !p.usesHistory() {
		// Plain greedy: the argmax of the row as it is.
		s.idx[0], s.probs[0] = int32(max(kernels.ArgMax(logits), 0)), 1
		return Distribution{IDs: s.idx[:1], Weights: s.probs[:1], Sum: 1}
	}
	adj := s.adj[:n]
	for i, l := range logits {
		adj[i] = float64(l)
	}
	for _, b := range p.LogitBias {
		if int(b.Token) < n {
			adj[b.Token] += float64(b.Bias)
		}
	}
	s.penalize(adj, p, h)
	if p.Temperature == 0 {
		s.idx[0], s.probs[0] = argMax(adj), 1
		return Distribution{IDs: s.idx[:1], Weights: s.probs[:1], Sum: 1}
	}
	idx := s.idx[:n]
	s.order(idx, adj)
	probs := s.probs[:n]
	maxLogit := adj[idx[0]]
	k := n
	if p.TopK > 0 && p.TopK < k {
		k = p.TopK
	}
	for i := 0; i < k; i++ {
		l := adj[idx[i]]
		if l != l {
			probs[i] = 0
			continue
		}
		probs[i] = math.Exp((l - maxLogit) / float64(p.Temperature))
		// The likeliest token has weight 1, so min_p compares weights
		// with MinP directly; weights only fall along the order, so
		// cutting the top k first or after min_p keeps the same set.
		if p.MinP > 0 && probs[i] < float64(p.MinP) {
			k = max(i, 1)
			break
		}
	}
	var sum float64
	for i := 0; i < k; i++ {
		sum += probs[i]
	}
	if p.TopP > 0 && p.TopP < 1 {
		var mass float64
		for i := 0; i < k; i++ {
			mass += probs[i] / sum
			if mass >= float64(p.TopP) {
				k = i + 1
				break
			}
		}
		sum = 0
		for i := 0; i < k; i++ {
			sum += probs[i]
		}
	}
	return Distribution{IDs: idx[:k], Weights: probs[:k], Sum: sum}
}

// order fills idx with the candidate ids 0..len(adj)-1 in draw order: adj
// descending, ties (-0 equal to +0) by id ascending, NaN last. A row of
// radixMin candidates or more takes a stable LSD radix sort on the bits
// of adj (four 16-bit passes, a pass whose digit is the same for every
// key skipped): on a vocabulary of 150k a fraction of a comparison sort's
// time. The order is total, so either way the result is the one any
// correct sort would give.
func (s *sampler) order(idx []int32, adj []float64) {
	n := len(adj)
	if n == 0 {
		return
	}
	if cap(s.keys) < n {
		s.keys, s.keys2, s.idx2 = make([]uint64, n), make([]uint64, n), make([]int32, n)
	}
	if s.buckets == nil {
		s.buckets = make([]int32, 1<<16)
	}
	keys, keys2, idx2 := s.keys[:n], s.keys2[:n], s.idx2[:n]
	for i, v := range adj {
		keys[i], idx[i] = descendingKey(v), int32(i)
	}
	if n < radixMin {
		// A pass costs a clear of 65,536 buckets: small rows (test models,
		// constrained masks) sort faster by comparison, in the same order.
		slices.SortFunc(idx, func(a, b int32) int {
			return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(a, b))
		})
		return
	}
	for shift := 0; shift < 64; shift += 16 {
		counts := s.buckets
		clear(counts)
		for _, k := range keys {
			counts[k>>shift&0xFFFF]++
		}
		if counts[keys[0]>>shift&0xFFFF] == int32(n) {
			continue // every key has this digit: the pass would change nothing
		}
		var sum int32
		for d, c := range counts {
			counts[d] = sum
			sum += c
		}
		for i, k := range keys {
			d := k >> shift & 0xFFFF
			keys2[counts[d]], idx2[counts[d]] = k, idx[i]
			counts[d]++
		}
		keys, keys2 = keys2, keys
		idx, idx2 = idx2, idx
	}
	if &idx[0] != &s.idx[0] {
		copy(idx2, idx) // an odd number of passes ran: the result is in the scratch
	}
}

// radixMin is the smallest row order sorts by radix.
const radixMin = 1 << 13

// descendingKey maps v to a key whose ascending order is v's descending
// order, with -0 equal to +0 and every NaN after everything else.
func descendingKey(v float64) uint64 {
	if v != v {
		return math.MaxUint64
	}
	if v == 0 {
		v = 0 // -0 sorts as +0
	}
	b := math.Float64bits(v)
	if b>>63 == 1 {
		b = ^b // negative: larger magnitude is smaller
	} else {
		b |= 1 << 63
	}
	return ^b
}

// penalize applies the repetition, frequency and presence penalties to
// adj, each once per distinct token, in vLLM's order.
func (s *sampler) penalize(adj []float64, p Sampling, h History) {
	if !p.usesHistory() {
		return
	}
	n := len(adj)
	if len(s.counts) < n {
		s.counts = make([]int32, n)
		s.seen = make([]uint32, n)
	}
	if p.repetition() {
		s.epoch++
		if s.epoch == 0 { // wrapped: old marks could match
			clear(s.seen)
			s.epoch = 1
		}
		rp := float64(p.RepetitionPenalty)
		for _, toks := range [2][]int32{h.Prompt, h.Output} {
			for _, t := range toks {
				if int(t) >= n || s.seen[t] == s.epoch {
					continue
				}
				s.seen[t] = s.epoch
				if adj[t] > 0 {
					adj[t] /= rp
				} else {
					adj[t] *= rp
				}
			}
		}
	}
	if p.FrequencyPenalty == 0 && p.PresencePenalty == 0 {
		return
	}
	for _, t := range h.Output {
		if int(t) < n {
			s.counts[t]++
		}
	}
	for _, t := range h.Output {
		if int(t) >= n || s.counts[t] == 0 {
			continue
		}
		adj[t] -= float64(p.FrequencyPenalty)*float64(s.counts[t]) + float64(p.PresencePenalty)
		s.counts[t] = 0
	}
}

// argMax is the index of the largest value, the lowest index on ties; a
// NaN counts as larger than every number (the first NaN wins), as
// kernels.ArgMax does for float32.
func argMax(x []float64) int32 {
	best := 0
	for i, v := range x {
		if v != v {
			return int32(i)
		}
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
