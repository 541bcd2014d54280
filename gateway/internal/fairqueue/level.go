package fairqueue

import (
	"cmp"
	"container/heap"
	"container/list"
	"slices"
)

// level is one priority level: the flows whose waiters asked for that
// priority, with the level's own weighted fair queuing state. A level
// exists while it has waiters; one that empties is dropped, so its virtual
// time starts over at 0 when it is used again.
type level struct {
	priority int
	vtime    float64          // the level's virtual time V
	flows    map[string]*flow // by tenant: the tenant's waiters at this priority
	ready    flowHeap         // flows whose head may get a turn
}

// flow is one tenant's waiters at one priority level.
type flow struct {
	level   *level
	tenant  string
	waiters list.List // *Waiter, FIFO; the head is Front
	start   float64   // virtual start tag of the head
	index   int       // position in level.ready; -1 when not there

	// Scratch of fleetChoiceLocked: the tenant's requests in flight per
	// weight across the fleet and at the other replicas, now and with one
	// more.
	fleetNow, fleetAfter, elseNow, elseAfter float64
}

func (f *flow) head() *Waiter { return f.waiters.Front().Value.(*Waiter) }

// finish is the head's virtual finish tag.
func (f *flow) finish() float64 {
	w := f.head()
	return f.start + float64(w.cost)/float64(w.weight)
}

// levelLocked returns the level of priority, creating it in its place in
// q.levels (highest priority first) if it has no waiters yet.
func (q *Queue) levelLocked(priority int) *level {
	i, found := slices.BinarySearchFunc(q.levels, priority, func(l *level, p int) int {
		return cmp.Compare(p, l.priority) // q.levels is in descending order
	})
	if found {
		return q.levels[i]
	}
	l := &level{priority: priority, flows: make(map[string]*flow)}
	q.levels = slices.Insert(q.levels, i, l)
	return l
}

// flowLocked returns tenantID's flow at level l, creating it with its start
// tag at the level's virtual time: idle time earns no credit.
func (l *level) flowLocked(tenantID string) *flow {
	f := l.flows[tenantID]
	if f == nil {
		f = &flow{level: l, tenant: tenantID, start: l.vtime, index: -1}
		l.flows[tenantID] = f
	}
	return f
}

// dropFlowLocked forgets f, which has no waiters left, and its level if
// that was the level's last flow.
func (q *Queue) dropFlowLocked(f *flow) {
	l := f.level
	delete(l.flows, f.tenant)
	if len(l.flows) > 0 {
		return
	}
	if i := slices.Index(q.levels, l); i >= 0 {
		q.levels = slices.Delete(q.levels, i, i+1)
	}
}

// nextLocked takes the flow whose head gets the next turn out of its
// level's ready heap: the one with the smallest finish tag in the highest
// level that has a ready flow, among the flows not ahead of their fleet
// share (fleetChoiceLocked). It returns nil when no head is eligible.
func (q *Queue) nextLocked() *flow {
	for _, l := range q.levels {
		switch {
		case l.ready.Len() == 0:
			continue
		case q.cfg.InFlight == nil || l.ready.Len() == 1:
			return heap.Pop(&l.ready).(*flow)
		}
		f := l.fleetChoiceLocked(q.cfg.InFlight)
		heap.Remove(&l.ready, f.index)
		return f
	}
	return nil
}

// fleetChoiceLocked returns the ready flow with the smallest finish tag
// among those whose tenant is not ahead of the others. A tenant is ahead
// when its requests in flight per weight are at least what another ready
// tenant's would be with one more, both across the fleet and at the other
// replicas alone: n_i/w_i >= (n_j+1)/w_j and r_i/w_i >= (r_k+1)/w_k for
// some j and k. The first condition balances the fleet; the second leaves
// to this replica's WFQ the tenants the other replicas serve alike (their
// WFQ already weighs them). The flow with the smallest (n_j+1)/w_j is never
// ahead, so a turn is never withheld; with nothing in flight elsewhere
// nobody is ahead, and the order is plain WFQ.
func (l *level) fleetChoiceLocked(inFlight func(string) (int64, int64)) *flow {
	// The two flows with the smallest loads after one more request, across
	// the fleet and elsewhere, so that each flow is compared with the best
	// of the others.
	var best, second, bestElse, secondElse *flow
	for _, f := range l.ready {
		fleet, remote := inFlight(f.tenant)
		w := float64(f.head().weight)
		f.fleetNow, f.fleetAfter = float64(fleet)/w, float64(fleet+1)/w
		f.elseNow, f.elseAfter = float64(remote)/w, float64(remote+1)/w
		switch {
		case best == nil || f.fleetAfter < best.fleetAfter:
			best, second = f, best
		case second == nil || f.fleetAfter < second.fleetAfter:
			second = f
		}
		switch {
		case bestElse == nil || f.elseAfter < bestElse.elseAfter:
			bestElse, secondElse = f, bestElse
		case secondElse == nil || f.elseAfter < secondElse.elseAfter:
			secondElse = f
		}
	}
	var pick *flow
	passed := false
	for i, f := range l.ready {
		other, otherElse := best, bestElse
		if f == best {
			other = second
		}
		if f == bestElse {
			otherElse = secondElse
		}
		if f.fleetNow >= other.fleetAfter && f.elseNow >= otherElse.elseAfter {
			// Passed over, it earns no credit here for turns it gets
			// elsewhere: its start tag keeps up with the level's V.
			if f.start < l.vtime {
				f.start, passed = l.vtime, true
			}
			continue
		}
		if pick == nil || l.ready.Less(i, pick.index) {
			pick = f
		}
	}
	if passed {
		heap.Init(&l.ready)
	}
	return pick
}

// flowHeap orders a level's flows by their head's finish tag, then arrival.
type flowHeap []*flow

func (h flowHeap) Len() int { return len(h) }
func (h flowHeap) Less(i, j int) bool {
	fi, fj := h[i].finish(), h[j].finish()
	if fi != fj {
		return fi < fj
	}
	return h[i].head().seq < h[j].head().seq
}
func (h flowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *flowHeap) Push(x any) {
	f := x.(*flow)
	f.index = len(*h)
	*h = append(*h, f)
}
func (h *flowHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.index = -1
	return f
}
