package storetest

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/warden-ai/warden/tenant"
)

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
		{TenantID: "acme", Model: "m1", Day: "2026-04-30", Requests: 2, PromptTokens: 15, CompletionTokens: 25, BilledTokens: 40},
		{TenantID: "acme", Model: "m2", Day: "2026-04-30", Requests: 1, PromptTokens: 1, CompletionTokens: 2, BilledTokens: 3},
		{TenantID: "acme", Model: "m1", Day: "2026-05-01", Requests: 1, PromptTokens: 7, CompletionTokens: 0, BilledTokens: 7},
		{TenantID: "acme", Model: "m2", Day: "2026-05-01", Requests: 1, PromptTokens: 3, CompletionTokens: 3, BilledTokens: 6},
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

// testCachedTokenRate: a tenant's cached_token_rate round-trips through
// both replicas (with its prefix_cache scope), bills the cached prompt
// tokens at that rate against the token rate and the budget, and usage
// records the cached and billed tokens; the default bills them in full.
func testCachedTokenRate(e *env) {
	t := e.t
	quarter := 0.25
	e.create(e.a, tenant.Tenant{ID: "acme", PrefixCache: "key", CachedTokenRate: &quarter,
		Limits: tenant.Limits{TokensPerMinute: 1000, Budget: 10000, BudgetPeriod: tenant.PeriodDay}})
	e.create(e.a, tenant.Tenant{ID: "plain", Limits: tenant.Limits{TokensPerMinute: 1000}})
	got, err := e.b.GetTenant(e.ctx, "acme")
	if err != nil || got.CachedTokenRate == nil || *got.CachedTokenRate != 0.25 || got.CachedRate() != 0.25 || got.PrefixCache != "key" {
		t.Fatalf("GetTenant via replica = %+v, %v; want cached_token_rate 0.25, prefix_cache key", got, err)
	}
	if plain, _ := e.b.GetTenant(e.ctx, "plain"); plain.CachedTokenRate != nil || plain.CachedRate() != 1 {
		t.Fatalf("default rate: %+v", plain)
	}
	tok := func(n int64) tenant.AcquireRequest { return tenant.AcquireRequest{Model: "m", Tokens: n} }
	// 400 prompt tokens of which 200 cached at 0.25, 100 completion:
	// billed 200 + 50 + 100 = 350 against a hold of 500.
	used := tenant.Consumed{PromptTokens: 400, CompletionTokens: 100, CachedTokens: 200, CachedRate: got.CachedRate()}
	if used.Billed() != 350 {
		t.Fatalf("Billed = %d, want 350", used.Billed())
	}
	l := e.acquire(e.a, "acme", tok(500))
	if err := l.Release(e.ctx, used); err != nil {
		t.Fatal(err)
	}
	if q := e.acquire(e.b, "acme", tok(0)).Info().Quota; q.RemainingTokens != 650 {
		t.Fatalf("token bucket after a 350-token bill: %d left, want 650", q.RemainingTokens)
	}
	// The same counts at the default rate bill all 500.
	l = e.acquire(e.b, "plain", tok(500))
	if err := l.Release(e.ctx, tenant.Consumed{PromptTokens: 400, CompletionTokens: 100, CachedTokens: 200, CachedRate: 1}); err != nil {
		t.Fatal(err)
	}
	if q := e.acquire(e.a, "plain", tok(0)).Info().Quota; q.RemainingTokens != 500 {
		t.Fatalf("token bucket after a 500-token bill: %d left, want 500", q.RemainingTokens)
	}
	us, err := e.a.Usage(e.ctx, "acme", day(2026, 3, 10, 0), day(2026, 3, 10, 0))
	want := tenant.Usage{TenantID: "acme", Model: "m", Day: "2026-03-10", Requests: 1, PromptTokens: 400,
		CompletionTokens: 100, CachedTokens: 200, BilledTokens: 350}
	if err != nil || len(us) != 1 || us[0] != want {
		t.Fatalf("usage %+v, %v; want %+v", us, err, want)
	}
	for name, bad := range map[string]float64{"above 1": 1.5, "negative": -0.1, "NaN": math.NaN()} {
		_, err := e.a.UpdateTenant(e.ctx, tenant.Tenant{ID: "plain", CachedTokenRate: &bad})
		wantErr(t, "cached_token_rate "+name, err, tenant.ErrInvalid, "cached_token_rate")
	}
	for name, c := range map[string]tenant.Consumed{
		"cached over prompt": {PromptTokens: 1, CachedTokens: 2, CachedRate: 1},
		"negative cached":    {PromptTokens: 1, CachedTokens: -1, CachedRate: 1},
		"rate over 1":        {PromptTokens: 1, CachedTokens: 1, CachedRate: 2},
	} {
		wantErr(t, "Release with "+name, e.acquire(e.a, "plain", tok(0)).Release(e.ctx, c), tenant.ErrInvalid)
	}
}

// testAliases: an alias set on one replica is listed on the other,
// repointed, deleted; bad names are ErrInvalid.
func testAliases(e *env) {
	t := e.t
	if list, err := e.a.ListAliases(e.ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListAliases on an empty store = %+v, %v", list, err)
	}
	for _, a := range []tenant.Alias{{Name: "default", Target: "org/llama-3.1:8b"}, {Name: "chat", Target: "a-model"}} {
		if err := e.a.SetAlias(e.ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	want := []tenant.Alias{{Name: "chat", Target: "a-model"}, {Name: "default", Target: "org/llama-3.1:8b"}}
	if list, err := e.b.ListAliases(e.ctx); err != nil || !slices.Equal(list, want) {
		t.Fatalf("ListAliases via replica = %+v, %v; want %+v", list, err, want)
	}
	if err := e.b.SetAlias(e.ctx, tenant.Alias{Name: "default", Target: "a-model"}); err != nil {
		t.Fatal(err)
	}
	if list, _ := e.a.ListAliases(e.ctx); len(list) != 2 || list[1] != (tenant.Alias{Name: "default", Target: "a-model"}) {
		t.Fatalf("repointed alias: %+v", list)
	}
	if err := e.a.DeleteAlias(e.ctx, "chat"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "second DeleteAlias", e.b.DeleteAlias(e.ctx, "chat"), tenant.ErrNotFound, "chat")
	if list, _ := e.b.ListAliases(e.ctx); len(list) != 1 || list[0].Name != "default" {
		t.Fatalf("ListAliases after delete = %+v", list)
	}
	for _, bad := range []tenant.Alias{{Name: "", Target: "x"}, {Name: "a b", Target: "x"}, {Name: "x", Target: ""}, {Name: "x", Target: "x"}} {
		wantErr(t, "SetAlias", e.a.SetAlias(e.ctx, bad), tenant.ErrInvalid)
	}
	wantErr(t, "DeleteAlias", e.a.DeleteAlias(e.ctx, "a b"), tenant.ErrInvalid)
}
