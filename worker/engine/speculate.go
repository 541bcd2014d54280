package engine

import (
	"fmt"
	"slices"
)

// Speculative decoding without a draft model (prompt lookup, n-gram
// speculation).
//
// Proposal. Before a decode step the engine looks, in the sequence's own
// tokens only (its prompt and the tokens it generated so far — never
// another request's), for the most recent earlier occurrence of the
// longest suffix of n tokens, n from NgramMax down to NgramMin, and
// proposes the up to K tokens that followed it. A sequence with no match
// decodes one token as usual.
//
// Verification. The step's chunk for that sequence is its last token
// followed by the k proposed tokens, at positions pos..pos+k: one forward
// computes them together (as a prefill chunk would) and returns the logits
// of every one of those positions. The engine then samples position by
// position exactly as the one-token path would — same sampler, the draw
// of output token i (Sampling.Seed, i), the sequence's constraint mask,
// logprobs from the raw row — and moves on to the next row only while the
// token it sampled equals the proposed one (then the next row was computed
// from the right input). The first mismatch, or the token after the last
// proposal, is the step's last token. So:
//
//   - the logits of every position are those of the one-token path (the
//     backend's chunk invariance), and every token is sampled from them
//     with the same draw: greedy and seeded outputs, logprobs and
//     constrained outputs are identical to decoding without speculation;
//   - for a deterministic proposal x (a point mass q), sampling t from p
//     and accepting x when t = x accepts x with probability p(x) and
//     otherwise yields t from p with x removed, renormalised — the
//     rejection sampling of speculative decoding, min(1, p/q) and the
//     residual (p − q)+, with the engine's counter-based draw;
//   - stop tokens, EOS and max_tokens end the sequence at the accepted
//     token where non-speculative decoding would, and usage counts only
//     the tokens emitted.
//
// KV. The step writes K/V for all k+1 positions, but the engine marks as
// written (kvpool.MarkTokensWritten, the slots the I3 check lets later
// steps read) only the positions whose input was accepted, one at a time
// before the token they produced is delivered; the next step overwrites
// the rejected positions before anything reads them. k is clamped so the
// chunk stays within the sequence's reserved pages and never proposes
// past MaxTokens (the token after the last proposal is the k+1-th of the
// step), and the proposed tokens share the step's chunk budget with
// prefill after prompts took theirs, so speculation never delays a
// prompt's chunk. A sequence whose proposals keep failing proposes less
// often (backOff).

// Speculation configures n-gram speculative decoding (see above). The
// zero value is off.
type Speculation struct {
	// On makes it the default for requests that do not choose
	// (Sampling.Speculate).
	On bool
	// K is the most tokens proposed per step; 0 means DefaultSpecK.
	K int
	// NgramMax and NgramMin bound the suffix lengths looked up, longest
	// first; 0 means DefaultNgramMax and DefaultNgramMin.
	NgramMax, NgramMin int
}

// Defaults for Speculation's zero fields.
const (
	DefaultSpecK    = 4
	DefaultNgramMax = 3
	DefaultNgramMin = 2
)

const (
	// maxSpecK and maxNgram bound Speculation's K and NgramMax.
	maxSpecK = 32
	maxNgram = 16
	// specHistoryBound caps the output tokens a sequence's history is
	// sized for up front (it grows past it if needed).
	specHistoryBound = 1 << 16
)

// withDefaults fills the zero fields and checks the ranges.
func (sp Speculation) withDefaults() (Speculation, error) {
	if sp.K == 0 {
		sp.K = DefaultSpecK
	}
	if sp.NgramMax == 0 {
		sp.NgramMax = DefaultNgramMax
	}
	if sp.NgramMin == 0 {
		sp.NgramMin = min(DefaultNgramMin, sp.NgramMax)
	}
	if sp.K < 1 || sp.K > maxSpecK || sp.NgramMin < 1 || sp.NgramMax < sp.NgramMin || sp.NgramMax > maxNgram {
		return sp, fmt.Errorf("engine: speculation k %d (want 1..%d), ngram %d..%d (want 1 <= min <= max <= %d)",
			sp.K, maxSpecK, sp.NgramMin, sp.NgramMax, maxNgram)
	}
	return sp, nil
}

// speculates says whether request r runs with speculation.
func (e *Engine) speculates(r *Request) bool {
	if r.PrefillOnly {
		return false
	}
	if r.Sampling.Speculate != nil {
		return *r.Sampling.Speculate
	}
	return e.cfg.Speculation.On
}

