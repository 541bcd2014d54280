package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warden-ai/warden/tenant"
)

func testAcquireChecks(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{
		RequestsPerMinute: 2, AllowedModels: []string{"m1", "m3"}, MaxPriority: 3,
	}})
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m2"}, tenant.ErrModelNotAllowed)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindModel})
	le = e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m1", Priority: 4}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 3})
	for what, req := range map[string]tenant.AcquireRequest{
		"tokens":   {Model: "m1", Tokens: -1},
		"priority": {Model: "m1", Priority: -1},
		"model":    {Model: ""},
	} {
		_, err := e.a.Acquire(e.ctx, "acme", req)
		wantErr(t, "Acquire with bad "+what, err, tenant.ErrInvalid, what)
	}
	// Denials consumed nothing: both requests of the minute are left.
	l := e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m1", Priority: 3, Tokens: 7})
	info := l.Info()
	if info.TenantID != "acme" || info.Model != "m1" || info.Priority != 3 || info.HeldTokens != 7 || info.Degraded ||
		!info.AcquiredAt.Equal(e.clock.Now()) || !info.ExpiresAt.Equal(e.clock.Now().Add(LeaseTTL)) || info.ID == "" {
		t.Fatalf("lease info %+v", info)
	}
	wantQuota(t, "first lease", info.Quota, tenant.Quota{LimitRequests: 2, RemainingRequests: 1, ResetRequests: 30 * time.Second})

	tn, _ := e.a.GetTenant(e.ctx, "acme")
	tn.Disabled = true
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	_, err := e.b.Acquire(e.ctx, "acme", tenant.AcquireRequest{Model: "m1"})
	wantErr(t, "Acquire for disabled tenant", err, tenant.ErrForbidden, "disabled")
	var le2 *tenant.LimitError
	if errors.As(err, &le2) {
		t.Fatalf("disabled tenant reported as a limit: %+v", le2)
	}
}

func testRequestsPerMinute(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 5}})
	req := tenant.AcquireRequest{Model: "m", Tokens: 100}
	for i := int64(1); i <= 5; i++ {
		s := []tenant.Store{e.a, e.b}[i%2]
		l := e.acquire(s, "acme", req)
		wantQuota(t, fmt.Sprintf("request %d", i), l.Info().Quota, tenant.Quota{
			LimitRequests: 5, RemainingRequests: 5 - i, ResetRequests: time.Duration(i) * 12 * time.Second,
		})
		e.release(l, 10, 10) // releasing does not give requests back
	}
	le := e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	q := tenant.Quota{LimitRequests: 5, ResetRequests: time.Minute}
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindRequests, Limit: 5, Reset: time.Minute, RetryAfter: 12 * time.Second, Quota: q})

	// The bucket refills one request per 12 s.
	e.clock.Advance(6 * time.Second)
	le = e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	if le.RetryAfter != 6*time.Second || le.Reset != 54*time.Second {
		t.Fatalf("after 6s: retry after %v reset %v, want 6s and 54s", le.RetryAfter, le.Reset)
	}
	e.clock.Advance(6 * time.Second)
	l := e.acquire(e.b, "acme", req)
	wantQuota(t, "after 12s", l.Info().Quota, tenant.Quota{LimitRequests: 5, RemainingRequests: 0, ResetRequests: time.Minute})
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)

	// After a quiet minute the bucket is full, and never fuller.
	e.clock.Advance(10 * time.Minute)
	for range 5 {
		e.acquire(e.a, "acme", req)
	}
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
}

