package registry

import (
	"fmt"

	"github.com/warden-ai/warden/internal/controlpb"
)

// PickPrefiller chooses the worker that computes a prompt-only request
// (embeddings) of tokens KV positions for model: a placeable worker that
// prefills (role prefill or both; no KV transfer is involved) whose pool
// can hold tokens now, the least loaded first (prefill's ranking), ties
// to the smaller ID.
func (r *Registry) PickPrefiller(model string, tokens int64) (*Worker, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Worker
	for _, w := range r.byID {
		if !w.placeable() || w.info.Model != model || poolOf(w.pool).UsableTokens() < tokens ||
			(w.info.Role != controlpb.Role_ROLE_PREFILL && w.info.Role != controlpb.Role_ROLE_BOTH) {
			continue
		}
		if best == nil || prefillLess(w, best) {
			best = w
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w for model %s", ErrNoWorker, model)
	}
	return best, nil
}
