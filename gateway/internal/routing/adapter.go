package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// AdapterScorer prefers candidates holding the request's LoRA adapter
// (1, else 0), which serve it without loading it first; 0 for every
// candidate of a request without one.
type AdapterScorer struct{}

var _ Scorer = AdapterScorer{}

// Score implements Scorer.
func (AdapterScorer) Score(req *Request, c registry.Candidate) float64 {
	if req.Adapter != "" && c.Adapters.Holds(req.Adapter) {
		return 1
	}
	return 0
}

// AdapterFit refuses the candidates that cannot take the request's LoRA
// adapter: those that report no adapter memory, and those that do not
// hold it and have less than its size available
// (registry.AdapterMemory.Available). Requests without an adapter fit
// everywhere.
type AdapterFit struct{}

var _ Filter = AdapterFit{}

// Admits implements Filter.
func (AdapterFit) Admits(req *Request, c registry.Candidate) bool {
	if req.Adapter == "" || c.Adapters.Holds(req.Adapter) {
		return true
	}
	return c.Adapters.Reported && c.Adapters.Available() >= req.AdapterBytes
}
