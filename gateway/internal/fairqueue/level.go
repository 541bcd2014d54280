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

	// Scratch of chargeElsewhereLocked: the tenant's requests in flight at
	// other replicas, and whether it had any there lately.
	elsewhere int64
	served    bool
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
// level that has a ready flow. It returns nil when no head is eligible.
func (q *Queue) nextLocked() *flow {
	for _, l := range q.levels {
		if l.ready.Len() > 0 {
			return heap.Pop(&l.ready).(*flow)
		}
	}
	return nil
}

// chargeElsewhereLocked is called when a waiter of the level was served,
// and only acts while a ready flow's tenant is served by this replica alone
// (nothing in flight elsewhere lately): otherwise every waiting tenant is
// also served by the other replicas' WFQ, and this one's order stays plain
// WFQ. It advances the start tag of each ready flow whose tenant has
// requests in flight at other replicas by the service those get while this
// replica serves one request: r/h heads' worth (r requests elsewhere, h
// here, a service here being about one of the h ending), capped at r heads'
// worth ahead of the level's V, so that a tenant served elsewhere for a
// long time is not shut out here for long once that ends.
func (l *level) chargeElsewhereLocked(fleet Fleet) {
	alone := false
	for _, f := range l.ready {
		f.elsewhere, f.served = fleet.Elsewhere(f.tenant)
		alone = alone || !f.served
	}
	if !alone {
		return
	}
	here := float64(max(fleet.Here(), 1))
	charged := false
	for _, f := range l.ready {
		if f.elsewhere <= 0 {
			continue
		}
		h := f.head()
		head := float64(h.cost) / float64(h.weight)
		r := float64(f.elsewhere)
		f.start = min(f.start+r/here*head, max(f.start, l.vtime+r*head))
		charged = true
	}
	if charged {
		heap.Init(&l.ready)
	}
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
