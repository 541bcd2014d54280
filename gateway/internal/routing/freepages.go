package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// FreePagesScorer scores the candidate's share of free pages.
type FreePagesScorer struct{}

var _ Scorer = FreePagesScorer{}

// Score implements Scorer.
func (FreePagesScorer) Score(_ *Request, c registry.Candidate) float64 {
	if c.TotalPages <= 0 || c.FreePages <= 0 {
		return 0
	}
	return float64(min(c.FreePages, c.TotalPages)) / float64(c.TotalPages)
}
