package redisstore_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// TestIncarnationMigration: a tenant record stored before incarnations
// existed (no "inc" field) gets one on first read. Replicas reading it
// concurrently (GetTenant, ListTenants, Authenticate) all end up with the
// same one, the one now stored, and later reads and updates keep it.
func TestIncarnationMigration(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := redistest.Prefix(t, addr)
	rdb := redistest.NewClient(t, addr)
	replicas := make([]*redisstore.Store, 4)
	for i := range replicas {
		replicas[i] = newStore(t, redistest.NewClient(t, addr), redisstore.WithPrefix(prefix))
	}
	ctx := t.Context()
	for _, id := range []string{"old1", "old2"} {
		if _, err := replicas[0].CreateTenant(ctx, tenant.Tenant{ID: id, Name: "from before"}); err != nil {
			t.Fatal(err)
		}
	}
	key, _, err := replicas[0].IssueKey(ctx, "old1", "")
	if err != nil {
		t.Fatal(err)
	}
	// Strip the incarnations, as a record written by an older gateway.
	stored := func(id string) map[string]any {
		t.Helper()
		raw, err := rdb.Get(ctx, prefix+"t:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, id := range []string{"old1", "old2"} {
		m := stored(id)
		delete(m, "inc")
		b, _ := json.Marshal(m)
		if err := rdb.Set(ctx, prefix+"t:"+id, b, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	seen := make([]string, 3*len(replicas))
	var wg sync.WaitGroup
	for i, s := range replicas {
		wg.Go(func() {
			if tn, err := s.GetTenant(ctx, "old1"); err == nil {
				seen[3*i] = tn.Incarnation
			}
		})
		wg.Go(func() {
			if p, err := s.Authenticate(ctx, key); err == nil {
				seen[3*i+1] = p.Tenant.Incarnation
			}
		})
		wg.Go(func() {
			if l, err := s.ListTenants(ctx); err == nil && len(l) == 2 {
				seen[3*i+2] = l[0].Incarnation
			}
		})
	}
	wg.Wait()
	inc, _ := stored("old1")["inc"].(string)
	if len(inc) != 32 {
		t.Fatalf("stored incarnation after the first reads %q, want 32 hex digits", inc)
	}
	for i, got := range seen {
		if got != inc {
			t.Fatalf("read %d saw incarnation %q, the stored one is %q (all: %q)", i, got, inc, seen)
		}
	}
	// An update of a record without one assigns one and keeps it after.
	upd, err := replicas[1].UpdateTenant(ctx, tenant.Tenant{ID: "old2", Name: "updated"})
	if err != nil || len(upd.Incarnation) != 32 || upd.Incarnation == inc {
		t.Fatalf("UpdateTenant of a record without incarnation = %+v, %v", upd, err)
	}
	if got, _ := stored("old2")["inc"].(string); got != upd.Incarnation {
		t.Fatalf("stored incarnation %q, UpdateTenant returned %q", got, upd.Incarnation)
	}
	if tn, err := replicas[2].GetTenant(ctx, "old2"); err != nil || tn.Incarnation != upd.Incarnation || tn.Name != "updated" {
		t.Fatalf("GetTenant after the update = %+v, %v", tn, err)
	}
}
