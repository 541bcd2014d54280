package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/test/harness"
)

// TestTenantsRedis: tenant limits, budgets and key revocation hold across
// two gateway processes sharing one Redis, exactly as the tenant package
// documents them: a burst spread over both gateways admits exactly the
// limit, held tokens are reconciled with the actual usage, a revoked key
// fails on both within the auth cache's second, and a request that can
// never fit is a 400 whatever the tenant's remaining quota. The subtests
// use tenants of their own and run in parallel.
func TestTenantsRedis(t *testing.T) {
	t.Parallel()
	c := harness.Start(t, env, harness.Options{
		Gateways: 2, Redis: true,
		Workers: append(harness.Single(harness.ModelTiny), harness.Single(harness.ModelEndless)...),
		// No worker is lost here on purpose: on a loaded machine the
		// default 2 s let a starved worker miss its heartbeats, and the
		// gateway aborted a request the test holds open (worker_lost).
		HeartbeatTimeout: 15 * time.Second,
	})
	t.Run("RequestsPerMinute", func(t *testing.T) { t.Parallel(); testRequestsPerMinute(t, c) })
	t.Run("TokensPerMinute", func(t *testing.T) { t.Parallel(); testTokensPerMinute(t, c) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); testConcurrency(t, c) })
	t.Run("Revocation", func(t *testing.T) { t.Parallel(); testRevocation(t, c) })
	t.Run("Budget", func(t *testing.T) { t.Parallel(); testBudget(t, c) })
	t.Run("NoMaxTokens", func(t *testing.T) { t.Parallel(); testNoMaxTokens(t, c) })
	t.Run("AdminBadInput", func(t *testing.T) { t.Parallel(); testAdminBadInput(t, c) })
}

// TestTenantsRedisCluster runs the limits that must be exact across
// replicas against two gateways sharing a private three-master Redis
// Cluster: the same subtests as TestTenantsRedis, with every script of
// the store running on the master of the prefix's hash slot.
func TestTenantsRedisCluster(t *testing.T) {
	t.Parallel()
	c := harness.Start(t, env, harness.Options{
		Gateways: 2, Redis: true, RedisCluster: true,
		Workers:          append(harness.Single(harness.ModelTiny), harness.Single(harness.ModelEndless)...),
		HeartbeatTimeout: 15 * time.Second, // as TestTenantsRedis
	})
	t.Run("RequestsPerMinute", func(t *testing.T) { t.Parallel(); testRequestsPerMinute(t, c) })
	t.Run("TokensPerMinute", func(t *testing.T) { t.Parallel(); testTokensPerMinute(t, c) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); testConcurrency(t, c) })
	t.Run("Revocation", func(t *testing.T) { t.Parallel(); testRevocation(t, c) })
}

// answer is one API response, read whole.
type answer struct {
	gateway int // index of the gateway that answered
	status  int
	header  http.Header
	body    []byte
	sent    time.Time
	done    time.Time
}

// code is the error code of an error answer ("" otherwise).
func (a answer) code() string {
	e, err := errenvelope.Decode(a.body)
	if err != nil {
		return ""
	}
	return e.CodeOrEmpty()
}

func (a answer) String() string {
	return fmt.Sprintf("gateway-%d: %d %s", a.gateway, a.status, strings.TrimSpace(string(a.body)))
}

// call posts body to path on gateway i of c with key and reads the whole
// answer.
func call(ctx context.Context, c *harness.Cluster, i int, key, path string, body any) (answer, error) {
	a := answer{gateway: i, sent: time.Now()}
	resp, err := c.Gateways[i].Post(ctx, key, path, body)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	a.body, err = io.ReadAll(resp.Body)
	a.done = time.Now()
	return a, err
}

// mustCall is call failing the test on a transport error.
func mustCall(t *testing.T, c *harness.Cluster, i int, key, path string, body any) answer {
	t.Helper()
	a, err := call(context.Background(), c, i, key, path, body)
	if err != nil {
		t.Fatalf("gateway-%d %s: %v", i, path, err)
	}
	return a
}

// completionBody is a greedy completion request.
func completionBody(model, prompt string, maxTokens int) map[string]any {
	return map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0}
}

