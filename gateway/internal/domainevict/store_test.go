package domainevict

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
)

var secret = bytes.Repeat([]byte("e"), cachekey.MinSecretBytes)

// fakeWorker records the evictions it is sent and acknowledges each with
// one evicted hash, or fails them all.
type fakeWorker struct {
	controlpb.WorkerClient
	fail  bool
	mu    sync.Mutex
	calls []*controlpb.EvictCacheDomainsRequest
}

func (f *fakeWorker) EvictCacheDomains(_ context.Context, req *controlpb.EvictCacheDomainsRequest, _ ...grpc.CallOption) (*controlpb.EvictCacheDomainsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("unreachable")
	}
	f.calls = append(f.calls, req)
	return &controlpb.EvictCacheDomainsResponse{FreedPages: 1, Evicted: &controlpb.PrefixCacheReport{Evicted: [][]byte{bytes.Repeat([]byte{1}, 32)}}}, nil
}

// take returns the calls received since the last take.
func (f *fakeWorker) take() []*controlpb.EvictCacheDomainsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func derive(t *testing.T, mode cachekey.Mode, s cachekey.Scope) []byte {
	t.Helper()
	d, ok := cachekey.Derive(secret, mode, s)
	if !ok {
		t.Fatalf("no domain for %q %+v", mode, s)
	}
	return d[:]
}

// adapterA is a LoRA adapter's content hash (the form of lora.Hash).
var adapterA = strings.Repeat("a", 64)

