package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/warden-ai/warden/tenant"
)

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

// testTenantIncarnation: a tenant's incarnation is created with the
// record (whatever the input says), every read of either replica
// (GetTenant, ListTenants, Authenticate) and every update keeps it, and a
// tenant deleted and re-created under the same ID gets a new one.
func testTenantIncarnation(e *env) {
	t := e.t
	created := e.create(e.a, tenant.Tenant{ID: "rc1", Incarnation: "chosen-by-the-client"})
	inc := created.Incarnation
	if len(inc) != 32 || strings.Trim(inc, "0123456789abcdef") != "" {
		t.Fatalf("CreateTenant's incarnation %q, want 32 hex digits chosen by the store", inc)
	}
	key, _, err := e.a.IssueKey(e.ctx, "rc1", "")
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for name, s := range map[string]tenant.Store{"primary": e.a, "replica": e.b} {
			if g, err := s.GetTenant(e.ctx, "rc1"); err != nil || g.Incarnation != inc {
				t.Fatalf("%s: GetTenant via %s = %+v, %v; want incarnation %q", when, name, g, err, inc)
			}
			if l, err := s.ListTenants(e.ctx); err != nil || len(l) != 1 || l[0].Incarnation != inc {
				t.Fatalf("%s: ListTenants via %s = %+v, %v; want incarnation %q", when, name, l, err, inc)
			}
			if p, err := s.Authenticate(e.ctx, key); err != nil || p.Tenant.Incarnation != inc {
				t.Fatalf("%s: Authenticate via %s = %+v, %v; want incarnation %q", when, name, p, err, inc)
			}
		}
	}
	check("after create")
	upd, err := e.b.UpdateTenant(e.ctx, tenant.Tenant{ID: "rc1", Name: "renamed", Incarnation: "0123456789abcdef0123456789abcdef",
		PrefixCache: "key"})
	if err != nil || upd.Incarnation != inc {
		t.Fatalf("UpdateTenant = %+v, %v; want incarnation %q kept", upd, err, inc)
	}
	check("after update")
	if err := e.b.DeleteTenant(e.ctx, "rc1"); err != nil {
		t.Fatal(err)
	}
	again := e.create(e.b, tenant.Tenant{ID: "rc1", Name: "new owner"})
	if again.Incarnation == inc || len(again.Incarnation) != 32 {
		t.Fatalf("re-created tenant's incarnation %q, the deleted one's %q: want a new one", again.Incarnation, inc)
	}
	if g, err := e.a.GetTenant(e.ctx, "rc1"); err != nil || g.Incarnation != again.Incarnation {
		t.Fatalf("GetTenant of the re-created tenant = %+v, %v; want incarnation %q", g, err, again.Incarnation)
	}
}
