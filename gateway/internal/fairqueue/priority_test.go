package fairqueue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestNegativePriorityCountsAsZero(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	a := mustEnterAt(t, q, "a", -5, 1, 1)
	b := mustEnterAt(t, q, "a", 0, 1, 1)
	if n := len(q.levels); n != 1 || q.levels[0].priority != 0 || q.Waiting("a") != 2 {
		t.Fatalf("levels %d, Waiting(a) %d: -5 and 0 must share level 0", n, q.Waiting("a"))
	}
	a.Done()
	b.Done()
	checkEmpty(t, q)
}

func TestHigherLevelServedFirst(t *testing.T) {
	// A flood at priority 0 arrives first (tenants a and b, 100 each);
	// then c sends 3 requests at priority 2 and d 3 at priority 1. The
	// next turns go to c's, then d's, then a and b share evenly again.
	s := newSim(t)
	for range 100 {
		s.enter("a", 1, 1)
		s.enter("b", 1, 1)
	}
	for range 10 {
		s.step(nil)
	}
	if s.served["a"] != 5 || s.served["b"] != 5 {
		t.Fatalf("before the high levels: a %d, b %d of 10", s.served["a"], s.served["b"])
	}
	for range 3 {
		s.enterAt("d", 1, 1, 1)
		s.enterAt("c", 2, 1, 1)
	}
	var order []string
	for range 6 {
		s.step(func(sw *simWaiter, _ int) { order = append(order, fmt.Sprintf("%s@%d", sw.tenant, sw.priority)) })
	}
	if want := "[c@2 c@2 c@2 d@1 d@1 d@1]"; fmt.Sprint(order) != want {
		t.Fatalf("service order %v, want %s", order, want)
	}
	if s.servedAt[0] != 10 {
		t.Fatalf("priority 0 got %d turns while higher levels waited", s.servedAt[0]-10)
	}
	for range 20 {
		s.step(nil)
	}
	if a, b := s.served["a"], s.served["b"]; a != 15 || b != 15 {
		t.Fatalf("after the high levels emptied: a %d, b %d, want 15 each", a, b)
	}
	s.finish()
}

func TestPriorityTrickleAgainstFlood(t *testing.T) {
	// Tenant a floods 1000 requests at priority 0; tenant b sends one at
	// priority 1 every 5 steps. Every b request is served at the very next
	// turn (1 slot: its own), however long a's backlog.
	s := newSim(t)
	for range 1000 {
		s.enter("a", 1, 1)
	}
	bSent, bServed := 0, 0
	for step := range 300 {
		if step%5 == 0 {
			s.enterAt("b", 1, 1, 1)
			bSent++
		}
		s.step(func(sw *simWaiter, slots int) {
			if sw.tenant != "b" {
				return
			}
			bServed++
			if slots != 1 {
				t.Errorf("b request arrived at slot %d waited %d slots, want 1", sw.arrived, slots)
			}
		})
	}
	if bServed != bSent || s.served["a"] != 300-bSent {
		t.Fatalf("b: %d sent, %d served; a served %d", bSent, bServed, s.served["a"])
	}
	s.finish()
}

func TestFairSharesWithinLevel(t *testing.T) {
	// WFQ holds inside a level while a lower level is backlogged: a and b
	// (weights 3:1) at priority 1 split the turns 3:1 at every prefix, and
	// c's flood at priority 0 gets none until they are done.
	s := newSim(t)
	for range 200 {
		s.enter("c", 1, 1)
	}
	for range 100 {
		s.enterAt("a", 1, 3, 1)
		s.enterAt("b", 1, 1, 1)
	}
	for range 120 {
		s.step(nil)
		if a, total := s.served["a"], s.slot; a < total*3/4-2 || a > total*3/4+2 {
			t.Fatalf("after %d slots a has %d, want about %d", total, a, total*3/4)
		}
	}
	if s.served["a"] != 90 || s.served["b"] != 30 || s.served["c"] != 0 {
		t.Fatalf("a %d, b %d, c %d of 120; want 90, 30, 0", s.served["a"], s.served["b"], s.served["c"])
	}
	for range 90 {
		s.step(nil) // a's last 10, b's 70 and then c's
	}
	if s.served["a"] != 100 || s.served["b"] != 100 || s.served["c"] != 10 {
		t.Fatalf("a %d, b %d, c %d; want 100, 100, 10", s.served["a"], s.served["b"], s.served["c"])
	}
	s.finish()
}

