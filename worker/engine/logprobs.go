package engine

import (
	"cmp"
	"math"
	"slices"
)

// MaxTopLogprobs is the most alternatives a request may ask for per token
// (OpenAI's limit for top_logprobs).
const MaxTopLogprobs = 20

// NoLogprob stands for a log probability that is not finite (a NaN or
// -Inf logit): OpenAI reports -9999.0 for tokens it considers
// impossible, and JSON cannot carry -Inf.
const NoLogprob = -9999.0

// Logprobs is the log probability of one sampled token and of the most
// likely alternatives at its position.
//
// They are computed from the raw logits of the forward — the untempered
// distribution, before temperature, top_p, top_k or any token mask, as
// OpenAI reports them (a constrained sequence samples from a masked copy;
// its token obeys the mask, its logprobs are those of an unconstrained
// request with the same prefix) — by a log-softmax in float64 over the
// float32 logits: logprob(t) = l[t] - m - log Σ exp(l[i] - m), with m the
// largest logit, summed in id order and evaluated left to right. They
// depend only on the sequence's own logits row, never on its batch mates.
type Logprobs struct {
	// Token is the sampled token and Logprob its log probability.
	Token   int32
	Logprob float64
	// Rank, for a prompt token (Sampling.PromptLogprobs) only, is the
	// number of tokens whose logit is at least Token's, NaN left out
	// (vLLM's rank: 1 for the likeliest, ties counted against it); 0
	// otherwise.
	Rank int
	// Top holds the most likely tokens, most likely first (ties: lower
	// id first); as many as the request's TopLogprobs.
	Top []TopLogprob
}

// TopLogprob is one alternative of Logprobs.Top.
type TopLogprob struct {
	Token   int32
	Logprob float64
}

// logprobScratch holds reusable space for logprob computations of the
// engine's goroutine.
type logprobScratch struct {
	idx []int32
}

// logprobs computes tok's log probability and the top alternatives from
// logits.
func (s *logprobScratch) logprobs(logits []float32, tok int32, top int) *Logprobs {
	m, ls := logNorm(logits)
	logprob := func(id int32) float64 { return finiteLogprob(float64(logits[id]) - m - ls) }
	lp := &Logprobs{Token: tok, Logprob: logprob(tok)}
	if top <= 0 {
		return lp
	}
	top = min(top, len(logits))
	s.idx = s.idx[:0]
	// A bounded insertion: the top list is at most MaxTopLogprobs long.
	for i, l := range logits {
		if l != l {
			continue
		}
		if len(s.idx) == top && !ahead(logits, int32(i), s.idx[top-1]) {
			continue
		}
		at, _ := slices.BinarySearchFunc(s.idx, int32(i), func(a, b int32) int {
			if ahead(logits, a, b) {
				return -1
			}
			return 1
		})
		if len(s.idx) < top {
			s.idx = append(s.idx, 0)
		}
		copy(s.idx[at+1:], s.idx[at:len(s.idx)-1])
		s.idx[at] = int32(i)
	}
	lp.Top = make([]TopLogprob, len(s.idx))
	for i, id := range s.idx {
		lp.Top[i] = TopLogprob{Token: id, Logprob: logprob(id)}
	}
	return lp
}

// rank is tok's Logprobs.Rank in logits.
func rank(logits []float32, tok int32) int {
	n, l := 0, logits[tok]
	if l != l {
		// A NaN logit: every other token is likelier.
		l = float32(math.Inf(-1))
	}
	for _, v := range logits {
		if v >= l {
			n++
		}
	}
	return max(n, 1)
}

// ahead orders tokens by logit descending, then id ascending.
func ahead(logits []float32, a, b int32) bool {
	if c := cmp.Compare(logits[b], logits[a]); c != 0 {
		return c < 0
	}
	return a < b
}

// logNorm returns the largest logit m and log Σ exp(l - m) in float64,
// NaN logits left out.
func logNorm(logits []float32) (m, ls float64) {
	m = math.Inf(-1)
	for _, l := range logits {
		if float64(l) > m {
			m = float64(l)
		}
	}
	if math.IsInf(m, 0) {
		return m, 0
	}
	var sum float64
	for _, l := range logits {
		if l == l {
			sum += math.Exp(float64(l) - m)
		}
	}
	return m, math.Log(sum)
}

func finiteLogprob(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return NoLogprob
	}
	return v
}