// TestStoreEvicts: each change that ends a cache domain evicts exactly
// the domains concerned on every worker, with its reason, after the
// change succeeded: on the base model and under every adapter the tenant
// may use (DESIGN I8a), or one adapter's when the tenant loses it; the
// acknowledged hashes reach the routing index, an unreachable worker is
// counted failed; other changes evict nothing. A tenant whose adapters
// cannot be listed still has its base-model domains evicted.
func TestStoreEvicts(t *testing.T) {
	ctx := context.Background()
	ok, down := &fakeWorker{}, &fakeWorker{fail: true}
	var forgot []string
	ev := New(Config{
		Workers: func() []Worker {
			return []Worker{{ID: "w1", Model: "m", Client: ok}, {ID: "w2", Model: "m", Client: down}}
		},
		Derive: func(m cachekey.Mode, s cachekey.Scope) (cachekey.Domain, bool) { return cachekey.Derive(secret, m, s) },
		Adapters: func(_ context.Context, id string) ([]string, error) {
			if id == "rc1" {
				return []string{adapterA}, nil
			}
			return nil, errors.New("registry unavailable")
		},
		Forget:  func(worker, model string, r *controlpb.PrefixCacheReport) { forgot = append(forgot, worker+"/"+model) },
		Timeout: time.Second,
		Logger:  slog.New(slog.DiscardHandler),
	})
	mem, err := memstore.New(secret)
	if err != nil {
		t.Fatal(err)
	}
	s := Wrap(mem, ev)
	want := func(what, reason string, domains ...[]byte) {
		t.Helper()
		calls := ok.take()
		if len(domains) == 0 {
			if len(calls) != 0 {
				t.Fatalf("%s: evictions %+v, want none", what, calls)
			}
			return
		}
		if len(calls) != 1 || calls[0].GetReason() != reason || !slices.EqualFunc(calls[0].GetDomains(), domains, bytes.Equal) {
			t.Fatalf("%s: evictions %+v, want one of %d domains for %s", what, calls, len(domains), reason)
		}
	}

	rc1, err := s.CreateTenant(ctx, tenant.Tenant{ID: "rc1"})
	if err != nil {
		t.Fatal(err)
	}
	_, k1, _ := s.IssueKey(ctx, "rc1", "")
	_, k2, _ := s.IssueKey(ctx, "rc1", "")
	scope := func(adapter string) [][]byte {
		return [][]byte{
			derive(t, cachekey.ModeTenant, cachekey.Scope{Tenant: "rc1", Incarnation: rc1.Incarnation, Adapter: adapter}),
			derive(t, cachekey.ModeKey, cachekey.Scope{Tenant: "rc1", Incarnation: rc1.Incarnation, KeyID: k1.ID, Adapter: adapter}),
			derive(t, cachekey.ModeKey, cachekey.Scope{Tenant: "rc1", Incarnation: rc1.Incarnation, KeyID: k2.ID, Adapter: adapter}),
		}
	}
	base, underA := scope(""), scope(adapterA)
	all := slices.Concat(base, underA)
	rc1.Name = "renamed"
	if _, err := s.UpdateTenant(ctx, rc1); err != nil {
		t.Fatal(err)
	}
	want("rename", "")
	if err := s.RevokeKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	want("revoking a key of a tenant-wide domain", "")
	rc1.PrefixCache = cachekey.ModeKey
	if _, err := s.UpdateTenant(ctx, rc1); err != nil {
		t.Fatal(err)
	}
	want("prefix_cache tenant → key", controlpb.EvictPrefixCacheChanged, all...)
	if err := s.RevokeKey(ctx, k2.ID); err != nil {
		t.Fatal(err)
	}
	want("revoking a key of a per-key tenant", controlpb.EvictKeyRevoked, base[2], underA[2])
	if err := s.EvictAdapter(ctx, "rc1", adapterA); err != nil {
		t.Fatal(err)
	}
	want("the tenant loses adapter A", controlpb.EvictAdapterRemoved, underA...)
	if err := s.EvictAdapter(ctx, "rc1", ""); err == nil {
		t.Fatal("EvictAdapter without an adapter succeeded")
	}
	want("EvictAdapter without an adapter", "")
	rc1.Disabled = true
	if _, err := s.UpdateTenant(ctx, rc1); err != nil {
		t.Fatal(err)
	}
	want("disable", controlpb.EvictTenantDisabled, all...)
	if _, err := s.UpdateTenant(ctx, rc1); err != nil {
		t.Fatal(err)
	}
	want("update of a disabled tenant", "")
	if err := s.DeleteTenant(ctx, "rc1"); err != nil {
		t.Fatal(err)
	}
	want("delete", controlpb.EvictTenantDeleted, all...)
	if err := s.DeleteTenant(ctx, "rc1"); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	want("a failed delete", "")
	if err := s.RevokeKey(ctx, "nosuchkey"); err == nil {
		t.Fatal("revoking an unknown key succeeded")
	}
	want("a failed revoke", "")
	if err := s.EvictAdapter(ctx, "rc1", adapterA); !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("EvictAdapter of a deleted tenant: %v", err)
	}
	want("EvictAdapter of a deleted tenant", "")

	rc2, err := s.CreateTenant(ctx, tenant.Tenant{ID: "rc2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "rc2"); err != nil {
		t.Fatal(err)
	}
	want("delete while the adapters cannot be listed", controlpb.EvictTenantDeleted,
		derive(t, cachekey.ModeTenant, cachekey.Scope{Tenant: "rc2", Incarnation: rc2.Incarnation}))

	if len(forgot) != 6 || forgot[0] != "w1/m" {
		t.Fatalf("routing index told %q, want w1/m once per acknowledged eviction", forgot)
	}
	for _, r := range controlpb.EvictReasons {
		n := 1.0
		if r == controlpb.EvictTenantDeleted {
			n = 2
		}
		if a, f := count(ev, r, OutcomeAcked), count(ev, r, OutcomeFailed); a != n || f != n {
			t.Errorf("%s: %v acked, %v failed; want %v and %v (one worker up, one down)", r, a, f, n, n)
		}
	}
}

// count reads warden_gateway_cache_domain_evictions_total{reason, outcome}.
func count(ev *Evictor, reason, outcome string) float64 {
	var m dto.Metric
	if err := ev.calls.WithLabelValues(reason, outcome).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
