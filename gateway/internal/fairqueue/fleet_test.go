package fairqueue

import (
	"fmt"
	"testing"
)

// TestFleetOrderIsWFQWithoutRemote: with in-flight counts that have
// nothing at other replicas, the order is exactly TestWeightedOrder's.
func TestFleetOrderIsWFQWithoutRemote(t *testing.T) {
	q := New(Config{MaxWaiting: 20, Fleet: &fleetSim{remote: map[string]int64{}, local: map[string]int64{"a": 3}, servedElsewhere: map[string]bool{}}})
	names := map[*Waiter]string{}
	var all []*Waiter
	for _, tc := range []struct {
		tenant string
		weight int
		cost   int64
		n      int
	}{{"a", 3, 3, 3}, {"b", 1, 1, 3}, {"c", 1, 2, 2}} {
		for i := range tc.n {
			w := mustEnter(t, q, tc.tenant, tc.weight, tc.cost)
			names[w] = fmt.Sprintf("%s%d", tc.tenant, i+1)
			all = append(all, w)
		}
	}
	if !hasTurn(t, all[0]) {
		t.Fatal("first waiter has no turn")
	}
	all[0].Retry()
	if got := fmt.Sprint(serviceOrder(t, q, all, names)); got != "[a1 b1 a2 b2 c1 a3 b3 c2]" {
		t.Fatalf("service order %s, want plain WFQ [a1 b1 a2 b2 c1 a3 b3 c2]", got)
	}
}

// fleetSim is one replica holding slots requests in flight, first in first
// out, while other replicas hold remote[tenant] of each tenant's.
type fleetSim struct {
	*sim
	local, remote   map[string]int64
	servedElsewhere map[string]bool // lately, with nothing there now
	running         []string
}

func newFleetSim(t *testing.T) *fleetSim {
	f := &fleetSim{sim: newSim(t), local: map[string]int64{}, remote: map[string]int64{}, servedElsewhere: map[string]bool{}}
	f.q = New(Config{MaxWaiting: 100_000, Fleet: f})
	return f
}

func (f *fleetSim) Elsewhere(id string) (int64, bool) {
	return f.remote[id], f.remote[id] > 0 || f.servedElsewhere[id]
}

func (f *fleetSim) Here() int64 {
	n := int64(0)
	for _, l := range f.local {
		n += l
	}
	return n
}

// turn ends the oldest request in flight, if any, and places the next.
func (f *fleetSim) turn() {
	if len(f.running) > 0 {
		f.local[f.running[0]]--
		f.running = f.running[1:]
	}
	f.step(func(sw *simWaiter, _ int) {
		f.local[sw.tenant]++
		f.running = append(f.running, sw.tenant)
	})
}

// TestFleetShareAcrossReplicas: tenant a also has requests in flight at
// another replica, b only here. Charged for its service there, a gets
// fewer turns here, so that both have about as many requests in flight
// across the fleet per weight (on average at most half a request apart,
// where this replica alone would leave them 1 to 4 apart); when a's
// requests elsewhere end, the split here is WFQ's again within a few
// turns (the charge is capped).
func TestFleetShareAcrossReplicas(t *testing.T) {
	// Without the fleet's counts, this replica would split its slots
	// evenly (3:1 with weights 3:1) and a would stay further ahead.
	for _, tc := range []struct{ wa, wb, remoteA, slots int }{
		{wa: 1, wb: 1, remoteA: 2, slots: 2},
		{wa: 1, wb: 1, remoteA: 4, slots: 6},
		{wa: 3, wb: 1, remoteA: 3, slots: 2},
	} {
		t.Run(fmt.Sprintf("w%d:%d/remote%d/slots%d", tc.wa, tc.wb, tc.remoteA, tc.slots), func(t *testing.T) {
			f := newFleetSim(t)
			f.remote["a"] = int64(tc.remoteA)
			for range 1000 {
				f.enter("a", tc.wa, 1)
				f.enter("b", tc.wb, 1)
			}
			for range tc.slots {
				f.step(func(sw *simWaiter, _ int) {
					f.local[sw.tenant]++
					f.running = append(f.running, sw.tenant)
				})
			}
			for range 50 {
				f.turn()
			}
			var sumA, sumB float64
			for range 200 {
				f.turn()
				sumA += float64(f.local["a"]+f.remote["a"]) / float64(tc.wa)
				sumB += float64(f.local["b"]) / float64(tc.wb)
			}
			if d := (sumA - sumB) / 200; d > 0.5 || d < -0.5 {
				t.Fatalf("in flight across the fleet per weight, on average: a %.2f, b %.2f; want at most half a request apart",
					sumA/200, sumB/200)
			}

			f.remote["a"] = 0 // a's requests at the other replica end
			a0, b0 := f.served["a"], f.served["b"]
			for range 200 {
				f.turn()
			}
			a, b := f.served["a"]-a0, f.served["b"]-b0
			wantA := 200 * tc.wa / (tc.wa + tc.wb)
			if a < wantA-tc.slots-1 || a > wantA+tc.slots+1 {
				t.Fatalf("with nothing elsewhere: a %d, b %d of 200 turns; want a about %d (WFQ, no credit for turns passed over)", a, b, wantA)
			}
			f.finish()
		})
	}
}

// TestFleetServedAlikeStaysWFQ: when every waiting tenant is served at the
// other replicas too, this replica's shares stay WFQ's whatever their
// counts there (the other replicas' queues weigh them already).
func TestFleetServedAlikeStaysWFQ(t *testing.T) {
	f := newFleetSim(t)
	f.remote["a"] = 3
	f.servedElsewhere["b"] = true // b had requests elsewhere lately, none now
	for range 1000 {
		f.enter("a", 3, 1)
		f.enter("b", 1, 1)
	}
	for range 2 {
		f.step(func(sw *simWaiter, _ int) {
			f.local[sw.tenant]++
			f.running = append(f.running, sw.tenant)
		})
	}
	a0 := f.served["a"]
	for range 200 {
		f.turn()
	}
	if a := f.served["a"] - a0; a < 148 || a > 152 {
		t.Fatalf("a served %d of 200 turns, want WFQ's 150", a)
	}
	f.finish()
}
