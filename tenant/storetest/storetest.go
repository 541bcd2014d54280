// Package storetest is the conformance suite of tenant.Store: every
// implementation runs Run, which checks the whole contract (CRUD, keys,
// authentication, every admission limit with its exact numbers, leases,
// usage, per-model limits) and that limits stay exact when requests are
// spread over two replicas sharing one state. The store's clock is a
// manual Clock, so window tests never sleep.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
		{"Keys", day(2026, 3, 10, 12), testKeys},
		{"AuthenticateRejects", day(2026, 3, 10, 12), testAuthenticateRejects},
		{"DeleteTenantRevokesKeys", day(2026, 3, 10, 12), testDeleteTenant},
		{"AuthCacheRevocation", day(2026, 3, 10, 12), testAuthCacheRevocation},
		{"ModelLimits", day(2026, 3, 10, 12), testModelLimits},
		{"AcquireChecks", day(2026, 3, 10, 12), testAcquireChecks},
		{"RequestsPerMinute", day(2026, 3, 10, 12), testRequestsPerMinute},
		{"TokensHoldAndReconcile", day(2026, 3, 10, 12), testTokens},
		{"RequestTooLarge", day(2026, 3, 10, 12), testTooLarge},
		{"Concurrency", day(2026, 3, 10, 12), testConcurrency},
		{"BudgetDay", day(2026, 3, 10, 22), testBudgetDay},
		{"BudgetMonthAndDuration", day(2028, 2, 28, 23), testBudgetMonth},
		{"Usage", day(2026, 4, 30, 23).Add(59 * time.Minute), testUsage},
		{"LimitsUpdateImmediately", day(2026, 3, 10, 12), testLimitsUpdate},
		{"PriorityDefaultsToZero", day(2026, 3, 10, 12), testPriority},
		{"Unlimited", day(2026, 3, 10, 12), testUnlimited},
		{"ExactAcrossReplicas", day(2026, 3, 10, 12), testExactAcrossReplicas},
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

