// Package fairqueue is the gateway's wait queue for admitted requests while
// workers are saturated. Requests leave it by weighted fair queuing (WFQ)
// across tenants, so one tenant's flood cannot starve another: over any
// backlogged period each tenant's share of the turns converges to its weight
// divided by the sum of the weights of the tenants waiting.
//
// # Protocol
//
// The queue does not own capacity; it only decides who may try for it next.
// A caller that finds no capacity enters the queue and loops:
//
//	if q.Len() == 0 && tryCapacity() { // fast path: nobody is waiting
//		return nil
//	}
//	w, err := q.Enter(ctx, tenant, weight, cost) // ErrFull
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
// waiter in WFQ order; at most Config.MaxTrying waiters hold a turn at once,
// and at most one per tenant, which keeps each tenant's requests FIFO.
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
// # Fair order
//
// Each tenant with waiters is a flow with a virtual start tag S; its head
// waiter (cost c, weight w) has the finish tag F = S + c/w. A turn goes to
// the head with the smallest F (ties: the earlier arrival). When a head is
// served (Done after holding a turn) the queue's virtual time V becomes
// max(V, F) and the flow's next head starts at F. A tenant that arrives
// with no waiters starts at V, so idle time earns no credit, and a waiter
// that leaves unserved charges nothing to the ones behind it. This is
// self-clocked fair queuing. With equal weights and costs, a request of a
// tenant with no other waiters is served within one turn per other
// backlogged tenant plus its own, however long their backlogs (the tests
// check 2 turns against one flooding tenant); with weights and costs, other
// tenants get turns until their finish tags pass the new request's.
//
// # Leaving
//
// Waiters leave by Done (idempotent). A waiter whose context ends leaves at
// once by itself: its Ready channel is closed and Err returns the context's
// error. A waiter that waited MaxWait without a turn leaves the same way
// with ErrTimeout. Timeouts are checked by a timer and by Enter, Signal and
// Retry, so with a fake clock (Config.Now) the first of those calls after
// the clock passes a deadline delivers it. The clock must not go back. A waiter holding a turn does not time out
// until it calls Retry.
package fairqueue
