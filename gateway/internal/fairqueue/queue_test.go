package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a manual clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// hasTurn reports, without blocking, whether w was given a turn. It fails
// the test if Ready was closed.
func hasTurn(t *testing.T, w *Waiter) bool {
	t.Helper()
	select {
	case _, ok := <-w.Ready():
		if !ok {
			t.Fatalf("Ready closed unexpectedly: %v", w.Err())
		}
		return true
	default:
		return false
	}
}

func mustEnter(t *testing.T, q *Queue, tenant string, weight int, cost int64) *Waiter {
	t.Helper()
	return mustEnterAt(t, q, tenant, 0, weight, cost)
}

func mustEnterAt(t *testing.T, q *Queue, tenant string, priority, weight int, cost int64) *Waiter {
	t.Helper()
	w, err := q.Enter(context.Background(), tenant, priority, weight, cost)
	if err != nil {
		t.Fatalf("Enter(%s, priority %d): %v", tenant, priority, err)
	}
	return w
}

// checkEmpty asserts that nothing is left in q's internal structures.
func checkEmpty(t *testing.T, q *Queue) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.arrived.Len() != 0 || len(q.levels) != 0 || q.trying != 0 || q.missed || q.timer != nil {
		t.Fatalf("queue not empty: arrived=%d levels=%d trying=%d missed=%v timer=%v",
			q.arrived.Len(), len(q.levels), q.trying, q.missed, q.timer != nil)
	}
}

func TestLenAndWaiting(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	if q.Len() != 0 {
		t.Fatalf("Len of new queue = %d", q.Len())
	}
	a1 := mustEnter(t, q, "a", 1, 1)
	a2 := mustEnter(t, q, "a", 1, 1)
	b1 := mustEnter(t, q, "b", 1, 1)
	if q.Len() != 3 || q.Waiting("a") != 2 || q.Waiting("b") != 1 || q.Waiting("c") != 0 {
		t.Fatalf("Len=%d Waiting(a)=%d Waiting(b)=%d", q.Len(), q.Waiting("a"), q.Waiting("b"))
	}
	a2.Done()
	a2.Done() // idempotent
	if q.Len() != 2 || q.Waiting("a") != 1 {
		t.Fatalf("after Done: Len=%d Waiting(a)=%d", q.Len(), q.Waiting("a"))
	}
	a1.Done()
	b1.Done()
	checkEmpty(t, q)
}

func TestFull(t *testing.T) {
	q := New(Config{MaxWaiting: 2})
	w1 := mustEnter(t, q, "a", 1, 1)
	mustEnter(t, q, "b", 1, 1)
	if _, err := q.Enter(context.Background(), "c", 0, 1, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("third Enter: %v, want ErrFull", err)
	}
	w1.Done()
	w3 := mustEnter(t, q, "c", 1, 1)
	if q.Waiting("c") != 1 {
		t.Fatalf("Waiting(c) = %d", q.Waiting("c"))
	}
	w3.Done()

	none := New(Config{MaxWaiting: 0})
	if _, err := none.Enter(context.Background(), "a", 0, 1, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("MaxWaiting 0: %v, want ErrFull", err)
	}
	// A reload raises the limit, then lowers it below the waiters queued:
	// they stay, new ones are refused.
	none.SetMaxWaiting(2)
	n1 := mustEnter(t, none, "a", 1, 1)
	n2 := mustEnter(t, none, "b", 1, 1)
	none.SetMaxWaiting(1)
	if _, err := none.Enter(context.Background(), "c", 0, 1, 1); !errors.Is(err, ErrFull) || none.Len() != 2 {
		t.Fatalf("Enter after lowering the limit: %v with %d waiting, want ErrFull and both still waiting", err, none.Len())
	}
	n1.Done()
	n2.Done()
	checkEmpty(t, none)
}

