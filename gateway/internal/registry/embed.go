package registry

import (
	"fmt"

	"github.com/warden-ai/warden/internal/controlpb"
)

// PickPrefiller chooses the worker that computes a prompt-only request
// (embeddings) of tokens KV positions for model: a placeable worker that
// prefills (role prefill or both; no KV transfer is involved) whose pool
// can hold tokens now, the least loaded first (prefill's ranking), ties
// to the smaller ID. Under a LoRA adapter (content hash adapter, of
// adapterBytes in a worker's adapter memory; "" for the base model) a
// worker that holds it ranks first, then one with adapterBytes
// available, as the router's AdapterScorer and AdapterFit rank
// generations; the others stay candidates, last (one that registered a
// moment ago has not reported its adapter memory yet).
func (r *Registry) PickPrefiller(model string, tokens int64, adapter string, adapterBytes int64) (*Worker, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Worker
	bestRank := 0
	for _, w := range r.byID {
		if !w.placeable() || w.info.Model != model || poolOf(w.pool).UsableTokens() < tokens ||
			(w.info.Role != controlpb.Role_ROLE_PREFILL && w.info.Role != controlpb.Role_ROLE_BOTH) {
			continue
		}
		rank := adapterRank(adapterMemoryOf(w.adapters), adapter, adapterBytes)
		if best == nil || rank > bestRank || rank == bestRank && prefillLess(w, best) {
			best, bestRank = w, rank
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w for model %s", ErrNoWorker, model)
	}
	return best, nil
}

// adapterRank ranks a worker of adapter memory m for a request under the
// adapter of content hash hash and size bytes: 2 if it holds it, 1 if it
// has room to load it, 0 otherwise; 0 for every worker without an
// adapter ("").
func adapterRank(m AdapterMemory, hash string, bytes int64) int {
	switch {
	case hash == "":
		return 0
	case m.Holds(hash):
		return 2
	case m.Reported && m.Available() >= bytes:
		return 1
	}
	return 0
}
