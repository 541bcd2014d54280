package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// sseData splits an SSE body into the payloads of its data events,
// checking the framing on the way.
func sseData(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		payload, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(payload, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, payload)
	}
	return out
}

func streamBody(extra string) string {
	return chatWith(`"stream":true` + extra)
}

func TestStreamWireFormat(t *testing.T) {
	svc := &fakeService{}
	rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", streamBody(`,"stream_options":{"include_usage":true}`), authJSON())
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	h := rec.Header()
	if h.Get("Content-Type") != "text/event-stream" || h.Get("X-Ratelimit-Remaining-Requests") != "41" || h.Get("Cache-Control") != "no-cache" {
		t.Errorf("headers = %v", h)
	}
	events := sseData(t, rec.Body.String())
	want := []string{
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{"content":"lo, wörld"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{"content":" 🌍"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}`,
		`{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"tiny","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`,
		`[DONE]`,
	}
	req := svc.lastRequest(t)
	id := strings.TrimPrefix(req.RequestID, "req_")
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %q", len(events), len(want), events)
	}
	for i, ev := range events {
		w := want[i]
		if strings.Contains(w, "%s") {
			w = strings.Replace(strings.Replace(w, "%s", id, 1), "%d", strconv.FormatInt(req.ReceivedAt.Unix(), 10), 1)
		}
		if ev != w {
			t.Errorf("event %d:\n got %s\nwant %s", i, ev, w)
		}
	}
}

func TestStreamWithoutUsageOption(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := streamBody("")
		if path == "/v1/completions" {
			body = `{"model":"tiny","prompt":"p","stream":true}`
		}
		rec := do(newTestHandler(&fakeService{}), "POST", path, body, authJSON())
		events := sseData(t, rec.Body.String())
		if events[len(events)-1] != "[DONE]" {
			t.Errorf("%s: last event %q", path, events[len(events)-1])
		}
		var text string
		for _, ev := range events[:len(events)-1] {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(ev), &m); err != nil {
				t.Fatal(err)
			}
			if _, ok := m["usage"]; ok {
				t.Errorf("%s: usage field without include_usage: %s", path, ev)
			}
			var c struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			_ = json.Unmarshal([]byte(ev), &c)
			text += c.Choices[0].Text + c.Choices[0].Delta.Content
		}
		if text != fakeText {
			t.Errorf("%s: text %q, want %q", path, text, fakeText)
		}
	}
}

// brokenGen is a generation that goes wrong after some text.
type brokenCase struct {
	name    string
	events  []Event
	err     error
	code    string
	private string // must not reach the client
}

func brokenCases() []brokenCase {
	u := fakeUsage
	return []brokenCase{
		{name: "internal error", events: []Event{{TextDelta: "Hel"}},
			err: errors.New("worker w3 at 10.1.1.1 crashed"), code: CodeInternal, private: "10.1.1.1"},
		{name: "typed error", events: []Event{{TextDelta: "Hel"}},
			err: ModelUnavailable("tiny", "decode worker lost"), code: CodeModelUnavailable},
		{name: "invalid UTF-8 from core", events: []Event{{TextDelta: "Hel"}, {TextDelta: "\xe2\x82"}, {FinishReason: "stop", Usage: &u}},
			code: CodeInternal},
		{name: "no finish reason", events: []Event{{TextDelta: "Hel"}, {Usage: &u}}, code: CodeInternal},
		{name: "no usage", events: []Event{{TextDelta: "Hel"}, {FinishReason: "stop"}}, code: CodeInternal},
		{name: "text after finish", events: []Event{{TextDelta: "Hel"}, {FinishReason: "stop", Usage: &u}, {TextDelta: "more"}},
			code: CodeInternal},
	}
}

// A failure after the stream started is one error event, and no [DONE].
func TestStreamErrorAfterStart(t *testing.T) {
	for _, tc := range brokenCases() {
		t.Run(tc.name, func(t *testing.T) {
			var gen *fakeGen
			svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
				gen = newFakeGen(tc.events...)
				gen.err = tc.err
				return gen, nil
			}}
			rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", streamBody(`,"stream_options":{"include_usage":true}`), authJSON())
			body := rec.Body.String()
			if rec.Code != 200 || !utf8.ValidString(body) || strings.Contains(body, "[DONE]") {
				t.Fatalf("status %d, body %q", rec.Code, body)
			}
			events := sseData(t, body)
			if !strings.Contains(events[1], `"content":"Hel"`) {
				t.Errorf("text before the failure missing: %q", events)
			}
			last := events[len(events)-1]
			_, code, _, msg := decodeEnvelope(t, []byte(last))
			if code != tc.code {
				t.Errorf("error code %q, want %q", code, tc.code)
			}
			if tc.private != "" && strings.Contains(body, tc.private) {
				t.Errorf("internal detail %q leaked: %q", tc.private, msg)
			}
			if gen.closes != 1 {
				t.Errorf("Close called %d times, want 1", gen.closes)
			}
		})
	}
}