func TestLevelVirtualTimeIsPerLevel(t *testing.T) {
	// Level 0 serves a alone for 30 turns: its V is 30. Then x (cost 100)
	// and y (cost 1) arrive at level 1 and are served, y first (tags 1
	// and 100 from the level's own V of 0); that moves level 1's V to 100
	// and not level 0's. A new flow z at level 0 then starts at level 0's
	// V, next to a's head: a and z alternate. (With one V for all levels z
	// would start at 100 and wait for 70 of a's turns.)
	s := newSim(t)
	for range 100 {
		s.enter("a", 1, 1)
	}
	for range 30 {
		s.step(nil)
	}
	s.enterAt("x", 1, 1, 100)
	s.enterAt("y", 1, 1, 1)
	var order []string
	for range 2 {
		s.step(func(sw *simWaiter, _ int) { order = append(order, sw.tenant) })
	}
	if fmt.Sprint(order) != "[y x]" {
		t.Fatalf("level 1 order %v, want [y x]", order)
	}
	for range 20 {
		s.enter("z", 1, 1)
	}
	before := s.served["a"]
	for range 20 {
		s.step(nil)
	}
	if a, z := s.served["a"]-before, s.served["z"]; a < 9 || a > 11 || z < 9 || z > 11 {
		t.Fatalf("after z arrived: a %d, z %d of 20, want an even split", a, z)
	}
	s.finish()
}

func TestTenantWithWaitersAtTwoLevels(t *testing.T) {
	// a's low-priority requests arrived first; its high-priority ones are
	// another flow and pass them (and b's) without waiting behind them.
	q := New(Config{MaxWaiting: 20})
	names := map[*Waiter]string{}
	var all []*Waiter
	add := func(name, tenant string, priority int) {
		w := mustEnterAt(t, q, tenant, priority, 1, 1)
		names[w] = name
		all = append(all, w)
	}
	add("a0.1", "a", 0)
	add("b0.1", "b", 0)
	add("a0.2", "a", 0)
	add("a1.1", "a", 1)
	add("a1.2", "a", 1)
	if q.Waiting("a") != 4 || q.Waiting("b") != 1 {
		t.Fatalf("Waiting(a)=%d Waiting(b)=%d", q.Waiting("a"), q.Waiting("b"))
	}
	if !hasTurn(t, all[0]) {
		t.Fatal("first waiter has no turn")
	}
	all[0].Retry()
	got := serviceOrder(t, q, all, names)
	if want := "[a1.1 a1.2 a0.1 b0.1 a0.2]"; fmt.Sprint(got) != want {
		t.Fatalf("service order %v, want %s", got, want)
	}
	checkEmpty(t, q)
}

func TestTenantHoldsOneTurnPerLevel(t *testing.T) {
	// With MaxTrying 2, a tenant's flows at two levels may each hold a
	// turn; two waiters of one flow never do.
	q := New(Config{MaxWaiting: 10, MaxTrying: 2})
	a0 := mustEnterAt(t, q, "a", 0, 1, 1)
	a1 := mustEnterAt(t, q, "a", 1, 1, 1)
	a1b := mustEnterAt(t, q, "a", 1, 1, 1)
	b0 := mustEnterAt(t, q, "b", 0, 1, 1)
	if !hasTurn(t, a0) {
		t.Fatal("a0 has no turn")
	}
	a0.Retry()
	q.Signal()
	q.Signal()
	if !hasTurn(t, a1) || !hasTurn(t, a0) || hasTurn(t, a1b) || hasTurn(t, b0) {
		t.Fatal("the two turns should go to a's heads at levels 1 and 0")
	}
	a1.Done() // hands its turn on: a1b is now its flow's head
	if !hasTurn(t, a1b) || hasTurn(t, b0) {
		t.Fatal("a1's turn did not go to a1b")
	}
	a0.Done() // the only ready flow left is b's
	if !hasTurn(t, b0) {
		t.Fatal("a0's turn did not go to b0")
	}
	a1b.Done()
	b0.Done()
	checkEmpty(t, q)
}

