package engine

import (
	"fmt"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/kvpool"
)

// Prefix lets a sequence use the pool's prefix cache (DESIGN I3). The
// caller reserved the sequence's pages with kvpool.ReservePrefix; the
// engine then
//   - computes the chain tags of the prompt's full pages itself, from the
//     prompt it runs, Domain and its owner's adapter (never from what the
//     caller looked up),
//     and presents them to kvpool.VerifyPrefix for the shared pages before
//     every step: a shared page with any other tag is an owner violation;
//   - prefills only the positions after the Hit shared pages (the result
//     is bit-identical: it is the same computation as a prompt split into
//     chunks at that position);
//   - seals the prompt's full pages once they are all written, so later
//     requests of the domain reuse them: after its own prefill, or, for a
//     Prefilled sequence (decode of a P/D transfer, whose Hit pages the
//     reservation shared from decode's cache), once the transferred
//     pages passed the ownership check before the first token.
//
// The same mechanism shares one owner's prompt among several sequences
// (n > 1): each sequence reserves with the prompt's tags and the pages
// the first one sealed are shared read-only; a domain private to the
// request (for example derived from the request ID) keeps that sharing
// within the request.
type Prefix struct {
	// Domain is the request's cache domain, derived server-side
	// (cachekey.Derive).
	Domain cachekey.Domain
	// Version is the model/format version of the KV.
	Version uint64
	// Hit is how many leading pages of Request.Pages are sealed pages the
	// caller shares; at most (len(Prompt)-1)/PageTokens for a sequence
	// the engine prefills, so the last prompt position is computed (its
	// logits give the first token).
	Hit int
}

// startPrefix validates req.Prefix and sets up the sequence's tags and its
// first position. It is a no-op without a Prefix.
func (e *Engine) startPrefix(s *sequence) error {
	px := s.req.Prefix
	if px == nil {
		return nil
	}
	pt := e.cfg.PageTokens
	limit := (len(s.req.Prompt) - 1) / pt
	if s.req.Prefilled {
		limit = len(s.req.Prompt) / pt
	}
	if px.Hit < 0 || px.Hit > limit || px.Hit > len(s.req.Pages) {
		return fmt.Errorf("%w: %d cached prefix pages for a %d-token prompt in pages of %d", ErrBadRequest, px.Hit, len(s.req.Prompt), pt)
	}
	s.tags = kvpool.Tags(px.Domain, px.Version, s.req.Owner.Adapter, s.req.Prompt, pt)
	s.shared = px.Hit
	s.cached = px.Hit * pt
	if !s.req.Prefilled {
		s.pos = s.cached
	}
	return nil
}

// sealPrompt seals the sequence's full prompt pages once its prompt is
// in the cache. Sealing is an optimisation: a refusal (for example a
// concurrent writer sealed the same prefix first) leaves the pages the
// sequence's own, and the sequence goes on.
func (e *Engine) sealPrompt(s *sequence) {
	if s.req.Prefix == nil || s.shared == len(s.tags) {
		return
	}
	n, err := e.pool.Seal(s.req.Owner, s.tags)
	if err != nil {
		e.log.Warn("sealing prompt pages failed; they stay private",
			"request_id", s.req.Owner.Request, "tenant", s.req.Owner.Tenant, "err", err)
		return
	}
	s.shared = n
}

// verify is the I3 gate for a sequence: its shared pages against the tags
// it computed, the rest against its owner, positions [0, tokens) written.
func (e *Engine) verify(s *sequence, tokens int) error {
	return e.pool.VerifyPrefix(s.req.Owner, s.req.Pages, tokens, s.tags[:s.shared])
}
