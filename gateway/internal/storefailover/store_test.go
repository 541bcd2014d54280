package storefailover

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warden-ai/warden/internal/syncbuf"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
)

// outage is a memory store that fails like an unreachable Redis while
// down, and reports a fixed number of live gateways.
type outage struct {
	*memstore.Store
	down     atomic.Bool
	replicas int
}

var _ Replicas = (*outage)(nil)

func (o *outage) err() error {
	if o.down.Load() {
		return tenant.ErrUnavailable
	}
	return nil
}

func (o *outage) Authenticate(ctx context.Context, key string) (tenant.Principal, error) {
	if err := o.err(); err != nil {
		return tenant.Principal{}, err
	}
	return o.Store.Authenticate(ctx, key)
}

func (o *outage) Acquire(ctx context.Context, id string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	l, err := o.Store.Acquire(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return tenant.NewLease(l.Info(), o), nil // released through o, so that it fails while down
}

func (o *outage) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	if err := o.err(); err != nil {
		return err
	}
	return o.Store.ReleaseLease(ctx, info, used)
}

func (o *outage) ShareInFlight(ctx context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	if err := o.err(); err != nil {
		return nil, err
	}
	return o.Store.ShareInFlight(ctx, r)
}

func (o *outage) Replicas(context.Context) (int, error) { return o.replicas, o.err() }

type fixture struct {
	t     *testing.T
	ctx   context.Context
	inner *outage
	s     *Store
	now   time.Time
	logs  *syncbuf.Buffer
	reg   *prometheus.Registry
}

