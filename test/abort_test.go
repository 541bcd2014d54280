package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// longMaxTokens makes an endless-model request generate for a long time
// (it never stops at EOS), so the tests below act while it runs; they
// check that it still ran when they did.
const longMaxTokens = 4000

// streamChat starts a streaming chat request and returns the open
// response once its status line arrived.
func streamChat(ctx context.Context, t *testing.T, g *harness.Gateway, key, model string, msgs []tokenizer.Message, maxTokens int) *http.Response {
	t.Helper()
	resp, err := g.Post(ctx, key, "/v1/chat/completions", map[string]any{
		"model": model, "messages": wireMessages(msgs), "max_tokens": maxTokens, "temperature": 0, "stream": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	return resp
}

// wireMessages is msgs as the API's JSON.
func wireMessages(msgs []tokenizer.Message) []map[string]string {
	out := make([]map[string]string, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]string{"role": m.Role, "content": m.Content}
	}
	return out
}

// chunk is the part of a chat stream event the tests read.
type chunk struct {
	Choices []struct {
		Delta        struct{ Content string } `json:"delta"`
		FinishReason *string                  `json:"finish_reason"`
	} `json:"choices"`
	Error *errenvelope.Body `json:"error"`
}

// readUntilText reads events until one carries text and returns the text.
func readUntilText(t *testing.T, sse *harness.SSE) string {
	t.Helper()
	for {
		data, err := sse.Next()
		if err != nil {
			t.Fatalf("stream ended before any text: %v", err)
		}
		var ch chunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			return ch.Choices[0].Delta.Content
		}
	}
}

