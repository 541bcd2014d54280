package redisstore_test

import (
	"testing"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// BenchmarkRequest measures the tenant work of one gateway request,
// Authenticate + Acquire + Release, with every limit enabled (none binding).
// The memstore sub-benchmarks are the baseline for the redisstore ones in
// the same run; "cached" authenticates through an AuthCache as the gateway
// does, "store" asks the store every time.
func BenchmarkRequest(b *testing.B) {
	mem, err := memstore.New(secret)
	if err != nil {
		b.Fatal(err)
	}
	addr := redistest.Addr(b)
	red := newStore(b, redistest.NewClient(b, addr), redisstore.WithPrefix(redistest.Prefix(b, addr)))
	for _, s := range []struct {
		name  string
		store tenant.Store
	}{{"memstore", mem}, {"redisstore", red}} {
		key := benchTenant(b, s.store)
		b.Run(s.name+"/auth=store", func(b *testing.B) { benchRequest(b, s.store, s.store, key) })
		cache := tenant.NewAuthCache(s.store, tenant.AuthCacheConfig{})
		b.Run(s.name+"/auth=cached", func(b *testing.B) { benchRequest(b, s.store, cache, key) })
	}
}

func benchTenant(b *testing.B, s tenant.Store) string {
	ctx := b.Context()
	_, err := s.CreateTenant(ctx, tenant.Tenant{ID: "bench", Limits: tenant.Limits{
		RequestsPerMinute: 1e12, TokensPerMinute: 1e14, MaxConcurrent: 1e6, Budget: 1e15,
		AllowedModels: []string{"tiny", "small"}, MaxPriority: 5,
	}})
	if err != nil {
		b.Fatal(err)
	}
	key, _, err := s.IssueKey(ctx, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	return key
}

func benchRequest(b *testing.B, s tenant.Store, auth tenant.Authenticator, key string) {
	ctx := b.Context()
	req := tenant.AcquireRequest{Model: "tiny", Tokens: 1024, Priority: 1}
	used := tenant.Consumed{PromptTokens: 200, CompletionTokens: 300}
	for b.Loop() {
		p, err := auth.Authenticate(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		l, err := s.Acquire(ctx, p.Tenant.ID, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, used); err != nil {
			b.Fatal(err)
		}
	}
}
