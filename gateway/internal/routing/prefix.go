package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// PrefixScorer scores the share of the prompt's pages the candidate is
// expected to hold in the request's cache domain.
type PrefixScorer struct{ Index *Index }

var _ Scorer = PrefixScorer{}

// Score implements Scorer.
func (s PrefixScorer) Score(req *Request, c registry.Candidate) float64 {
	if !req.Cached || s.Index == nil {
		return 0
	}
	h := req.Hashes(c.PageTokens)
	if len(h) == 0 {
		return 0
	}
	return float64(s.Index.Match(req.Model, c.ID, h)) / float64(len(h))
}
