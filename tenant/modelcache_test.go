package tenant

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

type fakeModels struct {
	mu    sync.Mutex
	list  []ModelLimits
	err   error
	calls int
}

func (f *fakeModels) ListModelLimits(context.Context) ([]ModelLimits, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return append([]ModelLimits(nil), f.list...), nil
}

func (f *fakeModels) set(list []ModelLimits, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list, f.err = list, err
}

func TestModelLimitsCache(t *testing.T) {
	ctx := t.Context()
	f := &fakeModels{}
	f.set(nil, errors.New("no redis"))
	clock := &manualClock{now: time.Unix(0, 0)}
	c := NewModelLimitsCache(f, ModelLimitsCacheConfig{Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if _, _, err := c.Get(ctx, "m"); err == nil {
		t.Fatal("first load error not reported")
	}
	f.set([]ModelLimits{{Model: "a", MaxContext: 10, AllowedTenants: []string{"acme"}}, {Model: "b", MaxOutputTokens: 5}}, nil)
	m, ok, err := c.Get(ctx, "a")
	if err != nil || !ok || m.MaxContext != 10 {
		t.Fatalf("Get(a) = %+v, %v, %v", m, ok, err)
	}
	m.AllowedTenants[0] = "mutated" // callers get copies
	if _, ok, _ := c.Get(ctx, "zzz"); ok {
		t.Fatal("unknown model reported as configured")
	}
	f.set([]ModelLimits{{Model: "a", MaxContext: 20}}, nil)
	clock.Advance(DefaultModelLimitsTTL - time.Nanosecond)
	if m, _, _ := c.Get(ctx, "a"); m.MaxContext != 10 || m.AllowedTenants[0] != "acme" {
		t.Fatalf("within TTL: %+v, want the cached, unmutated snapshot", m)
	}
	clock.Advance(time.Nanosecond)
	if m, _, _ := c.Get(ctx, "a"); m.MaxContext != 20 {
		t.Fatalf("after TTL: %+v, want the new limits", m)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	// Refresh failures keep serving the last snapshot, retrying once per TTL.
	f.set(nil, errors.New("redis down"))
	clock.Advance(DefaultModelLimitsTTL)
	calls := f.calls
	for range 5 {
		if m, ok, err := c.Get(ctx, "a"); err != nil || !ok || m.MaxContext != 20 {
			t.Fatalf("during outage: %+v, %v, %v", m, ok, err)
		}
	}
	if f.calls != calls+1 {
		t.Fatalf("%d refresh attempts during one TTL, want 1", f.calls-calls)
	}
}
