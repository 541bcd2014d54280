package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// benchChat is a typical chat body: a system prompt, a few turns, sampling
// options.
func benchChat(stream bool) string {
	var b strings.Builder
	b.WriteString(`{"model":"tiny","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."}`)
	for i := range 6 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		b.WriteString(`,{"role":"` + role + `","content":"` + strings.Repeat("Tell me about the weather in Zürich. ", 4) + `"}`)
	}
	b.WriteString(`],"max_tokens":256,"temperature":0.7,"top_p":0.95,"stop":["\n\n"],"user":"u-1"`)
	if stream {
		b.WriteString(`,"stream":true,"stream_options":{"include_usage":true}`)
	}
	b.WriteString(`}`)
	return b.String()
}

// BenchmarkDecodeChat is this package's decoder; compare with
// BenchmarkDecodeChatBaseline, a plain json.Unmarshal of the same body
// into a struct with no validation.
func BenchmarkDecodeChat(b *testing.B) {
	body := []byte(benchChat(false))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, e := decodeRequest(KindChat, body, DefaultMaxTokensLimit, nil); e != nil {
			b.Fatal(e)
		}
	}
}

func BenchmarkDecodeChatBaseline(b *testing.B) {
	body := []byte(benchChat(false))
	b.SetBytes(int64(len(body)))
	var v struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens   *int64   `json:"max_tokens"`
		Temperature *float64 `json:"temperature"`
		TopP        *float64 `json:"top_p"`
		Stop        []string `json:"stop"`
		User        string   `json:"user"`
	}
	for b.Loop() {
		if err := json.Unmarshal(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandlerChat is a whole non-streaming request in process (fake
// core); BenchmarkHandlerStream the same streamed (6 events); compare both
// with BenchmarkHandlerHealthz, the cost of the middleware alone.
func BenchmarkHandlerChat(b *testing.B) { benchHandler(b, "/v1/chat/completions", benchChat(false)) }

func BenchmarkHandlerStream(b *testing.B) { benchHandler(b, "/v1/chat/completions", benchChat(true)) }

func BenchmarkHandlerHealthz(b *testing.B) { benchHandler(b, "/healthz", "") }

func benchHandler(b *testing.B, path, body string) {
	h := newTestHandler(&fakeService{})
	method, header := http.MethodGet, http.Header(nil)
	if body != "" {
		method, header = http.MethodPost, authJSON()
	}
	for b.Loop() {
		if rec := do(h, method, path, body, header); rec.Code != 200 {
			b.Fatal(rec.Code, rec.Body)
		}
	}
}