// completionOut is the part of a completion answer or error body the
// tests read.
type completionOut struct {
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// checkCompletion checks a 200 completion answer against the reference
// output and returns its usage (prompt + completion tokens).
func checkCompletion(t *testing.T, a answer, want harness.Output) int64 {
	t.Helper()
	used, err := completionError(a, want)
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// completionError is checkCompletion for any goroutine: it returns what
// is wrong with the answer instead of failing the test.
func completionError(a answer, want harness.Output) (int64, error) {
	if a.status != http.StatusOK {
		return 0, fmt.Errorf("%v, want 200", a)
	}
	var out completionOut
	if err := json.Unmarshal(a.body, &out); err != nil {
		return 0, fmt.Errorf("%v: %w", a, err)
	}
	if len(out.Choices) != 1 || out.Choices[0].Text != want.Text || out.Choices[0].FinishReason != want.Finish ||
		out.Usage.PromptTokens != want.PromptTokens || out.Usage.CompletionTokens != want.CompletionTokens {
		return 0, fmt.Errorf("gateway-%d answered %s, want %q (%s) with usage %d+%d", a.gateway, a.body, want.Text, want.Finish,
			want.PromptTokens, want.CompletionTokens)
	}
	return int64(out.Usage.PromptTokens + out.Usage.CompletionTokens), nil
}

// checkDenied checks an error answer's status, code and type, and that it
// carries a request ID and no key.
func checkDenied(t *testing.T, a answer, status int, code string) errenvelope.Body {
	t.Helper()
	e, err := errenvelope.Decode(a.body)
	if err != nil || a.status != status || e.CodeOrEmpty() != code {
		t.Fatalf("%v, want %d %s", a, status, code)
	}
	if e.Message == "" || e.Type == "" || strings.Contains(e.Message, tenant.KeyPrefix) {
		t.Errorf("error %+v: empty message or type, or a key in it", e)
	}
	if id := a.header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") {
		t.Errorf("%v: x-request-id %q", a, id)
	}
	return e
}

// headerInt parses an integer header, failing the test if it is not one.
func headerInt(t *testing.T, a answer, name string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(a.header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("%v: header %s = %q, want an integer", a, name, a.header.Get(name))
	}
	return v
}

// headerDuration parses a duration header (x-ratelimit-reset-*).
func headerDuration(t *testing.T, a answer, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(a.header.Get(name))
	if err != nil {
		t.Fatalf("%v: header %s = %q, want a duration", a, name, a.header.Get(name))
	}
	return d
}

// retryAfter returns the Retry-After header in seconds, checking it is
// within [lo, hi].
func retryAfter(t *testing.T, a answer, lo, hi int64) int64 {
	t.Helper()
	v := headerInt(t, a, "Retry-After")
	if v < lo || v > hi {
		t.Errorf("%v: retry-after %d s, want %d to %d", a, v, lo, hi)
	}
	return v
}

// noHeaders checks that the answer carries none of the named headers.
func noHeaders(t *testing.T, a answer, names ...string) {
	t.Helper()
	for _, n := range names {
		if v := a.header.Get(n); v != "" {
			t.Errorf("%v: header %s = %q for a limit the tenant does not have", a, n, v)
		}
	}
}

// newTenant creates tenant id through gateway i's admin API and issues a
// key for it.
func newTenant(t *testing.T, c *harness.Cluster, i int, id string, weight int, limits tenant.Limits) adminclient.IssuedKey {
	t.Helper()
	ctx := context.Background()
	admin := c.Gateways[i].Admin
	if _, err := admin.CreateTenant(ctx, adminclient.TenantCreate{ID: id, Weight: weight, Limits: limits}); err != nil {
		t.Fatalf("creating tenant %s: %v", id, err)
	}
	k, err := admin.IssueKey(ctx, id, t.Name())
	if err != nil {
		t.Fatalf("issuing a key for %s: %v", id, err)
	}
	return k
}

// burst sends n requests at once, request i to gateway i%2, and returns
// the answers in order.
func burst(t *testing.T, c *harness.Cluster, n int, key, path string, body any) []answer {
	t.Helper()
	answers := make([]answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = call(context.Background(), c, i%len(c.Gateways), key, path, body)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return answers
}

// checkNeverFits: requests that can never fit the model's context are
// 400 context_length_exceeded on every gateway, whatever the state of the
// tenant's limits, never 429.
func checkNeverFits(t *testing.T, c *harness.Cluster, key string) {
	t.Helper()
	long := strings.Repeat("word ", 12000)
	for i := range c.Gateways {
		a := mustCall(t, c, i, key, "/v1/completions", completionBody(harness.ModelTiny, "Hello", 100000))
		e := checkDenied(t, a, http.StatusBadRequest, "context_length_exceeded")
		if e.ParamOrEmpty() != "max_tokens" || !strings.Contains(e.Message, "8192") {
			t.Errorf("%v: want param max_tokens and the limit 8192 in the message", a)
		}
		a = mustCall(t, c, i, key, "/v1/completions", completionBody(harness.ModelTiny, long, 4))
		if e := checkDenied(t, a, http.StatusBadRequest, "context_length_exceeded"); e.ParamOrEmpty() != "prompt" {
			t.Errorf("%v: want param prompt", a)
		}
	}
}

// testRequestsPerMinute: a burst of m > n requests spread over both
// gateways admits exactly n (the bucket's content; it refills one
// request per 60/n s, which the check allows for if the burst was slow);
// the others get 429 with headers that say how long to wait.
func testRequestsPerMinute(t *testing.T, c *harness.Cluster) {
	const n, m = 5, 12
	key := newTenant(t, c, 1, "rpm", 0, tenant.Limits{RequestsPerMinute: n}).Key
	want, err := reference(t, harness.ModelTiny).Completion(context.Background(), "Hello", 8)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	answers := burst(t, c, m, key, "/v1/completions", completionBody(harness.ModelTiny, "Hello", 8))
	span := time.Since(start)

	var remaining []int64
	perGateway := make([]int, len(c.Gateways))
	for _, a := range answers {
		if a.status == http.StatusOK {
			checkCompletion(t, a, want)
			if got := headerInt(t, a, "X-Ratelimit-Limit-Requests"); got != n {
				t.Errorf("%v: x-ratelimit-limit-requests %d, want %d", a, got, n)
			}
			remaining = append(remaining, headerInt(t, a, "X-Ratelimit-Remaining-Requests"))
			if reset := headerDuration(t, a, "X-Ratelimit-Reset-Requests"); reset <= 0 || reset > time.Minute {
				t.Errorf("%v: x-ratelimit-reset-requests %v, want within (0, 1m]", a, reset)
			}
			noHeaders(t, a, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens")
			perGateway[a.gateway]++
			continue
		}
		e := checkDenied(t, a, http.StatusTooManyRequests, "rate_limit_exceeded")
		if e.Type != "rate_limit_error" || !strings.Contains(e.Message, "requests") {
			t.Errorf("%v: want type rate_limit_error and a message naming the requests limit", a)
		}
		// The bucket holds less than one request and refills one per
		// 60/n s: the wait is at most that, and full after at most 1m.
		retryAfter(t, a, 1, 60/n)
		if got := headerInt(t, a, "X-Ratelimit-Limit-Requests"); got != n {
			t.Errorf("%v: x-ratelimit-limit-requests %d, want %d", a, got, n)
		}
		if got := headerInt(t, a, "X-Ratelimit-Remaining-Requests"); got != 0 {
			t.Errorf("%v: x-ratelimit-remaining-requests %d, want 0", a, got)
		}
		if reset := headerDuration(t, a, "X-Ratelimit-Reset-Requests"); reset < time.Minute*(n-1)/n-2*time.Second || reset > time.Minute {
			t.Errorf("%v: x-ratelimit-reset-requests %v, want about %v (an empty bucket of %d per minute)", a, reset, time.Minute, n)
		}
	}
	ok := len(remaining)
	t.Logf("burst of %d over %d gateways in %v: %d admitted (per gateway %v), remaining-requests of the admitted %v",
		m, len(c.Gateways), span.Round(time.Millisecond), ok, perGateway, remaining)
	refill := int(span * n / time.Minute)
	if ok < n || ok > n+refill {
		t.Fatalf("%d of %d requests admitted with %d per minute, want %d (+%d refilled during the %v burst)", ok, m, n, n, refill, span)
	}
	if refill == 0 {
		// One atomic bucket for both gateways: each admission saw the
		// previous ones, wherever they were made.
		slices.Sort(remaining)
		if !slices.Equal(remaining, []int64{0, 1, 2, 3, 4}) {
			t.Errorf("remaining-requests of the admitted requests %v, want each of 0..%d once", remaining, n-1)
		}
	}
	checkNeverFits(t, c, key)
}

// testTokensPerMinute: admission holds prompt + max_tokens against the
// token bucket until the request ends, then refunds what it did not use:
// a request that does not fit while another holds most of the bucket
// fits as soon as that one ended, on the other gateway, with exactly the
// reconciled remainder.
//
// How many tokens the first request generates before its client goes away
// depends on the machine's speed, so the test sizes the request it sends
// after the refund from what the first one actually used: it needs the
// refunded tokens (it does not fit in what the hold left plus the refill
// of the time elapsed) and fits in the reconciled bucket whatever the
// timing, so it is admitted at once exactly when the refund happened.
func testTokensPerMinute(t *testing.T, c *harness.Cluster) {
	const tpm = 3000
	ctx := context.Background()
	key := newTenant(t, c, 0, "tpm", 0, tenant.Limits{TokensPerMinute: tpm}).Key
	ref := reference(t, harness.ModelTiny)

	// The first request holds 2900 of the 3000 tokens while it generates.
	msgs := []tokenizer.Message{{Role: "user", Content: "Go on and on."}}
	p1, err := ref.ChatPrompt(msgs) // the endless model has the tiny one's tokenizer
	if err != nil {
		t.Fatal(err)
	}
	const hold1 = 2900
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	admitted1 := time.Now()
	resp := streamChat(ctx1, t, c.Gateways[0], key, harness.ModelEndless, msgs, hold1-len(p1))
	first := answer{gateway: 0, status: resp.StatusCode, header: resp.Header}
	if got := headerInt(t, first, "X-Ratelimit-Remaining-Tokens"); got != tpm-hold1 {
		t.Errorf("first request: x-ratelimit-remaining-tokens %d, want %d (a full bucket less the hold)", got, tpm-hold1)
	}
	readUntilText(t, harness.NewSSE(resp.Body))

	// The second needs as much as the first holds: not while the first
	// holds it (the refill would take most of a minute).
	want2, err := ref.Completion(ctx, "Hello", 8)
	if err != nil {
		t.Fatal(err)
	}
	const hold2 = hold1
	a := mustCall(t, c, 1, key, "/v1/completions", completionBody(harness.ModelTiny, "Hello", hold2-want2.PromptTokens))
	e := checkDenied(t, a, http.StatusTooManyRequests, "rate_limit_exceeded")
	if !strings.Contains(e.Message, "tokens") {
		t.Errorf("%v: the message does not name the tokens limit", a)
	}
	left := headerInt(t, a, "X-Ratelimit-Remaining-Tokens")
	if left < tpm-hold1 || left >= hold2 || headerInt(t, a, "X-Ratelimit-Limit-Tokens") != tpm {
		t.Errorf("%v: x-ratelimit limit %s remaining %d, want %d and %d or a little more (refill)", a,
			a.header.Get("X-Ratelimit-Limit-Tokens"), left, tpm, tpm-hold1)
	}
	// Retry-After is the time to refill what is missing, at tpm/60 per s.
	perSec := int64(tpm / 60)
	retryAfter(t, a, (hold2-left-1)/perSec, (hold2-left+perSec-1)/perSec+1)
	if reset := headerDuration(t, a, "X-Ratelimit-Reset-Tokens"); reset < time.Minute*time.Duration(tpm-left-perSec)/tpm || reset > time.Minute {
		t.Errorf("%v: x-ratelimit-reset-tokens %v, want the time to refill %d tokens at %d/s", a, reset, tpm-left, perSec)
	}
	noHeaders(t, a, "X-Ratelimit-Limit-Requests")

	// The first request ends (its client goes away) having used a part of
	// its hold; the rest is refunded.
	id1 := resp.Header.Get("X-Request-Id")
	cancel1()
	resp.Body.Close()
	rv := c.WaitRequestDone(t, id1)
	used1 := rv.PromptTokens + rv.CompletionTokens
	if rv.PromptTokens != int64(len(p1)) || used1 > hold1 {
		t.Fatalf("first request %s used %d+%d tokens, want its %d prompt tokens and at most %d in all",
			id1, rv.PromptTokens, rv.CompletionTokens, len(p1), hold1)
	}
	// The third fits in the reconciled bucket (tpm - used1, or more with
	// the refill) with margin tokens to spare, whatever used1 is.
	margin := min(int64(300), (tpm-used1)/3)
	hold3 := tpm - used1 - margin
	if hold3 < int64(want2.PromptTokens+8) {
		t.Fatalf("first request %s used %d of %d tokens: too few left to check the refund", id1, used1, tpm)
	}
	// Without the refund it would have to wait for the refill.
	if unrefunded := tpm - hold1 + int64(time.Since(admitted1).Seconds()+1)*perSec; hold3 <= unrefunded {
		t.Logf("first request used %d tokens in %v: the refund check below cannot tell a refund from the refill",
			used1, time.Since(admitted1).Round(time.Millisecond))
	}
	body3 := completionBody(harness.ModelTiny, "Hello", int(hold3)-want2.PromptTokens)
	// The lease is released just after the request ends: retry briefly.
	deadline := time.Now().Add(harness.WaitTimeout)
	for a = mustCall(t, c, 1, key, "/v1/completions", body3); a.status == http.StatusTooManyRequests && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		a = mustCall(t, c, 1, key, "/v1/completions", body3)
	}
	used3 := checkCompletion(t, a, want2)
	// With the refund the bucket held tpm - used1 (plus refill, capped at
	// tpm) before this admission; without it, it is admitted only once
	// the refill reached hold3, with (almost) nothing left.
	left = headerInt(t, a, "X-Ratelimit-Remaining-Tokens")
	t.Logf("first request held %d, used %d; the next held %d, admitted after the refund with %d tokens left (reconciled floor %d)",
		hold1, used1, hold3, left, margin)
	if left < margin || left > tpm-hold3 {
		t.Errorf("remaining tokens after the admission %d, want %d to %d: the unused %d tokens of the first request were not refunded",
			left, margin, tpm-hold3, hold1-used1)
	}

	// Usage, shared through Redis, counts what both requests used.
	checkUsage(t, c, 0, "tpm", 2, used1+used3)
}

// checkUsage checks a tenant's recorded usage, summed over the last two
// UTC days (a test running over midnight) and every model, read through
// gateway i's admin API.
func checkUsage(t *testing.T, c *harness.Cluster, i int, tenantID string, requests, tokens int64) {
	t.Helper()
	now := time.Now().UTC()
	// Usage is recorded by the lease release, just after the request
	// ended: look again briefly.
	var got []tenant.Usage
	for deadline := time.Now().Add(harness.WaitTimeout); ; time.Sleep(20 * time.Millisecond) {
		var err error
		got, err = c.Gateways[i].Admin.Usage(context.Background(), tenantID,
			now.Add(-24*time.Hour).Format(tenant.DayFormat), now.Format(tenant.DayFormat))
		if err != nil {
			t.Fatal(err)
		}
		var r, n int64
		for _, u := range got {
			r += u.Requests
			n += u.PromptTokens + u.CompletionTokens
		}
		if r == requests && n == tokens {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage of %s: %+v; want %d requests and %d tokens", tenantID, got, requests, tokens)
		}
	}
}

// testConcurrency: with max_concurrent k, k requests are in flight at
// once over both gateways and every other one gets 429 with retry-after
// 1; the slots come back when the requests end.
func testConcurrency(t *testing.T, c *harness.Cluster) {
	const k, m = 3, 8
	key := newTenant(t, c, 0, "conc", 0, tenant.Limits{MaxConcurrent: k}).Key
	msgs := []tokenizer.Message{{Role: "user", Content: "Count forever."}}
	body := map[string]any{"model": harness.ModelEndless, "messages": wireMessages(msgs), "max_tokens": longMaxTokens,
		"temperature": 0, "stream": true}

	// round sends n streaming requests at once and returns the admitted
	// ones, still streaming, and the denials.
	type stream struct {
		gateway int
		id      string
		cancel  context.CancelFunc
	}
	round := func(n int) (admitted []stream, denied []answer) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				gw := i % len(c.Gateways)
				ctx, cancel := context.WithCancel(context.Background())
				resp, err := c.Gateways[gw].Post(ctx, key, "/v1/chat/completions", body)
				if err != nil {
					cancel()
					t.Errorf("request %d: %v", i, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if resp.StatusCode != http.StatusOK {
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					cancel()
					denied = append(denied, answer{gateway: gw, status: resp.StatusCode, header: resp.Header, body: data})
					return
				}
				// Keep reading so that generation goes on.
				go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
				admitted = append(admitted, stream{gateway: gw, id: resp.Header.Get("X-Request-Id"), cancel: cancel})
			})
		}
		close(start)
		wg.Wait()
		return admitted, denied
	}
	// ranOut: on a loaded machine a held stream may reach its max_tokens
	// before the test ends it; it then completed and gave its slot back,
	// which is as good for this test as an abort.
	ranOut := func(rv adminclient.RequestView) bool {
		return rv.State == "completed" && rv.CompletionTokens == longMaxTokens
	}
	end := func(streams []stream) {
		for _, s := range streams {
			s.cancel()
		}
		for _, s := range streams {
			rv := waitDoneOn(t, c, s.gateway, s.id)
			if (rv.State != "aborted" || rv.Cause != "client_disconnect") && !ranOut(rv) {
				t.Errorf("request %s: %s (%s, %d tokens), want aborted by the client", s.id, rv.State, rv.Cause, rv.CompletionTokens)
			}
		}
	}

	admitted, denied := round(m)
	defer func() { end(admitted) }() // whatever is still streaming when the test stops
	t.Logf("%d concurrent requests over %d gateways: %d admitted, %d denied", m, len(c.Gateways), len(admitted), len(denied))
	if len(admitted) != k || len(denied) != m-k {
		t.Fatalf("%d admitted and %d denied, want %d and %d", len(admitted), len(denied), k, m-k)
	}
	for _, a := range denied {
		e := checkDenied(t, a, http.StatusTooManyRequests, "rate_limit_exceeded")
		if !strings.Contains(e.Message, "concurrency") {
			t.Errorf("%v: the message does not name the concurrency limit", a)
		}
		retryAfter(t, a, 1, 1) // tenant.ConcurrencyRetryAfter
		noHeaders(t, a, "X-Ratelimit-Limit-Requests", "X-Ratelimit-Limit-Tokens")
	}
	// The gateways' own view: exactly the k admitted requests in flight,
	// all of them generating (or one that already ran out, see ranOut).
	listed := map[string]bool{}
	for i, g := range c.Gateways {
		rs, err := g.Admin.Requests(context.Background(), adminclient.RequestFilter{Tenant: "conc"})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			listed[r.ID] = true
			if r.State != "decoding" {
				t.Errorf("gateway-%d: request %s is %s, want decoding", i, r.ID, r.State)
			}
		}
	}
	for _, s := range admitted {
		if !listed[s.id] {
			if rv := waitDoneOn(t, c, s.gateway, s.id); !ranOut(rv) {
				t.Errorf("admitted request %s is not in flight: %s (%s)", s.id, rv.State, rv.Cause)
			}
		}
		delete(listed, s.id)
	}
	for id := range listed {
		t.Errorf("the gateways list request %s of the tenant in flight, which was not admitted", id)
	}
	end(admitted)
	admitted = nil

	// Every slot is free again: k at once are admitted, one more is not.
	deadline := time.Now().Add(harness.WaitTimeout)
	for {
		admitted, denied = round(k + 1)
		if len(admitted) == k || time.Now().After(deadline) {
			break
		}
		// A slot is released just after its request ended: try again.
		end(admitted)
		time.Sleep(50 * time.Millisecond)
	}
	if len(admitted) != k || len(denied) != 1 {
		t.Errorf("after the requests ended: %d of %d admitted, want %d", len(admitted), k+1, k)
	}
	end(admitted)
	admitted = nil
}

