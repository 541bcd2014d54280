package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
)

// releaseFailingStore is a memstore whose lease releases fail with
// tenant.ErrUnavailable while down is set, as a Redis store's do during an
// outage.
type releaseFailingStore struct {
	*memstore.Store
	down atomic.Bool
}

var _ tenant.LeaseBackend = (*releaseFailingStore)(nil)

func (s *releaseFailingStore) Acquire(ctx context.Context, id string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	l, err := s.Store.Acquire(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return tenant.NewLease(l.Info(), s), nil
}

func (s *releaseFailingStore) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	if s.down.Load() {
		return tenant.ErrUnavailable
	}
	return s.Store.ReleaseLease(ctx, info, used)
}

// TestLeaseReleaseJournal: a request that ends while the store cannot take
// its release keeps its max_concurrent slot only until the store is back:
// the release waits in the journal (gauge warden_lease_release_journal)
// and the slot is usable again without waiting for the lease's TTL.
func TestLeaseReleaseJournal(t *testing.T) {
	mem, err := memstore.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	store := &releaseFailingStore{Store: mem}
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0
	tg := startGatewayWith(t, cfg, WithStore(store))
	if _, err := mem.UpdateTenant(context.Background(), tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxConcurrent: 1}}); err != nil {
		t.Fatal(err)
	}
	newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil).start()
	waitFor(t, "the model to be served", func() bool { return tg.Ready() == nil })
	body := map[string]any{"model": "tiny", "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "Say hello."}}}

	store.down.Store(true)
	if code, _, out := tg.post("/v1/chat/completions", body); code != http.StatusOK {
		t.Fatalf("request while releases fail: %d %s", code, out)
	}
	if n := tg.metric("warden_lease_release_journal", nil); n != 1 {
		t.Fatalf("journal gauge %v, want 1", n)
	}
	if code, _, out := tg.post("/v1/chat/completions", body); code != http.StatusTooManyRequests {
		t.Fatalf("second request with the slot still held: %d %s, want 429", code, out)
	}
	store.down.Store(false)
	back := time.Now()
	waitFor(t, "the slot to come back", func() bool {
		code, _, _ := tg.post("/v1/chat/completions", body)
		return code == http.StatusOK
	})
	t.Logf("slot usable again %v after the store returned", time.Since(back).Round(time.Millisecond))
	if n := tg.metric("warden_lease_release_journal", nil); n != 0 {
		t.Fatalf("journal gauge %v after recovery, want 0", n)
	}
}