func TestEnterWithDoneContext(t *testing.T) {
	q := New(Config{MaxWaiting: 2})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Enter(ctx, "a", 0, 1, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enter with cancelled ctx: %v", err)
	}
	checkEmpty(t, q)
}

func TestFirstWaiterGetsTurnAtOnce(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	q.Signal() // nobody waiting: lost, which is why Enter grants a turn
	w1 := mustEnter(t, q, "a", 1, 1)
	if !hasTurn(t, w1) {
		t.Fatal("first waiter of an empty queue has no turn")
	}
	w2 := mustEnter(t, q, "b", 1, 1)
	if hasTurn(t, w2) {
		t.Fatal("second waiter got a turn without a Signal")
	}
	w1.Retry()
	if hasTurn(t, w1) || hasTurn(t, w2) {
		t.Fatal("a turn was given after Retry without a Signal")
	}
	q.Signal()
	if !hasTurn(t, w1) {
		t.Fatal("Signal did not give the head (earliest, equal tags) its turn")
	}
	w1.Done()
	if !hasTurn(t, w2) {
		t.Fatal("Done with a turn did not hand it on")
	}
	w2.Done()
	checkEmpty(t, q)
}

func TestFIFOWithinTenant(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	var ws []*Waiter
	for range 5 {
		ws = append(ws, mustEnter(t, q, "a", 1, 1))
	}
	for i, w := range ws {
		if i > 0 {
			q.Signal()
		}
		for j, other := range ws[i+1:] {
			if hasTurn(t, other) {
				t.Fatalf("waiter %d got a turn before waiter %d", i+1+j, i)
			}
		}
		if !hasTurn(t, w) {
			t.Fatalf("waiter %d has no turn", i)
		}
		w.Retry() // no capacity: keeps its place
		q.Signal()
		if !hasTurn(t, w) {
			t.Fatalf("waiter %d lost its place after Retry", i)
		}
		w.Done()
		// Done handed the turn to the next waiter: give it back.
		if i+1 < len(ws) {
			if !hasTurn(t, ws[i+1]) {
				t.Fatalf("waiter %d did not get the turn handed on", i+1)
			}
			ws[i+1].Retry()
		}
	}
	checkEmpty(t, q)
}

func TestOnlyOneTurnAtATime(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	a := mustEnter(t, q, "a", 1, 1)
	b := mustEnter(t, q, "b", 1, 1)
	c := mustEnter(t, q, "c", 1, 1)
	if !hasTurn(t, a) {
		t.Fatal("a has no turn")
	}
	q.Signal()
	q.Signal()
	if hasTurn(t, b) || hasTurn(t, c) {
		t.Fatal("a second waiter got a turn while one is held (MaxTrying 1)")
	}
	// The signals were remembered: Retry tries again at once, once.
	a.Retry()
	if !hasTurn(t, a) {
		t.Fatal("Retry after a missed Signal did not try again at once")
	}
	a.Retry()
	if hasTurn(t, a) || hasTurn(t, b) || hasTurn(t, c) {
		t.Fatal("a remembered Signal was used twice")
	}
	for _, w := range []*Waiter{a, b, c} {
		w.Done()
	}
	checkEmpty(t, q)
}

func TestMaxTrying(t *testing.T) {
	q := New(Config{MaxWaiting: 10, MaxTrying: 2})
	a1 := mustEnter(t, q, "a", 1, 1)
	a2 := mustEnter(t, q, "a", 1, 1)
	b := mustEnter(t, q, "b", 1, 1)
	c := mustEnter(t, q, "c", 1, 1)
	if !hasTurn(t, a1) {
		t.Fatal("a1 has no turn")
	}
	q.Signal() // a2 is not eligible while a1 holds its tenant's turn
	if hasTurn(t, a2) || !hasTurn(t, b) {
		t.Fatal("second turn should go to b, not a2")
	}
	q.Signal()
	if hasTurn(t, c) {
		t.Fatal("third turn given with MaxTrying 2")
	}
	for _, w := range []*Waiter{a1, a2, b, c} {
		w.Done()
	}
	checkEmpty(t, q)
}

