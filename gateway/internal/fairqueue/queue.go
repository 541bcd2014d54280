package fairqueue

import (
	"container/heap"
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/warden-ai/warden/tenant"
)

var (
	// ErrFull is returned by Enter when Config.MaxWaiting requests are
	// already waiting.
	ErrFull = errors.New("fairqueue: queue full")
	// ErrTimeout is reported by Waiter.Err when the waiter waited
	// Config.MaxWait without a turn.
	ErrTimeout = errors.New("fairqueue: waited too long for capacity")
)

// Config configures a Queue.
type Config struct {
	// MaxWaiting is how many waiters the queue holds; Enter returns ErrFull
	// beyond it. 0 or less means no waiting at all: every Enter fails.
	MaxWaiting int
	// MaxWait is how long a waiter may wait for a turn before it leaves
	// with ErrTimeout. 0 or less means no limit (only its context ends it).
	MaxWait time.Duration
	// MaxTrying is how many waiters may hold a turn at once; 0 means 1.
	MaxTrying int
	// Now is the clock for MaxWait; nil means time.Now.
	Now func() time.Time
	// Fleet, when set, tells the queue of the other gateway replicas, so
	// that it charges each tenant for the service it gets there (see
	// "Across replicas" in the package comment). nil: this queue's gateway
	// is alone. Its methods are called with the queue's lock held and must
	// not call into the queue.
	Fleet Fleet
}

// Fleet is what a queue learns of the other gateway replicas.
type Fleet interface {
	// Elsewhere returns tenantID's requests in flight at other replicas,
	// and whether it had any there lately: whether they serve it too.
	Elsewhere(tenantID string) (inFlight int64, recently bool)
	// Here returns this replica's requests in flight, of every tenant.
	Here() int64
}

// Queue is a wait queue with strict priority levels and weighted fair
// queuing across tenants within each level. Its methods are safe for
// concurrent use. See the package comment for the protocol.
type Queue struct {
	cfg Config

	mu      sync.Mutex
	seq     uint64      // arrival counter, for ties
	levels  []*level    // levels with waiters, highest priority first
	arrived list.List   // every waiter, in arrival (= deadline) order
	trying  int         // waiters holding a turn
	missed  bool        // a Signal came while every turn was taken
	timer   *time.Timer // fires at the earliest deadline; nil when unarmed
}

type waiterState uint8

const (
	stateQueued waiterState = iota // waiting for a turn
	stateTrying                    // holding a turn
	stateGone                      // left the queue
)

// Waiter is one request waiting in a Queue.
type Waiter struct {
	q        *Queue
	flow     *flow
	weight   int
	cost     int64
	seq      uint64
	deadline time.Time // zero: none
	ready    chan struct{}
	stopCtx  func() bool

	// Guarded by q.mu.
	state     waiterState
	err       error
	inFlow    *list.Element
	inArrived *list.Element
}

// New returns an empty queue.
func New(cfg Config) *Queue {
	if cfg.MaxTrying <= 0 {
		cfg.MaxTrying = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Queue{cfg: cfg}
}

// SetMaxWaiting changes how many waiters the queue holds (a configuration
// reload). Waiters already queued beyond a lowered limit stay; only new
// ones are refused until the queue is below it.
func (q *Queue) SetMaxWaiting(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cfg.MaxWaiting = n
}

// SetMaxWait changes how long a new waiter may wait for a turn (a
// configuration reload); waiters already queued keep their deadline.
func (q *Queue) SetMaxWait(d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cfg.MaxWait = d
}

// MaxWait is how long a new waiter may wait for a turn now.
func (q *Queue) MaxWait() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cfg.MaxWait
}

// Enter adds a waiter for tenantID at the tail of the tenant's queue at
// priority (higher is served sooner; values below 0 count as 0). weight
// is the tenant's scheduling weight (clamped to [1, tenant.MaxWeight]) and
// cost the request's size in any unit shared by all callers, e.g. tokens
// (values below 1 count as 1); they order the waiters within a priority
// level. It fails with ErrFull when MaxWaiting waiters are already in the
// queue, or with ctx's error if ctx is already done.
//
// The waiter leaves by itself when ctx ends; the caller must still call
// Done.
func (q *Queue) Enter(ctx context.Context, tenantID string, priority, weight int, cost int64) (*Waiter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	priority = max(priority, 0)
	weight = min(max(weight, 1), tenant.MaxWeight)
	cost = max(cost, 1)

	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	q.expireLocked(now)
	if q.arrived.Len() >= q.cfg.MaxWaiting {
		return nil, ErrFull
	}
	wasEmpty := q.arrived.Len() == 0
	q.seq++
	w := &Waiter{q: q, weight: weight, cost: cost, seq: q.seq, ready: make(chan struct{}, 1)}
	if q.cfg.MaxWait > 0 {
		w.deadline = now.Add(q.cfg.MaxWait)
	}
	f := q.levelLocked(priority).flowLocked(tenantID)
	w.flow = f
	w.inFlow = f.waiters.PushBack(w)
	w.inArrived = q.arrived.PushBack(w)
	if f.waiters.Len() == 1 {
		heap.Push(&f.level.ready, f)
	}
	if wasEmpty {
		// A Signal sent while the queue was empty reached nobody: try now.
		q.grantLocked()
	}
	q.armLocked(now)
	w.stopCtx = context.AfterFunc(ctx, func() { w.leave(context.Cause(ctx)) })
	return w, nil
}

