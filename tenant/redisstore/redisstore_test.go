package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/internal/syncbuf"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/redisstore"
	"github.com/warden-ai/warden/tenant/storetest"
)

var secret = []byte("redisstore-test-server-secret")

func newStore(t testing.TB, rdb redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(rdb, secret, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the suite with two stores on two clients, as two
// gateway replicas sharing one Redis.
func TestConformance(t *testing.T) {
	addr := redistest.Addr(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) (tenant.Store, tenant.Store) {
		prefix := redistest.Prefix(t, addr)
		replica := func() tenant.Store {
			return newStore(t, redistest.NewClient(t, addr),
				redisstore.WithPrefix(prefix), redisstore.WithClock(now), redisstore.WithLeaseTTL(storetest.LeaseTTL))
		}
		return replica(), replica()
	})
}

// TestConformanceCluster runs the suite on a private three-master Redis
// Cluster: every script's keys share the prefix's hash slot.
func TestConformanceCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) (tenant.Store, tenant.Store) {
		prefix := redistest.UniquePrefix()
		replica := func() tenant.Store {
			return newStore(t, cluster.NewClient(t),
				redisstore.WithPrefix(prefix), redisstore.WithClock(now), redisstore.WithLeaseTTL(storetest.LeaseTTL))
		}
		return replica(), replica()
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, c := range map[string]struct {
		rdb    redis.UniversalClient
		secret []byte
		opts   []redisstore.Option
	}{
		"nil client":      {nil, secret, nil},
		"short secret":    {rdb, []byte("0123456789"), nil},
		"zero lease TTL":  {rdb, secret, []redisstore.Option{redisstore.WithLeaseTTL(0)}},
		"short retention": {rdb, secret, []redisstore.Option{redisstore.WithUsageRetention(time.Hour)}},
	} {
		if _, err := redisstore.New(c.rdb, c.secret, c.opts...); !errors.Is(err, tenant.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}

// TestServerClock checks the production configuration, where the scripts
// read the Redis server's clock.
func TestServerClock(t *testing.T) {
	addr := redistest.Addr(t)
	s := newStore(t, redistest.NewClient(t, addr), redisstore.WithPrefix(redistest.Prefix(t, addr)))
	ctx := t.Context()
	if _, err := s.CreateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1}}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	// Redis runs on this machine, so its clock agrees with ours; the bound
	// is generous because only gross errors (units, epoch) matter here.
	if d := time.Since(l.Info().AcquiredAt).Abs(); d > 10*time.Minute {
		t.Fatalf("lease acquired at %v, %v away from now", l.Info().AcquiredAt, d)
	}
	_, err = s.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m"})
	var le *tenant.LimitError
	if !errors.As(err, &le) || le.Kind != tenant.KindRequests || le.RetryAfter <= 0 || le.RetryAfter > time.Minute {
		t.Fatalf("second request in a minute: %v, want a requests denial with 0 < retry-after <= 1m", err)
	}
	if err := l.Release(ctx, tenant.Consumed{PromptTokens: 4, CompletionTokens: 2}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	u, err := s.Usage(ctx, "acme", now.Add(-24*time.Hour), now.Add(24*time.Hour))
	if err != nil || len(u) != 1 || u[0].Requests != 1 || u[0].PromptTokens != 4 || u[0].CompletionTokens != 2 {
		t.Fatalf("usage = %+v, %v", u, err)
	}
}

// TestRedisOutage kills a private redis-server in the middle of traffic and
// restarts it: nothing panics, authentication serves recently verified keys
// for the grace period, admission fails closed (or open when configured),
// and the same clients recover once Redis is back.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, MaxRetries: -1, DialerRetries: 1, Protocol: 2, DisableIdentity: true,
	})
	defer rdb.Close()
	// Separate logs, to count the outage reports of one store.
	var logs, openLogs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// Frozen store clock: the token arithmetic below must not depend on how
	// long the outage takes. The auth cache has its own clock.
	storeClock := storetest.NewClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	opts := []redisstore.Option{redisstore.WithPrefix("warden:{outage}:"), redisstore.WithClock(storeClock.Now)}
	closed := newStore(t, rdb, append(opts, redisstore.WithLogger(log))...)
	open := newStore(t, rdb, append(opts, redisstore.WithFailOpen(true),
		redisstore.WithLogger(slog.New(slog.NewTextHandler(&openLogs, nil))))...)
	ctx := t.Context()

	if _, err := closed.CreateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 1_000_000}}); err != nil {
		t.Fatal(err)
	}
	known, _, err := closed.IssueKey(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	unseen, _, err := closed.IssueKey(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock(time.Unix(1_000_000, 0)) // the auth cache's
	cache := tenant.NewAuthCache(closed, tenant.AuthCacheConfig{Now: clock.Now, Logger: log})
	if _, err := cache.Authenticate(ctx, known); err != nil {
		t.Fatal(err)
	}
	inFlight, err := closed.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 500})
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	clock.Advance(2 * time.Second) // past the cache TTL

	if p, err := cache.Authenticate(ctx, known); err != nil || p.Tenant.ID != "acme" {
		t.Fatalf("during outage, recently verified key: %+v, %v; want accepted from the cache", p, err)
	}
	_, err = cache.Authenticate(ctx, unseen)
	wantUnavailable(t, "cache, never verified key", err)
	_, err = closed.Authenticate(ctx, known)
	wantUnavailable(t, "store Authenticate", err)
	_, err = closed.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m"})
	wantUnavailable(t, "fail-closed Acquire", err)
	var le *tenant.LimitError
	if errors.As(err, &le) {
		t.Fatal("an outage is reported as a limit denial")
	}
	degraded, err := open.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m", Tokens: 300, Priority: 7})
	if err != nil || !degraded.Info().Degraded || degraded.Info().HeldTokens != 0 || degraded.Info().Priority != 0 {
		t.Fatalf("fail-open Acquire = %+v, %v; want a degraded lease holding nothing, at priority 0", degraded.Info(), err)
	}
	wantUnavailable(t, "Release", inFlight.Release(ctx, tenant.Consumed{PromptTokens: 100, CompletionTokens: 100}))
	_, err = closed.ListTenants(ctx)
	wantUnavailable(t, "ListTenants", err)

	clock.Advance(tenant.DefaultAuthGrace)
	_, err = cache.Authenticate(ctx, known)
	wantUnavailable(t, "cache after the grace period", err)

	srv.Restart()
	// The same clients reconnect by themselves; the first call may still
	// find a dead pooled connection, so wait for one success.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = cache.Authenticate(ctx, known)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := cache.Authenticate(ctx, unseen); err != nil {
		t.Fatalf("after restart, unseen key: %v", err)
	}
	// The failed release can be retried, and the degraded lease is charged
	// and recorded now that Redis is back.
	if err := inFlight.Release(ctx, tenant.Consumed{PromptTokens: 100, CompletionTokens: 100}); err != nil {
		t.Fatalf("retried Release: %v", err)
	}
	if err := degraded.Release(ctx, tenant.Consumed{PromptTokens: 200, CompletionTokens: 100}); err != nil {
		t.Fatalf("Release of degraded lease: %v", err)
	}
	l, err := closed.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "m"})
	if err != nil {
		t.Fatalf("Acquire after restart: %v", err)
	}
	// 1,000,000 - 500 held + 300 refunded - 300 charged for the degraded lease
	if got := l.Info().Quota.RemainingTokens; got != 1_000_000-500 {
		t.Fatalf("remaining tokens after recovery: %d, want %d", got, 1_000_000-500)
	}
	u, err := closed.Usage(ctx, "acme", storeClock.Now(), storeClock.Now())
	if err != nil || len(u) != 1 || u[0].Requests != 2 || u[0].PromptTokens != 300 || u[0].CompletionTokens != 200 {
		t.Fatalf("usage after recovery = %+v, %v", u, err)
	}
	out := logs.String()
	for _, want := range []string{"redis unavailable", "redis available again", "accepting recently verified API keys"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	if !strings.Contains(openLogs.String(), "admitting request without limits") {
		t.Errorf("fail-open admission not logged:\n%s", openLogs.String())
	}
	if n := strings.Count(out, "redis unavailable"); n != 1 {
		t.Errorf("outage logged %d times, want once per outage:\n%s", n, out)
	}
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, tenant.ErrUnavailable) {
		t.Fatalf("%s during outage: %v, want ErrUnavailable", what, err)
	}
}

// TestReplicas: the number of gateway replicas is those whose in-flight
// report has not expired, as of the last report.
func TestReplicas(t *testing.T) {
	addr := redistest.Addr(t)
	now := time.Now()
	s := newStore(t, redistest.NewClient(t, addr), redisstore.WithPrefix(redistest.Prefix(t, addr)),
		redisstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	if n, err := s.Replicas(ctx); err != nil || n != 0 {
		t.Fatalf("before any report: %d, %v", n, err)
	}
	for _, r := range []string{"gw-a", "gw-b", "gw-c"} {
		if _, err := s.ShareInFlight(ctx, tenant.InFlightReport{Replica: r, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Replicas(ctx); err != nil || n != 3 {
		t.Fatalf("three replicas reported: %d, %v", n, err)
	}
	now = now.Add(2 * time.Second) // a and b expire; c reports again
	if _, err := s.ShareInFlight(ctx, tenant.InFlightReport{Replica: "gw-c", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Replicas(ctx); err != nil || n != 1 {
		t.Fatalf("after two expired: %d, %v", n, err)
	}
}
