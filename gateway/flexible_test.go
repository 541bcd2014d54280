package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
)

// TestNoMaxTokensGetsRemainingAllowance: a tenant whose token rate is
// below the model's context can omit max_tokens; the answer is cut at
// what it can still spend and ends with "length"; the next request waits
// (429); only a prompt that alone exceeds the limit is a 400.
func TestNoMaxTokensGetsRemainingAllowance(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0 // limit changes apply at once
	tg := startGateway(t, cfg)
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.reply = strings.Repeat("long answer ", 20)
	w.start()
	ctx := context.Background()
	const tpm = 40
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: tpm}}); err != nil {
		t.Fatal(err)
	}
	code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi"})
	var resp struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &resp); code != 200 || err != nil || len(resp.Choices) != 1 {
		t.Fatalf("request without max_tokens: %d %s", code, body)
	}
	p, c := resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	if resp.Choices[0].FinishReason != "length" || p+c != tpm || resp.Choices[0].Text != w.reply[:c] {
		t.Fatalf("answer %+v usage %d+%d: want finish length at the allowance %d", resp.Choices, p, c, tpm)
	}
	if w.maxSeen[0] != int32(tpm-p) {
		t.Fatalf("the worker was asked for %d tokens, want %d", w.maxSeen[0], tpm-p)
	}
	if h.Get("X-Ratelimit-Remaining-Tokens") != "0" {
		t.Fatalf("headers %v", h)
	}
	// Nothing left: the next one waits.
	code, _, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi"})
	if e := decodeEnvelope(t, body); code != 429 || str(e.Error.Code) != "rate_limit_exceeded" ||
		!strings.Contains(e.Error.Message, "tokens per minute") {
		t.Fatalf("request with the allowance spent: %d %s", code, body)
	}
	// A prompt that alone (plus one output token) exceeds the limit: 400.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{TokensPerMinute: p}}); err != nil {
		t.Fatal(err)
	}
	code, _, body = tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi"})
	if e := decodeEnvelope(t, body); code != 400 || str(e.Error.Code) != "request_too_large" || str(e.Error.Param) != "prompt" ||
		!strings.Contains(e.Error.Message, "prompt plus one output token") {
		t.Fatalf("prompt above the limit: %d %s", code, body)
	}
}
