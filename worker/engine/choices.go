package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/warden-ai/warden/worker/kvpool"
)

// ChoiceSeed is the sampling seed of choice k of a request seeded with
// seed (n > 1): choice 0 keeps seed, choice k adds k times the 64-bit
// golden-ratio constant (wrapping). Running a single request with
// ChoiceSeed(seed, k) gives exactly choice k's tokens.
func ChoiceSeed(seed uint64, k int) uint64 {
	return seed + uint64(k)*0x9E3779B97F4A7C15
}

// ChoicePages lays out one reservation of pages for n choices of a
// prompt of prompt tokens with maxTokens each: the prompt's full pages
// once (shared read-only by every choice's table: same owner, or sealed
// pages when the request uses the prefix cache), then each choice's own
// pages (the prompt's partial last page and its output). It returns how
// many pages to reserve and, given them, the n page tables.
func ChoicePages(pageTokens, prompt, maxTokens, n int) (total int, tables func([]kvpool.PageID) [][]kvpool.PageID) {
	full := prompt / pageTokens
	per := (prompt+maxTokens-1+pageTokens-1)/pageTokens - full
	return full + n*per, func(pages []kvpool.PageID) [][]kvpool.PageID {
		out := make([][]kvpool.PageID, n)
		for k := range out {
			own := pages[full+k*per : full+(k+1)*per]
			out[k] = append(slices.Clip(pages[:full]), own...)
		}
		return out
	}
}

// SubmitChoices runs len(tables) sequences (the choices of one request,
// n > 1) from one prompt. Every table must hold the same pages for the
// prompt's full pages (ChoicePages); req.Pages is ignored. Choice 0 has
// the prompt; the other choices share its full pages read-only (its
// sealed pages with a Prefix, else pages of the same owner) and recompute
// only the prompt's partial last page into their own page
// (Stats.ForkTokens; Stats.PrefillTokens counts the prompt once) before
// decoding on their own. Each choice's first token is
//   - for a request the engine prefills: sampled, when choice 0's last
//     position's logits are computed, from those logits with the choice's
//     own seed (ChoiceSeed(req.Sampling.Seed, k)) and constraint;
//     with PrefillOnly the choices stop there (they never write, so every
//     table may be the prefill's one);
//   - for a Prefilled request (decode of a P/D transfer): req.FirstTokens[k],
//     delivered once choice 0's transferred pages passed the ownership check.
//
// Streams are in choice order.
func (e *Engine) SubmitChoices(ctx context.Context, req Request, tables [][]kvpool.PageID) ([]*Stream, error) {
	n := len(tables)
	switch {
	case n < 1 || n > e.cfg.MaxBatch:
		return nil, fmt.Errorf("%w: %d choices, want 1..%d (the batch size)", ErrBadRequest, n, e.cfg.MaxBatch)
	case req.Prefilled && len(req.FirstTokens) != n:
		return nil, fmt.Errorf("%w: %d first tokens for %d prefilled choices", ErrBadRequest, len(req.FirstTokens), n)
	}
	full := len(req.Prompt) / e.cfg.PageTokens
	seqs := make([]*sequence, n)
	for k, pages := range tables {
		r := req
		r.Pages = pages
		r.Sampling.Seed = ChoiceSeed(req.Sampling.Seed, k)
		if req.Prefilled {
			r.FirstToken = req.FirstTokens[k]
		}
		if err := e.validate(&r); err != nil {
			return nil, err
		}
		if len(pages) < full || !slices.Equal(pages[:full], tables[0][:full]) {
			return nil, fmt.Errorf("%w: choice %d does not share the prompt's full pages", ErrBadRequest, k)
		}
		seqs[k] = e.newSequence(ctx, r)
		seqs[k].choice = n > 1
		if k > 0 {
			seqs[k].awaiting = true
		}
	}
	if err := e.startPrefix(seqs[0]); err != nil {
		return nil, err
	}
	seqs[0].forks = seqs[1:]
	// The streams are taken before the loop can see the sequences: it
	// clears a sequence's stream when the sequence finishes.
	out := make([]*Stream, n)
	for k, s := range seqs {
		out[k] = s.stream
	}
	if err := e.enqueue(seqs[0]); err != nil {
		return nil, err
	}
	return out, nil
}

// fork starts s's other choices once s's prompt is in the cache: each
// shares s's full prompt pages (their tags and seals too), takes its first
// token from first, then recomputes the partial last prompt page into its
// own page table.
func (e *Engine) fork(s *sequence, first func(f *sequence) (int32, *Logprobs)) {
	forks := s.forks
	s.forks = nil
	pos := len(s.req.Prompt) / e.cfg.PageTokens * e.cfg.PageTokens
	for _, f := range forks {
		if f.stream == nil {
			continue
		}
		f.awaiting = false
		f.tags, f.shared, f.cached = s.tags, s.shared, s.cached
		f.pos, f.prompt = pos, len(s.req.Prompt)
		tok, lp := first(f)
		e.emit(f, tok, lp)
	}
}