func testTenantCRUD(e *env) {
	t := e.t
	in := tenant.Tenant{ID: "acme", Name: "Acme Corp", Limits: tenant.Limits{
		RequestsPerMinute: 10, TokensPerMinute: 5000, MaxConcurrent: 3, Budget: 1_000_000,
		AllowedModels: []string{"llama-3-8b", "tiny"}, MaxPriority: 2,
	}}
	got := e.create(e.a, in)
	want := in
	want.Weight, want.Limits.BudgetPeriod, want.CreatedAt = 1, tenant.PeriodMonth, e.clock.Now()
	if !equalTenant(got, want) {
		t.Fatalf("CreateTenant returned %+v, want %+v", got, want)
	}
	for name, s := range map[string]tenant.Store{"primary": e.a, "replica": e.b} {
		g, err := s.GetTenant(e.ctx, "acme")
		if err != nil || !equalTenant(g, want) {
			t.Fatalf("GetTenant via %s = %+v, %v; want %+v", name, g, err, want)
		}
	}
	_, err := e.b.CreateTenant(e.ctx, tenant.Tenant{ID: "acme"})
	wantErr(t, "duplicate CreateTenant", err, tenant.ErrExists, "acme")

	e.clock.Advance(time.Minute)
	e.create(e.b, tenant.Tenant{ID: "c1"})
	e.create(e.a, tenant.Tenant{ID: "b-corp", Weight: 7})
	list, err := e.b.ListTenants(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range list {
		ids = append(ids, tn.ID)
	}
	if !slices.Equal(ids, []string{"acme", "b-corp", "c1"}) || list[1].Weight != 7 || !equalTenant(list[0], want) {
		t.Fatalf("ListTenants = %+v", list)
	}

	upd := tenant.Tenant{ID: "acme", Name: "Acme 2", Weight: 5, Disabled: true,
		CreatedAt: time.Unix(1, 0), // ignored: CreatedAt is immutable
		Limits:    tenant.Limits{TokensPerMinute: 9, BudgetPeriod: tenant.PeriodDay}}
	got, err = e.b.UpdateTenant(e.ctx, upd)
	want = upd
	want.CreatedAt = day(2026, 3, 10, 12)
	if err != nil || !equalTenant(got, want) {
		t.Fatalf("UpdateTenant = %+v, %v; want %+v", got, err, want)
	}
	if g, err := e.a.GetTenant(e.ctx, "acme"); err != nil || !equalTenant(g, want) {
		t.Fatalf("GetTenant after update = %+v, %v; want %+v", g, err, want)
	}
	_, err = e.a.UpdateTenant(e.ctx, tenant.Tenant{ID: "nobody"})
	wantErr(t, "UpdateTenant of unknown tenant", err, tenant.ErrNotFound, "nobody")

	if err := e.a.DeleteTenant(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.GetTenant(e.ctx, "acme")
	wantErr(t, "GetTenant after delete", err, tenant.ErrNotFound, "acme")
	wantErr(t, "second DeleteTenant", e.b.DeleteTenant(e.ctx, "acme"), tenant.ErrNotFound)
	if list, _ := e.a.ListTenants(e.ctx); len(list) != 2 {
		t.Fatalf("ListTenants after delete has %d tenants, want 2", len(list))
	}
	e.create(e.b, tenant.Tenant{ID: "acme"}) // the ID is free again
}

func testTenantValidation(e *env) {
	t := e.t
	for _, id := range []string{"", "Acme", "-acme", "_a", "a b", "a.b", "a/b", "é", strings.Repeat("a", 64)} {
		_, err := e.a.CreateTenant(e.ctx, tenant.Tenant{ID: id})
		wantErr(t, fmt.Sprintf("CreateTenant(%q)", id), err, tenant.ErrInvalid, "tenant id")
		_, err = e.a.GetTenant(e.ctx, id)
		wantErr(t, fmt.Sprintf("GetTenant(%q)", id), err, tenant.ErrInvalid)
		_, err = e.a.Acquire(e.ctx, id, tenant.AcquireRequest{Model: "m"})
		wantErr(t, fmt.Sprintf("Acquire(%q)", id), err, tenant.ErrInvalid)
	}
	for _, id := range []string{"a", "0", "a_b-c", strings.Repeat("z", 63)} {
		e.create(e.a, tenant.Tenant{ID: id})
	}
	bad := []struct {
		field string
		t     tenant.Tenant
	}{
		{"limits.requests_per_minute", tenant.Tenant{Limits: tenant.Limits{RequestsPerMinute: -1}}},
		{"limits.tokens_per_minute", tenant.Tenant{Limits: tenant.Limits{TokensPerMinute: -5}}},
		{"limits.max_concurrent", tenant.Tenant{Limits: tenant.Limits{MaxConcurrent: -1}}},
		{"limits.budget", tenant.Tenant{Limits: tenant.Limits{Budget: -100}}},
		{"limits.max_priority", tenant.Tenant{Limits: tenant.Limits{MaxPriority: -1}}},
		{"limits.max_priority", tenant.Tenant{Limits: tenant.Limits{MaxPriority: tenant.MaxRequestPriority + 1}}},
		{"limits.budget", tenant.Tenant{Limits: tenant.Limits{Budget: tenant.MaxLimitValue + 1}}},
		{"limits.budget_period", tenant.Tenant{Limits: tenant.Limits{BudgetPeriod: "week"}}},
		{"limits.budget_period", tenant.Tenant{Limits: tenant.Limits{BudgetPeriod: "30s"}}},
		{"limits.budget_period", tenant.Tenant{Limits: tenant.Limits{BudgetPeriod: "1500ms"}}},
		{"limits.allowed_models[1]", tenant.Tenant{Limits: tenant.Limits{AllowedModels: []string{"ok", ""}}}},
		{"weight", tenant.Tenant{Weight: -1}},
		{"name", tenant.Tenant{Name: "bad\x00name"}},
	}
	for _, c := range bad {
		c.t.ID = "valid"
		_, err := e.a.CreateTenant(e.ctx, c.t)
		wantErr(t, "CreateTenant with bad "+c.field, err, tenant.ErrInvalid, c.field)
		_, err = e.b.UpdateTenant(e.ctx, c.t)
		wantErr(t, "UpdateTenant with bad "+c.field, err, tenant.ErrInvalid, c.field)
	}
	if _, err := e.a.GetTenant(e.ctx, "valid"); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("an invalid tenant was stored: GetTenant = %v", err)
	}
	for _, id := range []string{"nobody", "a0"} {
		_, err := e.b.GetTenant(e.ctx, id)
		wantErr(t, "GetTenant of unknown tenant", err, tenant.ErrNotFound, id)
		wantErr(t, "DeleteTenant of unknown tenant", e.b.DeleteTenant(e.ctx, id), tenant.ErrNotFound, id)
		_, err = e.b.Acquire(e.ctx, id, tenant.AcquireRequest{Model: "m"})
		wantErr(t, "Acquire for unknown tenant", err, tenant.ErrNotFound, id)
		_, _, err = e.b.IssueKey(e.ctx, id, "")
		wantErr(t, "IssueKey for unknown tenant", err, tenant.ErrNotFound, id)
	}
}

var keyPattern = regexp.MustCompile(`^wdn_[a-z2-7]{8}_[a-z2-7]{52}$`)

func testKeys(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	e.create(e.a, tenant.Tenant{ID: "other"})
	issue := func(s tenant.Store, id, name string) (string, tenant.KeyInfo) {
		t.Helper()
		key, info, err := s.IssueKey(e.ctx, id, name)
		if err != nil {
			t.Fatalf("IssueKey(%q): %v", id, err)
		}
		want := tenant.KeyInfo{ID: key[4:12], TenantID: id, Prefix: key[:12], Name: name, CreatedAt: e.clock.Now()}
		if !keyPattern.MatchString(key) || !equalKey(info, want) {
			t.Fatalf("IssueKey = %q, %+v; want a key matching %v and %+v", key, info, keyPattern, want)
		}
		return key, info
	}
	k1, i1 := issue(e.a, "acme", "ci")
	e.clock.Advance(time.Second)
	k2, i2 := issue(e.b, "acme", "")
	e.clock.Advance(time.Second)
	k3, i3 := issue(e.a, "other", "prod")
	if k1 == k2 || i1.ID == i2.ID {
		t.Fatal("two keys are identical")
	}
	for _, c := range []struct {
		key, tenant, id string
	}{{k1, "acme", i1.ID}, {k2, "acme", i2.ID}, {k3, "other", i3.ID}} {
		for name, s := range map[string]tenant.Store{"primary": e.a, "replica": e.b} {
			p, err := s.Authenticate(e.ctx, c.key)
			if err != nil || p.Tenant.ID != c.tenant || p.KeyID != c.id {
				t.Fatalf("Authenticate via %s = %+v, %v; want tenant %q key %q", name, p, err, c.tenant, c.id)
			}
		}
	}

	list := func(f tenant.KeyFilter) []string {
		t.Helper()
		infos, err := e.b.ListKeys(e.ctx, f)
		if err != nil {
			t.Fatalf("ListKeys(%+v): %v", f, err)
		}
		var ids []string
		for _, in := range infos {
			for _, k := range []string{k1, k2, k3} {
				if strings.Contains(fmt.Sprintf("%+v", in), k[13:]) {
					t.Fatalf("ListKeys reveals a key secret: %+v", in)
				}
			}
			ids = append(ids, in.ID)
		}
		return ids
	}
	for _, c := range []struct {
		f    tenant.KeyFilter
		want []string
	}{
		{tenant.KeyFilter{TenantID: "acme"}, []string{i1.ID, i2.ID}},
		{tenant.KeyFilter{TenantID: "other"}, []string{i3.ID}},
		{tenant.KeyFilter{}, []string{i1.ID, i2.ID, i3.ID}},
		{tenant.KeyFilter{Prefix: "wdn_"}, []string{i1.ID, i2.ID, i3.ID}},
		{tenant.KeyFilter{Prefix: i2.Prefix}, []string{i2.ID}},
		{tenant.KeyFilter{TenantID: "other", Prefix: i2.Prefix}, nil},
		{tenant.KeyFilter{TenantID: "nobody"}, nil},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("ListKeys(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	_, err := e.a.ListKeys(e.ctx, tenant.KeyFilter{TenantID: "Bad!"})
	wantErr(t, "ListKeys with bad tenant", err, tenant.ErrInvalid, "tenant id")

	revokedAt := e.clock.Now()
	if err := e.a.RevokeKey(e.ctx, i1.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.Authenticate(e.ctx, k1)
	wantErr(t, "Authenticate with revoked key", err, tenant.ErrUnauthenticated)
	if _, err := e.b.Authenticate(e.ctx, k2); err != nil {
		t.Fatalf("revoking one key broke another: %v", err)
	}
	e.clock.Advance(time.Hour)
	if err := e.b.RevokeKey(e.ctx, i1.ID); err != nil {
		t.Fatalf("second RevokeKey: %v", err)
	}
	infos, _ := e.a.ListKeys(e.ctx, tenant.KeyFilter{Prefix: i1.Prefix})
	if len(infos) != 1 || infos[0].RevokedAt == nil || !infos[0].RevokedAt.Equal(revokedAt) {
		t.Fatalf("revoked key listed as %+v, want RevokedAt %v", infos, revokedAt)
	}
	wantErr(t, "RevokeKey of unknown key", e.a.RevokeKey(e.ctx, "aaaaaaaa"), tenant.ErrNotFound, "aaaaaaaa")
	for _, bad := range []string{"", "short", "AAAAAAAA", k1, i1.Prefix} {
		wantErr(t, fmt.Sprintf("RevokeKey(%q)", bad), e.a.RevokeKey(e.ctx, bad), tenant.ErrInvalid, "key id")
	}
	_, _, err = e.a.IssueKey(e.ctx, "acme", "bad\nname")
	wantErr(t, "IssueKey with bad name", err, tenant.ErrInvalid, "key name")
	_, _, err = e.a.IssueKey(e.ctx, "Bad", "")
	wantErr(t, "IssueKey with bad tenant", err, tenant.ErrInvalid, "tenant id")
}

func equalKey(a, b tenant.KeyInfo) bool {
	return a.ID == b.ID && a.TenantID == b.TenantID && a.Prefix == b.Prefix && a.Name == b.Name &&
		a.CreatedAt.Equal(b.CreatedAt) && (a.RevokedAt == nil) == (b.RevokedAt == nil) &&
		(a.RevokedAt == nil || a.RevokedAt.Equal(*b.RevokedAt))
}

func testAuthenticateRejects(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	key, info, err := e.a.IssueKey(e.ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := tenant.NewKey() // well-formed, never issued
	if err != nil {
		t.Fatal(err)
	}
	flip := []byte(key)
	if flip[len(flip)-1] == 'a' {
		flip[len(flip)-1] = 'b'
	} else {
		flip[len(flip)-1] = 'a'
	}
	cases := map[string]string{
		"empty":              "",
		"bearer prefix kept": "Bearer " + key,
		"uppercase":          strings.ToUpper(key),
		"trailing byte":      key + "a",
		"truncated":          key[:len(key)-1],
		"dash separator":     strings.Replace(key, "_", "-", 2),
		"wrong secret":       string(flip),
		"other secret":       info.Prefix + other[12:],
		"unknown key id":     other,
		"foreign format":     "sk-" + key[4:],
		"non-utf8":           "wdn_\xff\xfe" + key[6:],
	}
	for name, presented := range cases {
		for sname, s := range map[string]tenant.Authenticator{"primary": e.a, "replica": e.b} {
			p, err := s.Authenticate(e.ctx, presented)
			if !errors.Is(err, tenant.ErrUnauthenticated) || err.Error() != tenant.ErrUnauthenticated.Error() {
				t.Errorf("%s via %s: Authenticate = %+v, %v; want exactly ErrUnauthenticated (no detail)", name, sname, p, err)
			}
		}
	}
	tn, _ := e.a.GetTenant(e.ctx, "acme")
	tn.Disabled = true
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.Authenticate(e.ctx, key)
	wantErr(t, "Authenticate for disabled tenant", err, tenant.ErrUnauthenticated)
	tn.Disabled = false
	if _, err := e.b.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Authenticate(e.ctx, key); err != nil {
		t.Fatalf("Authenticate after re-enabling: %v", err)
	}
}

func testDeleteTenant(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1}})
	e.create(e.a, tenant.Tenant{ID: "other"})
	k1, _, _ := e.a.IssueKey(e.ctx, "acme", "")
	k2, _, _ := e.a.IssueKey(e.ctx, "acme", "")
	k3, _, _ := e.a.IssueKey(e.ctx, "other", "")
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m"}) // uses the only request
	e.clock.Advance(time.Second)
	deletedAt := e.clock.Now()
	if err := e.b.DeleteTenant(e.ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{k1, k2} {
		_, err := e.a.Authenticate(e.ctx, k)
		wantErr(t, "Authenticate with key of deleted tenant", err, tenant.ErrUnauthenticated)
	}
	if _, err := e.a.Authenticate(e.ctx, k3); err != nil {
		t.Fatalf("deleting a tenant broke another tenant's key: %v", err)
	}
	infos, err := e.a.ListKeys(e.ctx, tenant.KeyFilter{TenantID: "acme"})
	if err != nil || len(infos) != 2 {
		t.Fatalf("ListKeys of deleted tenant = %+v, %v; want its 2 revoked keys", infos, err)
	}
	for _, in := range infos {
		if in.RevokedAt == nil || !in.RevokedAt.Equal(deletedAt) {
			t.Fatalf("key of deleted tenant: RevokedAt %v, want %v", in.RevokedAt, deletedAt)
		}
	}
	// A new tenant with the same ID starts with fresh limits and no keys.
	e.create(e.b, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1}})
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m"})
	if _, err := e.a.Authenticate(e.ctx, k1); !errors.Is(err, tenant.ErrUnauthenticated) {
		t.Fatalf("old key authenticates for the re-created tenant: %v", err)
	}
}

func testAuthCacheRevocation(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	key, info, _ := e.a.IssueKey(e.ctx, "acme", "")
	cacheClock := NewClock(time.Unix(0, 0))
	cache := tenant.NewAuthCache(e.b, tenant.AuthCacheConfig{Now: cacheClock.Now})
	if p, err := cache.Authenticate(e.ctx, key); err != nil || p.KeyID != info.ID {
		t.Fatalf("cached Authenticate = %+v, %v", p, err)
	}
	if err := e.a.RevokeKey(e.ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	// The replica's store refuses at once; its cache may serve the key for
	// strictly less than the default TTL of one second.
	if _, err := e.b.Authenticate(e.ctx, key); !errors.Is(err, tenant.ErrUnauthenticated) {
		t.Fatalf("replica store accepts a revoked key: %v", err)
	}
	cacheClock.Advance(tenant.DefaultAuthTTL - time.Millisecond)
	if _, err := cache.Authenticate(e.ctx, key); err != nil {
		t.Fatalf("cache within TTL: %v", err)
	}
	cacheClock.Advance(time.Millisecond)
	_, err := cache.Authenticate(e.ctx, key)
	wantErr(t, "cache after TTL with revoked key", err, tenant.ErrUnauthenticated)
}

func testModelLimits(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	e.create(e.a, tenant.Tenant{ID: "other"})
	m := tenant.ModelLimits{Model: "org/llama-3.1:8b", MaxContext: 4096, MaxOutputTokens: 512, AllowedTenants: []string{"acme"}}
	if err := e.a.SetModelLimits(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := e.a.SetModelLimits(e.ctx, tenant.ModelLimits{Model: "a-model", MaxContext: 10}); err != nil {
		t.Fatal(err)
	}
	got, err := e.b.GetModelLimits(e.ctx, m.Model)
	if err != nil || !equalModel(got, m) {
		t.Fatalf("GetModelLimits via replica = %+v, %v; want %+v", got, err, m)
	}
	list, err := e.b.ListModelLimits(e.ctx)
	if err != nil || len(list) != 2 || list[0].Model != "a-model" || !equalModel(list[1], m) {
		t.Fatalf("ListModelLimits = %+v, %v", list, err)
	}
	e.acquire(e.b, "acme", tenant.AcquireRequest{Model: m.Model, Tokens: 10})
	le := e.deny(e.b, "other", tenant.AcquireRequest{Model: m.Model, Tokens: 10}, tenant.ErrModelNotAllowed)
	if le.Kind != tenant.KindModel {
		t.Fatalf("kind %q, want model", le.Kind)
	}
	e.acquire(e.b, "other", tenant.AcquireRequest{Model: "a-model"})

	m.AllowedTenants = nil
	m.MaxContext = 8192
	if err := e.b.SetModelLimits(e.ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.a.GetModelLimits(e.ctx, m.Model); !equalModel(got, m) {
		t.Fatalf("replaced model limits = %+v, want %+v", got, m)
	}
	e.acquire(e.a, "other", tenant.AcquireRequest{Model: m.Model}) // open to all now

	if err := e.a.DeleteModelLimits(e.ctx, m.Model); err != nil {
		t.Fatal(err)
	}
	_, err = e.b.GetModelLimits(e.ctx, m.Model)
	wantErr(t, "GetModelLimits after delete", err, tenant.ErrNotFound, m.Model)
	wantErr(t, "second DeleteModelLimits", e.b.DeleteModelLimits(e.ctx, m.Model), tenant.ErrNotFound)
	if list, _ := e.a.ListModelLimits(e.ctx); len(list) != 1 {
		t.Fatalf("ListModelLimits after delete = %+v", list)
	}
	for field, bad := range map[string]tenant.ModelLimits{
		"model":              {Model: ""},
		"spaces":             {Model: "a b"},
		"max_context":        {Model: "x", MaxContext: -1},
		"max_output_tokens":  {Model: "x", MaxOutputTokens: -2},
		"allowed_tenants[0]": {Model: "x", AllowedTenants: []string{"Bad"}},
	} {
		wantErr(t, "SetModelLimits with bad "+field, e.a.SetModelLimits(e.ctx, bad), tenant.ErrInvalid, field)
	}
	_, err = e.a.GetModelLimits(e.ctx, "")
	wantErr(t, "GetModelLimits(\"\")", err, tenant.ErrInvalid)
}

func equalModel(a, b tenant.ModelLimits) bool {
	return a.Model == b.Model && a.MaxContext == b.MaxContext && a.MaxOutputTokens == b.MaxOutputTokens &&
		slices.Equal(a.AllowedTenants, b.AllowedTenants)
}

func testAcquireChecks(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{
		RequestsPerMinute: 2, AllowedModels: []string{"m1", "m3"}, MaxPriority: 3,
	}})
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m2"}, tenant.ErrModelNotAllowed)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindModel})
	le = e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m1", Priority: 4}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 3})
	for what, req := range map[string]tenant.AcquireRequest{
		"tokens":   {Model: "m1", Tokens: -1},
		"priority": {Model: "m1", Priority: -1},
		"model":    {Model: ""},
	} {
		_, err := e.a.Acquire(e.ctx, "acme", req)
		wantErr(t, "Acquire with bad "+what, err, tenant.ErrInvalid, what)
	}
	// Denials consumed nothing: both requests of the minute are left.
	l := e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m1", Priority: 3, Tokens: 7})
	info := l.Info()
	if info.TenantID != "acme" || info.Model != "m1" || info.Priority != 3 || info.HeldTokens != 7 || info.Degraded ||
		!info.AcquiredAt.Equal(e.clock.Now()) || !info.ExpiresAt.Equal(e.clock.Now().Add(LeaseTTL)) || info.ID == "" {
		t.Fatalf("lease info %+v", info)
	}
	wantQuota(t, "first lease", info.Quota, tenant.Quota{LimitRequests: 2, RemainingRequests: 1, ResetRequests: 30 * time.Second})

	tn, _ := e.a.GetTenant(e.ctx, "acme")
	tn.Disabled = true
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	_, err := e.b.Acquire(e.ctx, "acme", tenant.AcquireRequest{Model: "m1"})
	wantErr(t, "Acquire for disabled tenant", err, tenant.ErrForbidden, "disabled")
	var le2 *tenant.LimitError
	if errors.As(err, &le2) {
		t.Fatalf("disabled tenant reported as a limit: %+v", le2)
	}
}

func testRequestsPerMinute(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 5}})
	req := tenant.AcquireRequest{Model: "m", Tokens: 100}
	for i := int64(1); i <= 5; i++ {
		s := []tenant.Store{e.a, e.b}[i%2]
		l := e.acquire(s, "acme", req)
		wantQuota(t, fmt.Sprintf("request %d", i), l.Info().Quota, tenant.Quota{
			LimitRequests: 5, RemainingRequests: 5 - i, ResetRequests: time.Duration(i) * 12 * time.Second,
		})
		e.release(l, 10, 10) // releasing does not give requests back
	}
	le := e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	q := tenant.Quota{LimitRequests: 5, ResetRequests: time.Minute}
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindRequests, Limit: 5, Reset: time.Minute, RetryAfter: 12 * time.Second, Quota: q})

	// The bucket refills one request per 12 s.
	e.clock.Advance(6 * time.Second)
	le = e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	if le.RetryAfter != 6*time.Second || le.Reset != 54*time.Second {
		t.Fatalf("after 6s: retry after %v reset %v, want 6s and 54s", le.RetryAfter, le.Reset)
	}
	e.clock.Advance(6 * time.Second)
	l := e.acquire(e.b, "acme", req)
	wantQuota(t, "after 12s", l.Info().Quota, tenant.Quota{LimitRequests: 5, RemainingRequests: 0, ResetRequests: time.Minute})
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)

	// After a quiet minute the bucket is full, and never fuller.
	e.clock.Advance(10 * time.Minute)
	for range 5 {
		e.acquire(e.a, "acme", req)
	}
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
}