// The same failures without streaming are a plain error response.
func TestNonStreamBrokenGeneration(t *testing.T) {
	for _, tc := range brokenCases() {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
				g := newFakeGen(tc.events...)
				g.err = tc.err
				return g, nil
			}}
			rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", goodChat, authJSON())
			if rec.Code < 500 {
				t.Fatalf("status %d, want 5xx; body %s", rec.Code, rec.Body)
			}
			if _, code, _, _ := decodeEnvelope(t, rec.Body.Bytes()); code != tc.code {
				t.Errorf("code %q, want %q", code, tc.code)
			}
			if tc.private != "" && strings.Contains(rec.Body.String(), tc.private) {
				t.Errorf("internal detail leaked: %s", rec.Body)
			}
		})
	}
}

// A failure before the first event is still a normal HTTP error, with
// the rate-limit headers passed through.
func TestErrorBeforeFirstEvent(t *testing.T) {
	limited := RateLimited("Tenant over its tokens-per-minute limit.", 2500*time.Millisecond,
		http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Request-Id": {"forged"}})
	fromGenerate := &fakeService{gen: func(*GenerateRequest) (Generation, error) { return nil, limited }}
	fromNext := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		g := newFakeGen()
		g.err = limited
		return g, nil
	}}
	for name, svc := range map[string]*fakeService{"Generate": fromGenerate, "Next": fromNext} {
		for _, stream := range []bool{false, true} {
			body := goodChat
			if stream {
				body = streamBody("")
			}
			rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", body, authJSON())
			h := rec.Header()
			if rec.Code != 429 || h.Get("Retry-After") != "3" || h.Get("X-Ratelimit-Remaining-Tokens") != "0" ||
				h.Get("Content-Type") != "application/json" || !strings.HasPrefix(h.Get("X-Request-Id"), "req_") {
				t.Errorf("%s stream=%v: %d %v", name, stream, rec.Code, h)
			}
			if typ, code, _, _ := decodeEnvelope(t, rec.Body.Bytes()); typ != TypeRateLimit || code != CodeRateLimit {
				t.Errorf("%s stream=%v: %s/%s", name, stream, typ, code)
			}
		}
	}
}

func TestNonStreamHeadersFromEvents(t *testing.T) {
	rec := do(newTestHandler(&fakeService{}), "POST", "/v1/completions", `{"model":"tiny","prompt":"p"}`, authJSON())
	if rec.Code != 200 || rec.Header().Get("X-Ratelimit-Remaining-Requests") != "41" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	var resp struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string  `json:"text"`
			Index        int     `json:"index"`
			Logprobs     *string `json:"logprobs"`
			FinishReason string  `json:"finish_reason"`
		} `json:"choices"`
		Usage wireUsage `json:"usage"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Object != "text_completion" || len(resp.Choices) != 1 || resp.Choices[0].Text != fakeText ||
		resp.Choices[0].FinishReason != "stop" || resp.Usage.TotalTokens != 11 {
		t.Errorf("response %s", rec.Body)
	}
}

// A panic in the core after the stream started aborts the connection: the
// client sees a broken transfer, not a complete stream.
func TestPanicMidStreamAbortsConnection(t *testing.T) {
	gens := make(chan *fakeGen, 1)
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		gen := newFakeGen(standardEvents()...)
		gen.panicAfter = 2
		gens <- gen
		return gen, nil
	}}
	srv := httptest.NewServer(newTestHandler(svc))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(streamBody("")))
	req.Header = authJSON()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("read err %v, body %q: want a broken stream", err, body)
	}
	if !strings.Contains(string(body), `"content":"Hel"`) {
		t.Errorf("body %q lacks the text sent before the panic", body)
	}
	<-(<-gens).closed
}
