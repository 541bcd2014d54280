// Package fairqueue is the gateway's wait queue for admitted requests while
// workers are saturated. Requests leave it by strict priority, then by
// weighted fair queuing (WFQ) across tenants within a priority: a turn goes
// to the highest priority level that has a waiter eligible for one, and
// within that level to the tenant WFQ picks. So a request of a higher
// priority is served before any request of a lower one that is still
// waiting, however early that one arrived; and within a level one tenant's
// flood cannot starve another: over any backlogged period each tenant's
// share of the level's turns converges to its weight divided by the sum of
// the weights of the tenants waiting at that level. Lower levels wait while
// higher ones are backlogged; who may ask for which priority is for the
// caller to decide (the gateway: each tenant's max_priority).
//
// # Protocol
//
// The queue does not own capacity; it only decides who may try for it next.
// A caller that finds no capacity enters the queue and loops:
//
//	if q.Len() == 0 && tryCapacity() { // fast path: nobody is waiting
//		return nil
//	}
//	w, err := q.Enter(ctx, tenant, priority, weight, cost) // ErrFull
//	if err != nil {
//		return err
//	}
//	defer w.Done()
//	for {
//		<-w.Ready()
//		if err := w.Err(); err != nil {
//			return err // ErrTimeout or the context's error
//		}
//		if tryCapacity() {
//			w.Done() // at once: it hands the turn to the next waiter
//			return nil
//		}
//		w.Retry()
//	}
//
// Whoever frees capacity calls Signal. A Signal gives one turn to the next
// waiter in priority then WFQ order; at most Config.MaxTrying waiters hold
// a turn at once, and at most one per flow (a tenant's waiters at one
// priority), which keeps each flow FIFO. A tenant's requests at different
// priorities are different flows: a high-priority request is not stuck
// behind the same tenant's low-priority ones.
//
// No wake-up is lost:
//   - Done on a waiter holding a turn (it got capacity, or gave up) hands the
//     turn to the next waiter, so a burst of freed capacity is used by a
//     chain of waiters until one of them finds none;
//   - a Signal that arrives while every turn is taken is remembered, and the
//     next Retry tries again at once instead of waiting;
//   - the first waiter to enter an empty queue gets a turn at once, because
//     a Signal sent while the queue was empty reached nobody.
//
// # Priority levels
//
// Each priority with waiters is a level; levels are kept in descending
// order of priority and a level without waiters is dropped. A turn goes to
// the highest level that has a ready flow (one whose head does not hold a
// turn already); only if no flow of that level is ready does the next level
// down get it. There is no preemption: a lower-level waiter that already
// holds a turn keeps it until it calls Retry or Done, and the next turn goes
// to the higher level. Strict priority means a steady stream at a higher
// level can starve lower levels; MaxWait bounds how long they wait (they
// then leave with ErrTimeout).
//
// # Fair order within a level
//
// Each flow (tenant and priority) with waiters has a virtual start tag S;
// its head waiter (cost c, weight w) has the finish tag F = S + c/w. Within
// a level a turn goes to the head with the smallest F (ties: the earlier
// arrival). Every level has its own virtual time V: when a head is served
// (Done after holding a turn) its level's V becomes max(V, F) and the
// flow's next head starts at F. A flow that arrives with no waiters starts
// at its level's V, so idle time earns no credit, and a waiter that leaves
// unserved charges nothing to the ones behind it. This is self-clocked fair
// queuing, run per level; service at one level does not move another
// level's V. With equal weights and costs, a request of a tenant with no
// other waiters at its level is served within one turn per other
// backlogged tenant of that level plus its own, however long their
// backlogs, as long as no higher level has waiters (the tests check 2
// turns against one flooding tenant); with weights and costs, other tenants
// of the level get turns until their finish tags pass the new request's.
//
// # Across replicas
//
// Each gateway replica has its own queue, which sees only its own waiters.
// A tenant that sends to several replicas therefore gets turns at each of
// them, while a tenant that reaches one replica competes there with the
// first tenant's share of that replica alone. With Config.Fleet set, the
// queue charges for that while a waiting tenant of a level is served by
// this replica alone (no requests in flight at other replicas lately):
// each time a waiter of the level is served, every ready flow whose tenant
// has r requests in flight at other replicas has its start tag advanced by
// r/h of its head's c/w, h being this replica's requests in flight. A
// service here is about one of the h ending, during which about r/h of the
// tenant's requests end elsewhere; so the tags count its service at every
// replica, and this replica's turns go to the tenant it serves alone until
// the fleet has served both alike per weight. The charge is capped at r
// heads' worth ahead of the level's V, so a tenant whose requests
// elsewhere end gets turns here again within r of the others'. While every
// waiting tenant is served at other replicas too, nothing is charged: their
// queues weigh those tenants already, and in-flight counts would misjudge
// their service there when their requests run for different times. With
// nothing in flight elsewhere the order is plain WFQ. Only tenants waiting
// at this replica are compared: a replica where one tenant waits alone
// still gives it every turn.
//
// # Leaving
//
// Waiters leave by Done (idempotent). A waiter whose context ends leaves at
// once by itself: its Ready channel is closed and Err returns the context's
// error. A waiter that waited MaxWait without a turn leaves the same way
// with ErrTimeout. Timeouts are checked by a timer and by Enter, Signal and
// Retry, so with a fake clock (Config.Now) the first of those calls after
// the clock passes a deadline delivers it. The clock must not go back. A
// waiter holding a turn does not time out until it calls Retry. A waiter
// that leaves while holding a turn (Done, or its context ending) hands the
// turn on in the same order as a Signal would; one that times out at Retry
// has given its turn back, and a Signal missed during that turn goes on to
// the next waiter.
package fairqueue
