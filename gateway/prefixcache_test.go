package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/gateway/internal/routing"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
)

// TestPrefixCacheIsPerTenant: on a both worker, a tenant's repeated
// prompt is served from its cached prefix pages (usage reports the cached
// tokens) with the reference's content; another tenant sending the same
// prompt never hits the first one's pages, and a tenant with the cache
// off never hits at all.
func TestPrefixCacheIsPerTenant(t *testing.T) {
	const maxTokens = 8
	content := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 6)
	ref := runReference(t, chatTokens(t, content), maxTokens)
	tg := startGateway(t, testConfig())
	w := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	beta := newTenantKey(t, tg, "beta")
	ctx := context.Background()
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "gamma", PrefixCache: cachekey.ModeOff}); err != nil {
		t.Fatal(err)
	}
	gamma, _, err := tg.Store().IssueKey(ctx, "gamma", "test")
	if err != nil {
		t.Fatal(err)
	}
	const pageTokens = 16 // the default worker.kv.page_tokens
	hit := (ref.prompt - 1) / pageTokens * pageTokens
	ask := func(key string, wantCached int64) {
		t.Helper()
		askCached(t, tg, key, content, maxTokens, ref, wantCached)
	}
	if hit == 0 {
		t.Fatalf("the prompt (%d tokens) fills no page", ref.prompt)
	}
	ask(tg.key, 0)
	ask(tg.key, hit)
	ask(beta, 0) // the same tokens in another tenant's domain: no hit
	ask(beta, hit)
	ask(gamma, 0)
	ask(gamma, 0)
	w.poolQuiet()
}

// TestPrefixRoutingFollowsTheCache: with two both workers, a request
// whose prompt pages the gateway routed to one worker goes back there
// (and hits) even when the registry's own order would pick the other,
// busier-looking or not, once the worker reported the pages it sealed;
// the index never matches another tenant's request.
func TestPrefixRoutingFollowsTheCache(t *testing.T) {
	const maxTokens = 4
	content := strings.Repeat("Pack my box with five dozen liquor jugs. ", 6)
	ref := runReference(t, chatTokens(t, content), maxTokens)
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	w1 := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, reg)).attach(tg)
	w2 := startReal(t, workerConfig(t, "both-2", config.RoleBoth, config.TransferTCP, reg)).attach(tg)
	ask := func(key string) int64 {
		t.Helper()
		resp := tg.greedyChat(key, []chatMessage{userMessage(content)}, maxTokens)
		if got := resp.Choices[0].Message.Content; got != ref.text {
			t.Fatalf("answer %q, reference %q", got, ref.text)
		}
		return resp.Usage.PromptTokensDetails.CachedTokens
	}
	if ask(tg.key) != 0 {
		t.Fatal("first request hit")
	}
	// The serving worker reports the pages it sealed.
	waitFor(t, "the worker's report of its sealed pages", func() bool { return tg.domains.index.Len() > 0 })
	served := ""
	for _, s := range tg.table.List() {
		served = requestView(s).DecodeWorker
	}
	// Make the other worker the registry's choice: the serving worker now
	// looks busier (a request routed there and not finished).
	var other, busy *registry.Worker
	for _, w := range []*realWorker{w1, w2} {
		rw, ok := tg.reg.Get(w.id)
		if !ok {
			t.Fatalf("worker %s not registered", w.id)
		}
		if w.id == served {
			busy = rw
		} else {
			other = rw
		}
	}
	done := busy.Begin(0)
	if rt, err := tg.reg.Pick("tiny", 10); err != nil || rt.Decode != other {
		t.Fatalf("the registry alone would pick %v (%v), want the idle worker", rt.Decode.ID(), err)
	}
	if got := ask(tg.key); got == 0 {
		t.Fatal("the repeated prompt was not routed to the worker holding its pages")
	}
	beta := newTenantKey(t, tg, "beta")
	if got := ask(beta); got != 0 {
		t.Fatalf("another tenant hit %d cached tokens", got)
	}
	done()
	if tg.domains.index.Len() == 0 {
		t.Fatal("the routing index is empty")
	}
	w1.poolQuiet()
	w2.poolQuiet()
}