// testDisconnect: a client that drops a stream mid-generation aborts its
// request: the gateway records it aborted (client_disconnect) and every
// worker's pool returns to all free.
func testDisconnect(t *testing.T, c *harness.Cluster) {
	g := c.Gateway()
	key := c.NewKey(t, "disconnect")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := streamChat(ctx, t, g, key, harness.ModelEndless, []tokenizer.Message{{Role: "user", Content: "Talk forever."}}, longMaxTokens)
	id := resp.Header.Get("X-Request-Id")
	readUntilText(t, harness.NewSSE(resp.Body))

	rv, err := g.Admin.Request(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if rv.State != "decoding" {
		t.Fatalf("request %s is %s before the disconnect; the test needs it generating", id, rv.State)
	}
	cancel() // the client goes away
	resp.Body.Close()

	rv = c.WaitRequestDone(t, id)
	if rv.State != "aborted" || rv.Cause != "client_disconnect" {
		t.Errorf("request %s: state %s, cause %s; want aborted, client_disconnect", id, rv.State, rv.Cause)
	}
	t.Logf("request %s aborted after %d of %d tokens", id, rv.CompletionTokens, longMaxTokens)
	if rv.CompletionTokens >= longMaxTokens {
		t.Errorf("request %s generated all %d tokens", id, rv.CompletionTokens)
	}
	if rv.DecodeWorker == "" || rv.PrefillWorker == "" {
		t.Errorf("request %s: workers %q/%q, want a P/D pair", id, rv.PrefillWorker, rv.DecodeWorker)
	}
	c.WaitPoolsFree(t)
}

// TestWorkerKill: kill -9 of the decode worker mid-request fails the
// request visibly (an error event without [DONE] when streaming, an error
// envelope otherwise), the gateway marks the worker down, and once it is
// restarted the same request is served with the reference text.
func TestWorkerKill(t *testing.T) {
	c := harness.Start(t, env, harness.Options{Workers: harness.PD(harness.ModelEndless), HeartbeatTimeout: time.Second})
	g := c.Gateway()
	decode := c.Worker(config.RoleDecode, harness.ModelEndless)
	key := c.NewKey(t, "kill")
	msgs := []tokenizer.Message{{Role: "user", Content: "Keep going."}}
	// Long enough that the worker is still generating when it is killed
	// (about a second on one core), short enough to serve again.
	const maxTokens = 1000
	want, err := reference(t, harness.ModelEndless).Chat(context.Background(), msgs, maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	if want.Finish != "length" || want.CompletionTokens != maxTokens {
		t.Fatalf("the endless model stopped early: %+v", want)
	}

	t.Run("streaming", func(t *testing.T) {
		ctx := context.Background()
		resp := streamChat(ctx, t, g, key, harness.ModelEndless, msgs, maxTokens)
		defer resp.Body.Close()
		id := resp.Header.Get("X-Request-Id")
		sse := harness.NewSSE(resp.Body)
		text := readUntilText(t, sse)
		if err := decode.Kill(); err != nil {
			t.Fatal(err)
		}
		var last chunk
		for {
			data, err := sse.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			if data == "[DONE]" {
				t.Fatalf("the stream ended with [DONE] after its decode worker was killed")
			}
			if err := json.Unmarshal([]byte(data), &last); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			if last.Error == nil && len(last.Choices) > 0 {
				text += last.Choices[0].Delta.Content
				if fr := last.Choices[0].FinishReason; fr != nil && *fr != "" {
					t.Fatalf("the stream finished (%s) although its decode worker was killed", *fr)
				}
			}
		}
		if last.Error == nil || last.Error.CodeOrEmpty() != "worker_unavailable" {
			t.Errorf("last event %+v, want an error event with code worker_unavailable", last)
		}
		if !strings.HasPrefix(want.Text, text) || text == want.Text {
			t.Errorf("text before the error %q is not a proper prefix of the reference %q", text, want.Text)
		}
		checkFailed(t, c, id)
		waitDown(t, c, decode)
		c.RestartWorker(t, decode)
		checkServesAtOnce(t, c, key)

		resp2 := streamChat(ctx, t, g, key, harness.ModelEndless, msgs, maxTokens)
		defer resp2.Body.Close()
		got, finish := readAll(t, harness.NewSSE(resp2.Body))
		if got != want.Text || finish != "length" {
			t.Errorf("after the restart: %q (%s), want the reference %q (length)", got, finish, want.Text)
		}
		c.WaitPoolsFree(t)
	})

	t.Run("non-streaming", func(t *testing.T) {
		client := g.OpenAI(key)
		params := openai.ChatCompletionNewParams{
			Model: harness.ModelEndless, Messages: openAIMessages(msgs),
			MaxTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
		}
		c.WaitServing(t, key, harness.ModelEndless)
		errc := make(chan error, 1)
		go func() {
			_, err := client.Chat.Completions.New(context.Background(), params)
			errc <- err
		}()
		rv := c.WaitRequestState(t, "kill", "decoding")
		if err := decode.Kill(); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("the request returned %v, want an error envelope", err)
		}
		if apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "worker_unavailable" || apiErr.Message == "" {
			t.Errorf("error %d %q %q, want 503 worker_unavailable", apiErr.StatusCode, apiErr.Code, apiErr.Message)
		}
		checkFailed(t, c, rv.ID)
		waitDown(t, c, decode)
		c.RestartWorker(t, decode)
		checkServesAtOnce(t, c, key)

		resp, err := client.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		checkOutput(t, "after the restart", 0, resp.Choices[0].Message.Content, resp.Choices[0].FinishReason, resp.Usage, want)
		c.WaitPoolsFree(t)
	})
}

// checkServesAtOnce checks that the first request after the gateway
// lists a restarted worker healthy again is served, then waits until
// requests are served so that the test can go on checking content.
func checkServesAtOnce(t *testing.T, c *harness.Cluster, key string) {
	t.Helper()
	resp, err := c.Gateway().Post(context.Background(), key, "/v1/completions",
		map[string]any{"model": harness.ModelEndless, "prompt": "ping", "max_tokens": 1, "temperature": 0})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("first request after the restarted worker is listed healthy: %s %s", resp.Status, body)
		c.WaitServing(t, key, harness.ModelEndless)
	}
}

// checkFailed checks that request id ended failed or aborted, not
// completed.
func checkFailed(t *testing.T, c *harness.Cluster, id string) {
	t.Helper()
	rv := c.WaitRequestDone(t, id)
	if rv.State != "failed" && rv.State != "aborted" {
		t.Errorf("request %s: state %s (%s), want failed or aborted", id, rv.State, rv.Cause)
	}
}

// waitDown waits until the gateway no longer lists w as healthy.
func waitDown(t *testing.T, c *harness.Cluster, w *harness.Worker) {
	t.Helper()
	c.WaitWorker(t, w.ID, "down", func(v adminclient.WorkerView, found bool) bool { return !found || !v.Healthy })
}

// readAll reads a chat stream to its end and returns its text and finish
// reason; it fails the test on an error event or a missing [DONE].
func readAll(t *testing.T, sse *harness.SSE) (text, finish string) {
	t.Helper()
	var b strings.Builder
	for {
		data, err := sse.Next()
		if err != nil {
			t.Fatalf("stream ended without [DONE]: %v", err)
		}
		if data == "[DONE]" {
			return b.String(), finish
		}
		var ch chunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if ch.Error != nil {
			t.Fatalf("error event: %+v", *ch.Error)
		}
		if len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Delta.Content)
			if fr := ch.Choices[0].FinishReason; fr != nil && *fr != "" {
				finish = *fr
			}
		}
	}
}