// newFixture wraps a memory store seen by two live gateways, on a fake
// clock.
func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, ctx: context.Background(), now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), logs: &syncbuf.Buffer{},
		reg: prometheus.NewRegistry()}
	ms, err := memstore.New([]byte("0123456789abcdef0123456789abcdef"), memstore.WithClock(func() time.Time { return f.now }))
	if err != nil {
		t.Fatal(err)
	}
	f.inner = &outage{Store: ms, replicas: 2}
	f.s = New(f.inner, Config{Now: func() time.Time { return f.now }, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err := f.s.Register(f.reg); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.ShareInFlight(f.ctx, tenant.InFlightReport{Replica: "gw-1", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if n := f.s.Gateways(); n != 2 {
		t.Fatalf("Gateways() = %d, want 2", n)
	}
	return f
}

// known creates a tenant and authenticates one of its keys through s.
func (f *fixture) known(tn tenant.Tenant) {
	f.t.Helper()
	if _, err := f.s.CreateTenant(f.ctx, tn); err != nil {
		f.t.Fatal(err)
	}
	key, _, err := f.s.IssueKey(f.ctx, tn.ID, "k")
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.Authenticate(f.ctx, key); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) acquire(id string, tokens int64) (*tenant.Lease, error) {
	return f.s.Acquire(f.ctx, id, tenant.AcquireRequest{Model: "m", Tokens: tokens})
}

// admit acquires until a denial and returns the leases and the denial.
func (f *fixture) admit(id string, tokens int64, most int) ([]*tenant.Lease, error) {
	f.t.Helper()
	var leases []*tenant.Lease
	for range most + 1 {
		l, err := f.acquire(id, tokens)
		if err != nil {
			return leases, err
		}
		if !strings.HasPrefix(l.Info().ID, "local-") {
			f.t.Fatalf("lease %s was not admitted locally", l.Info().ID)
		}
		leases = append(leases, l)
	}
	f.t.Fatalf("%s: more than %d admitted", id, most)
	return nil, nil
}

func wantLimit(t *testing.T, err error, kind tenant.LimitKind, limit int64) {
	t.Helper()
	var le *tenant.LimitError
	if !errors.As(err, &le) || le.Kind != kind || le.Limit != limit || le.Unsatisfiable {
		t.Fatalf("got %v (%+v), want a %s denial at limit %d", err, le, kind, limit)
	}
	if kind != tenant.KindModel && kind != tenant.KindPriority && le.RetryAfter <= 0 {
		t.Errorf("%s denial without RetryAfter: %+v", kind, le)
	}
}

// TestOutageSharesOfEachLimit: during an outage each limit is enforced at
// this gateway's share (half, with two gateways) of what the store last
// reported left, refilling at half the rate; the concurrency share counts
// the leases the store admitted before the outage; a share of 0, or a
// tenant never verified, is ErrUnavailable; the checks that do not depend
// on counters deny as the store does.
func TestOutageSharesOfEachLimit(t *testing.T) {
	f := newFixture(t)
	f.known(tenant.Tenant{ID: "rpm", Limits: tenant.Limits{RequestsPerMinute: 10}})
	f.known(tenant.Tenant{ID: "tpm", Limits: tenant.Limits{TokensPerMinute: 1000}})
	f.known(tenant.Tenant{ID: "conc", Limits: tenant.Limits{MaxConcurrent: 4}})
	f.known(tenant.Tenant{ID: "one", Limits: tenant.Limits{MaxConcurrent: 1}})
	f.known(tenant.Tenant{ID: "strict", Limits: tenant.Limits{AllowedModels: []string{"other"}}})
	f.known(tenant.Tenant{ID: "low", Limits: tenant.Limits{MaxPriority: 0}})
	if _, err := f.s.CreateTenant(f.ctx, tenant.Tenant{ID: "stranger"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"rpm", "tpm"} { // the store reports 9 requests, 900 tokens left
		l, err := f.acquire(id, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(f.ctx, tenant.Consumed{PromptTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := f.acquire("conc", 1) // the store's, held through the outage
	if err != nil {
		t.Fatal(err)
	}

	f.inner.down.Store(true)
	if _, err := f.acquire("stranger", 1); !errors.Is(err, tenant.ErrUnavailable) {
		t.Fatalf("a tenant never verified: %v, want ErrUnavailable", err)
	}
	if !f.s.Degraded() {
		t.Fatal("not degraded after the store failed")
	}

	// Requests: floor(9/2) = 4, then one more per 12 s (5 a minute).
	leases, err := f.admit("rpm", 1, 4)
	if len(leases) != 4 {
		t.Fatalf("rpm: %d admitted, want 4", len(leases))
	}
	wantLimit(t, err, tenant.KindRequests, 5)

	// Tokens: floor(900/2) = 450, 100 held each; a release refunds.
	leases, err = f.admit("tpm", 100, 4)
	if len(leases) != 4 {
		t.Fatalf("tpm: %d admitted, want 4", len(leases))
	}
	wantLimit(t, err, tenant.KindTokens, 500)
	if err := leases[0].Release(f.ctx, tenant.Consumed{PromptTokens: 20}); !errors.Is(err, tenant.ErrUnavailable) {
		t.Fatalf("releasing a local lease while down: %v, want ErrUnavailable (retried by the journal)", err)
	}
	l, err := f.s.Acquire(f.ctx, "tpm", tenant.AcquireRequest{Model: "m", Tokens: 400, MinTokens: 50})
	if err != nil || l.Info().HeldTokens != 130 {
		t.Fatalf("a flexible request after a refund of 80: %v, held %+v, want 130", err, l)
	}

	// Concurrency: 4/2 = 2, one of them the store's lease.
	leases, err = f.admit("conc", 1, 1)
	if len(leases) != 1 {
		t.Fatalf("conc: %d admitted, want 1", len(leases))
	}
	wantLimit(t, err, tenant.KindConcurrency, 2)
	if err := held.Release(f.ctx, tenant.Consumed{}); !errors.Is(err, tenant.ErrUnavailable) {
		t.Fatalf("releasing the store's lease while down: %v", err)
	}
	if _, err := f.acquire("conc", 1); err != nil {
		t.Fatalf("conc after the store's lease ended: %v", err)
	}

	// The request share refills at 5 a minute.
	f.now = f.now.Add(12 * time.Second)
	if leases, err := f.admit("rpm", 1, 1); len(leases) != 1 {
		t.Fatalf("rpm after 12s: %d admitted, want 1 (%v)", len(leases), err)
	}

	if _, err := f.acquire("one", 1); !errors.Is(err, tenant.ErrUnavailable) || errors.Is(err, tenant.ErrRateLimited) {
		t.Errorf("a share of 0: %v, want ErrUnavailable", err)
	}
	if _, err := f.acquire("strict", 1); !errors.Is(err, tenant.ErrModelNotAllowed) {
		t.Errorf("a model not allowed: %v", err)
	}
	if _, err := f.s.Acquire(f.ctx, "low", tenant.AcquireRequest{Model: "m", Tokens: 1, Priority: 1}); !errors.Is(err, tenant.ErrForbidden) {
		t.Errorf("a priority above max_priority: %v", err)
	}
}

// TestOutageTransitions: degraded mode starts at the first unavailable
// call and ends at the first answer (a failure of a call begun before
// that answer does not start it again), each logged once and shown by
// warden_tenant_store_degraded; afterwards the store decides again, and a
// lease admitted locally records its usage in the store when released.
func TestOutageTransitions(t *testing.T) {
	f := newFixture(t)
	f.known(tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 2}})
	gauge := func() float64 {
		mfs, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "warden_tenant_store_degraded" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no warden_tenant_store_degraded")
		return 0
	}
	if gauge() != 0 {
		t.Fatal("degraded before any outage")
	}
	f.inner.down.Store(true)
	var local []*tenant.Lease
	for range 3 {
		if _, err := f.s.ShareInFlight(f.ctx, tenant.InFlightReport{Replica: "gw-1", TTL: time.Second}); err == nil {
			t.Fatal("report while down succeeded")
		}
		if l, err := f.acquire("acme", 10); err == nil { // a share of 1
			local = append(local, l)
		}
	}
	if len(local) != 1 || gauge() != 1 || !f.s.Degraded() {
		t.Fatalf("during the outage: %d admitted (want 1), gauge %v", len(local), gauge())
	}

	began := f.now // a call that meets the outage but fails after the recovery
	f.now = f.now.Add(time.Second)
	f.inner.down.Store(false)
	if _, err := f.s.ShareInFlight(f.ctx, tenant.InFlightReport{Replica: "gw-1", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if gauge() != 0 || f.s.Degraded() {
		t.Fatal("still degraded after the store answered")
	}
	if f.s.observe(began, tenant.ErrUnavailable) || f.s.Degraded() {
		t.Fatal("a failure begun before the recovery made the gateway degraded again")
	}
	for i := range 2 { // the store's own limit of 2 again
		if l, err := f.acquire("acme", 10); err != nil || strings.HasPrefix(l.Info().ID, "local-") {
			t.Fatalf("request %d after the outage: %v", i, err)
		}
	}
	if _, err := f.acquire("acme", 10); !errors.Is(err, tenant.ErrRateLimited) {
		t.Fatalf("third request after the outage: %v, want the store's denial", err)
	}
	if err := local[0].Release(f.ctx, tenant.Consumed{PromptTokens: 7, CompletionTokens: 3}); err != nil {
		t.Fatal(err)
	}
	u, err := f.s.Usage(f.ctx, "acme", f.now, f.now)
	if err != nil || len(u) != 1 || u[0].Requests != 1 || u[0].PromptTokens != 7 || u[0].CompletionTokens != 3 {
		t.Fatalf("usage after the local lease's release: %+v %v", u, err)
	}

	logs := f.logs.String()
	if n := strings.Count(logs, "degraded mode, admitting"); n != 1 {
		t.Errorf("%d lines on entering degraded mode, want 1:\n%s", n, logs)
	}
	if n := strings.Count(logs, "degraded mode over"); n != 1 {
		t.Errorf("%d lines on leaving degraded mode, want 1:\n%s", n, logs)
	}
}