func testTokens(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 3, TokensPerMinute: 1000}})
	tok := func(n int64) tenant.AcquireRequest { return tenant.AcquireRequest{Model: "m", Tokens: n} }
	a := e.acquire(e.a, "acme", tok(600))
	wantQuota(t, "hold 600", a.Info().Quota, tenant.Quota{
		LimitRequests: 3, RemainingRequests: 2, ResetRequests: 20 * time.Second,
		LimitTokens: 1000, RemainingTokens: 400, ResetTokens: 36 * time.Second,
	})
	le := e.deny(e.b, "acme", tok(500), tenant.ErrRateLimited)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindTokens, Limit: 1000, Remaining: 400, Reset: 36 * time.Second,
		RetryAfter: 6 * time.Second, Quota: a.Info().Quota})

	// Release refunds what was held but not used: 600 held, 150 used.
	e.release(a, 100, 50)
	b := e.acquire(e.b, "acme", tok(500))
	wantQuota(t, "after refund", b.Info().Quota, tenant.Quota{
		LimitRequests: 3, RemainingRequests: 1, ResetRequests: 40 * time.Second,
		LimitTokens: 1000, RemainingTokens: 350, ResetTokens: 39 * time.Second,
	})
	// ...and charges what was used beyond the hold: 500 held, 700 used.
	e.release(b, 400, 300)
	le = e.deny(e.a, "acme", tok(200), tenant.ErrRateLimited)
	if le.Kind != tenant.KindTokens || le.Remaining != 150 || le.RetryAfter != 3*time.Second {
		t.Fatalf("after extra charge: %+v, want 150 tokens left, retry after 3s", le)
	}
	e.clock.Advance(3 * time.Second) // refills 50 tokens (and 0.15 requests)
	c := e.acquire(e.a, "acme", tok(200))
	if q := c.Info().Quota; q.RemainingTokens != 0 || q.RemainingRequests != 0 {
		t.Fatalf("quota %+v, want no tokens and no requests left", q)
	}

	// Usage beyond the hold can put the bucket in debt; it then blocks even
	// requests that hold nothing until it is paid back.
	e.release(c, 1000, 200)
	le = e.deny(e.b, "acme", tok(0), tenant.ErrRateLimited)
	if le.Kind != tenant.KindRequests {
		t.Fatalf("kind %q, want requests", le.Kind)
	}
	e.clock.Advance(time.Minute) // requests full again; tokens at -1000 + 1000 = 0
	le = e.deny(e.b, "acme", tok(1), tenant.ErrRateLimited)
	if le.Kind != tenant.KindTokens || le.Remaining != 0 || le.RetryAfter != 60*time.Millisecond {
		t.Fatalf("after paying back the debt: %+v, want 0 tokens left, retry after 60ms", le)
	}
	e.acquire(e.a, "acme", tok(0))
}