// TestConversationsFollowTheirPrefix: two both workers, two tenants and a
// tenant with the cache off each hold the same two multi-turn
// conversations. Every later turn goes to the worker holding the
// conversation's pages, even with that worker made to look busier (the
// registry alone would pick the other), and reuses them (usage
// cached_tokens); the other tenant's identical conversations never hit
// the first one's pages; every answer equals the cache-off tenant's.
func TestConversationsFollowTheirPrefix(t *testing.T) {
	const maxTokens, turns = 4, 3
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	w1 := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, reg)).attach(tg)
	w2 := startReal(t, workerConfig(t, "both-2", config.RoleBoth, config.TransferTCP, reg)).attach(tg)
	ctx := context.Background()
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "nocache", PrefixCache: cachekey.ModeOff}); err != nil {
		t.Fatal(err)
	}
	nocache, _, err := tg.Store().IssueKey(ctx, "nocache", "test")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{"alpha": tg.key, "beta": newTenantKey(t, tg, "beta"), "nocache": nocache}
	lastWorker := func() string {
		var last lifecycle.Snapshot
		for _, s := range tg.table.List() {
			if s.Received.After(last.Received) {
				last = s
			}
		}
		return requestView(last).DecodeWorker
	}
	type turn struct {
		answer         string
		prompt, cached int64
	}
	say := func(key string, msgs []chatMessage) turn {
		t.Helper()
		resp := tg.greedyChat(key, msgs, maxTokens)
		return turn{resp.Choices[0].Message.Content, resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens}
	}
	topics := []string{"Pack my box with five dozen liquor jugs. ", "How vexingly quick daft zebras jump. "}
	got := map[string][][]turn{} // tenant → conversation → turns
	var prompt, cached int64
	for _, tenantID := range []string{"alpha", "beta", "nocache"} {
		for conv, topic := range topics {
			var msgs []chatMessage
			holder := ""
			var turnsOf []turn
			for k := range turns {
				msgs = append(msgs, userMessage(strings.Repeat(topic, 6/(1+k))))
				var done func()
				if holder != "" && tenantID != "nocache" {
					// The holder looks busier: the registry alone would
					// pick the other worker.
					rw, _ := tg.reg.Get(holder)
					done = rw.Begin(0)
				}
				before := tg.domains.index.Len()
				tr := say(keys[tenantID], msgs)
				if done != nil {
					done()
				}
				w := lastWorker()
				switch {
				case tenantID == "nocache" && tr.cached != 0:
					t.Fatalf("%s conversation %d turn %d: %d cached tokens with the cache off", tenantID, conv, k, tr.cached)
				case tenantID != "nocache" && k == 0 && conv == 0 && tr.cached != 0:
					t.Fatalf("%s: the first request hit %d cached tokens (another tenant's pages)", tenantID, tr.cached)
				case tenantID != "nocache" && k > 0 && (tr.cached == 0 || w != holder):
					t.Fatalf("%s conversation %d turn %d: served by %s with %d cached tokens; its pages are on %s", tenantID, conv, k, w, tr.cached, holder)
				}
				if tenantID != "nocache" {
					// The worker reports the pages the turn sealed.
					waitFor(t, "the worker's report of the turn's pages", func() bool { return tg.domains.index.Len() > before })
					if k > 0 {
						prompt, cached = prompt+tr.prompt, cached+tr.cached
					}
				}
				holder = w
				turnsOf = append(turnsOf, tr)
				msgs = append(msgs, assistantMessage(tr.answer))
			}
			got[tenantID] = append(got[tenantID], turnsOf)
		}
	}
	for _, tenantID := range []string{"alpha", "beta"} {
		for conv := range topics {
			for k := range turns {
				if a, ref := got[tenantID][conv][k], got["nocache"][conv][k]; a.answer != ref.answer || a.prompt != ref.prompt {
					t.Fatalf("%s conversation %d turn %d: %q (%d prompt tokens), without the cache %q (%d)", tenantID, conv, k, a.answer, a.prompt, ref.answer, ref.prompt)
				}
			}
		}
	}
	t.Logf("hit ratio of the later turns: %d of %d prompt tokens (%.0f%%)", cached, prompt, 100*float64(cached)/float64(prompt))
	if 10*cached < 6*prompt {
		t.Fatalf("the later turns reused %d of %d prompt tokens, want at least 60%%", cached, prompt)
	}
	w1.poolQuiet()
	w2.poolQuiet()
}

