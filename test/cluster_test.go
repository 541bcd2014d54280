package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// TestCluster runs the tests that can share one cluster, one after the
// other: each leaves every KV pool free, which the next relies on.
func TestCluster(t *testing.T) {
	c := mainCluster(t)
	t.Run("OpenAIClient", func(t *testing.T) { testOpenAIClient(t, c) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, c) })
	t.Run("Disconnect", func(t *testing.T) { testDisconnect(t, c) })
	t.Run("StructuredOutputs", func(t *testing.T) { testStructuredOutputs(t, c) })
	t.Run("Logprobs", func(t *testing.T) { testLogprobs(t, c) })
	t.Run("Choices", func(t *testing.T) { testChoices(t, c) })
}

// Prompts of the reference-equivalence tests.
var (
	chats = [][]tokenizer.Message{
		{{Role: "user", Content: "Say hello."}},
		{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "What does a gateway do?"},
			{Role: "assistant", Content: "It routes requests."},
			{Role: "user", Content: "Tell me more, with unicode: héllo wörld — 你好 🙂"},
		},
	}
	completions = []string{"Once upon a time", "The quick brown fox", "a b c d e f"}
)

// refMaxTokens is long enough for some references to stop at EOS and
// others at the limit.
const refMaxTokens = 48

// openAIMessages converts messages for the OpenAI client.
func openAIMessages(msgs []tokenizer.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system":
			out[i] = openai.SystemMessage(m.Content)
		case "assistant":
			out[i] = openai.AssistantMessage(m.Content)
		default:
			out[i] = openai.UserMessage(m.Content)
		}
	}
	return out
}

// testOpenAIClient: the official OpenAI Go client, streaming and not, chat
// and completions, through every worker shape, returns exactly the
// engine's own greedy output with honest usage, and the gateway's request
// record agrees.
func testOpenAIClient(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	key := c.NewKey(t, "openai")
	client := c.Gateway().OpenAI(key)
	ref := reference(t, harness.ModelTiny)

	models, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range models.Data {
		listed[m.ID] = true
		if got := m.JSON.ExtraFields["context_length"].Raw(); got != "8192" {
			t.Errorf("/v1/models: %s context_length = %s, want 8192", m.ID, got)
		}
		// The test models are float32 files, served as they are.
		if got := m.JSON.ExtraFields["dtype"].Raw(); got != `"f32"` {
			t.Errorf("/v1/models: %s dtype = %s, want \"f32\"", m.ID, got)
		}
	}
	for _, name := range []string{harness.ModelTiny, harness.ModelEndless, modelShm, modelSingle} {
		if !listed[name] {
			t.Errorf("/v1/models does not list %s: %v", name, listed)
		}
	}

	for _, model := range []string{harness.ModelTiny, modelShm, modelSingle} {
		t.Run(model, func(t *testing.T) {
			for i, msgs := range chats {
				want, err := ref.Chat(ctx, msgs, refMaxTokens)
				if err != nil {
					t.Fatal(err)
				}
				params := openai.ChatCompletionNewParams{
					Model: model, Messages: openAIMessages(msgs),
					MaxTokens: openai.Int(refMaxTokens), Temperature: openai.Float(0),
				}
				var hr *http.Response
				resp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&hr))
				if err != nil {
					t.Fatalf("chat %d: %v", i, err)
				}
				if len(resp.Choices) != 1 || resp.Object != "chat.completion" || resp.Model != model || !strings.HasPrefix(resp.ID, "chatcmpl-") {
					t.Fatalf("chat %d: unexpected response %s", i, resp.RawJSON())
				}
				ch := resp.Choices[0]
				checkOutput(t, "chat", i, ch.Message.Content, ch.FinishReason, resp.Usage, want)
				checkRecord(t, c, hr, want)

				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				stream := client.Chat.Completions.NewStreaming(ctx, params)
				var (
					text   strings.Builder
					finish string
					usage  openai.CompletionUsage
					chunks int
				)
				for stream.Next() {
					chunk := stream.Current()
					chunks++
					if len(chunk.Choices) > 0 {
						text.WriteString(chunk.Choices[0].Delta.Content)
						if fr := chunk.Choices[0].FinishReason; fr != "" {
							finish = fr
						}
					}
					if chunk.Usage.TotalTokens > 0 {
						usage = chunk.Usage
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("chat %d stream: %v", i, err)
				}
				checkOutput(t, "chat stream", i, text.String(), finish, usage, want)
				if chunks < 3 {
					t.Errorf("chat %d stream: %d chunks, want role, content, finish and usage chunks", i, chunks)
				}
			}

			for i, prompt := range completions {
				want, err := ref.Completion(ctx, prompt, refMaxTokens)
				if err != nil {
					t.Fatal(err)
				}
				params := openai.CompletionNewParams{
					Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
					MaxTokens: openai.Int(refMaxTokens), Temperature: openai.Float(0),
				}
				var hr *http.Response
				resp, err := client.Completions.New(ctx, params, option.WithResponseInto(&hr))
				if err != nil {
					t.Fatalf("completion %d: %v", i, err)
				}
				if len(resp.Choices) != 1 || resp.Object != "text_completion" || !strings.HasPrefix(resp.ID, "cmpl-") {
					t.Fatalf("completion %d: unexpected response %s", i, resp.RawJSON())
				}
				checkOutput(t, "completion", i, resp.Choices[0].Text, string(resp.Choices[0].FinishReason), resp.Usage, want)
				checkRecord(t, c, hr, want)

				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				stream := client.Completions.NewStreaming(ctx, params)
				var (
					text   strings.Builder
					finish string
					usage  openai.CompletionUsage
				)
				for stream.Next() {
					chunk := stream.Current()
					if len(chunk.Choices) > 0 {
						text.WriteString(chunk.Choices[0].Text)
						if fr := chunk.Choices[0].FinishReason; fr != "" {
							finish = string(fr)
						}
					}
					if chunk.Usage.TotalTokens > 0 {
						usage = chunk.Usage
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("completion %d stream: %v", i, err)
				}
				checkOutput(t, "completion stream", i, text.String(), finish, usage, want)
			}
		})
	}
	c.WaitPoolsFree(t)
}