func testTooLarge(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 1000, Budget: 5000}})
	e.create(e.a, tenant.Tenant{ID: "small", Limits: tenant.Limits{Budget: 500}})
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m", Tokens: 1001}, tenant.ErrRequestTooLarge)
	if le.Kind != tenant.KindTokens || !le.Unsatisfiable || le.RetryAfter != 0 || le.Limit != 1000 || errors.Is(le, tenant.ErrRateLimited) {
		t.Fatalf("oversized request: %+v", le)
	}
	le = e.deny(e.b, "small", tenant.AcquireRequest{Model: "m", Tokens: 501}, tenant.ErrRequestTooLarge)
	if le.Kind != tenant.KindBudget || !le.Unsatisfiable || le.Limit != 500 || errors.Is(le, tenant.ErrInsufficientQuota) {
		t.Fatalf("request above the whole budget: %+v", le)
	}
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m", Tokens: 1000})
	e.acquire(e.a, "small", tenant.AcquireRequest{Model: "m", Tokens: 500})
}

func testConcurrency(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxConcurrent: 2}})
	req := tenant.AcquireRequest{Model: "m"}
	l1 := e.acquire(e.a, "acme", req)
	l2 := e.acquire(e.b, "acme", req)
	le := e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindConcurrency, Limit: 2, RetryAfter: tenant.ConcurrencyRetryAfter})
	e.release(l1, 1, 1)
	err := l1.Release(e.ctx, tenant.Consumed{})
	wantErr(t, "second Release", err, tenant.ErrLeaseReleased)
	wantErr(t, "Renew after Release", l1.Renew(e.ctx), tenant.ErrLeaseReleased)
	e.acquire(e.b, "acme", req) // l3 takes l1's slot
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)

	// A leaked lease (crashed gateway) frees its slot at ExpiresAt.
	e.clock.Advance(LeaseTTL - time.Second)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	e.clock.Advance(time.Second)
	l4 := e.acquire(e.a, "acme", req)
	l5 := e.acquire(e.b, "acme", req)

	// Renewal keeps a slot past its original expiry.
	e.clock.Advance(LeaseTTL / 2)
	if err := l4.Renew(e.ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := e.clock.Now().Add(LeaseTTL); !l4.Info().ExpiresAt.Equal(want) {
		t.Fatalf("renewed lease expires at %v, want %v", l4.Info().ExpiresAt, want)
	}
	e.clock.Advance(LeaseTTL / 2) // l5 expires, l4 does not
	wantErr(t, "Renew of expired lease", l5.Renew(e.ctx), tenant.ErrLeaseExpired)
	e.acquire(e.b, "acme", req)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	// An expired lease can still be released, which records its usage.
	e.release(l5, 3, 4)
	e.release(l2, 0, 0)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited) // l2 and l5 had expired: nothing freed
	e.release(l4, 0, 0)
	e.acquire(e.a, "acme", req)
	u, err := e.b.Usage(e.ctx, "acme", e.clock.Now(), e.clock.Now())
	if err != nil || len(u) != 1 || u[0].Requests != 4 || u[0].PromptTokens != 4 || u[0].CompletionTokens != 5 {
		t.Fatalf("usage %+v, %v; want 4 requests, 4 prompt and 5 completion tokens", u, err)
	}
}