func TestNoPreemptionThenHigherLevel(t *testing.T) {
	// A low waiter holding the turn keeps it when a high one arrives; the
	// turn it gives back (Retry then Signal, or Done) goes to the high one.
	q := New(Config{MaxWaiting: 10})
	low := mustEnterAt(t, q, "a", 0, 1, 1)
	low2 := mustEnterAt(t, q, "b", 0, 1, 1)
	if !hasTurn(t, low) {
		t.Fatal("low has no turn")
	}
	high := mustEnterAt(t, q, "c", 3, 1, 1)
	if hasTurn(t, high) {
		t.Fatal("high took a turn while one was held (MaxTrying 1)")
	}
	low.Retry()
	q.Signal()
	if !hasTurn(t, high) || hasTurn(t, low) || hasTurn(t, low2) {
		t.Fatal("the next turn did not go to the higher level")
	}
	high.Done() // served: hands the turn to level 0, where low is first
	if !hasTurn(t, low) {
		t.Fatal("high's turn did not go to low")
	}
	low.Done()
	if !hasTurn(t, low2) {
		t.Fatal("low's turn did not go to low2")
	}
	low2.Done()
	checkEmpty(t, q)
}

func TestCancelledHighWaiterHandsTurnOn(t *testing.T) {
	q := New(Config{MaxWaiting: 10})
	low := mustEnterAt(t, q, "a", 0, 1, 1)
	if !hasTurn(t, low) {
		t.Fatal("low has no turn")
	}
	low.Retry()
	ctx, cancel := context.WithCancel(context.Background())
	high, err := q.Enter(ctx, "b", 5, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	queued, cancelQueued := context.WithCancel(context.Background())
	high2, err := q.Enter(queued, "c", 5, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	q.Signal()
	if !hasTurn(t, high) || hasTurn(t, high2) || hasTurn(t, low) {
		t.Fatal("the turn did not go to the first high waiter")
	}
	// A queued high waiter leaving charges nothing and takes no turn.
	cancelQueued()
	if _, ok := <-high2.Ready(); ok || !errors.Is(high2.Err(), context.Canceled) {
		t.Fatalf("queued high waiter after cancel: err %v", high2.Err())
	}
	// The high waiter holding the turn goes away: the turn goes on to
	// level 0 at once, without a Signal.
	cancel()
	<-low.Ready() // blocks until the turn is handed on
	if !errors.Is(high.Err(), context.Canceled) {
		t.Fatalf("high.Err = %v", high.Err())
	}
	if q.Len() != 1 || q.Waiting("b") != 0 || q.Waiting("c") != 0 {
		t.Fatalf("Len=%d after the high waiters left", q.Len())
	}
	high.Done()
	high2.Done()
	low.Done()
	checkEmpty(t, q)
}

func TestTimedOutHighWaiterHandsTurnOn(t *testing.T) {
	clk := newFakeClock()
	q := New(Config{MaxWaiting: 10, MaxWait: 10 * time.Second, Now: clk.Now})

	// Queued: a high waiter whose MaxWait passes leaves at the next call,
	// and that call's turn goes to the low waiter.
	high := mustEnterAt(t, q, "a", 1, 1, 1)
	if !hasTurn(t, high) {
		t.Fatal("high has no turn")
	}
	high.Retry()
	clk.Advance(time.Second)
	low := mustEnterAt(t, q, "b", 0, 1, 1) // deadline 1 s after high's
	clk.Advance(9 * time.Second)
	q.Signal()
	if _, ok := <-high.Ready(); ok || !errors.Is(high.Err(), ErrTimeout) {
		t.Fatalf("high: err %v, want ErrTimeout", high.Err())
	}
	if !hasTurn(t, low) {
		t.Fatal("the Signal that expired high did not go to low")
	}
	low.Done()
	high.Done()
	checkEmpty(t, q)

	// Holding the turn: a high waiter past its MaxWait leaves at Retry, and
	// a Signal that came during its turn goes on to the low waiter.
	high2 := mustEnterAt(t, q, "c", 1, 1, 1) // an empty queue: the turn at once
	clk.Advance(time.Second)
	low2 := mustEnterAt(t, q, "d", 0, 1, 1)
	q.Signal() // every turn is taken: remembered
	if !hasTurn(t, high2) || hasTurn(t, low2) {
		t.Fatal("high2 should hold the only turn")
	}
	clk.Advance(9 * time.Second) // high2's deadline; low2 has 1 s left
	high2.Retry()
	if _, ok := <-high2.Ready(); ok || !errors.Is(high2.Err(), ErrTimeout) {
		t.Fatalf("high2: err %v, want ErrTimeout", high2.Err())
	}
	if !hasTurn(t, low2) {
		t.Fatal("the Signal missed during high2's turn did not go to low2")
	}
	high2.Done()
	low2.Done()
	checkEmpty(t, q)
}
