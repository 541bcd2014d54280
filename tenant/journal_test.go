package tenant_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// flakyBackend fails releases with ErrUnavailable while down, and records
// the order of the releases it took.
type flakyBackend struct {
	mu       sync.Mutex
	down     bool
	released []string
}

var _ tenant.LeaseBackend = (*flakyBackend)(nil)

func (b *flakyBackend) ReleaseLease(_ context.Context, info tenant.LeaseInfo, _ tenant.Consumed) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return tenant.ErrUnavailable
	}
	b.released = append(b.released, info.ID)
	return nil
}

func (b *flakyBackend) RenewLease(context.Context, tenant.LeaseInfo) (time.Time, error) {
	return time.Time{}, errors.ErrUnsupported
}

func (b *flakyBackend) set(down bool) {
	b.mu.Lock()
	b.down = down
	b.mu.Unlock()
}

func (b *flakyBackend) taken() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.released...)
}

// TestReleaseJournal: releases are kept while the store is down, the oldest
// dropped beyond MaxEntries, and the rest released in order once it is back.
func TestReleaseJournal(t *testing.T) {
	b := &flakyBackend{down: true}
	j := tenant.NewReleaseJournal(tenant.JournalConfig{MaxEntries: 3, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { j.Run(ctx); close(done) }()
	for _, id := range []string{"l1", "l2", "l3", "l4"} {
		j.Add(tenant.NewLease(tenant.LeaseInfo{ID: id, TenantID: "t"}, b), tenant.Consumed{}, "req-"+id)
	}
	if j.Len() != 3 || j.Dropped() != 1 {
		t.Fatalf("journal: %d pending, %d dropped; want 3, 1", j.Len(), j.Dropped())
	}
	b.set(false)
	deadline := time.Now().Add(10 * time.Second)
	for j.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("journal still holds %d releases", j.Len())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if got := b.taken(); len(got) != 3 || got[0] != "l2" || got[1] != "l3" || got[2] != "l4" {
		t.Fatalf("released %v, want [l2 l3 l4]", got)
	}
	// A lease released meanwhile by its owner leaves the journal quietly.
	l := tenant.NewLease(tenant.LeaseInfo{ID: "l5", TenantID: "t"}, b)
	if err := l.Release(t.Context(), tenant.Consumed{}); err != nil {
		t.Fatal(err)
	}
	j.Add(l, tenant.Consumed{}, "req-l5")
	if !j.Flush(t.Context()) || j.Len() != 0 {
		t.Fatalf("Flush left %d releases", j.Len())
	}
}
