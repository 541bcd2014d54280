package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// newClient starts the handler on a test server and returns an official
// OpenAI client pointed at it.
func newClient(t *testing.T, svc *fakeService, key string) openai.Client {
	t.Helper()
	srv := httptest.NewServer(newTestHandler(svc))
	t.Cleanup(srv.Close)
	return openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1/"),
		option.WithAPIKey(key),
		option.WithHTTPClient(srv.Client()),
		option.WithMaxRetries(0),
	)
}

func chatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Be brief."),
			openai.UserMessage("Say hello."),
		},
		MaxTokens:   openai.Int(32),
		Temperature: openai.Float(0.5),
		Seed:        openai.Int(42),
	}
}

func checkUsage(t *testing.T, prompt, completion, total int64) {
	t.Helper()
	if prompt != fakeUsage.PromptTokens || completion != fakeUsage.CompletionTokens ||
		total != fakeUsage.PromptTokens+fakeUsage.CompletionTokens {
		t.Errorf("usage = %d/%d/%d, want %d/%d/%d", prompt, completion, total,
			fakeUsage.PromptTokens, fakeUsage.CompletionTokens, fakeUsage.PromptTokens+fakeUsage.CompletionTokens)
	}
}

func TestOpenAIClientChat(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	resp, err := client.Chat.Completions.New(context.Background(), chatParams())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("choices = %d, want 1", len(resp.Choices))
	}
	c := resp.Choices[0]
	if c.Message.Content != fakeText || string(c.Message.Role) != "assistant" || c.FinishReason != "stop" {
		t.Errorf("choice = %q/%q/%q, want %q/assistant/stop", c.Message.Content, c.Message.Role, c.FinishReason, fakeText)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != "tiny" || string(resp.Object) != "chat.completion" {
		t.Errorf("id/model/object = %q/%q/%q", resp.ID, resp.Model, resp.Object)
	}
	checkUsage(t, resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.TotalTokens)

	req := svc.lastRequest(t)
	want := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say hello."}}
	if !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("messages = %+v, want %+v", req.Messages, want)
	}
	if req.Kind != KindChat || req.Stream || *req.MaxTokens != 32 || *req.Temperature != 0.5 || *req.Seed != 42 {
		t.Errorf("normalised request = %+v", req)
	}
	if !strings.HasSuffix(resp.ID, strings.TrimPrefix(req.RequestID, "req_")) {
		t.Errorf("response id %q not derived from request id %q", resp.ID, req.RequestID)
	}
	if p := svc.p; p.Tenant != "acme" || p.KeyID != "key_1" {
		t.Errorf("principal = %+v", p)
	}
}