func testTokens(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 3, TokensPerMinute: 1000}})
	tok := func(n int64) tenant.AcquireRequest { return tenant.AcquireRequest{Model: "m", Tokens: n} }
	a := e.acquire(e.a, "acme", tok(600))
	wantQuota(t, "hold 600", a.Info().Quota, tenant.Quota{
		LimitRequests: 3, RemainingRequests: 2, ResetRequests: 20 * time.Second,
		LimitTokens: 1000, RemainingTokens: 400, ResetTokens: 36 * time.Second,
	})
	le := e.deny(e.b, "acme", tok(500), tenant.ErrRateLimited)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindTokens, Limit: 1000, Remaining: 400, Reset: 36 * time.Second,
		RetryAfter: 6 * time.Second, Quota: a.Info().Quota})

	// Release refunds what was held but not used: 600 held, 150 used.
	e.release(a, 100, 50)
	b := e.acquire(e.b, "acme", tok(500))
	wantQuota(t, "after refund", b.Info().Quota, tenant.Quota{
		LimitRequests: 3, RemainingRequests: 1, ResetRequests: 40 * time.Second,
		LimitTokens: 1000, RemainingTokens: 350, ResetTokens: 39 * time.Second,
	})
	// ...and charges what was used beyond the hold: 500 held, 700 used.
	e.release(b, 400, 300)
	le = e.deny(e.a, "acme", tok(200), tenant.ErrRateLimited)
	if le.Kind != tenant.KindTokens || le.Remaining != 150 || le.RetryAfter != 3*time.Second {
		t.Fatalf("after extra charge: %+v, want 150 tokens left, retry after 3s", le)
	}
	e.clock.Advance(3 * time.Second) // refills 50 tokens (and 0.15 requests)
	c := e.acquire(e.a, "acme", tok(200))
	if q := c.Info().Quota; q.RemainingTokens != 0 || q.RemainingRequests != 0 {
		t.Fatalf("quota %+v, want no tokens and no requests left", q)
	}

	// Usage beyond the hold can put the bucket in debt; it then blocks even
	// requests that hold nothing until it is paid back.
	e.release(c, 1000, 200)
	le = e.deny(e.b, "acme", tok(0), tenant.ErrRateLimited)
	if le.Kind != tenant.KindRequests {
		t.Fatalf("kind %q, want requests", le.Kind)
	}
	e.clock.Advance(time.Minute) // requests full again; tokens at -1000 + 1000 = 0
	le = e.deny(e.b, "acme", tok(1), tenant.ErrRateLimited)
	if le.Kind != tenant.KindTokens || le.Remaining != 0 || le.RetryAfter != 60*time.Millisecond {
		t.Fatalf("after paying back the debt: %+v, want 0 tokens left, retry after 60ms", le)
	}
	e.acquire(e.a, "acme", tok(0))
}

func testTooLarge(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 1000, Budget: 5000}})
	e.create(e.a, tenant.Tenant{ID: "small", Limits: tenant.Limits{Budget: 500}})
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m", Tokens: 1001}, tenant.ErrRequestTooLarge)
	if le.Kind != tenant.KindTokens || !le.Unsatisfiable || le.RetryAfter != 0 || le.Limit != 1000 || errors.Is(le, tenant.ErrRateLimited) {
		t.Fatalf("oversized request: %+v", le)
	}
	le = e.deny(e.b, "small", tenant.AcquireRequest{Model: "m", Tokens: 501}, tenant.ErrRequestTooLarge)
	if le.Kind != tenant.KindBudget || !le.Unsatisfiable || le.Limit != 500 || errors.Is(le, tenant.ErrInsufficientQuota) {
		t.Fatalf("request above the whole budget: %+v", le)
	}
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m", Tokens: 1000})
	e.acquire(e.a, "small", tenant.AcquireRequest{Model: "m", Tokens: 500})
}

// testFlexible checks requests without a fixed output budget: they hold
// what the token rate and budget have left, down to their minimum.
func testFlexible(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: 1000, Budget: 1500}})
	flex := func(tokens, minTokens int64) tenant.AcquireRequest {
		return tenant.AcquireRequest{Model: "m", Tokens: tokens, MinTokens: minTokens}
	}
	if got := e.acquire(e.a, "acme", flex(800, 10)).Info().HeldTokens; got != 800 {
		t.Fatalf("flexible request with room: held %d, want all 800", got)
	}
	l := e.acquire(e.b, "acme", flex(5000, 10)) // 200 left in the bucket
	if got := l.Info().HeldTokens; got != 200 || l.Info().Quota.RemainingTokens != 0 {
		t.Fatalf("flexible request: held %d (quota %+v), want the 200 left", got, l.Info().Quota)
	}
	le := e.deny(e.a, "acme", flex(5000, 10), tenant.ErrRateLimited)
	if le.Kind != tenant.KindTokens || le.RetryAfter != 600*time.Millisecond {
		t.Fatalf("flexible request on an empty bucket: %+v, want tokens, retry after the minimum's 600ms", le)
	}
	e.release(l, 20, 30) // refunds 150
	e.clock.Advance(time.Minute)
	// The bucket is full again; the budget has 1500-800-50 = 650 left.
	if got := e.acquire(e.b, "acme", flex(5000, 10)).Info().HeldTokens; got != 650 {
		t.Fatalf("flexible request under the budget: held %d, want 650", got)
	}
	le = e.deny(e.a, "acme", flex(5000, 10), tenant.ErrInsufficientQuota)
	if le.Kind != tenant.KindBudget || le.Remaining != 0 {
		t.Fatalf("flexible request with the budget spent: %+v", le)
	}
	e.create(e.a, tenant.Tenant{ID: "tiny", Limits: tenant.Limits{TokensPerMinute: 100}})
	le = e.deny(e.b, "tiny", flex(5000, 101), tenant.ErrRequestTooLarge)
	if le.Kind != tenant.KindTokens || !le.Unsatisfiable {
		t.Fatalf("flexible request whose minimum exceeds the limit: %+v", le)
	}
}

