package registry

// Candidate is what a routing score sees of a decode-capable worker.
type Candidate struct {
	ID string
	// FreePages is the worker's free (and reclaimable cached) pages as
	// last reported, less the pages routed there since; TotalPages its
	// pool; PageTokens its page size.
	FreePages, TotalPages int64
	PageTokens            int32
	// Load is the requests running and waiting on it plus those this
	// gateway routed there and has not finished.
	Load int64
}

// PickScored is Pick with the decode-capable workers ranked by score
// first (highest wins; Pick's order breaks ties). score runs with the
// registry's lock held and must not call back into the registry.
func (r *Registry) PickScored(model string, totalTokens int64, score func(Candidate) float64) (Route, error) {
	return r.pick(model, totalTokens, func(a, b *Worker) bool {
		sa, sb := score(candidateOf(a)), score(candidateOf(b))
		if sa != sb {
			return sa > sb
		}
		return decodeLess(a, b)
	})
}

// candidateOf describes w. Called with r.mu held.
func candidateOf(w *Worker) Candidate {
	return Candidate{
		ID: w.id, FreePages: w.pool.GetFreePages() - w.pendingPages, TotalPages: w.pool.GetTotalPages(),
		PageTokens: w.pool.GetPageTokens(), Load: int64(w.running) + int64(w.waiting) + w.assigned,
	}
}