func TestWeightedOrder(t *testing.T) {
	// Tags (V=0): a (w3, c3): 1, 2, 3; b (w1, c1): 1, 2, 3; c (w1, c2): 2, 4.
	q := New(Config{MaxWaiting: 20})
	names := map[*Waiter]string{}
	var all []*Waiter
	add := func(tenant string, weight int, cost int64, n int) {
		for i := range n {
			w := mustEnter(t, q, tenant, weight, cost)
			names[w] = fmt.Sprintf("%s%d", tenant, i+1)
			all = append(all, w)
		}
	}
	add("a", 3, 3, 3)
	add("b", 1, 1, 3)
	add("c", 1, 2, 2)
	// The first Enter took a turn at once; give it back without serving.
	if !hasTurn(t, all[0]) {
		t.Fatal("first waiter has no turn")
	}
	all[0].Retry()

	got := serviceOrder(t, q, all, names)
	want := "[a1 b1 a2 b2 c1 a3 b3 c2]"
	if fmt.Sprint(got) != want {
		t.Fatalf("service order %v, want %s", got, want)
	}
	checkEmpty(t, q)
}

// serviceOrder serves every waiter of all, one per Signal with MaxTrying
// 1, and returns their names in the order they got their turns. Nobody may
// hold a turn when it is called.
func serviceOrder(t *testing.T, q *Queue, all []*Waiter, names map[*Waiter]string) []string {
	t.Helper()
	var got []string
	for range len(all) {
		q.Signal()
		var served *Waiter
		for _, w := range all {
			if hasTurn(t, w) {
				if served != nil {
					t.Fatalf("two turns at once: %s and %s", names[served], names[w])
				}
				served = w
			}
		}
		if served == nil {
			t.Fatal("Signal gave no turn")
		}
		got = append(got, names[served])
		served.Done()
		// Done handed the turn on; the next one finds no capacity.
		for _, w := range all {
			if w != served && hasTurn(t, w) {
				w.Retry()
			}
		}
	}
	return got
}

func TestTimeoutWithFakeClock(t *testing.T) {
	clk := newFakeClock()
	q := New(Config{MaxWaiting: 10, MaxWait: 10 * time.Second, Now: clk.Now})
	a := mustEnter(t, q, "a", 1, 1) // holds the turn
	if !hasTurn(t, a) {
		t.Fatal("a has no turn")
	}
	clk.Advance(5 * time.Second)
	b := mustEnter(t, q, "b", 1, 1)
	clk.Advance(5 * time.Second) // a's deadline; b has 5s left
	q.Signal()
	if a.Err() != nil {
		t.Fatalf("a holds a turn and must not time out: %v", a.Err())
	}
	select {
	case <-b.Ready():
		t.Fatal("b was woken before its deadline")
	default:
	}
	a.Retry() // its MaxWait has passed: it leaves
	if _, ok := <-a.Ready(); ok || !errors.Is(a.Err(), ErrTimeout) {
		t.Fatalf("a after Retry past its deadline: err %v", a.Err())
	}
	if q.Len() != 1 || q.Waiting("a") != 0 {
		t.Fatalf("Len=%d Waiting(a)=%d after a timed out", q.Len(), q.Waiting("a"))
	}
	// The Signal that came during a's turn goes to b.
	if !hasTurn(t, b) {
		t.Fatal("the remembered Signal was lost when a timed out")
	}
	b.Retry()
	clk.Advance(5 * time.Second)
	if q.Len() != 1 {
		t.Fatal("expired before any call into the queue saw the clock")
	}
	q.Signal() // any call delivers the timeout
	if _, ok := <-b.Ready(); ok || !errors.Is(b.Err(), ErrTimeout) {
		t.Fatalf("b: err %v, want ErrTimeout with Ready closed", b.Err())
	}
	a.Done()
	b.Done()
	checkEmpty(t, q)
}