// startSpeculation gives a speculating sequence its token history and
// its chunk buffer.
func (e *Engine) startSpeculation(s *sequence) {
	if !e.speculates(&s.req) {
		return
	}
	p := s.req.Prompt
	s.hist = make([]int32, len(p), len(p)+min(s.req.Sampling.MaxTokens, specHistoryBound))
	copy(s.hist, p)
	s.in = make([]int32, 1, 1+e.cfg.Speculation.K)
}

// propose fills dst (its capacity is the most tokens wanted) with the
// tokens that followed the most recent earlier occurrence of the longest
// suffix of hist of NgramMax..NgramMin tokens, and returns it; empty when
// there is none.
func propose(hist []int32, ngramMin, ngramMax int, dst []int32) []int32 {
	dst = dst[:0]
	want := cap(dst)
	n := len(hist)
	for g := min(ngramMax, n-1); g >= ngramMin; g-- {
		suffix := hist[n-g:]
		// Occurrences starting at j < n-g, the latest first.
		for j := n - g - 1; j >= 0; j-- {
			if hist[j+g-1] != suffix[g-1] || !slices.Equal(hist[j:j+g], suffix) {
				continue
			}
			follow := hist[j+g : min(j+g+want, n)]
			return append(dst, follow...)
		}
	}
	return dst
}

// speculate extends the decode chunks of speculating sequences in the
// step's batch with proposed tokens, using up to budget tokens, and gives
// each extended chunk a logits row per position.
func (e *Engine) speculate(budget int) {
	sp := &e.cfg.Speculation
	rows := 0
	for i, s := range e.members {
		c := &e.batch[i]
		s.drafts = 0
		if s.in == nil || c.Start < len(s.req.Prompt) || budget == 0 {
			continue
		}
		if s.specSkip > 0 {
			s.specSkip--
			continue
		}
		// The step emits at most k+1 tokens and writes positions up to
		// pos+k: both stay within MaxTokens and the reserved pages.
		k := min(sp.K, budget, s.req.Sampling.MaxTokens-s.generated-1,
			len(s.req.Pages)*e.cfg.PageTokens-s.pos-1)
		if k <= 0 {
			continue
		}
		d := propose(s.hist, sp.NgramMin, sp.NgramMax, s.in[1:1:1+k])
		if len(d) == 0 {
			continue
		}
		s.in = s.in[:1+len(d)]
		s.in[0] = s.next[0]
		c.Tokens = s.in
		s.drafts = len(d)
		budget -= len(d)
		rows += len(s.in)
	}
	if rows == 0 {
		return
	}
	v := len(e.logits[0])
	if need := rows * v; len(e.specLogits) < need {
		e.specLogits = make([]float32, need)
	}
	off := 0
	for i, s := range e.members {
		if s.drafts == 0 {
			continue
		}
		n := (1 + s.drafts) * v
		e.batch[i].Logits = e.specLogits[off : off+n : off+n]
		off += n
		e.specProposed.Add(uint64(s.drafts))
	}
}

// verifyDrafts samples a speculative chunk's rows in order — each exactly as a
// one-token step would — and keeps going while the sampled token is the
// proposed one. Before delivering the token of row i it records position
// Start+i as written: its input was the sequence's last token or an
// accepted proposal. Positions of rejected proposals stay unwritten.
func (e *Engine) verifyDrafts(s *sequence, c Chunk) {
	v := len(c.Logits) / len(c.Tokens)
	skip := s.shared * e.cfg.PageTokens
	accepted := 0
	for i := range c.Tokens {
		end := c.Start + i + 1
		if err := e.pool.MarkTokensWritten(s.req.Owner, c.Pages[s.shared:], end-skip); err != nil {
			e.finish(s, FinishError, err)
			return
		}
		s.pos = end
		e.decodeTokens.Add(1)
		tok, lp := e.pick(s, c.Logits[i*v:(i+1)*v])
		ok := i+1 < len(c.Tokens) && tok == c.Tokens[i+1]
		if ok {
			accepted++
			e.specAccepted.Add(1)
		}
		e.emit(s, tok, lp)
		if s.stream == nil || !ok {
			break
		}
	}
	s.backOff(accepted)
}

// maxSpecBackoff bounds how many decode steps a sequence whose proposals
// keep failing goes without proposing.
const maxSpecBackoff = 16

// backOff adapts how often s proposes to how its last proposal fared: a
// proposal of which nothing was accepted doubles (plus one) the number of
// steps s then decodes without proposing, up to maxSpecBackoff; an
// accepted token resets it. Text with nothing to copy thus pays for a
// failed verification about once in maxSpecBackoff steps, while copying
// text proposes at every step. It affects speed only, never the output.
func (s *sequence) backOff(accepted int) {
	if accepted > 0 {
		s.specBackoff = 0
		return
	}
	s.specBackoff = min(2*s.specBackoff+1, maxSpecBackoff)
	s.specSkip = s.specBackoff
}
