package registry

import (
	"context"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestInFlightBudget: a worker's batch size is learned from a heartbeat that
// shows it saturated; from then on this gateway places at most the slots
// plus an eighth on it, prefers a worker with room, and
// reports Busy when none has any. Re-registration forgets what was learned.
func TestInFlightBudget(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("a", controlpb.Role_ROLE_BOTH, "host", "tcp"), pool(100, 100))
	beat := func(id string, running, waiting int32) {
		t.Helper()
		if _, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{
			WorkerId: id, Pool: pool(100, 100), Running: running, Waiting: waiting}); err != nil {
			t.Fatal(err)
		}
	}
	pick := func() Route {
		t.Helper()
		rt, err := h.Pick("tiny", 16)
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	a, _ := h.Get("a")
	var done []func()
	for range 30 { // unbounded until learned
		if rt := pick(); rt.Busy {
			t.Fatalf("worker never seen saturated is busy after %d requests", len(done))
		}
		done = append(done, a.Begin(1))
	}
	beat("a", 3, 0) // not saturated: nothing learned
	if s := a.Snapshot(); s.Slots != 0 || s.InFlightBudget != 0 {
		t.Fatalf("learned %d slots from an unsaturated worker", s.Slots)
	}
	beat("a", 16, 12)
	if s := a.Snapshot(); s.Slots != 16 || s.InFlightBudget != 18 {
		t.Fatalf("slots %d budget %d, want 16 and 18", s.Slots, s.InFlightBudget)
	}
	for len(done) >= 18 {
		if !pick().Busy {
			t.Fatalf("%d in flight on a budget of 18: not busy", len(done))
		}
		done[len(done)-1]()
		done = done[:len(done)-1]
	}
	if pick().Busy {
		t.Fatal("17 in flight on a budget of 18: busy")
	}
	// A second worker with room is preferred over a full one.
	h.register(t, info("b", controlpb.Role_ROLE_BOTH, "host", "tcp"), pool(100, 50))
	done = append(done, a.Begin(1))
	if rt := pick(); rt.Busy || rt.Decode.ID() != "b" {
		t.Fatalf("Pick = %s busy %v, want b with room", rt.Decode.ID(), rt.Busy)
	}
	h.register(t, info("a", controlpb.Role_ROLE_BOTH, "host", "tcp"), pool(100, 100))
	if s := a.Snapshot(); s.Slots != 0 {
		t.Fatalf("re-registered worker keeps %d learned slots", s.Slots)
	}
	for _, d := range done {
		d()
	}
	// A decode worker's budget has more slack: its requests count from
	// before prefill and transfer.
	h.register(t, info("d", controlpb.Role_ROLE_DECODE, "host", "tcp"), pool(100, 100))
	beat("d", 2, 1)
	if d, _ := h.Get("d"); d.Snapshot().InFlightBudget != 3 {
		t.Fatalf("decode worker with 2 slots: budget %d, want 3", d.Snapshot().InFlightBudget)
	}
}
