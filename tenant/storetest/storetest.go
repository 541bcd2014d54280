// Package storetest is the conformance suite of tenant.Store: every
// implementation runs Run, which checks the whole contract (CRUD, keys,
// authentication, every admission limit with its exact numbers, leases,
// usage, per-model limits, the replicas' shared in-flight counts) and that
// limits stay exact when requests are spread over two replicas sharing one
// state. The store's clock is a
// manual Clock, so window tests never sleep.
package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// LeaseTTL is the lease TTL stores under test must be configured with.
const LeaseTTL = time.Minute

// Factory returns two handles on one fresh, empty state, as two gateway
// replicas would see it (an in-memory store returns itself twice). Both
// must read time from now, use LeaseTTL, and be cleaned up by t.Cleanup.
type Factory func(t *testing.T, now func() time.Time) (primary, replica tenant.Store)

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one subtest's stores and clock.
type env struct {
	t     *testing.T
	ctx   context.Context
	clock *Clock
	a, b  tenant.Store
}

// Run runs the conformance suite against the stores newStores creates.
func Run(t *testing.T, newStores Factory) {
	tests := []struct {
		name  string
		start time.Time
		fn    func(e *env)
	}{
		{"TenantCRUD", day(2026, 3, 10, 12), testTenantCRUD},
		{"TenantValidation", day(2026, 3, 10, 12), testTenantValidation},
		{"TenantIncarnation", day(2026, 3, 10, 12), testTenantIncarnation},
		{"Keys", day(2026, 3, 10, 12), testKeys},
		{"AuthenticateRejects", day(2026, 3, 10, 12), testAuthenticateRejects},
		{"DeleteTenantRevokesKeys", day(2026, 3, 10, 12), testDeleteTenant},
		{"AuthCacheRevocation", day(2026, 3, 10, 12), testAuthCacheRevocation},
		{"ModelLimits", day(2026, 3, 10, 12), testModelLimits},
		{"Aliases", day(2026, 3, 10, 12), testAliases},
		{"AcquireChecks", day(2026, 3, 10, 12), testAcquireChecks},
		{"RequestsPerMinute", day(2026, 3, 10, 12), testRequestsPerMinute},
		{"TokensHoldAndReconcile", day(2026, 3, 10, 12), testTokens},
		{"RequestTooLarge", day(2026, 3, 10, 12), testTooLarge},
		{"FlexibleTokens", day(2026, 3, 10, 12), testFlexible},
		{"Concurrency", day(2026, 3, 10, 12), testConcurrency},
		{"BudgetDay", day(2026, 3, 10, 22), testBudgetDay},
		{"BudgetMonthAndDuration", day(2028, 2, 28, 23), testBudgetMonth},
		{"Usage", day(2026, 4, 30, 23).Add(59 * time.Minute), testUsage},
		{"CachedTokenRate", day(2026, 3, 10, 12), testCachedTokenRate},
		{"LimitsUpdateImmediately", day(2026, 3, 10, 12), testLimitsUpdate},
		{"PriorityDefaultsToZero", day(2026, 3, 10, 12), testPriority},
		{"Unlimited", day(2026, 3, 10, 12), testUnlimited},
		{"ExactAcrossReplicas", day(2026, 3, 10, 12), testExactAcrossReplicas},
		{"InFlightShares", day(2026, 3, 10, 12), testInFlightShares},
		{"Adapters", day(2026, 3, 10, 12), testAdapters},
		{"AdapterTenantDeletion", day(2026, 3, 10, 12), testAdapterTenantDeletion},
		{"UsageModel", day(2026, 3, 10, 12), testUsageModel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(tc.start)
			a, b := newStores(t, clock.Now)
			tc.fn(&env{t: t, ctx: t.Context(), clock: clock, a: a, b: b})
		})
	}
}

func day(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }

func (e *env) create(s tenant.Store, tn tenant.Tenant) tenant.Tenant {
	e.t.Helper()
	got, err := s.CreateTenant(e.ctx, tn)
	if err != nil {
		e.t.Fatalf("CreateTenant(%q): %v", tn.ID, err)
	}
	return got
}

func (e *env) acquire(s tenant.Store, id string, req tenant.AcquireRequest) *tenant.Lease {
	e.t.Helper()
	l, err := s.Acquire(e.ctx, id, req)
	if err != nil {
		e.t.Fatalf("Acquire(%q, %+v): %v", id, req, err)
	}
	return l
}

// deny acquires expecting a denial wrapping sentinel and returns it.
func (e *env) deny(s tenant.Store, id string, req tenant.AcquireRequest, sentinel error) *tenant.LimitError {
	e.t.Helper()
	l, err := s.Acquire(e.ctx, id, req)
	if err == nil {
		e.t.Fatalf("Acquire(%q, %+v) = lease %+v, want %v", id, req, l.Info(), sentinel)
	}
	if !errors.Is(err, sentinel) {
		e.t.Fatalf("Acquire(%q, %+v) = %v, want %v", id, req, err, sentinel)
	}
	var le *tenant.LimitError
	if !errors.As(err, &le) {
		e.t.Fatalf("Acquire(%q, %+v) = %T %v, want *tenant.LimitError", id, req, err, err)
	}
	return le
}

func (e *env) release(l *tenant.Lease, prompt, completion int64) {
	e.t.Helper()
	if err := l.Release(e.ctx, tenant.Consumed{PromptTokens: prompt, CompletionTokens: completion}); err != nil {
		e.t.Fatalf("Release(%s): %v", l.Info().ID, err)
	}
}

func wantErr(t *testing.T, what string, err, sentinel error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: error %v, want %v", what, err, sentinel)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q does not mention %q", what, err, m)
		}
	}
}

func wantLimit(t *testing.T, got *tenant.LimitError, want tenant.LimitError) {
	t.Helper()
	g := *got
	if g != want {
		t.Fatalf("limit error\n got %+v\nwant %+v", g, want)
	}
}

func wantQuota(t *testing.T, what string, got, want tenant.Quota) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: quota\n got %+v\nwant %+v", what, got, want)
	}
}

func equalTenant(a, b tenant.Tenant) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Weight == b.Weight && a.Disabled == b.Disabled &&
		a.CreatedAt.Equal(b.CreatedAt) && equalLimits(a.Limits, b.Limits)
}

func equalLimits(a, b tenant.Limits) bool {
	return a.RequestsPerMinute == b.RequestsPerMinute && a.TokensPerMinute == b.TokensPerMinute &&
		a.MaxConcurrent == b.MaxConcurrent && a.Budget == b.Budget && a.BudgetPeriod == b.BudgetPeriod &&
		slices.Equal(a.AllowedModels, b.AllowedModels) && a.MaxPriority == b.MaxPriority
}
