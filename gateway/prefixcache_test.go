package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warden-ai/warden/config"
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
