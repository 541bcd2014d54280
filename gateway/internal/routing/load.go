package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// LoadScorer prefers candidates with fewer requests: 1/(1+load).
type LoadScorer struct{}

var _ Scorer = LoadScorer{}

// Score implements Scorer.
func (LoadScorer) Score(_ *Request, c registry.Candidate) float64 {
	return 1 / (1 + float64(max(c.Load, 0)))
}
