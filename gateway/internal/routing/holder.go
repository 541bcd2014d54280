package routing

import "github.com/warden-ai/warden/gateway/internal/registry"

// DefaultHolderQueueShare is HolderQueue's default Share: a saturated
// worker holding the whole prompt takes up to half its batch size of
// requests beyond its in-flight budget.
const DefaultHolderQueueShare = 0.5

// HolderQueue admits a candidate that has room in its in-flight budget,
// and one that is saturated but holds the request's prefix while its
// queue stays short: the request then waits in the holder's queue rather
// than recomputing the prefix elsewhere. The wait it accepts grows with
// what the hit saves: the holder takes up to Share × its batch size ×
// the share of the prompt's pages it holds (rounded) requests beyond its
// budget, this one included. A holder past that bound, or a saturated
// worker holding nothing, is refused: the request goes to a worker with
// room (or, when none has, waits in the gateway's fair queue).
type HolderQueue struct {
	// Index tells which workers hold which pages; nil admits on room
	// alone.
	Index *Index
	// Share is the bound's factor (DefaultHolderQueueShare).
	Share float64
}

var _ Filter = HolderQueue{}

// Admits implements Filter.
func (h HolderQueue) Admits(req *Request, c registry.Candidate) bool {
	if c.Room() {
		return true
	}
	held := PrefixScorer{Index: h.Index}.Score(req, c)
	beyond := c.InFlight - c.Budget + 1 // beyond the budget, this request included
	return held > 0 && float64(beyond) <= h.Share*float64(c.Slots)*held+0.5
}
