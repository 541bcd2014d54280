package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/test/harness"
	"github.com/warden-ai/warden/worker/engine"
)

// choiceTokens is max_tokens of the n > 1 tests.
const choiceTokens = 16

// testChoices: n = 3 through the official client on a single worker —
// at temperature 0 three choices equal to the engine's greedy output, at
// temperature 1 with a seed three choices each equal to the engine run
// alone with the choice's seed (engine.ChoiceSeed), streamed and not;
// usage counts the prompt once and sums the completions; the worker
// prefilled the prompt once per request (warden_engine_prefills_total,
// warden_engine_tokens_total{kind="prefill"} with kind="cached"); n above
// gateway.max_n is refused with 400 naming n (TestPrefillDecodeChoices runs
// n > 1 on separate prefill and decode workers). A tokens-per-minute limit
// reserves the prompt once plus n × max_tokens; without max_tokens each
// choice gets an equal share of what the tenant can spend.
func testChoices(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	client := c.Gateway().OpenAI(c.NewKey(t, "choices"))
	ref := reference(t, harness.ModelTiny)
	msgs := chats[1]
	p, err := ref.ChatPrompt(msgs)
	if err != nil {
		t.Fatal(err)
	}
	worker := c.Worker(config.RoleBoth, modelSingle)
	for _, tc := range []struct {
		name        string
		temperature float64
		seed        int64
	}{{"greedy", 0, 0}, {"seeded", 1, 11}} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantFinish, completion := referenceChoices(t, ref, p, tc.temperature, tc.seed)
			params := openai.ChatCompletionNewParams{
				Model: modelSingle, Messages: openAIMessages(msgs), MaxTokens: openai.Int(choiceTokens),
				Temperature: openai.Float(tc.temperature), Seed: openai.Int(tc.seed), N: openai.Int(3),
			}
			before := scrape(t, worker.MetricsURL)
			resp, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			after := scrape(t, worker.MetricsURL)
			if d := after["warden_engine_prefills_total"] - before["warden_engine_prefills_total"]; d != 1 {
				t.Fatalf("%v prefills for one n = 3 request, want 1", d)
			}
			// Prefilled or reused from the prefix cache, once.
			delta := func(kind string) float64 {
				series := `warden_engine_tokens_total{kind="` + kind + `"}`
				return after[series] - before[series]
			}
			if d := delta("prefill") + delta("cached"); d != float64(len(p)) {
				t.Fatalf("%v prompt tokens prefilled or cached for one n = 3 request of %d", d, len(p))
			}
			if len(resp.Choices) != 3 || resp.Usage.PromptTokens != int64(len(p)) || resp.Usage.CompletionTokens != completion {
				t.Fatalf("%d choices, usage %+v; want 3, prompt %d, completion %d", len(resp.Choices), resp.Usage, len(p), completion)
			}
			for k, ch := range resp.Choices {
				if ch.Index != int64(k) || ch.Message.Content != want[k] {
					t.Fatalf("choice %d (index %d) = %q, engine alone with its seed %q", k, ch.Index, ch.Message.Content, want[k])
				}
			}

			stream := client.Chat.Completions.NewStreaming(ctx, params)
			got := make([]string, 3)
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					if ch.Index < 0 || ch.Index >= 3 {
						t.Fatalf("chunk of choice %d", ch.Index)
					}
					got[ch.Index] += ch.Delta.Content
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			for k := range got {
				if got[k] != want[k] {
					t.Fatalf("streamed choice %d = %q, engine %q", k, got[k], want[k])
				}
			}

			// A stop string applies to each choice on its own: a
			// character from the middle of choice 1's text.
			r := []rune(want[1])
			if len(r) < 2 {
				t.Fatalf("choice 1 too short for a stop string: %q", want[1])
			}
			stop := string(r[len(r)/2])
			params.Stop = openai.ChatCompletionNewParamsStopUnion{OfString: openai.String(stop)}
			resp, err = client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			for k, ch := range resp.Choices {
				text, finish := want[k], wantFinish[k]
				if i := strings.Index(text, stop); i >= 0 {
					text, finish = text[:i], "stop"
				}
				if ch.Message.Content != text || ch.FinishReason != finish {
					t.Fatalf("stop %q: choice %d = %q (%s), want %q (%s)", stop, k, ch.Message.Content, ch.FinishReason, text, finish)
				}
			}
		})
	}

	// Legacy completions with n.
	cp, err := ref.CompletionPrompt(completions[1])
	if err != nil {
		t.Fatal(err)
	}
	cwant, err := ref.Run(ctx, cp, harness.Greedy(choiceTokens))
	if err != nil {
		t.Fatal(err)
	}
	cresp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: modelSingle, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(completions[1])},
		MaxTokens: openai.Int(choiceTokens), Temperature: openai.Float(0), N: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cresp.Choices) != 2 || cresp.Choices[0].Text != cwant.Text || cresp.Choices[1].Text != cwant.Text || cresp.Choices[1].Index != 1 {
		t.Fatalf("completions n = 2: %+v, engine %q", cresp.Choices, cwant.Text)
	}

	// Tokens-per-minute reserve the prompt once plus n × max_tokens.
	const tpm = 2 * choiceTokens
	if _, err := c.Gateway().Admin.CreateTenant(ctx, adminclient.TenantCreate{ID: "choices-tpm",
		Limits: tenant.Limits{TokensPerMinute: int64(len(p)) + tpm}}); err != nil {
		t.Fatal(err)
	}
	limited := c.Gateway().OpenAI(c.NewKey(t, "choices-tpm"))
	_, err = limited.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: modelSingle, Messages: openAIMessages(msgs), MaxTokens: openai.Int(choiceTokens), N: openai.Int(3),
	})
	var tooLarge *openai.Error
	if !errors.As(err, &tooLarge) || tooLarge.StatusCode != http.StatusBadRequest || tooLarge.Code != "request_too_large" {
		t.Fatalf("n = 3 × %d tokens over a limit of prompt + %d: %v, want 400 request_too_large", choiceTokens, tpm, err)
	}
	// Without max_tokens each choice gets an equal share of the rest.
	shared, err := limited.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: modelSingle, Messages: openAIMessages(msgs), N: openai.Int(3), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(shared.Choices) != 3 || shared.Usage.PromptTokens != int64(len(p)) || shared.Usage.CompletionTokens > tpm {
		t.Fatalf("n = 3 without max_tokens: %d choices, usage %+v, limit prompt + %d", len(shared.Choices), shared.Usage, tpm)
	}
	share, err := ref.Run(ctx, p, harness.Greedy(tpm/3))
	if err != nil {
		t.Fatal(err)
	}
	for k, ch := range shared.Choices {
		if ch.Message.Content != share.Text || ch.FinishReason != share.Finish {
			t.Fatalf("choice %d without max_tokens = %q (%s), engine with %d tokens %q (%s)", k, ch.Message.Content, ch.FinishReason, tpm/3, share.Text, share.Finish)
		}
	}

	for _, model := range []string{harness.ModelTiny, modelSingle} {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: openAIMessages(msgs), MaxTokens: openai.Int(4), N: openai.Int(9),
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "n" {
			t.Fatalf("%s n = 9: %v, want 400 naming n", model, fmt.Sprint(err))
		}
	}
}

// referenceChoices runs the reference model for each of three choices of
// prompt p at temperature with seed (choice k with its derived seed) and
// returns their texts, finish reasons and completion tokens in all; it
// fails t when seeded choices come out equal (they could not tell the
// choices apart).
func referenceChoices(t *testing.T, ref *harness.Reference, p []int32, temperature float64, seed int64) (texts, finishes []string, completion int64) {
	t.Helper()
	texts, finishes = make([]string, 3), make([]string, 3)
	for k := range texts {
		out, err := ref.Run(context.Background(), p, engine.Sampling{Temperature: float32(temperature), TopP: 1, MaxTokens: choiceTokens,
			Seed: engine.ChoiceSeed(uint64(seed), k)})
		if err != nil {
			t.Fatal(err)
		}
		texts[k], finishes[k] = out.Text, out.Finish
		completion += int64(out.CompletionTokens)
	}
	if temperature > 0 && texts[0] == texts[1] && texts[1] == texts[2] {
		t.Fatalf("the reference's three seeded choices are equal: %q", texts[0])
	}
	return texts, finishes, completion
}
