package aliases

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// flaky is a store whose listing can be made to fail.
type flaky struct {
	tenant.AliasStore
	mu   sync.Mutex
	down bool
}

func (f *flaky) ListAliases(ctx context.Context) ([]tenant.Alias, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, tenant.ErrUnavailable
	}
	return f.AliasStore.ListAliases(ctx)
}

func (f *flaky) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }

func TestResolver(t *testing.T) {
	ctx := context.Background()
	ms, err := memstore.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	src := &flaky{AliasStore: ms}
	now := time.Unix(1000, 0)
	r := New(src, Config{Static: map[string]string{"default": "llama", "fast": "tiny"}, Now: func() time.Time { return now }})
	resolve := func(name string) (string, bool) {
		t.Helper()
		return r.Resolve(ctx, name)
	}
	if target, ok := resolve("default"); !ok || target != "llama" {
		t.Fatalf("configured alias: %q %v", target, ok)
	}
	if _, ok := resolve("llama"); ok {
		t.Fatal("a model name resolved as an alias")
	}

	// Set through another replica: seen after TTL.
	if err := ms.SetAlias(ctx, tenant.Alias{Name: "default", Target: "qwen"}); err != nil {
		t.Fatal(err)
	}
	if target, _ := resolve("default"); target != "llama" {
		t.Fatalf("within TTL: %q", target)
	}
	now = now.Add(DefaultTTL)
	if target, _ := resolve("default"); target != "qwen" {
		t.Fatalf("after TTL: %q, want the admin alias over the configured one", target)
	}
	want := []Entry{{"default", "qwen", FromAdmin}, {"fast", "tiny", FromConfig}}
	if list := r.List(ctx); !reflect.DeepEqual(list, want) {
		t.Fatalf("List = %+v; want %+v", list, want)
	}

	// Set here: seen at once after Invalidate.
	if err := ms.DeleteAlias(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	r.Invalidate()
	if target, _ := resolve("default"); target != "llama" {
		t.Fatalf("after delete: %q, want the configured alias uncovered", target)
	}

	// A store outage keeps the last snapshot.
	if err := ms.SetAlias(ctx, tenant.Alias{Name: "chat", Target: "qwen"}); err != nil {
		t.Fatal(err)
	}
	src.setDown(true)
	r.Invalidate()
	if _, ok := resolve("chat"); ok {
		t.Fatal("resolved an alias the store could not list")
	}
	if target, _ := resolve("fast"); target != "tiny" {
		t.Fatalf("during the outage: %q", target)
	}
	src.setDown(false)
	now = now.Add(DefaultTTL)
	if target, _ := resolve("chat"); target != "qwen" {
		t.Fatalf("after the outage: %q", target)
	}

	// A first load during an outage serves the configured aliases; the
	// store's come once it is back.
	src.setDown(true)
	r = New(src, Config{Static: map[string]string{"fast": "tiny"}, Now: func() time.Time { return now }})
	if _, ok := resolve("chat"); ok {
		t.Fatal("resolved an alias the store could not list")
	}
	if target, _ := resolve("fast"); target != "tiny" {
		t.Fatalf("configured alias during an outage: %q", target)
	}
	src.setDown(false)
	if _, ok := resolve("chat"); ok {
		t.Fatal("retried before TTL")
	}
	now = now.Add(DefaultTTL)
	if target, _ := resolve("chat"); target != "qwen" {
		t.Fatalf("after the outage: %q", target)
	}
}

// TestResolverAcrossReplicas: two gateways' resolvers over one Redis
// (two stores, as two replicas have): an alias repointed through one is
// served by it at once and by the other within its TTL.
func TestResolverAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Addr(t)
	prefix := fmt.Sprintf("warden:{aliases-%d}:", time.Now().UnixNano())
	replica := func() (*redisstore.Store, *Resolver) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		s, err := redisstore.New(rdb, []byte("0123456789abcdef0123456789abcdef"), redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return s, New(s, Config{Static: map[string]string{"default": "llama"}, TTL: 50 * time.Millisecond})
	}
	storeA, a := replica()
	_, b := replica()
	for _, r := range []*Resolver{a, b} {
		if target, _ := r.Resolve(ctx, "default"); target != "llama" {
			t.Fatalf("configured alias: %q", target)
		}
	}
	if err := storeA.SetAlias(ctx, tenant.Alias{Name: "default", Target: "qwen"}); err != nil {
		t.Fatal(err)
	}
	a.Invalidate() // what the admin API does on the replica that set it
	if target, _ := a.Resolve(ctx, "default"); target != "qwen" {
		t.Fatalf("replica A right after the change: %q", target)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if target, _ := b.Resolve(ctx, "default"); target == "qwen" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica B never saw the repointed alias")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