func testConcurrency(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{MaxConcurrent: 2}})
	req := tenant.AcquireRequest{Model: "m"}
	l1 := e.acquire(e.a, "acme", req)
	l2 := e.acquire(e.b, "acme", req)
	le := e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindConcurrency, Limit: 2, RetryAfter: tenant.ConcurrencyRetryAfter})
	e.release(l1, 1, 1)
	err := l1.Release(e.ctx, tenant.Consumed{})
	wantErr(t, "second Release", err, tenant.ErrLeaseReleased)
	wantErr(t, "Renew after Release", l1.Renew(e.ctx), tenant.ErrLeaseReleased)
	e.acquire(e.b, "acme", req) // l3 takes l1's slot
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)

	// A leaked lease (crashed gateway) frees its slot at ExpiresAt.
	e.clock.Advance(LeaseTTL - time.Second)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	e.clock.Advance(time.Second)
	l4 := e.acquire(e.a, "acme", req)
	l5 := e.acquire(e.b, "acme", req)

	// Renewal keeps a slot past its original expiry.
	e.clock.Advance(LeaseTTL / 2)
	if err := l4.Renew(e.ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if want := e.clock.Now().Add(LeaseTTL); !l4.Info().ExpiresAt.Equal(want) {
		t.Fatalf("renewed lease expires at %v, want %v", l4.Info().ExpiresAt, want)
	}
	e.clock.Advance(LeaseTTL / 2) // l5 expires, l4 does not
	wantErr(t, "Renew of expired lease", l5.Renew(e.ctx), tenant.ErrLeaseExpired)
	e.acquire(e.b, "acme", req)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited)
	// An expired lease can still be released, which records its usage.
	e.release(l5, 3, 4)
	e.release(l2, 0, 0)
	e.deny(e.a, "acme", req, tenant.ErrRateLimited) // l2 and l5 had expired: nothing freed
	e.release(l4, 0, 0)
	e.acquire(e.a, "acme", req)
	u, err := e.b.Usage(e.ctx, "acme", e.clock.Now(), e.clock.Now())
	if err != nil || len(u) != 1 || u[0].Requests != 4 || u[0].PromptTokens != 4 || u[0].CompletionTokens != 5 {
		t.Fatalf("usage %+v, %v; want 4 requests, 4 prompt and 5 completion tokens", u, err)
	}
}

func testLimitsUpdate(e *env) {
	t := e.t
	tn := e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 1}})
	req := tenant.AcquireRequest{Model: "m"}
	e.acquire(e.b, "acme", req)
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	tn.Limits.RequestsPerMinute = 0
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.acquire(e.b, "acme", req)
	tn.Limits.RequestsPerMinute = 2 // the bucket refills up to the new limit
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.acquire(e.b, "acme", req)
	e.acquire(e.b, "acme", req)
	e.deny(e.b, "acme", req, tenant.ErrRateLimited)
	tn.Limits.AllowedModels = []string{"other"}
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.deny(e.b, "acme", req, tenant.ErrModelNotAllowed)
}

// testPriority: MaxPriority 0, the default, allows priority 0 only (it is
// not "unlimited" like the other limits); a set maximum allows exactly up
// to itself, changes apply at once, and a denial charges nothing.
func testPriority(e *env) {
	t := e.t
	tn := e.create(e.a, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 3}})
	if tn.Limits.MaxPriority != 0 {
		t.Fatalf("default MaxPriority %d, want 0", tn.Limits.MaxPriority)
	}
	e.release(e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m"}), 0, 0)
	for _, s := range []tenant.Store{e.a, e.b} {
		le := e.deny(s, "acme", tenant.AcquireRequest{Model: "m", Priority: 1}, tenant.ErrForbidden)
		wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 0})
		if errors.Is(le, tenant.ErrRateLimited) || le.RetryAfter != 0 {
			t.Fatalf("priority denial %+v looks retryable", le)
		}
	}
	le := e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: tenant.MaxRequestPriority}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 0})

	tn.Limits.MaxPriority = 2
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	l := e.acquire(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: 2})
	if l.Info().Priority != 2 {
		t.Fatalf("lease priority %d", l.Info().Priority)
	}
	e.release(l, 0, 0)
	le = e.deny(e.a, "acme", tenant.AcquireRequest{Model: "m", Priority: 3}, tenant.ErrForbidden)
	wantLimit(t, le, tenant.LimitError{Kind: tenant.KindPriority, Limit: 2})
	// The denials charged nothing: the third request of the minute passes,
	// the fourth is rate limited.
	e.acquire(e.a, "acme", tenant.AcquireRequest{Model: "m", Priority: 1})
	e.deny(e.b, "acme", tenant.AcquireRequest{Model: "m"}, tenant.ErrRateLimited)

	tn.Limits.MaxPriority = tenant.MaxRequestPriority
	tn.Limits.RequestsPerMinute = 0
	if _, err := e.a.UpdateTenant(e.ctx, tn); err != nil {
		t.Fatal(err)
	}
	e.acquire(e.b, "acme", tenant.AcquireRequest{Model: "m", Priority: tenant.MaxRequestPriority})
	if got, err := e.b.GetTenant(e.ctx, "acme"); err != nil || got.Limits.MaxPriority != tenant.MaxRequestPriority {
		t.Fatalf("GetTenant: %+v, %v", got.Limits, err)
	}
}