func TestOpenAIClientChatStream(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	params := chatParams()
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	defer stream.Close()

	var (
		text, finish, role string
		usage              *openai.CompletionUsage
		chunks             int
	)
	for stream.Next() {
		chunk := stream.Current()
		chunks++
		if string(chunk.Object) != "chat.completion.chunk" || !strings.HasPrefix(chunk.ID, "chatcmpl-") {
			t.Errorf("chunk object/id = %q/%q", chunk.Object, chunk.ID)
		}
		if chunk.JSON.Usage.Valid() && chunk.Usage.TotalTokens > 0 {
			if len(chunk.Choices) != 0 {
				t.Errorf("usage chunk has %d choices, want 0", len(chunk.Choices))
			}
			u := chunk.Usage
			usage = &u
		}
		for _, c := range chunk.Choices {
			if !utf8.ValidString(c.Delta.Content) {
				t.Errorf("delta %q is not valid UTF-8", c.Delta.Content)
			}
			text += c.Delta.Content
			if c.Delta.Role != "" {
				role = c.Delta.Role
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != fakeText || finish != "stop" || role != "assistant" {
		t.Errorf("stream gave %q/%q/%q, want %q/stop/assistant", text, finish, role, fakeText)
	}
	// role chunk + one per delta + finish chunk + usage chunk
	if want := 1 + len(fakeDeltas) + 2; chunks != want {
		t.Errorf("%d chunks, want %d", chunks, want)
	}
	if usage == nil {
		t.Fatal("no usage chunk")
	}
	checkUsage(t, usage.PromptTokens, usage.CompletionTokens, usage.TotalTokens)
	if req := svc.lastRequest(t); !req.Stream || !req.IncludeUsage {
		t.Errorf("stream/include_usage = %v/%v", req.Stream, req.IncludeUsage)
	}
}

func TestOpenAIClientCompletion(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	resp, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")},
		Stop:   openai.CompletionNewParamsStopUnion{OfStringArray: []string{"\n", "END"}},
		TopP:   openai.Float(0.9),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != fakeText || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if !strings.HasPrefix(resp.ID, "cmpl-") || string(resp.Object) != "text_completion" {
		t.Errorf("id/object = %q/%q", resp.ID, resp.Object)
	}
	checkUsage(t, resp.Usage.PromptTokens, resp.Usage.CompletionTokens, resp.Usage.TotalTokens)
	req := svc.lastRequest(t)
	if req.Kind != KindCompletion || req.Prompt != "Once upon" || *req.TopP != 0.9 ||
		len(req.Stop) != 2 || req.Stop[0] != "\n" || req.Stop[1] != "END" || req.MaxTokens != nil {
		t.Errorf("normalised request = %+v", req)
	}
}

func TestOpenAIClientCompletionStream(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		svc := &fakeService{}
		client := newClient(t, svc, goodKey)
		params := openai.CompletionNewParams{
			Model:  "tiny",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")},
		}
		if includeUsage {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		stream := client.Completions.NewStreaming(context.Background(), params)
		var text, finish string
		var usage *openai.CompletionUsage
		for stream.Next() {
			chunk := stream.Current()
			for _, c := range chunk.Choices {
				text += c.Text
				if c.FinishReason != "" {
					finish = string(c.FinishReason)
				}
			}
			if chunk.Usage.TotalTokens > 0 {
				u := chunk.Usage
				usage = &u
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		stream.Close()
		if text != fakeText || finish != "stop" {
			t.Errorf("include_usage=%v: stream gave %q/%q", includeUsage, text, finish)
		}
		if includeUsage != (usage != nil) {
			t.Errorf("include_usage=%v but usage chunk present=%v", includeUsage, usage != nil)
		}
		if usage != nil {
			checkUsage(t, usage.PromptTokens, usage.CompletionTokens, usage.TotalTokens)
		}
	}
}

func TestOpenAIClientModels(t *testing.T) {
	client := newClient(t, &fakeService{}, goodKey)
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "tiny" || page.Data[0].OwnedBy != "warden" || page.Data[0].Created != 1700000000 {
		t.Fatalf("models = %+v", page.Data)
	}
	if raw := page.Data[0].JSON.ExtraFields["context_length"].Raw(); raw != "2048" {
		t.Errorf("context_length = %q, want 2048", raw)
	}
}

func TestOpenAIClientErrors(t *testing.T) {
	cases := []struct {
		name, key, model string
		status           int
		code, param      string
	}{
		{"unknown model", goodKey, "nope", http.StatusNotFound, CodeModelNotFound, "model"},
		{"wrong key", "sk-wrong", "tiny", http.StatusUnauthorized, CodeInvalidAPIKey, ""},
		{"revoked key", revokedKey, "tiny", http.StatusUnauthorized, CodeInvalidAPIKey, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(t, &fakeService{}, tc.key)
			params := chatParams()
			params.Model = tc.model
			_, err := client.Chat.Completions.New(context.Background(), params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Param != tc.param {
				t.Errorf("got %d %q %q, want %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, tc.status, tc.code, tc.param)
			}
		})
	}
}

// A stream that fails after it started ends in an error event that the
// official client reports, not in a clean end of stream.
func TestOpenAIClientSeesMidStreamError(t *testing.T) {
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		g := newFakeGen(Event{TextDelta: "partial"})
		g.err = ModelUnavailable("tiny", "decode worker lost")
		return g, nil
	}}
	client := newClient(t, svc, goodKey)
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatParams())
	defer stream.Close()
	var text string
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text += c.Delta.Content
		}
	}
	var se *ssestream.StreamError
	if !errors.As(stream.Err(), &se) || !strings.Contains(se.Message, CodeModelUnavailable) {
		t.Fatalf("stream err = %v, want a StreamError with %s", stream.Err(), CodeModelUnavailable)
	}
	if text != "partial" {
		t.Errorf("text = %q, want %q", text, "partial")
	}
}
