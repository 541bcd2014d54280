package routing

import (
	"sync"

	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// RoundRobin takes the workers of each role in turn, whatever they hold
// (config gateway.routing: round_robin): the baseline cache-aware routing
// is measured against. Every request gets the next turn; among the
// workers of a role seen so far, the one at that turn scores highest.
type RoundRobin struct {
	mu   sync.Mutex
	ids  map[controlpb.Role]map[string]int // worker → its place in its role, first seen first
	next int
}

var _ Scorer = (*RoundRobin)(nil)

// Score implements Scorer: 1 for the worker whose turn it is, less for
// the workers after it.
func (rr *RoundRobin) Score(req *Request, c registry.Candidate) float64 {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.ids == nil {
		rr.ids = make(map[controlpb.Role]map[string]int)
	}
	role := rr.ids[c.Role]
	if role == nil {
		role = make(map[string]int)
		rr.ids[c.Role] = role
	}
	idx, ok := role[c.ID]
	if !ok {
		idx = len(role)
		role[c.ID] = idx
	}
	req.mu.Lock()
	if !req.turnSet {
		req.turn, req.turnSet = rr.next, true
		rr.next++
	}
	turn := req.turn
	req.mu.Unlock()
	n := len(role)
	return 1 - float64(((idx-turn)%n+n)%n)/float64(n)
}

// RoundRobinRouter is the router of gateway.routing: round_robin: the
// workers with room in their in-flight budget first (HolderQueue without
// an index), then in turn.
func RoundRobinRouter() *Router {
	return &Router{Filters: []Filter{HolderQueue{}, AdapterFit{}}, Scorers: []Weighted{{Scorer: &RoundRobin{}, Weight: 1}}}
}
