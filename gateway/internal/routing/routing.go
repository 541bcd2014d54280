// Package routing scores the workers a request may run on (DESIGN §3,
// issue 14): pluggable scorers, one per file like llm-d's scheduler
// plugins, combined with weights into one number per candidate; the
// registry picks the highest (registry.PickScored).
//
// The prefix scorer reads Index, the gateway's record of which prompt
// pages it has routed to which worker in which cache domain: an estimate
// (workers do not report evictions yet), so a stale entry costs only a
// less useful choice, never correctness — the worker verifies every
// shared page itself (I3). The index is keyed by model and cache domain
// and its hashes cover the domain, so it never answers across domains.
package routing

import (
	"sync"

	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
)

// Request is what scorers know of the request being placed.
type Request struct {
	Model  string
	Domain cachekey.Domain
	// Cached is false when the request uses no prefix cache.
	Cached bool
	Prompt []int32

	mu     sync.Mutex
	chains map[int32][]cachekey.Hash
}

// Hashes returns the chain hashes of the prompt's full pages of
// pageTokens tokens but the last token (the pages a hit can cover),
// computed once per page size.
func (r *Request) Hashes(pageTokens int32) []cachekey.Hash {
	if pageTokens <= 0 || len(r.Prompt) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.chains[pageTokens]; ok {
		return h
	}
	if r.chains == nil {
		r.chains = make(map[int32][]cachekey.Hash)
	}
	h := cachekey.Chain(r.Domain, 0, r.Prompt[:len(r.Prompt)-1], int(pageTokens))
	r.chains[pageTokens] = h
	return h
}

// Scorer rates one candidate for a request, higher better, in [0, 1].
type Scorer interface {
	Score(req *Request, c registry.Candidate) float64
}

// Weighted is a scorer with its weight.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Router combines weighted scorers.
type Router struct {
	Scorers []Weighted
}

// Score is the weighted sum of every scorer's score.
func (r *Router) Score(req *Request, c registry.Candidate) float64 {
	var s float64
	for _, w := range r.Scorers {
		s += w.Weight * w.Scorer.Score(req, c)
	}
	return s
}

// Default is the router the gateway uses: the expected prefix hit alone,
// so that a request without a recorded hit is placed exactly as without
// the cache (the registry's order: most free pages, then fewest routed
// requests). FreePagesScorer and LoadScorer trade hits against balance
// when weighted in; the default does not yet.
func Default(ix *Index) *Router {
	return &Router{Scorers: []Weighted{{Scorer: PrefixScorer{Index: ix}, Weight: 1}}}
}
