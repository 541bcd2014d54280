package e2e

import (
	"bytes"
	"context"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/test/harness"
)

// logprobTokens is the number of tokens of the logprobs tests.
const logprobTokens = 12

// testLogprobs: chat (whole and streamed) and legacy completions with
// logprobs through every worker shape (P/D over tcp and shm — the first
// token's logprobs come from the prefill worker — and a single worker)
// return, through the official client, exactly the logprobs and top
// alternatives the in-process engine computes for the same prompt.
func testLogprobs(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	client := c.Gateway().OpenAI(c.NewKey(t, "logprobs"))
	ref := reference(t, harness.ModelTiny)
	tok := ref.Tokenizer()
	msgs := chats[1]
	p, err := ref.ChatPrompt(msgs)
	if err != nil {
		t.Fatal(err)
	}
	const top = 5
	sampling := harness.Greedy(logprobTokens)
	sampling.Logprobs, sampling.TopLogprobs, sampling.IgnoreEOS = true, top, false
	want, err := ref.Run(ctx, p, sampling)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Logprobs) != len(want.Tokens) || len(want.Tokens) == 0 {
		t.Fatalf("reference: %d logprobs for %d tokens", len(want.Logprobs), len(want.Tokens))
	}
	bytesOf := func(id int32) []byte {
		b, err := tok.TokenBytes(id)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	asBytes := func(v []int64) []byte {
		b := make([]byte, len(v))
		for i, x := range v {
			b[i] = byte(x)
		}
		return b
	}
	check := func(what string, got []openai.ChatCompletionTokenLogprob) {
		t.Helper()
		if len(got) != len(want.Logprobs) {
			t.Fatalf("%s: %d logprobs, the engine gives %d", what, len(got), len(want.Logprobs))
		}
		for i, w := range want.Logprobs {
			g := got[i]
			if g.Logprob != w.Logprob || !bytes.Equal(asBytes(g.Bytes), bytesOf(w.Token)) || len(g.TopLogprobs) != len(w.Top) {
				t.Fatalf("%s: token %d = %q %v (%d alternatives), engine %q %v (%d)", what, i,
					g.Token, g.Logprob, len(g.TopLogprobs), bytesOf(w.Token), w.Logprob, len(w.Top))
			}
			for j, a := range w.Top {
				ga := g.TopLogprobs[j]
				if ga.Logprob != a.Logprob || !bytes.Equal(asBytes(ga.Bytes), bytesOf(a.Token)) {
					t.Fatalf("%s: token %d alternative %d = %q %v, engine %q %v", what, i, j, ga.Token, ga.Logprob, bytesOf(a.Token), a.Logprob)
				}
			}
		}
	}
	for _, model := range []string{harness.ModelTiny, modelShm, modelSingle} {
		t.Run(model, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{
				Model: model, Messages: openAIMessages(msgs), MaxTokens: openai.Int(logprobTokens),
				Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(top),
			}
			resp, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content != want.Text {
				t.Fatalf("content %q, engine %q", resp.Choices[0].Message.Content, want.Text)
			}
			check("chat", resp.Choices[0].Logprobs.Content)

			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var streamed []openai.ChatCompletionTokenLogprob
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					streamed = append(streamed, ch.Logprobs.Content...)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			check("chat stream", streamed)
		})
	}

	// Legacy completions: logprobs is the number of alternatives; the
	// sampled token is in each top_logprobs map.
	cp, err := ref.CompletionPrompt(completions[0])
	if err != nil {
		t.Fatal(err)
	}
	sampling.TopLogprobs = 2
	cwant, err := ref.Run(ctx, cp, sampling)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: modelSingle, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(completions[0])},
		MaxTokens: openai.Int(logprobTokens), Temperature: openai.Float(0), Logprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp := resp.Choices[0].Logprobs
	if len(lp.TokenLogprobs) != len(cwant.Logprobs) || len(lp.TopLogprobs) != len(cwant.Logprobs) || len(lp.TextOffset) != len(cwant.Logprobs) {
		t.Fatalf("completion logprobs %+v, engine has %d tokens", lp, len(cwant.Logprobs))
	}
	offset := int64(0)
	for i, w := range cwant.Logprobs {
		if lp.TokenLogprobs[i] != w.Logprob || lp.TextOffset[i] != offset {
			t.Fatalf("token %d: logprob %v at offset %d, engine %v at %d", i, lp.TokenLogprobs[i], lp.TextOffset[i], w.Logprob, offset)
		}
		offset += int64(len(bytesOf(w.Token)))
		if n := len(lp.TopLogprobs[i]); n < 2 || n > 3 {
			t.Fatalf("token %d: %d alternatives, want 2 or 3", i, n)
		}
	}
}
