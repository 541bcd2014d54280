package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/test/harness"
)

// Phases of the Redis outage test.
const (
	phaseBefore = iota
	phaseOutage
	phaseAfter
)

var phaseNames = [...]string{"before", "outage", "after"}

// outageSample is one answer of the steady load, with the phase it was
// sent in.
type outageSample struct {
	answer
	phase int
}

// TestRedisOutage: Redis is killed (SIGKILL) under a steady load on three
// gateways sharing it, and restarted with its data (append-only file).
// During the outage every gateway stays up and healthy and answers at once:
// keys verified within the outage grace still authenticate and are
// admitted under each gateway's share of their tenant's limits (degraded
// mode; the steady tenant has none) — or, on the gateway configured with
// fail_open, without limits — so the load sees no error; a key never
// verified is refused with 503 (the store cannot tell), and a request
// that can never fit is still a 400. Once Redis is back every gateway
// serves again within a few seconds, with the store's limits enforced.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redis := env.StartRedis(t)
	const failOpen = 2 // the gateway with tenants.fail_open
	c := harness.Start(t, env, harness.Options{
		Gateways: 3, Redis: true, RedisAddr: redis.Addr,
		EditGateway: func(i int, cfg *config.Config) { cfg.Tenants.FailOpen = i == failOpen },
		Workers:     harness.Single(harness.ModelTiny),
	})
	steady := newTenant(t, c, 0, "steady", 0, tenant.Limits{}).Key
	idle := newTenant(t, c, 1, "idle", 0, tenant.Limits{}).Key
	limited := newTenant(t, c, 2, "limited", 0, tenant.Limits{RequestsPerMinute: 2}).Key
	want, err := reference(t, harness.ModelTiny).Completion(ctx, "Hello", 8)
	if err != nil {
		t.Fatal(err)
	}
	body := completionBody(harness.ModelTiny, "Hello", 8)

	// The steady load: one client per gateway, a request every 50 ms.
	var (
		phase   atomic.Int32
		mu      sync.Mutex
		samples []outageSample
		wg      sync.WaitGroup
		okSeen  = make([]atomic.Int32, len(c.Gateways))
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	for i := range c.Gateways {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				p := int(phase.Load())
				a, err := call(loadCtx, c, i, steady, "/v1/completions", body)
				if loadCtx.Err() != nil {
					return
				}
				if err != nil {
					t.Errorf("gateway-%d: %v", i, err)
					return
				}
				if a.status == http.StatusOK {
					if _, err := completionError(a, want); err != nil {
						t.Error(err)
					}
					okSeen[i].Add(1)
				}
				mu.Lock()
				samples = append(samples, outageSample{a, p})
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	waitUntil(t, "every gateway to serve the load", func() error {
		for i := range c.Gateways {
			if okSeen[i].Load() < 3 {
				return fmt.Errorf("gateway-%d: %d answered", i, okSeen[i].Load())
			}
		}
		return nil
	})

	phase.Store(phaseOutage)
	killedAt := time.Now() // a request answered from now on may have met the outage
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed Redis %s (SIGKILL)", redis.Addr)

	// Degraded mode: a key verified within the grace authenticates and is
	// admitted under the gateway's share of its tenant's limits (none for
	// steady), or with fail_open without any check.
	for i := range c.Gateways {
		a := mustCall(t, c, i, steady, "/v1/completions", body)
		checkCompletion(t, a, want)
		t.Logf("gateway-%d admitted a verified key without Redis in %v", i, a.done.Sub(a.sent).Round(time.Millisecond))
	}
	// A key no gateway verified cannot be checked: 503 everywhere, even
	// with fail_open, never a 401 (the key may be valid) or a 200.
	for _, i := range []int{0, failOpen} {
		checkDenied(t, mustCall(t, c, i, idle, "/v1/completions", body), http.StatusServiceUnavailable, "service_unavailable")
	}
	// Bad requests are still told so.
	checkNeverFits(t, c, steady)
	if _, err := c.Gateways[1].Admin.ListTenants(ctx); !isAdminError(err, http.StatusServiceUnavailable, adminclient.CodeStoreUnavailable) {
		t.Errorf("admin API without Redis: %v, want 503 %s", err, adminclient.CodeStoreUnavailable)
	}
	if ws, err := c.Gateways[1].Admin.Workers(ctx); err != nil || len(ws) != 1 || !ws[0].Healthy {
		t.Errorf("admin API workers without Redis: %+v, %v", ws, err)
	}
	for i, g := range c.Gateways {
		for _, path := range []string{"/healthz", "/readyz"} {
			if status := get(t, g, path); status != http.StatusOK {
				t.Errorf("gateway-%d %s without Redis: %d", i, path, status)
			}
		}
	}
	// Let the load run into the outage for a while.
	time.Sleep(2*time.Second - time.Since(killedAt))

	redis.Restart(t)
	phase.Store(phaseAfter)
	restartedAt := time.Now()
	outage := restartedAt.Sub(killedAt)
	var recovered []time.Duration
	for i := range c.Gateways {
		waitUntil(t, fmt.Sprintf("gateway-%d to admit requests again", i), func() error {
			a, err := call(ctx, c, i, steady, "/v1/completions", body)
			if err != nil {
				return err
			}
			if a.status != http.StatusOK {
				return errors.New(a.String())
			}
			return nil
		})
		recovered = append(recovered, time.Since(restartedAt).Round(time.Millisecond))
	}
	t.Logf("Redis down for %v; after its restart the gateways admitted requests again after %v", outage.Round(time.Millisecond), recovered)
	for i, d := range recovered {
		if d > 10*time.Second {
			t.Errorf("gateway-%d took %v to recover, want a few seconds", i, d)
		}
	}

	// The data survived (append-only file): the key no gateway had seen
	// works, and the limits are enforced again, on every gateway.
	checkCompletion(t, mustCall(t, c, 0, idle, "/v1/completions", body), want)
	checkCompletion(t, mustCall(t, c, 0, limited, "/v1/completions", body), want)
	checkCompletion(t, mustCall(t, c, 1, limited, "/v1/completions", body), want)
	checkDenied(t, mustCall(t, c, failOpen, limited, "/v1/completions", body), http.StatusTooManyRequests, "rate_limit_exceeded")
	time.Sleep(500 * time.Millisecond) // some load after the recovery
	stopLoad()
	wg.Wait()

	// The load saw only 200s: its key was verified before the outage.
	counts := map[string]int{}
	var slowest time.Duration
	for _, s := range samples {
		counts[fmt.Sprintf("gateway-%d %s %d", s.gateway, phaseNames[s.phase], s.status)]++
		switch {
		case s.status == http.StatusOK:
			if s.phase == phaseOutage {
				slowest = max(slowest, s.done.Sub(s.sent))
			}
		default:
			t.Errorf("%s: %v", phaseNames[s.phase], s)
		}
	}
	t.Logf("load answers by gateway, phase and status: %v; slowest 200 during the outage %v", counts, slowest.Round(time.Millisecond))
	for i := range c.Gateways {
		if counts[fmt.Sprintf("gateway-%d outage 200", i)] == 0 {
			t.Errorf("gateway-%d answered nothing of the load during the outage", i)
		}
	}
	for i, g := range c.Gateways {
		if !g.Running() {
			t.Errorf("gateway-%d is not running", i)
		}
		if strings.Contains(g.Log(), "panic") {
			t.Errorf("gateway-%d panicked:\n%s", i, g.LogTail(40))
		}
	}
}

// isAdminError reports whether err is an admin API answer with status and
// code.
func isAdminError(err error, status int, code string) bool {
	var e *adminclient.Error
	return errors.As(err, &e) && e.Status == status && e.Code == code
}

// get returns the status of a GET of path on g's API.
func get(t *testing.T, g *harness.Gateway, path string) int {
	t.Helper()
	resp, err := g.HTTP.Get(g.APIURL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitUntil polls check until it returns nil, failing the test after
// harness.WaitTimeout.
func waitUntil(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(harness.WaitTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: gave up after %v: %v", what, harness.WaitTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServed waits until served, a count of requests served, has grown by
// n from its value at the call; what names the wait in a failure.
func waitServed(t *testing.T, what string, served func() int64, n int64) {
	t.Helper()
	from := served()
	waitUntil(t, what, func() error {
		if got := served() - from; got < n {
			return fmt.Errorf("%d served", got)
		}
		return nil
	})
}