func testBudgetDay(e *env) {
	t := e.t
	// The clock starts at 22:00 UTC.
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{Budget: 1000, BudgetPeriod: tenant.PeriodDay}})
	tok := func(n int64) tenant.AcquireRequest { return tenant.AcquireRequest{Model: "m", Tokens: n} }
	a := e.acquire(e.a, "acme", tok(600))
	le := e.deny(e.b, "acme", tok(500), tenant.ErrInsufficientQuota)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindBudget, Limit: 1000, Remaining: 400, Reset: 2 * time.Hour, RetryAfter: 2 * time.Hour})
	if errors.Is(le, tenant.ErrRateLimited) {
		t.Fatal("budget denial is also ErrRateLimited")
	}
	e.release(a, 200, 100) // 300 used of the 600 held
	b := e.acquire(e.b, "acme", tok(500))
	le = e.deny(e.a, "acme", tok(300), tenant.ErrInsufficientQuota)
	if le.Remaining != 200 {
		t.Fatalf("remaining budget %d, want 200", le.Remaining)
	}
	e.clock.Advance(time.Hour + 59*time.Minute)
	e.deny(e.a, "acme", tok(300), tenant.ErrInsufficientQuota)
	e.clock.Advance(time.Minute) // midnight: a new period
	c := e.acquire(e.a, "acme", tok(1000))
	// b was admitted yesterday: its extra usage is not charged to today.
	e.release(b, 900, 0)
	e.release(c, 600, 0) // refunds 400 of today's hold
	e.acquire(e.b, "acme", tok(400))
	le = e.deny(e.b, "acme", tok(1), tenant.ErrInsufficientQuota)
	if le.Remaining != 0 || le.RetryAfter != 24*time.Hour {
		t.Fatalf("exhausted budget: %+v", le)
	}
}

