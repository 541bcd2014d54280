package gateway

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
)

// hasRepeat reports whether ids holds a token twice.
func hasRepeat(ids []int32) bool {
	return len(slices.Compact(slices.Sorted(slices.Values(ids)))) < len(ids)
}

// TestRealSamplingControls: the sampling controls travel from the
// API client through the gateway to real workers, alone and as
// prefill and decode (whose first token the prefill worker samples with
// the same penalties and bias): the text equals a worker called directly
// with the same parameters; logit_bias forces a token; a frequency
// penalty stops the greedy output's repetitions; a logit_bias id outside
// the vocabulary is a 400 naming logit_bias.
func TestRealSamplingControls(t *testing.T) {
	ref := newRefWorker(t, 64)
	prompt := chatTokens(t, realPrompt)
	const n = 16
	seeded := &controlpb.SamplingParams{Temperature: 0.8, TopP: 0.95, TopK: 30, MinP: 0.01, Seed: 7, MaxTokens: n,
		PresencePenalty: 0.5, FrequencyPenalty: 1.5, RepetitionPenalty: 1.3}
	want := ref.runSampling(prompt, seeded)
	plainSeeded := ref.runSampling(prompt, &controlpb.SamplingParams{Temperature: 0.8, TopP: 0.95, TopK: 30, MinP: 0.01, Seed: 7, MaxTokens: n})
	if want.text == plainSeeded.text {
		t.Fatalf("the penalties changed nothing: %q", want.text)
	}
	// The tiny model's greedy output starts repeating within long tokens.
	const long = 64
	greedy := ref.runSampling(prompt, &controlpb.SamplingParams{Temperature: 0, MaxTokens: long})
	penalized := ref.runSampling(prompt, &controlpb.SamplingParams{Temperature: 0, MaxTokens: long, FrequencyPenalty: 2, PresencePenalty: 2})
	if !hasRepeat(greedy.ids) || hasRepeat(penalized.ids) {
		t.Fatalf("greedy %v should repeat a token, with frequency and presence penalty 2 %v should not", greedy.ids, penalized.ids)
	}
	forced, err := ref.tok.Encode(" story")
	if err != nil || len(forced) == 0 {
		t.Fatal(forced, err)
	}
	word, err := ref.tok.Decode(forced[:1])
	if err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"single", "prefill-decode"} {
		t.Run(mode, func(t *testing.T) {
			tg := startGateway(t, testConfig())
			reg := tg.RegistryAddr().String()
			if mode == "single" {
				startReal(t, workerConfig(t, "both-s", config.RoleBoth, config.TransferTCP, reg)).attach(tg)
			} else {
				startReal(t, workerConfig(t, "decode-s", config.RoleDecode, config.TransferTCP, reg)).attach(tg)
				startReal(t, workerConfig(t, "prefill-s", config.RolePrefill, config.TransferTCP, reg)).attach(tg)
			}
			ctx := context.Background()
			client := tg.api()

			params := realChat(n)
			params.Temperature, params.TopP, params.Seed = new(0.8), new(0.95), new(int64(7))
			params.PresencePenalty, params.FrequencyPenalty = new(0.5), new(1.5)
			params.Extra = map[string]any{"top_k": 30, "min_p": 0.01, "repetition_penalty": 1.3}
			resp, err := client.chat(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != want.text || resp.Usage.CompletionTokens != want.completion {
				t.Fatalf("seeded with every control: %q (%d tokens), the worker alone %q (%d)", got, resp.Usage.CompletionTokens, want.text, want.completion)
			}

			// n = 2: each choice is the single request with its seed, the
			// penalties reading the choice's own output.
			params.N = new(int64(2))
			params.Extra = map[string]any{"repetition_penalty": 1.3}
			two, err := client.chat(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			for k := range 2 {
				one := params
				one.N, one.Seed = new(int64(1)), new(int64(engine.ChoiceSeed(7, k)))
				alone, err := client.chat(ctx, one) // with repetition_penalty 1.3
				if err != nil {
					t.Fatal(err)
				}
				if two.Choices[k].Message.Content != alone.Choices[0].Message.Content {
					t.Fatalf("choice %d: %q, alone with its seed %q", k, two.Choices[k].Message.Content, alone.Choices[0].Message.Content)
				}
			}

			params = realChat(long)
			params.FrequencyPenalty, params.PresencePenalty = new(2.0), new(2.0)
			resp, err = client.chat(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != penalized.text {
				t.Fatalf("greedy with penalties: %q, the worker alone %q", got, penalized.text)
			}

			params = realChat(6)
			params.Temperature = new(1.0)
			params.LogitBias = map[string]int64{strconv.Itoa(int(forced[0])): 100}
			resp, err = client.chat(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != strings.Repeat(string(word), 6) {
				t.Fatalf("logit_bias +100 on %q: %q", word, got)
			}

			params.LogitBias = map[string]int64{strconv.Itoa(ref.tok.VocabSize()): 5}
			_, err = client.chat(ctx, params)
			var apiErr *apiError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "logit_bias" {
				t.Fatalf("logit_bias outside the vocabulary: %v", err)
			}
		})
	}
}
