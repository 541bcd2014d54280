// Package routing scores the workers a request may run on (DESIGN §3,
// issue 14): pluggable scorers, one per file like llm-d's scheduler
// plugins, combined with weights into one number per candidate; the
// registry picks the highest (registry.PickScored).
//
// The prefix scorer reads Index, built from what the workers report
// they sealed and evicted (Events, carried by their heartbeats): which
// prompt pages each worker holds, per model, in which cache domain. A
// stale entry (an eviction not yet reported) costs only a less useful
// choice, never correctness: the worker verifies every shared page
// itself (I3). Chain hashes cover the cache domain, so the index never
// answers across domains.
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
	// Adapter is the content hash of the request's LoRA adapter, "" for
	// the base model (the workers' chain hashes cover it, DESIGN I8a);
	// AdapterBytes its size in a worker's adapter memory.
	Adapter      string
	AdapterBytes int64

	mu     sync.Mutex
	chains map[chainKey][]cachekey.Hash
	// The request's turn for RoundRobin, once it took one.
	turn    int
	turnSet bool
}

// chainKey names one way of hashing the prompt: a worker's page size and
// cache version.
type chainKey struct {
	pageTokens int32
	version    uint64
}

// Hashes returns the chain hashes of the prompt's full pages of
// pageTokens tokens but the last token (the pages a hit can cover) under
// a worker's cache version and the request's adapter, computed once per
// page size and version: the hashes the worker computes for the request.
func (r *Request) Hashes(pageTokens int32, version uint64) []cachekey.Hash {
	if pageTokens <= 0 || len(r.Prompt) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := chainKey{pageTokens, version}
	if h, ok := r.chains[k]; ok {
		return h
	}
	if r.chains == nil {
		r.chains = make(map[chainKey][]cachekey.Hash)
	}
	h := cachekey.Chain(r.Domain, version, r.Adapter, r.Prompt[:len(r.Prompt)-1], int(pageTokens))
	r.chains[k] = h
	return h
}

// Scorer rates one candidate for a request, higher better, in [0, 1].
type Scorer interface {
	Score(req *Request, c registry.Candidate) float64
}

// Filter admits or refuses a candidate for a request. A refused candidate
// ranks below every admitted one, whatever the scores; it is still chosen
// when every candidate is refused (the request then waits for capacity).
type Filter interface {
	Admits(req *Request, c registry.Candidate) bool
}

// Weighted is a scorer with its weight.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Router combines filters and weighted scorers.
type Router struct {
	Filters []Filter
	Scorers []Weighted
}

// Score is the weighted sum of every scorer's score, raised above any
// refused candidate's when every filter admits c.
func (r *Router) Score(req *Request, c registry.Candidate) float64 {
	var s, top float64
	for _, w := range r.Scorers {
		s += w.Weight * w.Scorer.Score(req, c)
		top += w.Weight
	}
	if r.Admits(req, c) {
		s += top + 1
	}
	return s
}

// Admits reports whether every filter admits c: a request routed there
// may be placed even when c's in-flight budget is used up.
func (r *Router) Admits(req *Request, c registry.Candidate) bool {
	for _, f := range r.Filters {
		if !f.Admits(req, c) {
			return false
		}
	}
	return true
}

// Default weights: a full expected hit outweighs any load, so the pages
// of a conversation go back to the worker holding them; between workers
// with equal hits (none, typically a conversation's first turn) the load
// and the free pages decide, which spreads new conversations. Before any
// score, HolderQueue sets saturated workers aside unless they hold the
// prefix and their queue is short.
const (
	DefaultPrefixWeight    = 2
	DefaultLoadWeight      = 1
	DefaultFreePagesWeight = 1
	DefaultAdapterWeight   = 1
)

// Default is the router the gateway uses: HolderQueue and AdapterFit,
// then expected prefix hit, load, free pages and holding the request's
// LoRA adapter with the default weights.
func Default(ix *Index) *Router {
	return &Router{Filters: []Filter{HolderQueue{Index: ix, Share: DefaultHolderQueueShare}, AdapterFit{}}, Scorers: []Weighted{
		{Scorer: PrefixScorer{Index: ix}, Weight: DefaultPrefixWeight},
		{Scorer: LoadScorer{}, Weight: DefaultLoadWeight},
		{Scorer: FreePagesScorer{}, Weight: DefaultFreePagesWeight},
		{Scorer: AdapterScorer{}, Weight: DefaultAdapterWeight},
	}}
}