func testBudgetMonth(e *env) {
	t := e.t
	// The clock starts at 2028-02-28 23:00 UTC; 2028 is a leap year.
	e.create(e.a, tenant.Tenant{ID: "monthly", Limits: tenant.Limits{Budget: 100}}) // default period: month
	e.create(e.a, tenant.Tenant{ID: "hourly", Limits: tenant.Limits{Budget: 100, BudgetPeriod: "1h"}})
	e.create(e.a, tenant.Tenant{ID: "weekly", Limits: tenant.Limits{Budget: 100, BudgetPeriod: "168h"}})
	tok := func(n int64) tenant.AcquireRequest { return tenant.AcquireRequest{Model: "m", Tokens: n} }
	e.clock.Advance(30 * time.Minute)
	for _, c := range []struct {
		id    string
		reset time.Duration
	}{
		{"monthly", 24*time.Hour + 30*time.Minute}, // until 2028-03-01
		{"hourly", 30 * time.Minute},
		// 168h periods start on Thursdays (the Unix epoch); 2028-02-28 is a Monday.
		{"weekly", 48*time.Hour + 30*time.Minute},
	} {
		e.acquire(e.a, c.id, tok(100))
		le := e.deny(e.b, c.id, tok(1), tenant.ErrInsufficientQuota)
		if le.RetryAfter != c.reset || le.Reset != c.reset {
			t.Fatalf("%s: retry after %v reset %v, want %v", c.id, le.RetryAfter, le.Reset, c.reset)
		}
	}
	e.clock.Advance(30 * time.Minute) // 2028-02-29 00:00
	e.acquire(e.a, "hourly", tok(100))
	e.deny(e.a, "monthly", tok(1), tenant.ErrInsufficientQuota)
	e.clock.Advance(24 * time.Hour) // 2028-03-01 00:00
	e.acquire(e.a, "monthly", tok(100))
	e.deny(e.a, "weekly", tok(1), tenant.ErrInsufficientQuota)
	e.clock.Advance(24 * time.Hour) // Thursday 2028-03-02 00:00
	e.acquire(e.a, "weekly", tok(100))
	// Changing the period starts a new count.
	tn, _ := e.a.GetTenant(e.ctx, "monthly")
	tn.Limits.BudgetPeriod = tenant.PeriodDay
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.acquire(e.b, "monthly", tok(100))
}

