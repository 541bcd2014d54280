package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// TestRecreatedTenantStartsCold is issue 25's reproduction, on a single
// worker and over P/D: tenant rc1 sends a long prompt twice (the second
// time served from its cache), is deleted and re-created under the same
// ID for a new owner with a new key. The new owner's first request with
// the same prompt reuses nothing (cached_tokens 0) and still gets the
// engine's answer; the deletion evicted the old owner's sealed pages from
// every serving worker's pool (prefill's and decode's over P/D): the
// admin workers view reports no cached page left.
func TestRecreatedTenantStartsCold(t *testing.T) {
	tiny := env.Models[harness.ModelTiny]
	models := []config.Model{harness.DefaultModels()[0], {Name: modelSingle, ContextLength: harness.DefaultContext, ContextPolicy: config.ContextClamp}}
	workers := append(harness.PD(harness.ModelTiny), harness.WorkerSpec{Role: config.RoleBoth, Model: modelSingle, ModelDir: tiny})
	c := harness.Start(t, env, harness.Options{Workers: workers, Models: models})
	ref := reference(t, harness.ModelTiny)
	ctx, cancel := context.WithTimeout(context.Background(), harness.WaitTimeout)
	defer cancel()
	admin := c.Gateway().Admin
	prompt := strings.Repeat("The recycled tenant must never read the pages of the one before it. ", 70)
	want, err := ref.Completion(ctx, prompt, 8)
	if err != nil {
		t.Fatal(err)
	}
	if want.PromptTokens < 1000 {
		t.Fatalf("the prompt is %d tokens, want at least 1000", want.PromptTokens)
	}
	hit := int64((want.PromptTokens - 1) / 16 * 16) // the full pages before the last prompt token
	for _, model := range []string{modelSingle, harness.ModelTiny} {
		t.Run(model, func(t *testing.T) {
			ask := func(key string, wantCached int64) {
				t.Helper()
				client := c.Gateway().OpenAI(key)
				resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
					Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
					MaxTokens: openai.Int(8), Temperature: openai.Float(0),
				})
				if err != nil {
					t.Fatal(err)
				}
				checkOutput(t, model, 0, resp.Choices[0].Text, string(resp.Choices[0].FinishReason), resp.Usage, want)
				if got := resp.Usage.PromptTokensDetails.CachedTokens; got != wantCached {
					t.Fatalf("cached_tokens %d, want %d", got, wantCached)
				}
			}
			var ids []string // the workers serving model
			if model == modelSingle {
				ids = []string{c.Worker(config.RoleBoth, model).ID}
			} else {
				ids = []string{c.Worker(config.RolePrefill, model).ID, c.Worker(config.RoleDecode, model).ID}
			}
			old := c.NewKey(t, "rc1")
			ask(old, 0)
			ask(old, hit)
			c.WaitPoolsFree(t)
			for _, id := range ids {
				// The serving workers hold the old owner's pages, cached.
				c.WaitWorker(t, id, "holding cached pages", func(v adminclient.WorkerView, found bool) bool { return found && v.Pool.CachedPages > 0 })
			}
			if err := admin.DeleteTenant(ctx, "rc1"); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				// The deletion evicted them: the pool is all free, nothing cached.
				c.WaitWorker(t, id, "without cached pages", func(v adminclient.WorkerView, found bool) bool {
					return found && v.Pool.CachedPages == 0 && v.Pool.FreePages == v.Pool.TotalPages
				})
			}
			if _, err := admin.CreateTenant(ctx, adminclient.TenantCreate{ID: "rc1", Name: "new owner"}); err != nil {
				t.Fatal(err)
			}
			fresh, err := admin.IssueKey(ctx, "rc1", "new owner")
			if err != nil {
				t.Fatal(err)
			}
			ask(fresh.Key, 0)
			ask(fresh.Key, hit)
			if err := admin.DeleteTenant(ctx, "rc1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
