package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// PrefixScorer scores the expected hit length: the share of the prompt's
// pages the candidate holds in the request's cache domain, as its
// reports say (Index). A candidate without a cache (cache version 0)
// scores 0.
type PrefixScorer struct{ Index *Index }

var _ Scorer = PrefixScorer{}

// Score implements Scorer.
func (s PrefixScorer) Score(req *Request, c registry.Candidate) float64 {
	if !req.Cached || s.Index == nil || c.CacheVersion == 0 {
		return 0
	}
	h := req.Hashes(c.PageTokens, c.CacheVersion)
	if len(h) == 0 {
		return 0
	}
	return float64(s.Index.Match(req.Model, c.ID, h)) / float64(len(h))
}
