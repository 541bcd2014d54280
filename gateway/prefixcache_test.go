package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warden-ai/warden/config"
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
		c := openai.NewClient(option.WithBaseURL(tg.base+"/v1/"), option.WithAPIKey(key),
			option.WithHTTPClient(tg.http), option.WithMaxRetries(0))
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
			MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatal(err)
		}
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
	ctx := context.Background()
	ask := func(key string) int64 {
		t.Helper()
		c := openai.NewClient(option.WithBaseURL(tg.base+"/v1/"), option.WithAPIKey(key),
			option.WithHTTPClient(tg.http), option.WithMaxRetries(0))
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
			MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatal(err)
		}
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
