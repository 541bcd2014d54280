package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/tenant"
)

type tokenizeAnswer struct {
	Count       int     `json:"count"`
	MaxModelLen int64   `json:"max_model_len"`
	Tokens      []int32 `json:"tokens"`
	Prompt      string  `json:"prompt"`
}

// tokenizeCall posts body to path and decodes the answer.
func tokenizeCall(t *testing.T, tg *testGateway, path string, body any) (int, tokenizeAnswer, []byte) {
	t.Helper()
	code, _, raw := tg.post(path, body)
	var a tokenizeAnswer
	if code == 200 {
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("%s: %v in %s", path, err, raw)
		}
	}
	return code, a, raw
}

// TestRealTokenize: /tokenize returns exactly the tokens a real worker is
// prefilled with for the same chat or completion input (the count equals
// usage.prompt_tokens, and generating from the ids on a worker called
// directly gives the gateway's text); /detokenize inverts it; bad ids
// and unknown models are 400 and 404; the calls count against the
// request rate but bill no tokens.
func TestRealTokenize(t *testing.T) {
	cfg := testConfig()
	cfg.Tenants.AuthCacheTTL = 0 // limit changes apply at once
	tg := startGateway(t, cfg)
	startReal(t, workerConfig(t, "both-tok", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)
	ref := newRefWorker(t, 64)
	ctx := context.Background()
	client := tg.api()

	// Chat: the template's rendering, as the generation prefills it.
	code, chat, raw := tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny",
		"messages": []map[string]any{{"role": "user", "content": realPrompt}}})
	if code != 200 || !slices.Equal(chat.Tokens, chatTokens(t, realPrompt)) || chat.Count != len(chat.Tokens) || chat.MaxModelLen != 2048 {
		t.Fatalf("tokenize chat: %d %s", code, raw)
	}
	resp, err := client.chat(ctx, realChat(8))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokens != int64(chat.Count) {
		t.Fatalf("tokenize counted %d, the chat request prefilled %d", chat.Count, resp.Usage.PromptTokens)
	}
	if want := ref.run(chat.Tokens, 8); want.text != resp.Choices[0].Message.Content {
		t.Fatalf("generating from the tokenized ids: %q, the chat request %q", want.text, resp.Choices[0].Message.Content)
	}
	// Without the generation prompt the rendering is a strict prefix.
	_, bare, _ := tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny", "add_generation_prompt": false,
		"messages": []map[string]any{{"role": "user", "content": realPrompt}}})
	if len(bare.Tokens) >= len(chat.Tokens) || !slices.Equal(bare.Tokens, chat.Tokens[:len(bare.Tokens)]) {
		t.Fatalf("add_generation_prompt false: %v, with it %v", bare.Tokens, chat.Tokens)
	}

	// Completion: BOS, then the text.
	const text = "Once upon a time"
	code, comp, raw := tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny", "prompt": text})
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := tok.Encode(text)
	bos, _ := tok.BOS()
	if code != 200 || !slices.Equal(comp.Tokens, append([]int32{bos}, plain...)) {
		t.Fatalf("tokenize prompt: %d %s", code, raw)
	}
	cresp, err := client.completions(ctx, completionRequest{Model: "tiny",
		Prompt: text, MaxTokens: new(int64(6)), Temperature: new(0.0)})
	if err != nil {
		t.Fatal(err)
	}
	if cresp.Usage.PromptTokens != int64(comp.Count) {
		t.Fatalf("tokenize counted %d, the completion prefilled %d", comp.Count, cresp.Usage.PromptTokens)
	}
	if want := ref.run(comp.Tokens, 6); want.text != cresp.Choices[0].Text {
		t.Fatalf("generating from the tokenized ids: %q, the completion %q", want.text, cresp.Choices[0].Text)
	}
	_, nospecial, _ := tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny", "prompt": text, "add_special_tokens": false})
	if !slices.Equal(nospecial.Tokens, plain) {
		t.Fatalf("add_special_tokens false: %v, want %v", nospecial.Tokens, plain)
	}

	// Detokenize: the text back, special tokens written out.
	code, det, raw := tokenizeCall(t, tg, "/detokenize", map[string]any{"model": "tiny", "tokens": comp.Tokens})
	bosText, _ := tok.Decode([]int32{bos})
	if code != 200 || det.Prompt != string(bosText)+text {
		t.Fatalf("detokenize: %d %s", code, raw)
	}

	for _, c := range []struct {
		path  string
		body  any
		code  int
		param string
	}{
		{"/detokenize", map[string]any{"model": "tiny", "tokens": []int{1, tok.VocabSize()}}, 400, "tokens[1]"},
		{"/detokenize", map[string]any{"model": "tiny", "tokens": []any{1, -2}}, 400, "tokens[1]"},
		{"/detokenize", map[string]any{"model": "tiny", "tokens": "1 2"}, 400, "tokens"},
		{"/detokenize", map[string]any{"model": "nope", "tokens": []int{1}}, 404, "model"},
		{"/tokenize", map[string]any{"model": "nope", "prompt": "x"}, 404, "model"},
		{"/tokenize", map[string]any{"model": "tiny"}, 400, "prompt"},
		{"/tokenize", map[string]any{"model": "tiny", "prompt": "x", "add_special_tokens": "yes"}, 400, "add_special_tokens"},
		{"/tokenize", map[string]any{"model": "tiny", "messages": []any{}, "chat_template": "x"}, 400, "messages"},
		{"/tokenize", map[string]any{"model": "tiny", "messages": []map[string]any{{"role": "user", "content": "x"}}, "chat_template": "{{x}}"}, 400, "chat_template"},
	} {
		code, _, body := tokenizeCall(t, tg, c.path, c.body)
		e := decodeEnvelope(t, body)
		if code != c.code || str(e.Error.Param) != c.param {
			t.Errorf("%s %v: %d %s, want %d naming %s", c.path, c.body, code, body, c.code, c.param)
		}
	}

	// Counted against the request rate, billed no tokens: a prompt far
	// above the token rate tokenizes while requests remain, then 429.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{RequestsPerMinute: 3, TokensPerMinute: 10}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("many words here ", 20)
	for i := range 3 {
		code, a, raw := tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny", "prompt": long})
		if code != 200 || a.Count <= 10 {
			t.Fatalf("tokenize %d under the request rate: %d %s", i, code, raw)
		}
	}
	code, _, raw = tokenizeCall(t, tg, "/detokenize", map[string]any{"model": "tiny", "tokens": []int{1}})
	if e := decodeEnvelope(t, raw); code != 429 || str(e.Error.Code) != "rate_limit_exceeded" {
		t.Fatalf("past the request rate: %d %s", code, raw)
	}
	// A model the tenant may not use is hidden as not found.
	if _, err := tg.Store().UpdateTenant(ctx, tenant.Tenant{ID: "acme", Limits: tenant.Limits{AllowedModels: []string{"other"}}}); err != nil {
		t.Fatal(err)
	}
	code, _, raw = tokenizeCall(t, tg, "/tokenize", map[string]any{"model": "tiny", "prompt": "x"})
	if e := decodeEnvelope(t, raw); code != 404 || str(e.Error.Code) != "model_not_found" {
		t.Fatalf("a model the tenant may not use: %d %s", code, raw)
	}
}
