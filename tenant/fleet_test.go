package tenant_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/syncbuf"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/storetest"
)

// outageSharer is a store whose in-flight reports fail with
// ErrUnavailable while down.
type outageSharer struct {
	tenant.InFlightSharer
	down atomic.Bool
}

func (s *outageSharer) ShareInFlight(ctx context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	if s.down.Load() {
		return nil, tenant.ErrUnavailable
	}
	return s.InFlightSharer.ShareInFlight(ctx, r)
}

func wantInFlight(t *testing.T, what string, f *tenant.FleetInFlight, id string, here, elsewhere int64) {
	t.Helper()
	ge, recently := f.Elsewhere(id)
	if gh := f.Here(); gh != here || ge != elsewhere || (ge > 0 && !recently) {
		t.Fatalf("%s: Here() = %d, Elsewhere(%s) = %d, recently %v; want %d, %d", what, gh, id, ge, recently, here, elsewhere)
	}
}

// TestFleetInFlight: two replicas on one store see each other's counts
// after a report, their own at once; a replica whose report fails counts
// its own only, says so once, and recovers; a replica that stops
// reporting drops out after its reports' TTL, and one that stops cleanly
// at once.
func TestFleetInFlight(t *testing.T) {
	ctx := t.Context()
	clock := storetest.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	mem, err := memstore.New([]byte("fleet-test-server-secret-0123456"), memstore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	store := &outageSharer{InFlightSharer: mem}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r1 := tenant.NewFleetInFlight(store, tenant.FleetConfig{Replica: "gw-1", Interval: time.Second, Logger: log})
	r2 := tenant.NewFleetInFlight(mem, tenant.FleetConfig{Logger: log}) // a generated replica ID

	a1, a2 := r1.Begin("acme"), r1.Begin("acme")
	r2.Begin("acme")
	r2.Begin("beta")
	wantInFlight(t, "before any report", r1, "acme", 2, 0)
	for _, f := range []*tenant.FleetInFlight{r1, r2, r1} {
		if err := f.Report(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantInFlight(t, "after reports", r1, "acme", 2, 1)
	wantInFlight(t, "after reports", r1, "beta", 2, 1)
	a1()
	a1() // a second end changes nothing
	wantInFlight(t, "own request ended", r1, "acme", 1, 1)

	store.down.Store(true)
	for range 2 {
		if err := r1.Report(ctx); err == nil {
			t.Fatal("report during the outage succeeded")
		}
	}
	if !r1.Degraded() {
		t.Fatal("not degraded during the outage")
	}
	wantInFlight(t, "during the outage", r1, "acme", 1, 0)
	if _, recently := r1.Elsewhere("acme"); recently {
		t.Fatal("during the outage, acme is still seen elsewhere")
	}
	store.down.Store(false)
	if err := r1.Report(ctx); err != nil || r1.Degraded() {
		t.Fatalf("report after the outage: %v, degraded %v", err, r1.Degraded())
	}
	wantInFlight(t, "after the outage", r1, "acme", 1, 1)
	out := logs.String()
	if strings.Count(out, "cannot share requests in flight") != 1 || !strings.Contains(out, "sharing requests in flight with the other gateways again") {
		t.Fatalf("the outage is not logged once with its end:\n%s", out)
	}

	// r2 dies: its last report counts for its TTL (8 intervals of 250ms).
	clock.Advance(2*time.Second - time.Millisecond)
	if err := r1.Report(ctx); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, "within r2's TTL", r1, "acme", 1, 1)
	clock.Advance(time.Millisecond)
	if err := r1.Report(ctx); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, "past r2's TTL", r1, "acme", 1, 0)
	wantInFlight(t, "past r2's TTL", r1, "beta", 1, 0)

	// r1 stops cleanly: r2 sees its counts gone at once.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { r1.Run(runCtx); close(done) }()
	stop()
	<-done
	if err := r2.Report(ctx); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, "r1 stopped", r2, "acme", 2, 0)
	a2()
}
