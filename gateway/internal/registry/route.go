package registry

import (
	"fmt"

	"github.com/warden-ai/warden/internal/controlpb"
)

// Route is a routing decision: a worker that holds the KV and decodes
// (decode or both), and for a decode worker the prefill worker.
type Route struct {
	Decode  *Worker
	Prefill *Worker // nil when Decode has role both
	// Pages is how many pages the request needs on Decode.
	Pages int64
	// FreePages is Decode's free pages as last reported, less the pages
	// routed there since.
	FreePages int64
	// Busy: Decode's in-flight budget is used up (budget.go); the request
	// should wait in the fair queue.
	Busy bool
}

// Pick chooses where a request of totalTokens (prompt + max output) for
// model runs, never on a cordoned or draining worker: the healthy decode-capable worker (decode or both) with the
// most free pages (counting pages routed since its last heartbeat), and
// for a decode worker the healthy prefill worker with the least work. A
// decode worker is eligible only with a prefill worker it can receive
// from: its transfer backend shm needs a prefill worker on the same host
// (host_id); tcp takes any. Ties go to fewer requests routed by this
// gateway, then to the smaller ID. Free pages only rank workers: whether
// they are really free is for the worker's Reserve to say. A worker whose
// pool cannot hold totalTokens now (Pool.UsableTokens: net of quarantine)
// is never picked.
func (r *Registry) Pick(model string, totalTokens int64) (Route, error) {
	return r.pick(model, totalTokens, nil)
}

// pick is Pick with the workers ranked by score first when score is not
// nil.
func (r *Registry) pick(model string, totalTokens int64, score func(Candidate) float64) (Route, error) {
	better := func(a, b *Worker) bool { return decodeBetter(a, b, decodeLess) }
	if score != nil {
		better = scoredLess(score, better)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var best, bestPrefill *Worker
	for _, w := range r.byID {
		if !w.placeable() || w.info.Model != model || poolOf(w.pool).UsableTokens() < totalTokens {
			continue
		}
		var prefill *Worker
		switch w.info.Role {
		case controlpb.Role_ROLE_BOTH:
		case controlpb.Role_ROLE_DECODE:
			if prefill = r.prefillFor(w, score); prefill == nil {
				continue
			}
		default:
			continue
		}
		if best == nil || better(w, best) {
			best, bestPrefill = w, prefill
		}
	}
	if best == nil {
		return Route{}, fmt.Errorf("%w for model %s", ErrNoWorker, model)
	}
	return Route{Decode: best, Prefill: bestPrefill, Pages: pagesFor(totalTokens, best.pool.GetPageTokens()),
		FreePages: best.pool.GetFreePages() - best.pendingPages, Busy: !best.roomLocked()}, nil
}

// Cordon stops (on) or resumes (off) new placements on worker id; the
// requests already placed there run to their end. The mark stays across
// the worker's re-registrations. It returns the worker's state, or false
// for an unknown worker.
func (r *Registry) Cordon(id string, on bool) (Snapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.byID[id]
	if !ok {
		return Snapshot{}, false
	}
	if w.cordoned != on {
		w.cordoned = on
		r.cfg.Logger.Info("worker placements changed by an operator", "worker", id, "cordoned", on)
	}
	return w.snapshotLocked(), true
}

// placeable reports whether new requests may be placed on w: healthy,
// not cordoned by an operator, not draining itself. Called with r.mu held.
func (w *Worker) placeable() bool { return w.healthy && !w.cordoned && !w.draining }

// prefillFor returns the healthy prefill worker that can push KV to
// decode with the highest score (when score is not nil) and then the
// least load, or nil. Called with r.mu held.
func (r *Registry) prefillFor(decode *Worker, score func(Candidate) float64) *Worker {
	sameHost := decode.info.TransferBackend == "shm"
	less := prefillLess
	if score != nil {
		less = scoredLess(score, prefillLess)
	}
	var best *Worker
	for _, w := range r.byID {
		if !w.placeable() || w.info.Model != decode.info.Model || w.info.Role != controlpb.Role_ROLE_PREFILL ||
			(sameHost && w.info.HostId != decode.info.HostId) {
			continue
		}
		if best == nil || less(w, best) {
			best = w
		}
	}
	return best
}

func pagesFor(tokens int64, pageTokens int32) int64 {
	if pageTokens <= 0 {
		return 0
	}
	return (tokens + int64(pageTokens) - 1) / int64(pageTokens)
}

func decodeLess(a, b *Worker) bool {
	fa, fb := a.pool.GetFreePages()-a.pendingPages, b.pool.GetFreePages()-b.pendingPages
	if fa != fb {
		return fa > fb
	}
	if a.assigned != b.assigned {
		return a.assigned < b.assigned
	}
	return a.id < b.id
}

func prefillLess(a, b *Worker) bool {
	la := int64(a.running) + int64(a.waiting) + a.assigned
	lb := int64(b.running) + int64(b.waiting) + b.assigned
	if la != lb {
		return la < lb
	}
	return a.id < b.id
}