// greedyChat sends msgs to model tiny with API key key, at temperature 0
// for at most maxTokens, and returns the answer; it fails the test on an
// error.
func (tg *testGateway) greedyChat(key string, msgs []chatMessage, maxTokens int64) *chatCompletion {
	tg.t.Helper()
	resp, err := tg.apiAs(key).chat(context.Background(), chatCompletionRequest{
		Model: "tiny", Messages: msgs, MaxTokens: &maxTokens, Temperature: new(0.0),
	})
	if err != nil {
		tg.t.Fatal(err)
	}
	return resp
}

// TestPrefixCacheOnPD: through a prefill and a decode worker (tcp), a
// repeated prompt reuses the prefill worker's sealed pages; usage
// cached_tokens, non-streamed and in the streamed final usage chunk, is
// what prefill reused (every full page but the last token's), the text is
// the reference's, and the usage records bill the cached tokens at the
// tenant's cached_token_rate.
func TestPrefixCacheOnPD(t *testing.T) {
	const maxTokens = 8
	content := strings.Repeat("Sphinx of black quartz, judge my vow. ", 6)
	ref := runReference(t, chatTokens(t, content), maxTokens)
	tg := startGateway(t, testConfig())
	reg := tg.RegistryAddr().String()
	d := startReal(t, workerConfig(t, "decode-1", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
	startReal(t, workerConfig(t, "prefill-1", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
	ctx := context.Background()
	rate := 0.25
	if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: "cachy", CachedTokenRate: &rate}); err != nil {
		t.Fatal(err)
	}
	key, _, err := tg.Store().IssueKey(ctx, "cachy", "test")
	if err != nil {
		t.Fatal(err)
	}
	const pageTokens = 16 // the default worker.kv.page_tokens
	hit := (ref.prompt - 1) / pageTokens * pageTokens
	if hit == 0 {
		t.Fatalf("the prompt (%d tokens) fills no page", ref.prompt)
	}
	c := tg.apiAs(key)
	params := chatCompletionRequest{
		Model: "tiny", Messages: []chatMessage{userMessage(content)},
		MaxTokens: new(int64(maxTokens)), Temperature: new(0.0),
	}
	check := func(what, text string, u completionUsage, wantCached int64) {
		t.Helper()
		if text != ref.text || u.PromptTokens != ref.prompt || u.CompletionTokens != ref.completion {
			t.Fatalf("%s: answer %q usage %d+%d, reference %q %d+%d", what, text, u.PromptTokens, u.CompletionTokens, ref.text, ref.prompt, ref.completion)
		}
		if u.PromptTokensDetails.CachedTokens != wantCached {
			t.Fatalf("%s: cached_tokens %d, want %d", what, u.PromptTokensDetails.CachedTokens, wantCached)
		}
	}
	for i, want := range []int64{0, hit} {
		resp, err := c.chat(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("request %d", i+1), resp.Choices[0].Message.Content, resp.Usage, want)
	}
	params.StreamOptions = &streamOptions{IncludeUsage: true}
	stream := c.chatStream(ctx, params)
	var text string
	var usage completionUsage
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text += c.Delta.Content
		}
		if ch.Usage.PromptTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("streamed request", text, usage, hit)
	for _, s := range tg.table.List() {
		if v := requestView(s); v.PrefillWorker != "prefill-1" || v.DecodeWorker != d.id {
			t.Fatalf("request %+v did not go through P/D", v)
		}
	}
	// Billing: the cached prompt tokens at the tenant's rate.
	var got []tenant.Usage
	waitFor(t, "the usage of the 3 requests", func() bool {
		got, err = tg.Store().Usage(ctx, "cachy", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		return err == nil && len(got) == 1 && got[0].Requests == 3
	})
	total := 3 * (ref.prompt + ref.completion)
	if u := got[0]; u.CachedTokens != 2*hit || u.BilledTokens != total-2*hit+int64(math.Round(float64(2*hit)*rate)) {
		t.Fatalf("usage record %+v; want %d cached of %d tokens, billed at %v", u, 2*hit, total, rate)
	}
	d.poolQuiet()
}

// TestPrefixIndexOnEveryGateway: a worker reporting to two gateways gives
// each its own cursor in the pool's events, so both routing indexes learn
// every page the worker sealed, whichever gateway's request sealed it.
func TestPrefixIndexOnEveryGateway(t *testing.T) {
	const maxTokens = 4
	content := strings.Repeat("The five boxing wizards jump quickly. ", 6)
	ref := runReference(t, chatTokens(t, content), maxTokens)
	tg1, tg2 := startGateway(t, testConfig()), startGateway(t, testConfig())
	cfg := workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg1.RegistryAddr().String())
	cfg.Worker.Gateways = append(cfg.Worker.Gateways, tg2.RegistryAddr().String())
	w := startReal(t, cfg).attach(tg1)
	waitFor(t, "the worker to register with the second gateway", func() bool {
		rw, ok := tg2.reg.Get(w.id)
		return ok && rw.Snapshot().Healthy
	})
	ctx := context.Background()
	for i, tg := range []*testGateway{tg1, tg2} {
		resp, err := tg.api().chat(ctx, chatCompletionRequest{
			Model: "tiny", Messages: []chatMessage{userMessage(content)},
			MaxTokens: new(int64(maxTokens)), Temperature: new(0.0),
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.Content; got != ref.text {
			t.Fatalf("gateway %d: answer %q, reference %q", i+1, got, ref.text)
		}
	}
	// Each gateway derives its own domain: the worker sealed the prompt's
	// pages twice, once per domain, and both indexes hold both sets.
	prompt := chatTokens(t, content)
	rw, _ := tg1.reg.Get(w.id)
	c := rw.Candidate()
	var sets [][]cachekey.Hash
	for _, tg := range []*testGateway{tg1, tg2} {
		acme, err := tg.Store().GetTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		d, ok := tg.domains.of(api.Principal{Tenant: "acme", Incarnation: acme.Incarnation}, cachekey.ModeTenant, "")
		if !ok {
			t.Fatal("no cache domain")
		}
		req := &routing.Request{Model: "tiny", Domain: d, Cached: true, Prompt: prompt}
		if h := req.Hashes(c.PageTokens, c.CacheVersion); len(h) > 0 {
			sets = append(sets, h)
		}
	}
	if len(sets) != 2 {
		t.Fatalf("the prompt (%d tokens) fills no page", len(prompt))
	}
	for i, tg := range []*testGateway{tg1, tg2} {
		waitFor(t, fmt.Sprintf("gateway %d's index to hold the pages sealed through both gateways", i+1), func() bool {
			for _, h := range sets {
				if tg.domains.index.Match("tiny", w.id, h) != len(h) {
					return false
				}
			}
			return true
		})
	}
	w.poolQuiet()
}

// TestDomainsFollowTheKeySecret: gateways sharing tenants.key_secret_file
// (the replicas of one fleet, or one gateway restarted) derive the same
// cache domain for a tenant, so they share the workers' cached pages;
// another key secret, or none (a secret drawn at start-up), shares none.
func TestDomainsFollowTheKeySecret(t *testing.T) {
	domain := func(keySecret []byte) cachekey.Domain {
		d, ok := newCacheDomains(slog.New(slog.DiscardHandler), config.RoutingCacheAware, keySecret).of(api.Principal{Tenant: "acme", Incarnation: "i1"}, cachekey.ModeTenant, "")
		if !ok {
			t.Fatal("no cache domain")
		}
		return d
	}
	a := []byte("fleet key secret")
	if domain(a) != domain([]byte("fleet key secret")) {
		t.Error("two gateways with one key secret derive different domains")
	}
	if domain(a) == domain([]byte("another key secret")) {
		t.Error("two key secrets derive the same domain")
	}
	if domain(nil) == domain(nil) {
		t.Error("two gateways without a key secret derive the same domain")
	}
	if !bytes.Equal(domainSecret(a), domainSecret(a)) || bytes.Equal(domainSecret(a), a) {
		t.Error("the domain secret is not a fixed function of the key secret distinct from it")
	}
}

// TestDeleteEvictsTheTenantsCache (issue 25): a tenant deleted through
// the admin API and re-created under the same ID with a new key meets
// none of the old owner's pages: the deletion evicted them from the
// worker (acknowledged before the admin call returned: the pool holds no
// cached page, the routing index forgot them, the eviction is counted)
// and the new owner's first request reuses nothing and gets the
// reference's answer. Revoking a key of a tenant with per-key domains
// evicts that key's pages.
func TestDeleteEvictsTheTenantsCache(t *testing.T) {
	const maxTokens = 8
	content := strings.Repeat("A recycled tenant ID must not inherit the pages of its last owner. ", 6)
	ref := runReference(t, chatTokens(t, content), maxTokens)
	tg := startGateway(t, testConfig())
	w := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ctx := context.Background()
	const pageTokens = 16
	hit := (ref.prompt - 1) / pageTokens * pageTokens
	ask := func(key string, wantCached int64) {
		t.Helper()
		askCached(t, tg, key, content, maxTokens, ref, wantCached)
	}
	cached := func() int64 {
		t.Helper()
		st, err := w.client.Status(ctx, &controlpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		p := st.GetPool()
		if p.FreePages+p.ReservedPages+p.InUsePages+p.QuarantinedPages != p.TotalPages {
			t.Fatalf("pool accounting broken: %+v", p)
		}
		return p.CachedPages
	}
	issue := func(id string, mode cachekey.Mode) (string, string) {
		t.Helper()
		if _, err := tg.Store().CreateTenant(ctx, tenant.Tenant{ID: id, PrefixCache: mode}); err != nil {
			t.Fatal(err)
		}
		key, info, err := tg.Store().IssueKey(ctx, id, "test")
		if err != nil {
			t.Fatal(err)
		}
		return key, info.ID
	}
	evictions := func(reason string) float64 {
		return tg.metric("warden_gateway_cache_domain_evictions_total", map[string]string{"reason": reason, "outcome": "acked"})
	}
	if hit == 0 {
		t.Fatalf("the prompt (%d tokens) fills no page", ref.prompt)
	}

	old, _ := issue("rc1", "")
	ask(old, 0)
	ask(old, hit)
	w.poolQuiet()
	waitFor(t, "the worker's report of its sealed pages", func() bool { return tg.domains.index.Len() > 0 })
	if n := cached(); n != hit/pageTokens {
		t.Fatalf("%d cached pages before the deletion, want %d", n, hit/pageTokens)
	}
	if code, body := tg.admin(http.MethodDelete, "/admin/v1/tenants/rc1"); code != http.StatusOK {
		t.Fatalf("DELETE tenant: %d %s", code, body)
	}
	if n := cached(); n != 0 {
		t.Fatalf("%d cached pages after the deletion was acknowledged, want 0", n)
	}
	if n := tg.domains.index.Len(); n != 0 {
		t.Fatalf("the routing index still holds %d entries of the deleted tenant", n)
	}
	if got := evictions("tenant_deleted"); got != 1 {
		t.Fatalf("%v acknowledged tenant_deleted evictions, want 1 (one worker)", got)
	}
	fresh, _ := issue("rc1", "")
	ask(fresh, 0)
	ask(fresh, hit)
	w.poolQuiet()

	// Per-key domains: revoking one key evicts its pages, not the other key's.
	k1, k1ID := issue("pk", cachekey.ModeKey)
	k2, _, err := tg.Store().IssueKey(ctx, "pk", "second")
	if err != nil {
		t.Fatal(err)
	}
	ask(k1, 0)
	ask(k2, 0)
	w.poolQuiet()
	before := cached()
	if code, body := tg.admin(http.MethodDelete, "/admin/v1/keys/"+k1ID); code != http.StatusOK {
		t.Fatalf("DELETE key: %d %s", code, body)
	}
	if n := cached(); n != before-hit/pageTokens {
		t.Fatalf("%d cached pages after revoking a key, %d before: want the key's %d pages evicted", n, before, hit/pageTokens)
	}
	if got := evictions("key_revoked"); got != 1 {
		t.Fatalf("%v acknowledged key_revoked evictions, want 1", got)
	}
	ask(k2, hit) // the other key's pages stay
	w.poolQuiet()
}

// askCached sends content as a greedy chat with key and checks the answer
// and usage against ref and the reported cached_tokens against wantCached.
func askCached(t *testing.T, tg *testGateway, key, content string, maxTokens int64, ref reference, wantCached int64) {
	t.Helper()
	resp := tg.greedyChat(key, []chatMessage{userMessage(content)}, maxTokens)
	u := resp.Usage
	if got := resp.Choices[0].Message.Content; got != ref.text || u.PromptTokens != ref.prompt || u.CompletionTokens != ref.completion {
		t.Fatalf("answer %q usage %d+%d, reference %q %d+%d", got, u.PromptTokens, u.CompletionTokens, ref.text, ref.prompt, ref.completion)
	}
	if u.PromptTokensDetails.CachedTokens != wantCached {
		t.Fatalf("cached_tokens %d, want %d", u.PromptTokensDetails.CachedTokens, wantCached)
	}
}

// TestAdapterRemovalEvictsItsCache: a tenant's pages sealed under its
// LoRA adapter (on a real worker) are evicted when the adapter is
// deleted, and when the tenant is deleted (its adapters are listed
// before the deletion removes them), each acknowledged before the admin
// call returns.
func TestAdapterRemovalEvictsItsCache(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ctx := context.Background()
	cfg, weights, _ := realAdapterFiles(t, 5)
	acme := tg // the test gateway's key is tenant acme's
	cachedPages := func() int64 {
		t.Helper()
		st, err := w.client.Status(ctx, &controlpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetPool().CachedPages
	}
	evictions := func(reason string) float64 {
		return tg.metric("warden_gateway_cache_domain_evictions_total", map[string]string{"reason": reason, "outcome": "acked"})
	}
	content := strings.Repeat("An adapter's pages go with the adapter. ", 8)
	body := map[string]any{"model": "tiny:ad", "max_tokens": 4, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": content}}}
	fill := func() {
		t.Helper()
		if _, err := tg.adapters.Register(ctx, adapters.Upload{Base: "tiny", Name: "ad", Owner: "acme", ConfigJSON: cfg, Weights: weights}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if code, _, b := acme.postKey(acme.key, "/v1/chat/completions", body); code != http.StatusOK {
				t.Fatalf("chat under the adapter: %d %s", code, b)
			}
		}
		w.poolQuiet()
		if cachedPages() == 0 {
			t.Fatal("no page sealed under the adapter")
		}
	}

	fill()
	if code, b := tg.admin(http.MethodDelete, "/admin/v1/adapters/tiny:ad"); code != http.StatusOK {
		t.Fatalf("DELETE adapter: %d %s", code, b)
	}
	if n := cachedPages(); n != 0 {
		t.Fatalf("%d cached pages after the adapter's deletion was acknowledged, want 0", n)
	}
	if got := evictions("adapter_removed"); got != 1 {
		t.Fatalf("%v acknowledged adapter_removed evictions, want 1", got)
	}

	fill()
	if code, b := tg.admin(http.MethodDelete, "/admin/v1/tenants/acme"); code != http.StatusOK {
		t.Fatalf("DELETE tenant: %d %s", code, b)
	}
	if n := cachedPages(); n != 0 {
		t.Fatalf("%d cached pages after the tenant's deletion was acknowledged, want 0", n)
	}
}