func TestTimeoutByTimer(t *testing.T) {
	// Real clock, short MaxWait, nobody calls into the queue: the timer
	// must deliver the timeout. The test waits for it, asserting no time.
	q := New(Config{MaxWaiting: 10, MaxWait: 5 * time.Millisecond})
	a := mustEnter(t, q, "a", 1, 1)
	if !hasTurn(t, a) {
		t.Fatal("a has no turn")
	}
	a.Retry()
	if _, ok := <-a.Ready(); ok {
		t.Fatal("Ready gave a turn instead of closing")
	}
	if !errors.Is(a.Err(), ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", a.Err())
	}
	a.Done()
	checkEmpty(t, q)
}

func TestCancelLeavesPromptly(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	a := mustEnter(t, q, "a", 1, 1)
	ctx, cancel := context.WithCancelCause(context.Background())
	b, err := q.Enter(ctx, "b", 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("client went away")
	cancel(cause)
	if _, ok := <-b.Ready(); ok {
		t.Fatal("Ready gave a turn instead of closing")
	}
	if !errors.Is(b.Err(), cause) {
		t.Fatalf("Err = %v, want the cancel cause", b.Err())
	}
	if q.Len() != 1 || q.Waiting("b") != 0 {
		t.Fatalf("Len=%d Waiting(b)=%d after cancel", q.Len(), q.Waiting("b"))
	}
	b.Done()
	a.Done()
	checkEmpty(t, q)
}

func TestCancelWhileHoldingTurnHandsItOn(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	ctx, cancel := context.WithCancel(context.Background())
	a, err := q.Enter(ctx, "a", 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := mustEnter(t, q, "b", 1, 1)
	<-a.Ready() // a holds the turn
	cancel()
	<-b.Ready() // blocks until the turn is handed on
	if !errors.Is(a.Err(), context.Canceled) {
		t.Fatalf("a.Err = %v", a.Err())
	}
	a.Done()
	b.Done()
	checkEmpty(t, q)
}

// sim drives a queue deterministically from one goroutine: capacity frees
// one slot per step, and whoever holds a turn takes a slot if there is one.
type sim struct {
	t        *testing.T
	q        *Queue
	capacity int
	slot     int                     // services so far
	queues   map[string][]*simWaiter // each flow's waiters, FIFO
	flows    []string                // flow keys, in order of first arrival
	served   map[string]int          // services by tenant
	servedAt map[int]int             // services by priority
}

type simWaiter struct {
	w        *Waiter
	tenant   string
	priority int
	arrived  int // slot count at arrival
}

func newSim(t *testing.T) *sim {
	return &sim{t: t, q: New(Config{MaxWaiting: 100_000}), queues: map[string][]*simWaiter{},
		served: map[string]int{}, servedAt: map[int]int{}}
}

func (s *sim) enter(tenant string, weight int, cost int64) { s.enterAt(tenant, 0, weight, cost) }

// enterAt adds a waiter of tenant at priority; a flow is a tenant's
// waiters at one priority.
func (s *sim) enterAt(tenant string, priority, weight int, cost int64) {
	key := fmt.Sprintf("%s/%d", tenant, priority)
	if _, ok := s.queues[key]; !ok {
		s.flows = append(s.flows, key)
	}
	sw := &simWaiter{w: mustEnterAt(s.t, s.q, tenant, priority, weight, cost), tenant: tenant, priority: priority, arrived: s.slot}
	s.queues[key] = append(s.queues[key], sw)
	s.drain(nil)
}

// step frees one slot, signals, and serves whoever gets it; onServe sees
// each served waiter and the number of slots it waited (its own included).
func (s *sim) step(onServe func(sw *simWaiter, slots int)) {
	s.capacity++
	s.q.Signal()
	s.drain(onServe)
}

// drain plays every pending turn until nobody holds one. Only heads are
// looked at (FIFO within a flow is tested elsewhere); finish checks that
// nobody else ever got a turn.
func (s *sim) drain(onServe func(sw *simWaiter, slots int)) {
	for {
		var sw *simWaiter
		var key string
		for _, k := range s.flows {
			if q := s.queues[k]; len(q) > 0 && hasTurn(s.t, q[0].w) {
				if sw != nil {
					s.t.Fatal("two turns at once")
				}
				sw, key = q[0], k
			}
		}
		if sw == nil {
			return
		}
		if s.capacity == 0 {
			sw.w.Retry()
			continue
		}
		s.capacity--
		s.slot++
		s.served[sw.tenant]++
		s.servedAt[sw.priority]++
		s.queues[key] = s.queues[key][1:]
		if onServe != nil {
			onServe(sw, s.slot-sw.arrived)
		}
		sw.w.Done()
	}
}

// finish checks that no waiter left holds a turn.
func (s *sim) finish() {
	for _, q := range s.queues {
		for _, sw := range q {
			if hasTurn(s.t, sw.w) {
				s.t.Fatalf("a %s waiter at priority %d that was not its flow's head got a turn", sw.tenant, sw.priority)
			}
		}
	}
}

func TestFairnessFloodVersusTrickle(t *testing.T) {
	// Tenant a (weight 1) floods 1000 requests; tenant b (weight 1) sends
	// one every 5 steps. Bound: every b request is served within 2 service
	// slots of its arrival (one of a's, then its own), however long a's
	// backlog is.
	const bound = 2
	s := newSim(t)
	for range 1000 {
		s.enter("a", 1, 1)
	}
	bSent, bServed, worst := 0, 0, 0
	for step := range 600 {
		if step%5 == 0 {
			s.enter("b", 1, 1)
			bSent++
		}
		s.step(func(sw *simWaiter, slots int) {
			if sw.tenant != "b" {
				return
			}
			bServed++
			worst = max(worst, slots)
			if slots > bound {
				t.Errorf("b request arrived at slot %d waited %d slots, bound %d", sw.arrived, slots, bound)
			}
		})
	}
	if bServed != bSent {
		t.Fatalf("b: %d sent, %d served", bSent, bServed)
	}
	if got := s.served["a"]; got != 600-bSent {
		t.Fatalf("a served %d, want the remaining %d slots", got, 600-bSent)
	}
	s.finish()
	t.Logf("b: %d requests, worst wait %d slots; a served %d", bSent, worst, s.served["a"])
}

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		wa, wb   int
		ca, cb   int64
		slots    int
		wantA    int
		tolerate int
	}{
		{wa: 1, wb: 1, ca: 1, cb: 1, slots: 400, wantA: 200, tolerate: 1},
		{wa: 3, wb: 1, ca: 1, cb: 1, slots: 400, wantA: 300, tolerate: 1},
		{wa: 1, wb: 1, ca: 2, cb: 1, slots: 300, wantA: 100, tolerate: 1}, // a's requests cost twice as much
	} {
		t.Run(fmt.Sprintf("w%d:%d/c%d:%d", tc.wa, tc.wb, tc.ca, tc.cb), func(t *testing.T) {
			s := newSim(t)
			for range 1000 {
				s.enter("a", tc.wa, tc.ca)
				s.enter("b", tc.wb, tc.cb)
			}
			for range tc.slots {
				s.step(nil)
				// Shares hold at every prefix, not just at the end.
				a, total := s.served["a"], s.slot
				want := total * tc.wantA / tc.slots
				if a < want-tc.tolerate-1 || a > want+tc.tolerate+1 {
					t.Fatalf("after %d slots a has %d, want about %d", total, a, want)
				}
			}
			if a := s.served["a"]; a < tc.wantA-tc.tolerate || a > tc.wantA+tc.tolerate {
				t.Fatalf("a served %d of %d, want %d±%d", a, tc.slots, tc.wantA, tc.tolerate)
			}
			s.finish()
		})
	}
}