func testUnlimited(e *env) {
	t := e.t
	e.create(e.a, tenant.Tenant{ID: "acme"})
	var leases []*tenant.Lease
	for i := range 50 {
		l := e.acquire([]tenant.Store{e.a, e.b}[i%2], "acme", tenant.AcquireRequest{Model: "m", Tokens: 1_000_000})
		wantQuota(t, "unlimited", l.Info().Quota, tenant.Quota{})
		leases = append(leases, l)
	}
	for _, l := range leases {
		e.release(l, 1_000_000, 1_000_000)
	}
}

// testExactAcrossReplicas fires more concurrent requests than a limit
// allows, split over both replicas, and checks that exactly the limit is
// admitted; flexible requests together never hold more than the limit.
func testExactAcrossReplicas(e *env) {
	t := e.t
	const n, m = 10, 40
	e.create(e.a, tenant.Tenant{ID: "rpm", Limits: tenant.Limits{RequestsPerMinute: n}})
	e.create(e.a, tenant.Tenant{ID: "tpm", Limits: tenant.Limits{TokensPerMinute: n * 100}})
	e.create(e.a, tenant.Tenant{ID: "conc", Limits: tenant.Limits{MaxConcurrent: n / 2}})
	e.create(e.a, tenant.Tenant{ID: "flex", Limits: tenant.Limits{TokensPerMinute: n * 100}})

	burst := func(id string, tokens int64, sentinel error) []*tenant.Lease {
		return e.burst(id, m, tenant.AcquireRequest{Model: "m", Tokens: tokens}, sentinel)
	}
	if got := len(burst("rpm", 0, tenant.ErrRateLimited)); got != n {
		t.Fatalf("rpm limit %d, %d concurrent requests over 2 replicas: %d admitted", n, m, got)
	}

	leases := burst("tpm", 100, tenant.ErrRateLimited)
	if len(leases) != n {
		t.Fatalf("tpm limit %d, %d concurrent requests of 100 tokens: %d admitted", n*100, m, len(leases))
	}
	var wg sync.WaitGroup
	for _, l := range leases {
		wg.Go(func() { e.release(l, 30, 20) }) // each refunds 50 of its 100
	}
	wg.Wait()
	if got := len(burst("tpm", 100, tenant.ErrRateLimited)); got != n/2 {
		t.Fatalf("after refunding %d tokens: %d requests of 100 admitted, want %d", n*50, got, n/2)
	}

	leases = burst("conc", 0, tenant.ErrRateLimited)
	if len(leases) != n/2 {
		t.Fatalf("concurrency limit %d, %d concurrent requests: %d admitted", n/2, m, len(leases))
	}

	// Flexible requests (up to 250 tokens, at least 30) take what is left:
	// together they hold exactly the limit, never more.
	held := int64(0)
	for _, l := range e.burst("flex", m, tenant.AcquireRequest{Model: "m", Tokens: 250, MinTokens: 30}, tenant.ErrRateLimited) {
		held += l.Info().HeldTokens
	}
	if held != n*100 {
		t.Fatalf("flexible requests over 2 replicas hold %d tokens, want exactly the limit %d", held, n*100)
	}
}

// burst fires m concurrent copies of req, alternating replicas, and
// returns the leases granted; every denial must wrap sentinel.
func (e *env) burst(id string, m int, req tenant.AcquireRequest, sentinel error) []*tenant.Lease {
	t := e.t
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		leases   []*tenant.Lease
		wrongErr atomic.Value
	)
	for i := range m {
		wg.Go(func() {
			s := []tenant.Store{e.a, e.b}[i%2]
			l, err := s.Acquire(e.ctx, id, req)
			switch {
			case err == nil:
				mu.Lock()
				leases = append(leases, l)
				mu.Unlock()
			case !errors.Is(err, sentinel):
				wrongErr.Store(err)
			}
		})
	}
	wg.Wait()
	if err := wrongErr.Load(); err != nil {
		t.Fatalf("%s: unexpected error %v", id, err)
	}
	return leases
}
