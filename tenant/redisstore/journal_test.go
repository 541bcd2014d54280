package redisstore_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// TestJournalAfterOutage: a tenant with max_concurrent 2 holds both slots on
// one replica when a private redis-server is killed (SIGKILL); both requests
// end during the outage, so their releases fail and go to the journal.
// After the restart, another replica can use both slots again within
// seconds — not at the 10-minute lease TTL — and the usage of both requests
// is recorded.
func TestJournalAfterOutage(t *testing.T) {
	srv := redistest.Start(t)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{
			Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
			WriteTimeout: 500 * time.Millisecond, MaxRetries: -1, DialerRetries: 1, Protocol: 2, DisableIdentity: true,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	opts := []redisstore.Option{redisstore.WithPrefix("warden:{journal}:"), redisstore.WithLeaseTTL(redisstore.DefaultLeaseTTL)}
	a, b := newStore(t, client(), opts...), newStore(t, client(), opts...)
	ctx := t.Context()
	if _, err := a.CreateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxConcurrent: 2}}); err != nil {
		t.Fatal(err)
	}
	var leases []*tenant.Lease
	for range 2 {
		l, err := a.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	var le *tenant.LimitError
	if _, err := b.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m"}); !errors.As(err, &le) || le.Kind != tenant.KindConcurrency {
		t.Fatalf("third Acquire = %v, want a concurrency denial", err)
	}

	j := tenant.NewReleaseJournal(tenant.JournalConfig{Logger: slog.New(slog.DiscardHandler)})
	go j.Run(ctx)
	srv.Kill()
	used := tenant.Consumed{PromptTokens: 3, CompletionTokens: 4}
	for i, l := range leases {
		err := l.Release(ctx, used)
		if !errors.Is(err, tenant.ErrUnavailable) {
			t.Fatalf("Release during the outage: %v, want ErrUnavailable", err)
		}
		j.Add(l, used, "req-"+string(rune('a'+i)))
	}
	if n := j.Len(); n != 2 {
		t.Fatalf("journal holds %d releases during the outage, want 2", n)
	}

	srv.Restart()
	back := time.Now()
	var got []*tenant.Lease
	for len(got) < 2 {
		l, err := b.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m"})
		switch {
		case err == nil:
			got = append(got, l)
		case errors.As(err, &le) && le.Kind == tenant.KindConcurrency, errors.Is(err, tenant.ErrUnavailable):
			if time.Since(back) > 30*time.Second {
				t.Fatalf("slots not back %v after Redis returned: %v (journal %d)", time.Since(back), err, j.Len())
			}
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	took := time.Since(back)
	t.Logf("both max_concurrent slots usable again %v after Redis returned", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("slots came back %v after Redis returned, want within 5s", took)
	}
	// A slot is free once the release script ran; the journal forgets the
	// release when the call returns, a moment later.
	waitUntil(t, "the journal to empty", func() bool { return j.Len() == 0 })
	u, err := b.Usage(ctx, "acme", time.Now(), time.Now())
	if err != nil || len(u) != 1 || u[0].Requests != 2 || u[0].PromptTokens != 6 || u[0].CompletionTokens != 8 {
		t.Errorf("usage after recovery = %+v, %v; want the 2 journaled requests", u, err)
	}
}