func testUsage(e *env) {
	t := e.t
	// The clock starts at 2026-04-30 23:59 UTC.
	e.create(e.a, tenant.Tenant{ID: "acme"})
	e.create(e.a, tenant.Tenant{ID: "other"})
	run := func(s tenant.Store, id, model string, p, c int64) {
		t.Helper()
		e.release(e.acquire(s, id, tenant.AcquireRequest{Model: model, Tokens: 100}), p, c)
	}
	run(e.a, "acme", "m1", 10, 20)
	run(e.b, "acme", "m2", 1, 2)
	run(e.b, "acme", "m1", 5, 5)
	run(e.a, "other", "m1", 1000, 1000)
	held := e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m2", Tokens: 50}) // released tomorrow
	e.clock.Advance(2 * time.Minute)                                               // 2026-05-01 00:01
	run(e.a, "acme", "m1", 7, 0)
	e.release(held, 3, 3)

	want := []tenant.Usage{
		{TenantID: "acme", Model: "m1", Day: "2026-04-30", Requests: 2, PromptTokens: 15, CompletionTokens: 25},
		{TenantID: "acme", Model: "m2", Day: "2026-04-30", Requests: 1, PromptTokens: 1, CompletionTokens: 2},
		{TenantID: "acme", Model: "m1", Day: "2026-05-01", Requests: 1, PromptTokens: 7, CompletionTokens: 0},
		{TenantID: "acme", Model: "m2", Day: "2026-05-01", Requests: 1, PromptTokens: 3, CompletionTokens: 3},
	}
	for _, c := range []struct {
		from, to time.Time
		want     []tenant.Usage
	}{
		{day(2026, 4, 30, 23), day(2026, 5, 1, 0), want},
		{day(2026, 4, 1, 0), day(2026, 6, 1, 0), want},
		{day(2026, 4, 30, 0), day(2026, 4, 30, 23), want[:2]},
		{day(2026, 5, 1, 5), day(2026, 5, 1, 5), want[2:]},
		{day(2026, 5, 2, 0), day(2026, 5, 9, 0), nil},
		// from/to in another zone are taken as UTC instants
		{time.Date(2026, 5, 1, 1, 0, 0, 0, time.FixedZone("CEST", 2*3600)), day(2026, 5, 1, 0), want},
	} {
		got, err := e.b.Usage(e.ctx, "acme", c.from, c.to)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Usage(%v, %v) = %+v, %v\nwant %+v", c.from, c.to, got, err, c.want)
		}
	}
	_, err := e.a.Usage(e.ctx, "acme", day(2026, 5, 2, 0), day(2026, 5, 1, 0))
	wantErr(t, "Usage with to before from", err, tenant.ErrInvalid, "before")
	_, err = e.a.Usage(e.ctx, "acme", day(2020, 1, 1, 0), day(2026, 1, 1, 0))
	wantErr(t, "Usage over years", err, tenant.ErrInvalid, "days")
	_, err = e.a.Usage(e.ctx, "Not Valid", day(2026, 5, 1, 0), day(2026, 5, 1, 0))
	wantErr(t, "Usage of bad tenant ID", err, tenant.ErrInvalid, "tenant id")
	// Usage outlives the tenant.
	if err := e.a.DeleteTenant(e.ctx, "other"); err != nil {
		t.Fatal(err)
	}
	got, err := e.b.Usage(e.ctx, "other", day(2026, 4, 30, 0), day(2026, 4, 30, 0))
	if err != nil || len(got) != 1 || got[0].PromptTokens != 1000 {
		t.Fatalf("usage of deleted tenant = %+v, %v", got, err)
	}
	_, err = e.a.Acquire(e.ctx, "other", tenant.AcquireRequest{Model: "m1"})
	wantErr(t, "Acquire for deleted tenant", err, tenant.ErrNotFound)
}