func TestIdleTenantEarnsNoCredit(t *testing.T) {
	// b is served alone for a while; then a arrives. b's past service must
	// not make a win everything (a starts at V, not at 0), nor the reverse.
	s := newSim(t)
	for range 100 {
		s.enter("b", 1, 1)
	}
	for range 50 {
		s.step(nil)
	}
	for range 100 {
		s.enter("a", 1, 1)
	}
	before := s.served["b"]
	for range 20 {
		s.step(nil)
	}
	if a, b := s.served["a"], s.served["b"]-before; a < 9 || a > 11 || b < 9 || b > 11 {
		t.Fatalf("after a arrived: a %d, b %d of 20, want an even split", a, b)
	}
}

func TestConcurrentRace(t *testing.T) {
	// Without MaxWait a lost wake-up hangs the test; with it, timeouts race
	// with everything else.
	t.Run("no-timeout", func(t *testing.T) { concurrentRace(t, 0, 1) })
	t.Run("timeout", func(t *testing.T) { concurrentRace(t, 2*time.Millisecond, 1) })
	t.Run("priorities", func(t *testing.T) { concurrentRace(t, 0, 3) })
	t.Run("priorities-timeout", func(t *testing.T) { concurrentRace(t, 2*time.Millisecond, 3) })
}

