package storedresp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/redistest"
)

var secret = bytes.Repeat([]byte{7}, 32)

// backends runs f against a Memory backend and a Redis one (under a
// unique key prefix, removed afterwards).
func backends(t *testing.T, f func(t *testing.T, b Backend, raw func(tenant, id string) []byte)) {
	t.Run("memory", func(t *testing.T) {
		m := NewMemory(nil)
		f(t, m, func(tenant, id string) []byte {
			b, _ := m.Get(context.Background(), tenant, id)
			return b
		})
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		prefix := "storedresp-test-" + rand.Text()[:8] + ":"
		t.Cleanup(func() {
			ctx := context.Background()
			keys, _ := rdb.Keys(ctx, prefix+"*").Result()
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			rdb.Close()
		})
		r := NewRedis(rdb, prefix)
		f(t, r, func(tenant, id string) []byte {
			b, _ := rdb.Get(context.Background(), r.recordKey(tenant, id)).Bytes()
			return b
		})
	})
}

func principal(tenant, incarnation string) api.Principal {
	return api.Principal{Tenant: tenant, KeyID: "k", Incarnation: incarnation}
}

func record(id, text string) *api.StoredResponse {
	return &api.StoredResponse{ID: id, Messages: []api.Message{{Role: "user", Content: "question " + id}, {Role: "assistant", Content: text,
		ToolCalls: []api.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":1}`}}}},
		Response: json.RawMessage(`{"id":"` + id + `","output_text":"` + text + `"}`)}
}

// TestOwnership: a record reads back whole for its tenant incarnation;
// another tenant, or the same tenant name re-created (a new incarnation),
// finds nothing — and the re-created tenant's miss removes the record;
// the backend holds only sealed bytes.
func TestOwnership(t *testing.T) {
	backends(t, func(t *testing.T, b Backend, raw func(tenant, id string) []byte) {
		ctx := context.Background()
		s, err := New(b, secret, Options{})
		if err != nil {
			t.Fatal(err)
		}
		acme, acmeAgain, other := principal("acme", "inc1"), principal("acme", "inc2"), principal("globex", "inc1")
		want := record("resp_1", "the secret plan of acme")
		if err := s.Put(ctx, acme, want); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, acme, "resp_1")
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("Get = %+v, %v; want %+v", got, err, want)
		}
		if sealed := raw("acme", "resp_1"); len(sealed) == 0 || bytes.Contains(sealed, []byte("secret plan")) || bytes.Contains(sealed, []byte("question")) {
			t.Errorf("the backend holds %q: not sealed", sealed)
		}
		if _, err := s.Get(ctx, other, "resp_1"); !errors.Is(err, api.ErrResponseNotFound) {
			t.Errorf("another tenant's Get: %v, want not found", err)
		}
		if err := s.Delete(ctx, other, "resp_1"); !errors.Is(err, api.ErrResponseNotFound) {
			t.Errorf("another tenant's Delete: %v, want not found", err)
		}
		if _, err := s.Get(ctx, acmeAgain, "resp_1"); !errors.Is(err, api.ErrResponseNotFound) {
			t.Errorf("re-created tenant's Get: %v, want not found", err)
		}
		if len(raw("acme", "resp_1")) != 0 {
			t.Error("the record the re-created tenant could not open is still there")
		}
		// A blob copied under another ID does not open there.
		if err := s.Put(ctx, acme, record("resp_2", "two")); err != nil {
			t.Fatal(err)
		}
		if err := b.Put(ctx, "acme", "resp_3", raw("acme", "resp_2"), time.Hour, 1<<20); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, acme, "resp_3"); !errors.Is(err, api.ErrResponseNotFound) {
			t.Errorf("a blob moved to another ID opened: %v", err)
		}
		if err := s.Delete(ctx, acme, "resp_2"); err != nil {
			t.Errorf("Delete: %v", err)
		}
		if _, err := s.Get(ctx, acme, "resp_2"); !errors.Is(err, api.ErrResponseNotFound) {
			t.Errorf("Get after Delete: %v", err)
		}
	})
}

