package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
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
		resp := tg.greedyChat(key, []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}, maxTokens)
		u := resp.Usage
		if got := resp.Choices[0].Message.Content; got != ref.text || u.PromptTokens != ref.prompt || u.CompletionTokens != ref.completion {
			t.Fatalf("answer %q usage %d+%d, reference %q %d+%d", got, u.PromptTokens, u.CompletionTokens, ref.text, ref.prompt, ref.completion)
		}
		if u.PromptTokensDetails.CachedTokens != wantCached {
			t.Fatalf("cached_tokens %d, want %d", u.PromptTokensDetails.CachedTokens, wantCached)
		}
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
		resp := tg.greedyChat(key, []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}, maxTokens)
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
	say := func(key string, msgs []openai.ChatCompletionMessageParamUnion) turn {
		t.Helper()
		resp := tg.greedyChat(key, msgs, maxTokens)
		return turn{resp.Choices[0].Message.Content, resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens}
	}
	topics := []string{"Pack my box with five dozen liquor jugs. ", "How vexingly quick daft zebras jump. "}
	got := map[string][][]turn{} // tenant → conversation → turns
	var prompt, cached int64
	for _, tenantID := range []string{"alpha", "beta", "nocache"} {
		for conv, topic := range topics {
			var msgs []openai.ChatCompletionMessageParamUnion
			holder := ""
			var turnsOf []turn
			for k := range turns {
				msgs = append(msgs, openai.UserMessage(strings.Repeat(topic, 6/(1+k))))
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
				msgs = append(msgs, openai.AssistantMessage(tr.answer))
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
func (tg *testGateway) greedyChat(key string, msgs []openai.ChatCompletionMessageParamUnion, maxTokens int64) *openai.ChatCompletion {
	tg.t.Helper()
	resp, err := tg.openaiAs(key).Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: msgs, MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
	})
	if err != nil {
		tg.t.Fatal(err)
	}
	return resp
}