// concurrentRace has many goroutines enter, wait, take capacity, cancel and
// time out at once, at priorities drawn from [0, levels); capacity is a
// counter that finished requests give back with Signal. Everyone must
// finish, the capacity must never be oversubscribed, and the queue must end
// empty.
func concurrentRace(t *testing.T, maxWait time.Duration, levels int) {
	const (
		workers  = 64
		requests = 40
		slots    = 4
	)
	q := New(Config{MaxWaiting: workers * requests, MaxWait: maxWait, MaxTrying: 2})
	var (
		inUse, peak              atomic.Int64
		served, timedOut, gaveUp atomic.Int64
		wg                       sync.WaitGroup
	)
	take := func() bool {
		for {
			n := inUse.Load()
			if n >= slots {
				return false
			}
			if inUse.CompareAndSwap(n, n+1) {
				for {
					p := peak.Load()
					if n+1 <= p || peak.CompareAndSwap(p, n+1) {
						return true
					}
				}
			}
		}
	}
	release := func() {
		inUse.Add(-1)
		q.Signal()
	}
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			tenant := fmt.Sprintf("t%d", g%5)
			for range requests {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(8) == 0 {
					go cancel() // cancel concurrently with everything else
				}
				err := func() error {
					if q.Len() == 0 && take() {
						return nil
					}
					w, err := q.Enter(ctx, tenant, rng.IntN(levels), 1+g%3, int64(1+rng.IntN(4)))
					if err != nil {
						return err
					}
					defer w.Done()
					for {
						<-w.Ready()
						if err := w.Err(); err != nil {
							return err
						}
						if take() {
							w.Done()
							return nil
						}
						w.Retry()
					}
				}()
				cancel()
				switch {
				case err == nil:
					served.Add(1)
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond) // hold the slot a while
					release()
				case errors.Is(err, ErrTimeout):
					timedOut.Add(1)
				case errors.Is(err, context.Canceled):
					gaveUp.Add(1)
				default:
					t.Errorf("unexpected error %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > slots {
		t.Fatalf("capacity oversubscribed: peak %d > %d", p, slots)
	}
	total := served.Load() + timedOut.Load() + gaveUp.Load()
	if total != workers*requests {
		t.Fatalf("%d outcomes for %d requests", total, workers*requests)
	}
	if served.Load() == 0 {
		t.Fatal("nobody was served")
	}
	t.Logf("served %d, timed out %d, cancelled %d", served.Load(), timedOut.Load(), gaveUp.Load())
	checkEmpty(t, q)
}
