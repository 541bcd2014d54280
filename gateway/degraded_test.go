package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// modelContext returns tiny's context_length on /v1/models (0 when the
// model is not listed).
func (tg *testGateway) modelContext() int64 {
	code, body := tg.get("/v1/models")
	if code != http.StatusOK {
		tg.t.Fatalf("/v1/models: %d %s", code, body)
	}
	var list struct {
		Data []struct {
			ID      string `json:"id"`
			Context int64  `json:"context_length"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		tg.t.Fatal(err)
	}
	for _, m := range list.Data {
		if m.ID == "tiny" {
			return m.Context
		}
	}
	return 0
}

// TestQuarantineLowersTheAdvertisedContext (I12): pages a worker
// quarantines lower the advertised and enforced context to what its pool
// holds now; a request that cannot fit now is a 400 at once with the
// counts (never a wait ending in 429), one that fits is served; the
// degradation is a metric and shows in the admin API; a fully quarantined
// model is not ready; released pages bring the context back.
func TestQuarantineLowersTheAdvertisedContext(t *testing.T) {
	cfg := testConfig() // tiny: context 2048
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
	waitFor(t, "the configured context", func() bool { return tg.modelContext() == 2048 })

	w.quarantine(200) // 56 usable pages: 896 tokens
	waitFor(t, "the context to shrink", func() bool { return tg.modelContext() == 896 })
	if v := tg.metric("warden_model_context_degraded", map[string]string{"model": "tiny"}); v != 1 {
		t.Errorf("warden_model_context_degraded = %v, want 1", v)
	}
	if v := tg.metric("warden_model_usable_context_tokens", map[string]string{"model": "tiny"}); v != 896 {
		t.Errorf("warden_model_usable_context_tokens = %v, want 896", v)
	}
	code, body := tg.admin(http.MethodGet, "/admin/v1/models")
	if code != http.StatusOK || !strings.Contains(string(body), `"degraded":true`) || !strings.Contains(string(body), `"usable_context":896`) {
		t.Errorf("admin models: %d %s", code, body)
	}

	start := time.Now()
	code, hdr, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "Say hello.", "max_tokens": 1000})
	e := decodeEnvelope(t, body)
	if code != http.StatusBadRequest || str(e.Error.Code) != "context_length_exceeded" || !strings.Contains(e.Error.Message, "896") ||
		!strings.Contains(e.Error.Message, "1000") || hdr.Get("Retry-After") != "" {
		t.Errorf("a request that cannot fit now: %d %s", code, body)
	}
	if waited := time.Since(start); waited > cfg.Gateway.Queue.MaxWait/2 {
		t.Errorf("the 400 came after %s: it waited", waited)
	}
	resp, err := tg.api().chat(context.Background(), chatParams(100))
	if err != nil || resp.Choices[0].Message.Content != fakeReply {
		t.Fatalf("a request that fits: %v", err)
	}
	if err := tg.Ready(); err != nil {
		t.Errorf("not ready with a usable pool: %v", err)
	}

	w.quarantine(56) // nothing usable
	waitFor(t, "the model to stop being served", func() bool { return tg.Ready() != nil })
	code, hdr, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "Say hello.", "max_tokens": 5})
	if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "model_unavailable" ||
		hdr.Get("Retry-After") == "" || strings.Contains(e.Error.Message, w.id) {
		t.Errorf("a fully quarantined model: %d %v %s", code, hdr, body)
	}

	w.mu.Lock()
	w.free, w.quarantined = w.total, 0
	w.mu.Unlock()
	waitFor(t, "the context to come back", func() bool { return tg.modelContext() == 2048 })
	if v := tg.metric("warden_model_context_degraded", map[string]string{"model": "tiny"}); v != 0 {
		t.Errorf("warden_model_context_degraded = %v after the release, want 0", v)
	}
}

// TestFailoverToAnotherPrefill: a prefill worker whose connection is
// refused is marked suspect at once (long before its heartbeat timeout)
// and the request that found it dead is placed again on the other prefill
// worker with the same ticket: no request fails, every answer is the
// reference reply, and the failover is counted.
func TestFailoverToAnotherPrefill(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.HeartbeatTimeout = time.Minute // only the refused connection can tell
	tg := startGateway(t, cfg)
	fab := &fabric{}
	newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab).start()
	// The dead one has the smaller ID: picked first on ties (fake IDs
	// count up across the package's tests, "fake-100" < "fake-99").
	dead, alive := newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab), newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab)
	dead.id, alive.id = "0-"+dead.id, "1-"+alive.id
	dead.start()
	alive.start()
	dead.kill() // its port now refuses connections

	for i := range 6 {
		resp, err := tg.api().chat(context.Background(), chatParams(100))
		if err != nil {
			t.Fatalf("request %d after the prefill worker died: %v", i, err)
		}
		if got := resp.Choices[0].Message.Content; got != fakeReply {
			t.Fatalf("request %d: %q, want %q", i, got, fakeReply)
		}
	}
	if w, ok := tg.reg.Get(dead.id); !ok || w.Snapshot().Healthy {
		t.Errorf("the dead prefill worker is still healthy in routing")
	}
	if v := tg.metric("warden_failovers_total", nil); v < 1 {
		t.Errorf("warden_failovers_total = %v, want ≥ 1", v)
	}
	if n := len(alive.requestCalls()); n != 6 {
		t.Errorf("the live prefill worker served %d requests, want 6", n)
	}
}

// redisGateways starts n gateways sharing one Redis tenant store under a
// key prefix of their own (setRedis says where the store is), each with
// a fake worker whose Generate passes its valve (open until shut), and
// waits until each is ready and counts the others as live.
func redisGateways(t *testing.T, n int, setRedis func(*config.Redis)) ([]*testGateway, *valve) {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "key-secret")
	if err := os.WriteFile(secret, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.UniquePrefix()
	v := newValve(t)
	var gws []*testGateway
	for range n {
		cfg := testConfig()
		cfg.Tenants.Store, cfg.Tenants.KeySecretFile, cfg.Tenants.Redis.KeyPrefix = config.StoreRedis, secret, prefix
		setRedis(&cfg.Tenants.Redis)
		tg := startGateway(t, cfg)
		w := newFake(tg, controlpb.Role_ROLE_BOTH, 1024, nil)
		w.holdTokens = v.ch
		w.start()
		waitFor(t, "the gateway to be ready", func() bool { return tg.Ready() == nil })
		gws = append(gws, tg)
	}
	for _, tg := range gws {
		waitFor(t, "each gateway to count the live gateways", func() bool { return tg.failover.Gateways() == n })
	}
	return gws, v
}

// valve lets fake workers' Generate through while open (one receive
// each from ch) and holds them while shut.
type valve struct {
	ch  chan struct{}
	ctl chan bool
}

func newValve(t *testing.T) *valve {
	v := &valve{ch: make(chan struct{}), ctl: make(chan bool)}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		open := true
		for {
			send := v.ch
			if !open {
				send = nil
			}
			select {
			case send <- struct{}{}:
			case open = <-v.ctl:
			case <-done:
				return
			}
		}
	}()
	return v
}

func (v *valve) set(open bool) { v.ctl <- open }

// tenantKey creates the tenant in tg's store and issues it a key.
func tenantKey(t *testing.T, tg *testGateway, tn tenant.Tenant) string {
	t.Helper()
	if _, err := tg.Store().CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	key, _, err := tg.Store().IssueKey(context.Background(), tn.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	return key
}

var helloBody = map[string]any{"model": "tiny", "messages": []map[string]string{{"role": "user", "content": "Say hello."}}, "max_tokens": 40}

// chatReply checks a 200 answer's content and returns its usage.
func chatReply(t *testing.T, code int, body []byte) (prompt, completion int64) {
	t.Helper()
	var r struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); code != http.StatusOK || err != nil || len(r.Choices) != 1 || r.Choices[0].Message.Content != fakeReply {
		t.Fatalf("want %q: %d %s (%v)", fakeReply, code, body, err)
	}
	return r.Usage.Prompt, r.Usage.Completion
}

// untilDenied sends helloBody with key through tg until a denial, checks
// every answer before it and that the denial is a 429 rate limit with
// Retry-After, and returns how many were served.
func untilDenied(t *testing.T, tg *testGateway, key string, most int) int {
	t.Helper()
	for n := 0; ; n++ {
		code, hdr, body := tg.postKey(key, "/v1/chat/completions", helloBody)
		if code != http.StatusOK {
			if e := decodeEnvelope(t, body); code != http.StatusTooManyRequests || str(e.Error.Code) != "rate_limit_exceeded" || hdr.Get("Retry-After") == "" {
				t.Fatalf("after %d served: %d %v %s, want 429 rate_limit_exceeded with Retry-After", n, code, hdr, body)
			}
			return n
		}
		chatReply(t, code, body)
		if n >= most {
			t.Fatalf("more than %d requests served", most)
		}
	}
}

// TestStoreOutageServesKnownTenantsUnderLocalShares: while the Redis
// tenant store is down, two gateways keep serving a key they verified,
// each under its share (half) of what the store last had left of the
// tenant's requests per minute, never more in all than was left; a key
// they never verified is refused with 503 service_unavailable and
// Retry-After, not 401 or 500; warden_tenant_store_degraded is 1. When
// Redis is back the gauge is 0 and the usage of the requests served
// locally is recorded in the store.
func TestStoreOutageServesKnownTenantsUnderLocalShares(t *testing.T) {
	t.Parallel()              // waits on timers, failovers and heartbeats: it overlaps with the others
	srv := redistest.Start(t) // persisted: it restarts with its data
	gws, _ := redisGateways(t, 2, func(r *config.Redis) { r.Addr = srv.Addr })
	const rpm = 8
	key := tenantKey(t, gws[0], tenant.Tenant{ID: "lim", Limits: tenant.Limits{RequestsPerMinute: rpm}})
	unseen := tenantKey(t, gws[0], tenant.Tenant{ID: "unseen"})
	start := time.Now()
	for _, tg := range gws { // each verifies the key; the store has 6 left
		code, _, body := tg.postKey(key, "/v1/chat/completions", helloBody)
		chatReply(t, code, body)
	}

	srv.Kill()
	for _, tg := range gws {
		waitFor(t, "degraded mode", func() bool { return tg.metric("warden_tenant_store_degraded", nil) == 1 })
	}
	for _, tg := range gws {
		code, hdr, body := tg.postKey(unseen, "/v1/chat/completions", helloBody)
		if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "service_unavailable" ||
			hdr.Get("Retry-After") == "" || !strings.Contains(e.Error.Message, "tenant store is unavailable") {
			t.Errorf("a key never verified during the outage: %d %v %s", code, hdr, body)
		}
	}
	served := make([]int, len(gws))
	total := 0
	for i, tg := range gws {
		served[i] = untilDenied(t, tg, key, rpm)
		total += served[i]
	}
	// gateway 0 saw 7 left, gateway 1 saw 6: shares of 3 each, plus
	// what refilled meanwhile (rpm a minute, for the fleet).
	refill := int(math.Ceil(time.Since(start).Minutes() * rpm))
	for i, n := range served {
		if n < 3 || n > 3+refill {
			t.Errorf("gateway %d served %d during the outage, want its share 3 (+%d refilled)", i, n, refill)
		}
	}
	if total > rpm-2+refill {
		t.Errorf("the gateways served %d during the outage, more than the %d (+%d refilled) the store had left", total, rpm-2, refill)
	}

	srv.Restart()
	for _, tg := range gws {
		waitFor(t, "the end of degraded mode", func() bool { return tg.metric("warden_tenant_store_degraded", nil) == 0 })
	}
	waitFor(t, "the outage's usage to reach the store", func() bool {
		u, err := gws[0].Store().Usage(context.Background(), "lim", time.Now(), time.Now())
		return err == nil && len(u) == 1 && u[0].Requests == int64(2+total)
	})
	code, _, body := gws[1].postKey(unseen, "/v1/chat/completions", helloBody)
	chatReply(t, code, body)
}

// TestStoreClusterFailover: two gateways on a Redis Cluster of three
// masters with a replica each, under load from four clients; the master
// holding the store's keys is SIGKILLed. Errors (if any) last no longer
// than Redis's own failover plus 2 s, and are 503s with Retry-After;
// every other request is answered with the reference reply; each
// gateway's degraded mode ends within the same bound. Afterwards the
// store's limits are exact again across both gateways: requests per
// minute, tokens per minute and max_concurrent, and acme holds no lease.
func TestStoreClusterFailover(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	cluster := redistest.StartClusterWith(t, redistest.ClusterConfig{Replicas: true, NodeTimeout: time.Second})
	gws, v := redisGateways(t, 2, func(r *config.Redis) {
		r.Cluster, r.Addrs = true, append(slices.Clone(cluster.Addrs), cluster.Replicas...)
	})
	prefix := gws[0].cfg.Tenants.Redis.KeyPrefix
	var failedOver time.Time
	underFailover(t, gws, func(ctx context.Context) (string, error) {
		old := cluster.KillMasterOf(t, prefix+"x")
		master, err := cluster.WaitFailover(ctx, prefix+"x", old)
		failedOver = time.Now()
		return fmt.Sprintf("master %s failed over to %s", old, master), err
	})

	// The store's limits are exact again, across both gateways.
	const rpm = 6
	key := tenantKey(t, gws[0], tenant.Tenant{ID: "rpm", Limits: tenant.Limits{RequestsPerMinute: rpm}})
	start := time.Now()
	served := 0
	for i := 0; ; i++ {
		code, hdr, body := gws[i%2].postKey(key, "/v1/chat/completions", helloBody)
		if code != http.StatusOK {
			if e := decodeEnvelope(t, body); code != http.StatusTooManyRequests || str(e.Error.Code) != "rate_limit_exceeded" || hdr.Get("Retry-After") == "" {
				t.Fatalf("request %d: %d %s", i, code, body)
			}
			break
		}
		chatReply(t, code, body)
		served++
	}
	if refill := int(math.Ceil(time.Since(start).Minutes() * rpm)); served < rpm || served > rpm+refill {
		t.Errorf("requests per minute %d: %d served (+%d refilled)", rpm, served, refill)
	}

	// Tokens per minute: each request holds prompt + max_tokens, then is
	// charged what it used (u); room for exactly 3.
	code, _, body := gws[0].post("/v1/chat/completions", helloBody)
	p, c := chatReply(t, code, body)
	u, hold := p+c, p+int64(helloBody["max_tokens"].(int))
	tpm := hold + 2*u
	key = tenantKey(t, gws[0], tenant.Tenant{ID: "tpm", Limits: tenant.Limits{TokensPerMinute: tpm}})
	start = time.Now()
	if served, refill := untilDenied(t, gws[1], key, 100), int(math.Ceil(time.Since(start).Minutes()*float64(tpm)/float64(u))); served < 3 || served > 3+refill {
		t.Errorf("tokens per minute %d (requests hold %d, use %d): %d served (+%d refilled)", tpm, hold, u, served, refill)
	}

	// max_concurrent: with the workers holding every request, 3 of 5
	// are admitted across the gateways, 2 refused at once; the 3 are
	// served when the workers go on.
	key = tenantKey(t, gws[0], tenant.Tenant{ID: "conc", Limits: tenant.Limits{MaxConcurrent: 3}})
	v.set(false)
	type answer struct {
		code int
		body []byte
	}
	answers := make(chan answer, 5)
	for i := range 5 {
		go func() {
			code, _, body := gws[i%2].postKey(key, "/v1/chat/completions", helloBody)
			answers <- answer{code, body}
		}()
	}
	for range 2 {
		a := <-answers
		if e := decodeEnvelope(t, a.body); a.code != http.StatusTooManyRequests || !strings.Contains(e.Error.Message, "concurrency") {
			t.Errorf("over max_concurrent: %d %s", a.code, a.body)
		}
	}
	v.set(true)
	for range 3 {
		a := <-answers
		chatReply(t, a.code, a.body)
	}

	// No lease leaked: every lease acme took after the failover is
	// released. Redis replicates asynchronously, so a release the old
	// master took in its last moments may not have reached the replica
	// that replaced it: such a lease (at most one per client in flight at
	// the kill, each taken before the failover) holds its slot until its
	// TTL, as docs/tenants.md says. A lease's score is its expiry in
	// microseconds on the server's clock.
	cl := cluster.NewClient(t)
	var left []redis.Z
	defer func() {
		if t.Failed() {
			for _, z := range left {
				t.Logf("acme lease %v expires %v after the failover was seen", z.Member, time.UnixMicro(int64(z.Score)).Sub(failedOver))
			}
		}
	}()
	waitFor(t, "acme's leases taken after the failover to be released", func() bool {
		var err error
		left, err = cl.ZRangeWithScores(context.Background(), prefix+"cc:acme", 0, -1).Result()
		if err != nil || len(left) > 4 {
			return false
		}
		for _, z := range left {
			if expires := time.UnixMicro(int64(z.Score)); expires.After(failedOver.Add(redisstore.DefaultLeaseTTL + time.Second)) {
				return false
			}
		}
		return true
	})
	if len(left) > 0 {
		t.Logf("%d lease(s) of acme taken before the failover lost their release with the old master; they expire at their TTL", len(left))
	}
}

// underFailover runs four clients through gws (two each) while fail
// kills the store's master and waits until Redis has failed over,
// measuring Redis's failover time; then it checks that errors, if any,
// lasted no longer than that plus 2 s and were 503s with Retry-After,
// that every other answer is the reference, and that each gateway's
// degraded mode ended within the same bound.
func underFailover(t *testing.T, gws []*testGateway, fail func(ctx context.Context) (string, error)) {
	t.Helper()
	type result struct {
		start, end time.Time
		code       int
		hdr        http.Header
		body       []byte
	}
	var (
		mu      sync.Mutex
		results []result
	)
	served := func(since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.code == http.StatusOK && r.start.After(since) {
				n++
			}
		}
		return n
	}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for i := range 4 {
		tg := gws[i%len(gws)]
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := result{start: time.Now()}
				r.code, r.hdr, r.body = tg.post("/v1/chat/completions", helloBody)
				r.end = time.Now()
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			}
		})
	}
	var lastDegraded atomic.Int64 // unix ns a gateway was last seen degraded
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			for _, tg := range gws {
				if tg.failover.Degraded() {
					lastDegraded.Store(time.Now().UnixNano())
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	waitFor(t, "load before the kill", func() bool { return served(time.Time{}) >= 20 })

	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	what, err := fail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	redisFailover := time.Since(killed)
	waitFor(t, "every gateway out of degraded mode", func() bool {
		return !slices.ContainsFunc(gws, func(tg *testGateway) bool { return tg.failover.Degraded() })
	})
	after := time.Now()
	waitFor(t, "load after the failover", func() bool { return served(after) >= 20 })
	close(stop)
	clients.Wait()
	<-watchDone

	bound := redisFailover + 2*time.Second
	var firstErr, lastErr time.Time
	failed := 0
	for _, r := range results {
		if r.code == http.StatusOK {
			chatReply(t, r.code, r.body)
			continue
		}
		failed++
		if e := decodeEnvelope(t, r.body); r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" {
			t.Errorf("a failed request: %d %v %s (%s)", r.code, r.hdr, r.body, str(e.Error.Code))
		}
		if firstErr.IsZero() || r.start.Before(firstErr) {
			firstErr = r.start
		}
		if r.end.After(lastErr) {
			lastErr = r.end
		}
	}
	window := lastErr.Sub(firstErr)
	var degraded time.Duration
	if d := lastDegraded.Load(); d != 0 {
		degraded = time.Unix(0, d).Sub(killed)
	}
	t.Logf("%s in %v (Redis); %d requests, %d failed within %v; degraded until %v after the kill",
		what, redisFailover.Round(time.Millisecond), len(results), failed, window.Round(time.Millisecond), degraded.Round(time.Millisecond))
	if window > bound {
		t.Errorf("errors lasted %v, more than Redis's failover (%v) + 2s", window, redisFailover)
	}
	if degraded > bound {
		t.Errorf("degraded mode lasted %v after the kill, more than Redis's failover (%v) + 2s", degraded, redisFailover)
	}
}

// TestStoreSentinelFailover: two gateways reach the store through Redis
// Sentinel; the master is SIGKILLed under load and the sentinel promotes
// its replica. As with a cluster, errors (if any) last no longer than
// the failover plus 2 s, and afterwards the gateways write to the new
// master: a tenant created then is served.
func TestStoreSentinelFailover(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	s := redistest.StartSentinel(t, time.Second)
	gws, _ := redisGateways(t, 2, func(r *config.Redis) {
		r.Sentinel = config.Sentinel{MasterName: redistest.SentinelMaster, Addrs: []string{s.Addr}}
	})
	underFailover(t, gws, func(ctx context.Context) (string, error) {
		s.Master.Kill()
		return fmt.Sprintf("master %s failed over to %s", s.Master.Addr, s.Replica.Addr), s.WaitFailover(ctx)
	})
	key := tenantKey(t, gws[1], tenant.Tenant{ID: "after", Limits: tenant.Limits{RequestsPerMinute: 2}})
	for _, tg := range gws {
		code, _, body := tg.postKey(key, "/v1/chat/completions", helloBody)
		chatReply(t, code, body)
	}
	if n := untilDenied(t, gws[0], key, 1); n != 0 {
		t.Errorf("a third request within the minute: served, want refused")
	}
}