// Signal tells the queue that capacity may have been freed: the next
// waiter in fair order gets a turn. If every turn is taken, the signal is
// remembered for the next Retry. Without waiters it does nothing.
func (q *Queue) Signal() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	q.expireLocked(now)
	if q.arrived.Len() > 0 && !q.grantLocked() {
		q.missed = true
	}
	q.armLocked(now)
}

// Len returns the number of waiters, holding a turn or not. Zero means a
// caller may try for capacity without entering the queue.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.arrived.Len()
}

// Highest returns the highest priority at which a waiter waits, and false
// when none does.
func (q *Queue) Highest() (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.levels) == 0 {
		return 0, false
	}
	return q.levels[0].priority, true
}

// Waiting returns the number of waiters of tenantID, at every priority.
func (q *Queue) Waiting(tenantID string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, l := range q.levels {
		if f := l.flows[tenantID]; f != nil {
			n += f.waiters.Len()
		}
	}
	return n
}

// Ready returns the channel that receives a value each time the waiter gets
// a turn, and is closed when the waiter leaves by itself (Err is then not
// nil). It is not closed by Done.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Err returns why the waiter left by itself: ErrTimeout, or the cause of
// its context's end (context.Canceled, context.DeadlineExceeded or a cause
// given to context.WithCancelCause). It is nil while the waiter is in the
// queue and after Done.
func (w *Waiter) Err() error {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.err
}

// Retry gives the turn back after the waiter found no capacity. The waiter
// keeps its place at the head of its flow and waits for the next
// Signal, or tries again at once if a Signal came during its turn. If its
// MaxWait has passed it leaves with ErrTimeout. Retry without a turn does
// nothing.
func (w *Waiter) Retry() {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state != stateTrying {
		return
	}
	now := q.cfg.Now()
	w.state = stateQueued
	q.trying--
	heap.Push(&w.flow.level.ready, w.flow)
	q.expireLocked(now)
	if q.missed && q.trying < q.cfg.MaxTrying {
		q.missed = false
		q.grantLocked()
	}
	q.armLocked(now)
}

// Done removes the waiter from the queue. Called while holding a turn, it
// counts the waiter as served and hands the turn to the next waiter. It is
// idempotent and may be called after the waiter left by itself.
func (w *Waiter) Done() {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(w, nil, w.state == stateTrying)
}

// leave removes the waiter because its context ended.
func (w *Waiter) leave(cause error) {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(w, cause, false)
}

// grantLocked gives a turn to the head with the smallest finish tag in the
// highest level that has an eligible head, if a turn is free, and reports
// whether it did.
func (q *Queue) grantLocked() bool {
	if q.trying >= q.cfg.MaxTrying {
		return false
	}
	f := q.nextLocked()
	if f == nil {
		return false
	}
	w := f.head()
	w.state = stateTrying
	q.trying++
	select {
	case w.ready <- struct{}{}:
	default: // a turn is already pending in the buffer
	}
	return true
}

// removeLocked takes w out of the queue, if it is still there. served
// advances its level's virtual clock past w's finish tag; a non-nil err is
// what Err will report (w then learns of its leaving by Ready being
// closed). A turn w held goes to the next waiter.
func (q *Queue) removeLocked(w *Waiter, err error, served bool) {
	w.stopCtx()
	if w.state == stateGone {
		return
	}
	f := w.flow
	l := f.level
	wasHead := f.waiters.Front() == w.inFlow
	wasTrying := w.state == stateTrying
	switch {
	case wasTrying:
		q.trying--
	case wasHead:
		heap.Remove(&l.ready, f.index)
	}
	if served {
		l.vtime = max(l.vtime, f.finish())
		f.start = l.vtime
	}
	w.state = stateGone
	f.waiters.Remove(w.inFlow)
	q.arrived.Remove(w.inArrived)
	if err != nil {
		w.err = err
		close(w.ready)
	}

	switch {
	case f.waiters.Len() == 0:
		// A level without waiters is dropped: no tags are left to compare
		// with, so its V starts over, which keeps V small enough for
		// float64 tags to stay precise.
		q.dropFlowLocked(f)
	case wasHead:
		heap.Push(&l.ready, f) // with its next head
	}
	if served && q.cfg.Fleet != nil {
		l.chargeElsewhereLocked(q.cfg.Fleet)
	}
	if q.arrived.Len() == 0 {
		q.missed = false
		if q.timer != nil {
			q.timer.Stop()
			q.timer = nil
		}
		return
	}
	if wasTrying {
		q.grantLocked()
	}
}

// expireLocked removes the queued waiters whose deadline has passed.
// Deadlines follow arrival order, so it stops at the first one in the
// future. Waiters holding a turn are skipped: Retry expires them.
func (q *Queue) expireLocked(now time.Time) {
	for e := q.arrived.Front(); e != nil; {
		w := e.Value.(*Waiter)
		e = e.Next()
		if w.deadline.IsZero() || now.Before(w.deadline) {
			return
		}
		if w.state == stateQueued {
			q.removeLocked(w, ErrTimeout, false)
		}
	}
}

// armLocked makes sure a timer fires at the earliest deadline, so waiters
// time out even when nobody calls into the queue.
func (q *Queue) armLocked(now time.Time) {
	if q.timer != nil || q.cfg.MaxWait <= 0 {
		return
	}
	for e := q.arrived.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*Waiter); w.state == stateQueued {
			q.timer = time.AfterFunc(max(w.deadline.Sub(now), time.Millisecond), q.onTimer)
			return
		}
	}
}

func (q *Queue) onTimer() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Now()
	q.timer = nil
	q.expireLocked(now)
	q.armLocked(now)
}