func testLimitsUpdate(e *env) {
	t := e.t
	tn := e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1}})
	req := tenant.AcquireRequest{Model: "m"}
	e.acquire(e.b, "acme", req)
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	tn.Limits.RequestsPerMinute = 0
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.acquire(e.b, "acme", req)
	tn.Limits.RequestsPerMinute = 2 // the bucket refills up to the new limit
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.acquire(e.b, "acme", req)
	e.acquire(e.b, "acme", req)
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	tn.Limits.AllowedModels = []string{"other"}
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.deny(e.b, "acme", req, tenant.ErrModelNotAllowed)
}

// testPriority: MaxPriority 0, the default, allows priority 0 only (it is
// not "unlimited" like the other limits); a set maximum allows exactly up
// to itself, changes apply at once, and a denial charges nothing.
func testPriority(e *env) {
	t := e.t
	tn := e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 3}})
	if tn.Limits.MaxPriority != 0 {
		t.Fatalf("default MaxPriority %d, want 0", tn.Limits.MaxPriority)
	}
	e.release(e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m"}), 0, 0)
	for _, s := range []tenant.Store{e.a, e.b} {
		le := e.deny(s, "acme", tenant.AcquireRequest{Model: "m", Priority: 1}, tenant.ErrForbidden)
		wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 0})
		if errors.Is(le, tenant.ErrRateLimited) || le.RetryAfter != 0 {
			t.Fatalf("priority denial %+v looks retryable", le)
		}
	}
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: tenant.MaxRequestPriority}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 0})

	tn.Limits.MaxPriority = 2
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	l := e.acquire(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: 2})
	if l.Info().Priority != 2 {
		t.Fatalf("lease priority %d", l.Info().Priority)
	}
	e.release(l, 0, 0)
	le = e.deny(e.a, "acme", tenant.AcquireRequest{Model: "m", Priority: 3}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 2})
	// The denials charged nothing: the third request of the minute passes,
	// the fourth is rate limited.
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m", Priority: 1})
	e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m"}, tenant.ErrRateLimited)

	tn.Limits.MaxPriority = tenant.MaxRequestPriority
	tn.Limits.RequestsPerMinute = 0
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.acquire(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: tenant.MaxRequestPriority})
	if got, err := e.b.GetTenant(e.ctx, "acme"); err != nil || got.Limits.MaxPriority != tenant.MaxRequestPriority {
		t.Fatalf("GetTenant: %+v, %v", got.Limits, err)
	}
}

func testUnlimited(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	var leases []*tenant.Lease
	for i := range 50 {
		l := e.acquire([]tenant.Store{e.a, e.b}[i%2], "acme", tenant.AcquireRequest{Model: "m", Tokens: 1_000_000})
		wantQuota(t, "unlimited", l.Info().Quota, tenant.Quota{})
		leases = append(leases, l)
	}
	for _, l := range leases {
		e.release(l, 1_000_000, 1_000_000)
	}
}

// testExactAcrossReplicas fires more concurrent requests than a limit
// allows, split over both replicas, and checks that exactly the limit is
// admitted.
func testExactAcrossReplicas(e *env) {
	t := e.t
	const n, m = 10, 40
	e.create(e.a, tenant.Tenant{ID: "rpm", Limits: tenant.Limits{RequestsPerMinute: n}})
	e.create(e.a, tenant.Tenant{ID: "tpm", Limits: tenant.Limits{TokensPerMinute: n * 100}})
	e.create(e.a, tenant.Tenant{ID: "conc", Limits: tenant.Limits{MaxConcurrent: n / 2}})

	burst := func(id string, tokens int64, sentinel error) []*tenant.Lease {
		t.Helper()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			leases   []*tenant.Lease
			wrongErr atomic.Value
		)
		for i := range m {
			wg.Go(func() {
				s := []tenant.Store{e.a, e.b}[i%2]
				l, err := s.Acquire(e.ctx, id, tenant.AcquireRequest{Model: "m", Tokens: tokens})
				switch {
				case err == nil:
					mu.Lock()
					leases = append(leases, l)
					mu.Unlock()
				case !errors.Is(err, sentinel):
					wrongErr.Store(err)
				}
			})
		}
		wg.Wait()
		if err := wrongErr.Load(); err != nil {
			t.Fatalf("%s: unexpected error %v", id, err)
		}
		return leases
	}
	if got := len(burst("rpm", 0, tenant.ErrRateLimited)); got != n {
		t.Fatalf("rpm limit %d, %d concurrent requests over 2 replicas: %d admitted", n, m, got)
	}

	leases := burst("tpm", 100, tenant.ErrRateLimited)
	if len(leases) != n {
		t.Fatalf("tpm limit %d, %d concurrent requests of 100 tokens: %d admitted", n*100, m, len(leases))
	}
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() { e.release(l, 30, 20) }) // each refunds 50 of its 100
	}
	wg.Wait()
	if got := len(burst("tpm", 100, tenant.ErrRateLimited)); got != n/2 {
		t.Fatalf("after refunding %d tokens: %d requests of 100 admitted, want %d", n*50, got, n/2)
	}

	leases = burst("conc", 0, tenant.ErrRateLimited)
	if len(leases) != n/2 {
		t.Fatalf("concurrency limit %d, %d concurrent requests: %d admitted", n/2, m, len(leases))
	}
	for _, l := range leases {
		wg.Go(func() { e.release(l, 0, 0) })
	}
	wg.Wait()
	if got := len(burst("conc", 0, tenant.ErrRateLimited)); got != n/2 {
		t.Fatalf("after releasing all: %d admitted, want %d", got, n/2)
	}
}