// checkOutput compares a response with the reference: text, finish
// reason and usage (I7: the prompt tokens prefilled, the tokens
// generated).
func checkOutput(t *testing.T, what string, i int, text, finish string, usage openai.CompletionUsage, want harness.Output) {
	t.Helper()
	if text != want.Text {
		t.Errorf("%s %d: text\n%q\nwant the engine's\n%q", what, i, text, want.Text)
	}
	if finish != want.Finish {
		t.Errorf("%s %d: finish_reason %q, want %q", what, i, finish, want.Finish)
	}
	if usage.PromptTokens != int64(want.PromptTokens) || usage.CompletionTokens != int64(want.CompletionTokens) ||
		usage.TotalTokens != int64(want.PromptTokens+want.CompletionTokens) {
		t.Errorf("%s %d: usage %d+%d=%d, want %d+%d", what, i, usage.PromptTokens, usage.CompletionTokens, usage.TotalTokens,
			want.PromptTokens, want.CompletionTokens)
	}
}

// checkRecord looks the response's x-request-id up in the admin API: the
// request completed with the same token counts.
func checkRecord(t *testing.T, c *harness.Cluster, hr *http.Response, want harness.Output) {
	t.Helper()
	id := hr.Header.Get("X-Request-Id")
	if !strings.HasPrefix(id, "req_") {
		t.Fatalf("x-request-id %q", id)
	}
	rv := c.WaitRequestDone(t, id)
	if rv.State != "completed" || rv.PromptTokens != int64(want.PromptTokens) || rv.CompletionTokens != int64(want.CompletionTokens) {
		t.Errorf("request %s: state %s, tokens %d+%d; want completed, %d+%d", id, rv.State, rv.PromptTokens, rv.CompletionTokens,
			want.PromptTokens, want.CompletionTokens)
	}
}