// waitDoneOn waits until request id reaches a terminal state on gateway
// i and returns it.
func waitDoneOn(t *testing.T, c *harness.Cluster, i int, id string) adminclient.RequestView {
	t.Helper()
	for deadline := time.Now().Add(harness.WaitTimeout); ; time.Sleep(20 * time.Millisecond) {
		rv, err := c.Gateways[i].Admin.Request(context.Background(), id)
		if err != nil {
			t.Fatalf("gateway-%d: request %s: %v", i, id, err)
		}
		switch rv.State {
		case "completed", "rejected", "aborted", "failed":
			return rv
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway-%d: request %s still %s after %v", i, id, rv.State, harness.WaitTimeout)
		}
	}
}

// authTTL is the gateways' auth cache TTL (tenants.auth_cache_ttl): the
// documented bound on how late a revocation takes effect.
const authTTL = time.Second

// revocationSlack allows for scheduling noise on a loaded machine on top
// of authTTL.
const revocationSlack = 500 * time.Millisecond

// testRevocation: a key revoked through one gateway's admin API fails on
// both gateways once their cached verification is older than the auth
// cache's TTL; the tenant's other key keeps working.
func testRevocation(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	revoked := newTenant(t, c, 0, "revoke", 0, tenant.Limits{})
	kept, err := c.Gateways[1].Admin.IssueKey(ctx, "revoke", "kept")
	if err != nil {
		t.Fatal(err)
	}
	models := func(i int, key string) answer {
		a := answer{gateway: i, sent: time.Now()}
		req, err := http.NewRequest(http.MethodGet, c.Gateways[i].APIURL+"/v1/models", nil)
		if err != nil {
			t.Error(err)
			return a
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Gateways[i].HTTP.Do(req)
		if err != nil {
			t.Errorf("gateway-%d /v1/models: %v", i, err)
			return a
		}
		defer resp.Body.Close()
		a.status, a.header = resp.StatusCode, resp.Header
		a.body, _ = io.ReadAll(resp.Body)
		a.done = time.Now()
		return a
	}
	// Both gateways have the key verified in their caches.
	for i := range c.Gateways {
		if a := models(i, revoked.Key); a.status != http.StatusOK {
			t.Fatalf("before the revocation: %v", a)
		}
	}

	if _, err := c.Gateways[0].Admin.RevokeKey(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	// Poll both gateways until every answer to a request sent later than
	// the TTL (plus slack) after the revocation was checked.
	polls := make([][]answer, len(c.Gateways))
	var wg sync.WaitGroup
	for i := range c.Gateways {
		wg.Go(func() {
			for {
				a := models(i, revoked.Key)
				if a.status == 0 {
					return
				}
				polls[i] = append(polls[i], a)
				if a.status != http.StatusOK && a.sent.Sub(revokedAt) > authTTL+revocationSlack {
					return
				}
				if time.Since(revokedAt) > harness.WaitTimeout {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i, ps := range polls {
		var lastOK, first401 *answer
		for j := range ps {
			a := &ps[j]
			switch {
			case a.status == http.StatusOK:
				if first401 != nil {
					t.Errorf("gateway-%d accepted the key again after refusing it: %v", i, a)
				}
				lastOK = a
			case first401 == nil:
				checkDenied(t, *a, http.StatusUnauthorized, "invalid_api_key")
				first401 = a
			}
		}
		if first401 == nil {
			t.Errorf("gateway-%d still accepts the revoked key %v after the revocation", i, harness.WaitTimeout)
			continue
		}
		delay := first401.done.Sub(revokedAt)
		accepted := time.Duration(0)
		if lastOK != nil {
			accepted = lastOK.sent.Sub(revokedAt)
		}
		t.Logf("gateway-%d: the revoked key failed %v after the revocation (first refusal received); last accepted request sent at +%v; %d polls",
			i, delay.Round(time.Millisecond), accepted.Round(time.Millisecond), len(ps))
		// The contract: no request arriving later than the TTL after the
		// revocation is accepted. A request's arrival is after its
		// sending, so the check is immune to slow answers; the first
		// refusal must follow as soon as the poll before it returned.
		if accepted > authTTL+revocationSlack {
			t.Errorf("gateway-%d accepted the revoked key in a request sent %v after the revocation, want at most %v (auth cache TTL %v)",
				i, accepted, authTTL+revocationSlack, authTTL)
		}
		if refusedSent := first401.sent.Sub(revokedAt); lastOK != nil && refusedSent > max(accepted+lastOK.done.Sub(lastOK.sent), authTTL)+revocationSlack {
			t.Errorf("gateway-%d refused the revoked key only in a request sent %v after the revocation", i, refusedSent)
		}
	}
	for i := range c.Gateways {
		if a := models(i, kept.Key); a.status != http.StatusOK {
			t.Errorf("the tenant's other key: %v", a)
		}
	}
	keys, err := c.Gateways[1].Admin.ListKeys(ctx, adminclient.KeyFilter{Tenant: "revoke"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if (k.RevokedAt != nil) != (k.ID == revoked.ID) {
			t.Errorf("key %s: revoked at %v; only %s was revoked", k.ID, k.RevokedAt, revoked.ID)
		}
	}
}

// testBudget: a budget counts the tokens actually used (held at admission,
// reconciled at the end) and, once it cannot cover a request, denies it
// with 429 insufficient_quota; a request larger than the whole budget is a
// 400, and one that never fits the context is a 400 too.
func testBudget(t *testing.T, c *harness.Cluster) {
	// A fixed period so that the test cannot run across its end (UTC
	// midnight for "day").
	const budget, period = 400, tenant.BudgetPeriod("8784h")
	key := newTenant(t, c, 1, "budget", 0, tenant.Limits{Budget: budget, BudgetPeriod: period}).Key
	want, err := reference(t, harness.ModelTiny).Completion(context.Background(), "Hello", 300)
	if err != nil {
		t.Fatal(err)
	}
	if want.Finish != "stop" {
		t.Fatalf("the tiny model's answer to %q no longer stops by itself: %+v", "Hello", want)
	}
	p := want.PromptTokens
	// holding returns a request that holds exactly hold tokens.
	holding := func(hold int) map[string]any { return completionBody(harness.ModelTiny, "Hello", hold-p) }

	// The first request holds 305 tokens and uses a few.
	used := checkCompletion(t, mustCall(t, c, 0, key, "/v1/completions", holding(305)), want)
	left := budget - int(used)
	// One token more than what is left is denied...
	a := mustCall(t, c, 1, key, "/v1/completions", holding(left+1))
	e := checkDenied(t, a, http.StatusTooManyRequests, "insufficient_quota")
	if !strings.Contains(e.Message, "budget") {
		t.Errorf("%v: the message does not mention the budget", a)
	}
	// (Retry-After: the time to the period's end.)
	retryAfter(t, a, 1, int64(8784*time.Hour/time.Second))
	// ... exactly what is left is admitted: the 305 held were reconciled
	// to the tokens used.
	hold2 := left
	used += checkCompletion(t, mustCall(t, c, 0, key, "/v1/completions", holding(hold2)), want)
	left = budget - int(used)
	a = mustCall(t, c, 1, key, "/v1/completions", holding(left+1))
	checkDenied(t, a, http.StatusTooManyRequests, "insufficient_quota")
	// More than the whole budget can never be admitted: 400, not 429.
	a = mustCall(t, c, 0, key, "/v1/completions", holding(budget+1))
	if e := checkDenied(t, a, http.StatusBadRequest, "request_too_large"); e.ParamOrEmpty() != "max_tokens" {
		t.Errorf("%v: want param max_tokens", a)
	}
	checkNeverFits(t, c, key)
	checkUsage(t, c, 0, "budget", 2, used)
	t.Logf("budget %d: 2 requests holding 305 and then exactly the %d left used %d tokens; one holding 1 more was refused each time",
		budget, hold2, used)
}

// testAdminBadInput: bad admin requests get clear errors end to end (the
// admin package's tests have the full table), and change nothing; the CLI
// reports them with a non-zero exit status.
func testAdminBadInput(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	newTenant(t, c, 0, "admin-bad", 0, tenant.Limits{RequestsPerMinute: 7})
	g := c.Gateways[1]
	cases := []struct {
		name, method, path, auth, body string
		status                         int
		code, param                    string
	}{
		{"wrong token", "GET", "/admin/v1/tenants", "Bearer wrong", "", 401, adminclient.CodeInvalidToken, ""},
		{"no token", "GET", "/admin/v1/tenants", "", "", 401, adminclient.CodeInvalidToken, ""},
		{"API key as admin token", "GET", "/admin/v1/tenants", "Bearer " + tenant.KeyPrefix + "abcdefgh_x", "", 401, adminclient.CodeInvalidToken, ""},
		{"unknown tenant", "GET", "/admin/v1/tenants/nobody", "", "", 404, adminclient.CodeNotFound, ""},
		{"limits of an unknown tenant", "PATCH", "/admin/v1/tenants/nobody", "", `{"limits":{"requests_per_minute":5}}`, 404, adminclient.CodeNotFound, ""},
		{"key for an unknown tenant", "POST", "/admin/v1/tenants/nobody/keys", "", `{}`, 404, adminclient.CodeNotFound, ""},
		{"negative limit", "POST", "/admin/v1/tenants", "", `{"id":"neg","limits":{"requests_per_minute":-5}}`, 400, adminclient.CodeInvalidValue, "limits.requests_per_minute"},
		{"negative limit update", "PATCH", "/admin/v1/tenants/admin-bad", "", `{"limits":{"tokens_per_minute":-1}}`, 400, adminclient.CodeInvalidValue, "limits.tokens_per_minute"},
		{"negative weight", "PATCH", "/admin/v1/tenants/admin-bad", "", `{"weight":-2}`, 400, adminclient.CodeInvalidValue, "weight"},
		{"bad budget period", "PATCH", "/admin/v1/tenants/admin-bad", "", `{"limits":{"budget_period":"fortnight"}}`, 400, adminclient.CodeInvalidValue, "limits.budget_period"},
		{"unknown limit", "PATCH", "/admin/v1/tenants/admin-bad", "", `{"limits":{"rpm":5}}`, 400, adminclient.CodeUnknownField, "limits.rpm"},
		{"revoke an unknown key", "DELETE", "/admin/v1/keys/abcdefgh", "", "", 404, adminclient.CodeNotFound, ""},
	}
	for _, tc := range cases {
		auth := tc.auth
		if auth == "" && tc.name != "no token" {
			auth = "Bearer " + c.AdminToken
		}
		req, err := http.NewRequest(tc.method, g.AdminURL+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e, err := errenvelope.Decode(data)
		if err != nil || resp.StatusCode != tc.status || e.CodeOrEmpty() != tc.code || e.ParamOrEmpty() != tc.param || e.Message == "" {
			t.Errorf("%s: %d %s, want %d code %s param %q", tc.name, resp.StatusCode, data, tc.status, tc.code, tc.param)
		}
		if tc.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
	// Nothing changed, as the other gateway sees it.
	got, err := c.Gateways[0].Admin.GetTenant(ctx, "admin-bad")
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Limits; got.Weight != 1 || l.RequestsPerMinute != 7 || l.TokensPerMinute != 0 || l.BudgetPeriod != tenant.PeriodMonth {
		t.Errorf("the bad requests changed the tenant: %+v", got)
	}
	if _, err := c.Gateways[0].Admin.GetTenant(ctx, "neg"); !adminclient.IsNotFound(err) {
		t.Errorf("tenant neg: %v, want not found", err)
	}

	// The CLI says what is wrong and exits 1.
	tokenFile := filepath.Join(c.Dir, "admin-token")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"wrong token", []string{"--token", "wrong", "tenants", "list"}, []string{"401", adminclient.CodeInvalidToken}},
		{"negative limit", []string{"--token-file", tokenFile, "limits", "set", "admin-bad", "--requests-per-minute", "-5"},
			[]string{"requests_per_minute"}},
		{"unknown tenant", []string{"--token-file", tokenFile, "tenants", "get", "nobody"}, []string{"404", adminclient.CodeNotFound}},
		{"model not served", []string{"--token-file", tokenFile, "model-limits", "set", "llama-70b", "--max-context", "100"},
			[]string{`model "llama-70b" is not served`, "--force"}},
	} {
		args := append([]string{"admin", "--url", g.AdminURL, "--cacert", env.PKI.CACert}, tc.args...)
		out, err := exec.Command(env.Bin, args...).CombinedOutput()
		if code := exitCode(err); code != 1 {
			t.Errorf("CLI %s: exit status %d, want 1:\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("CLI %s: the error does not say %q:\n%s", tc.name, w, out)
			}
		}
	}
	if _, err := c.Gateways[0].Admin.GetModelLimits(ctx, "llama-70b"); !adminclient.IsNotFound(err) {
		t.Errorf("limits of the model not served were set without --force: %v", err)
	}
	// --force sets them all the same (a model about to be added).
	args := []string{"admin", "--url", g.AdminURL, "--cacert", env.PKI.CACert, "--token-file", tokenFile, "model-limits", "set", "llama-70b", "--max-context", "100", "--force"}
	if out, err := exec.Command(env.Bin, args...).CombinedOutput(); err != nil {
		t.Errorf("model-limits set --force: %v:\n%s", err, out)
	}
	if m, err := c.Gateways[0].Admin.GetModelLimits(ctx, "llama-70b"); err != nil || m.MaxContext != 100 {
		t.Errorf("limits set with --force: %+v, %v", m, err)
	}
	if err := c.Gateways[0].Admin.DeleteModelLimits(ctx, "llama-70b"); err != nil {
		t.Error(err)
	}
}
