package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// modelEndlessShm is the endless model served by a prefill and a decode
// worker over the shm transfer.
const modelEndlessShm = "endless-shm"

// TestPrefillDecodeChoices: n = 3 on separate prefill and decode worker
// processes, over tcp and shm. At temperature 0 the three choices equal
// the single-worker engine's greedy output; at temperature 1 with a seed
// choice k equals the engine run alone with the derived seed
// (engine.ChoiceSeed), streamed (with each chunk's index) and not, so
// reproducibly. The prefill worker prefills the prompt once per request
// (warden_engine_prefills_total +1, its prompt tokens once) and usage
// counts the prompt once. A client leaving mid-stream aborts all three
// choices and every page ends free on both workers.
func TestPrefillDecodeChoices(t *testing.T) {
	endless := env.Models[harness.ModelEndless]
	models, workers := harness.PDOverTCPAndSHM(harness.ModelEndless, modelEndlessShm, endless)
	c := harness.Start(t, env, harness.Options{Workers: workers, Models: models})
	ref := reference(t, harness.ModelEndless)
	msgs := chats[1]
	p, err := ref.ChatPrompt(msgs)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, model := range []string{harness.ModelEndless, modelEndlessShm} {
		t.Run(model, func(t *testing.T) {
			client := c.Gateway().OpenAI(c.NewKey(t, "pd-choices-"+model))
			prefill := c.Worker(config.RolePrefill, model)
			for _, tc := range []struct {
				name        string
				temperature float64
				seed        int64
			}{{"greedy", 0, 0}, {"seeded", 1, 11}} {
				want, _, completion := referenceChoices(t, ref, p, tc.temperature, tc.seed)
				params := openai.ChatCompletionNewParams{
					Model: model, Messages: openAIMessages(msgs), MaxTokens: openai.Int(choiceTokens),
					Temperature: openai.Float(tc.temperature), Seed: openai.Int(tc.seed), N: openai.Int(3),
				}
				before := scrape(t, prefill.MetricsURL)
				resp, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				after := scrape(t, prefill.MetricsURL)
				if d := after["warden_engine_prefills_total"] - before["warden_engine_prefills_total"]; d != 1 {
					t.Fatalf("%s: %v prefills on the prefill worker for one n = 3 request, want 1", tc.name, d)
				}
				delta := func(kind string) float64 {
					series := `warden_engine_tokens_total{kind="` + kind + `"}`
					return after[series] - before[series]
				}
				if d := delta("prefill") + delta("cached"); d != float64(len(p)) {
					t.Fatalf("%s: %v prompt tokens prefilled or cached for one n = 3 request of %d", tc.name, d, len(p))
				}
				if len(resp.Choices) != 3 || resp.Usage.PromptTokens != int64(len(p)) || resp.Usage.CompletionTokens != completion {
					t.Fatalf("%s: %d choices, usage %+v; want 3, prompt %d, completion %d", tc.name, len(resp.Choices), resp.Usage, len(p), completion)
				}
				for k, ch := range resp.Choices {
					if ch.Index != int64(k) || ch.Message.Content != want[k] {
						t.Fatalf("%s: choice %d (index %d) = %q, engine alone with its seed %q", tc.name, k, ch.Index, ch.Message.Content, want[k])
					}
				}

				stream := client.Chat.Completions.NewStreaming(ctx, params)
				got := make([]string, 3)
				for stream.Next() {
					for _, ch := range stream.Current().Choices {
						if ch.Index < 0 || ch.Index >= 3 {
							t.Fatalf("%s: chunk of choice %d", tc.name, ch.Index)
						}
						got[ch.Index] += ch.Delta.Content
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				for k := range got {
					if got[k] != want[k] {
						t.Fatalf("%s: streamed choice %d = %q, engine %q", tc.name, k, got[k], want[k])
					}
				}
			}
			c.WaitPoolsFree(t)
			disconnectChoices(t, c, model)
		})
	}
}

// disconnectChoices streams an n = 3 request that would run for long on
// model, leaves once every choice has sent text, and checks that the
// request ends aborted (client_disconnect) and every pool returns to all
// free.
func disconnectChoices(t *testing.T, c *harness.Cluster, model string) {
	g := c.Gateway()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := g.Post(ctx, c.NewKey(t, "pd-choices-abort-"+model), "/v1/chat/completions", map[string]any{
		"model": model, "messages": wireMessages([]tokenizer.Message{{Role: "user", Content: "Talk forever."}}),
		"max_tokens": longMaxTokens / 4, "temperature": 1, "seed": 3, "n": 3, "stream": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	id := resp.Header.Get("X-Request-Id")
	sse := harness.NewSSE(resp.Body)
	for seen := map[int]bool{}; len(seen) < 3; {
		data, err := sse.Next()
		if err != nil {
			t.Fatalf("stream ended before every choice sent text: %v", err)
		}
		var ch struct {
			Choices []struct {
				Index int                      `json:"index"`
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		for _, x := range ch.Choices {
			if x.Delta.Content != "" {
				seen[x.Index] = true
			}
		}
	}
	rv, err := g.Admin.Request(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rv.State != "decoding" {
		t.Fatalf("request %s is %s before the disconnect; the test needs it generating", id, rv.State)
	}
	cancel()
	resp.Body.Close()
	rv = c.WaitRequestDone(t, id)
	if rv.State != "aborted" || rv.Cause != "client_disconnect" || rv.PrefillWorker == "" || rv.DecodeWorker == "" {
		t.Errorf("request %s: state %s, cause %s, workers %q/%q; want aborted, client_disconnect, a P/D pair", id, rv.State, rv.Cause, rv.PrefillWorker, rv.DecodeWorker)
	}
	// Each choice may hold a quarter of what one long request holds.
	if rv.CompletionTokens >= 3*longMaxTokens/4 {
		t.Errorf("request %s generated all %d tokens", id, rv.CompletionTokens)
	}
	t.Logf("request %s aborted after %d of %d tokens", id, rv.CompletionTokens, 3*longMaxTokens/4)
	c.WaitPoolsFree(t)
}