// TestDeleteTenant: a tenant's deletion removes its records, not another
// tenant's.
func TestDeleteTenant(t *testing.T) {
	backends(t, func(t *testing.T, b Backend, raw func(tenant, id string) []byte) {
		ctx := context.Background()
		s, _ := New(b, secret, Options{})
		acme, other := principal("acme", "i"), principal("globex", "i")
		for _, p := range []api.Principal{acme, other} {
			for i := range 3 {
				if err := s.Put(ctx, p, record(fmt.Sprint("resp_", i), "x")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := b.DeleteTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			id := fmt.Sprint("resp_", i)
			if len(raw("acme", id)) != 0 {
				t.Errorf("acme's %s survived the tenant's deletion", id)
			}
			if _, err := s.Get(ctx, other, id); err != nil {
				t.Errorf("globex's %s: %v", id, err)
			}
		}
	})
}

// TestTenantBound: storing past a tenant's byte bound evicts that
// tenant's oldest records, never another tenant's; a record larger than
// the bound is refused.
func TestTenantBound(t *testing.T) {
	backends(t, func(t *testing.T, b Backend, _ func(tenant, id string) []byte) {
		ctx := context.Background()
		one := record("resp_0", "x")
		probe, _ := New(b, secret, Options{})
		size := sealedSize(t, probe, one)
		s, err := New(b, secret, Options{MaxTenantBytes: int64(3*size + size/2)}) // room for 3
		if err != nil {
			t.Fatal(err)
		}
		acme, other := principal("acme", "i"), principal("globex", "i")
		if err := s.Put(ctx, other, record("resp_0", "x")); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if err := s.Put(ctx, acme, record(fmt.Sprint("resp_", i), "x")); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			_, err := s.Get(ctx, acme, fmt.Sprint("resp_", i))
			if kept := err == nil; kept != (i >= 2) {
				t.Errorf("acme's record %d: kept %v (err %v), want the 3 newest kept", i, kept, err)
			}
		}
		if _, err := s.Get(ctx, other, "resp_0"); err != nil {
			t.Errorf("globex's record was evicted by acme's: %v", err)
		}
		big := record("resp_big", string(bytes.Repeat([]byte("y"), 4*size)))
		if err := s.Put(ctx, acme, big); !errors.Is(err, ErrTooLarge) {
			t.Errorf("oversized Put: %v, want ErrTooLarge", err)
		}
	})
}

// sealedSize is the sealed size of r.
func sealedSize(t *testing.T, s *Store, r *api.StoredResponse) int {
	plain, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := s.aead(principal("acme", "i"))
	if err != nil {
		t.Fatal(err)
	}
	return aead.NonceSize() + len(plain) + aead.Overhead()
}

// TestExpiry: a record is gone after the TTL.
func TestExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemory(func() time.Time { return now })
	s, _ := New(m, secret, Options{TTL: time.Minute})
	p := principal("acme", "i")
	if err := s.Put(context.Background(), p, record("resp_1", "x")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Second)
	if _, err := s.Get(context.Background(), p, "resp_1"); err != nil {
		t.Fatalf("before the TTL: %v", err)
	}
	now = now.Add(time.Second)
	if _, err := s.Get(context.Background(), p, "resp_1"); !errors.Is(err, api.ErrResponseNotFound) {
		t.Fatalf("after the TTL: %v", err)
	}
}

// TestRedisKeysExpire: in Redis the record and the tenant's accounting
// carry the TTL.
func TestRedisKeysExpire(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer rdb.Close()
	prefix := "storedresp-ttl-" + rand.Text()[:8] + ":"
	r := NewRedis(rdb, prefix)
	s, _ := New(r, secret, Options{TTL: time.Hour})
	ctx := context.Background()
	if err := s.Put(ctx, principal("acme", "i"), record("resp_1", "x")); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 5 {
		t.Fatalf("keys %v (%v), want the record, index, sizes, count and sequence", keys, err)
	}
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %v (%v), want within an hour", k, ttl, err)
		}
	}
	rdb.Del(ctx, keys...)
}
