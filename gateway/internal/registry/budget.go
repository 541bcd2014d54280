package registry

import "github.com/warden-ai/warden/internal/controlpb"

// In-flight budget: the gateway places on a decode-capable worker only what
// that worker can run now, so that excess load waits in the gateway's fair
// queue (priority levels, then weighted fair queuing) rather than first in,
// first out in the worker engine's pending list.
//
// The budget is learned from heartbeats: a worker that reports waiting
// sequences is running as many as its batch holds, so the most running
// sequences seen in such a heartbeat is its batch size (its compute slots).
// Until a worker has been seen saturated its budget is unbounded (KV pages
// alone limit placement, as before). The budget allows some slack above the
// slots, so that a request is ready to take a slot the moment one frees; the
// engine's pending list then holds at most that slack. A decode worker
// counts requests still in prefill and transfer against its budget, so its
// slack is a quarter of the slots (at least one); a both worker prefills in
// its own batch, so its slack is an eighth (none below 8 slots).

// learnSlots updates the worker's learned batch size from its last report.
// Called with r.mu held.
func (w *Worker) learnSlots() {
	if w.waiting > 0 && w.running > w.slots {
		w.slots = w.running
	}
}

// budgetLocked is the most requests this gateway places on w at once, 0 for
// no bound. Called with r.mu held.
func (w *Worker) budgetLocked() int64 {
	if w.slots <= 0 {
		return 0
	}
	s := int64(w.slots)
	if w.info.GetRole() == controlpb.Role_ROLE_DECODE {
		return s + max(1, s/4)
	}
	return s + s/8
}

// roomLocked reports whether w's in-flight budget admits one more request.
// Called with r.mu held.
func (w *Worker) roomLocked() bool {
	b := w.budgetLocked()
	return b == 0 || w.assigned < b
}

// Newcomer reports whether a request of tenant may be placed on w now,
// beyond its in-flight budget or ahead of the requests waiting in the
// fair queue: tenant has nothing in flight on w from this gateway, and w
// holds less than twice its budget. The worker's engine then gives the
// request a slot at once, preempting a sequence of a tenant that runs two
// or more (worker/engine admit), so a tenant sending one request at a time
// never waits for a flooder's request to finish. At most one request per
// tenant and worker goes past the budget, and never more than the budget
// again in all.
func (w *Worker) Newcomer(tenant string) bool {
	w.reg.mu.Lock()
	defer w.reg.mu.Unlock()
	b := w.budgetLocked()
	return w.byTenant[tenant] == 0 && (b == 0 || w.assigned < 2*b)
}

// decodeBetter ranks decode-capable workers: one with room in its in-flight
// budget first, then decodeLess.
func decodeBetter(a, b *Worker, less func(a, b *Worker) bool) bool {
	if ra, rb := a.roomLocked(), b.roomLocked(); ra != rb {
		return ra
	}
	return less(a, b)
}
