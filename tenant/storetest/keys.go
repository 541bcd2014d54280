package storetest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/warden-ai/warden/tenant"
)

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
