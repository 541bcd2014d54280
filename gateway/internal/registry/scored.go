package registry

import "github.com/warden-ai/warden/internal/controlpb"

// Candidate is what a routing score sees of a worker: a decode-capable
// one, or a prefill worker for a decode worker.
type Candidate struct {
	ID string
	// FreePages is the worker's free (and reclaimable cached) pages as
	// last reported, less the pages routed there since; TotalPages its
	// pool; PageTokens its page size.
	FreePages, TotalPages int64
	PageTokens            int32
	// Load is the requests on it: those this gateway routed there and
	// has not finished, or the running and waiting ones of its last
	// heartbeat (which include other gateways'), whichever is more. Not
	// their sum: this gateway's requests are in both.
	Load int64
	// InFlight is the requests this gateway routed there and has not
	// finished; Budget the most it places there at once (0: no bound
	// learned yet); Slots the worker's learned batch size (0 until seen
	// saturated). See budget.go.
	InFlight, Budget int64
	Slots            int32
	// CacheVersion is the version the worker's prefix pages are hashed
	// under (WorkerInfo.prefix_cache_version); 0 without a cache.
	CacheVersion uint64
	// Role is the worker's role.
	Role controlpb.Role
	// Adapters is its LoRA adapter memory.
	Adapters AdapterMemory
}

// Room reports whether the candidate's in-flight budget admits one more
// request.
func (c Candidate) Room() bool { return c.Budget == 0 || c.InFlight < c.Budget }

// PickScored is Pick with the workers ranked by score first (highest
// wins; Pick's order breaks ties): the decode-capable workers, and for a
// decode worker the prefill workers it can receive from. Room in a
// worker's in-flight budget, which Pick ranks first, only breaks ties:
// the score weighs it (a request may rather wait for the worker holding
// its prefix). score runs with the registry's lock held and must not
// call back into the registry.
func (r *Registry) PickScored(model string, totalTokens int64, score func(Candidate) float64) (Route, error) {
	return r.pick(model, totalTokens, score)
}

// scoredLess orders workers by score, highest first, then by tie.
func scoredLess(score func(Candidate) float64, tie func(a, b *Worker) bool) func(a, b *Worker) bool {
	return func(a, b *Worker) bool {
		sa, sb := score(candidateOf(a)), score(candidateOf(b))
		if sa != sb {
			return sa > sb
		}
		return tie(a, b)
	}
}

// Candidate describes the worker as a routing score sees it.
func (w *Worker) Candidate() Candidate {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	return candidateOf(w)
}

// candidateOf describes w. Called with r.mu held.
func candidateOf(w *Worker) Candidate {
	return Candidate{
		ID: w.id, FreePages: w.pool.GetFreePages() - w.pendingPages, TotalPages: w.pool.GetTotalPages(),
		PageTokens: w.pool.GetPageTokens(), Load: max(int64(w.running)+int64(w.waiting), w.assigned),
		InFlight: w.assigned, Budget: w.budgetLocked(), Slots: w.slots,
		CacheVersion: w.info.GetPrefixCacheVersion(), Role: w.info.GetRole(), Adapters: adapterMemoryOf(w.adapters),
	}
}
