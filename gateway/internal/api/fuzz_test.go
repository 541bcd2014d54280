package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzSeeds returns request bodies covering the accepted forms and the
// rejections.
func fuzzSeeds() []string {
	return []string{
		goodChat,
		chatWith(`"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"temperature":1.2,"top_p":0.5,"seed":1,"stop":["a","b"]`),
		chatWith(`"max_completion_tokens":1e3,"stop":"x","n":1,"user":"u","logprobs":false,"metadata":{"k":"v"}`),
		`{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		`{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
		`{"model":"tiny","prompt":"hello","max_tokens":16,"echo":false}`,
		`{"model":"tiny","prompt":["hello"]}`,
		`{"model":"tiny","prompt":[[1,2]]}`,
		`{"model":"tiny","messages":{}}`,
		chatWith(`"max_tokens":"ten"`),
		chatWith(`"max_tokens":1e400,"seed":-1e30`),
		chatWith(`"temperature":2.0000001,"top_p":-0`),
		chatWith(`"cache_salt":"x","kv_transfer_params":{}`),
		chatWith(`"logprobs":true,"top_logprobs":20`),
		chatWith(`"top_logprobs":3`),
		`{"model":"tiny","prompt":"x","logprobs":5}`,
		`{"model":"tiny","prompt":"x","logprobs":21}`,
		chatWith(`"priority":3`),
		chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string","maxLength":3},"b":{"anyOf":[{"type":"integer","minimum":-5},{"enum":["x",null]}]}},"required":["a"]}}}`),
		chatWith(`"response_format":{"type":"json_object"},"guided_regex":"a+"`),
		chatWith(`"guided_json":"{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}"`),
		chatWith(`"guided_choice":["yes","no"],"guided_decoding_backend":"outlines"`),
		chatWith(`"guided_regex":"(a|b){2,5}\\d"`),
		chatWith(`"structured_outputs":{"json":{"type":"string","pattern":"x"}}`),
		chatWith(`"priority":-1`),
		chatWith(`"priority":1.5,"max_tokens":2`),
		chatWith(`"priority":"high"`),
		`{"model":"tiny","prompt":"x","priority":1000}`,
		`{"model":"tiny","prompt":"x","priority":1001}`,
		`{"model":"tiny","messages":[{"role":"user","content":"\ud800"}]}`,
		"{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}",
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		`{"model":"tiny","model":7}`,
		`{"model":"tiny","prompt":"x","n":3}`, `{"model":"tiny","prompt":"x","n":1e3}`,
		`{"model":"tiny","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"strict":true}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`,
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		``, `null`, `{}`, `"x"`, `1`,
	}
}

// checkDecoded asserts the decoder's contract on one body.
func checkDecoded(t *testing.T, kind Kind, body []byte) {
	req, e := decodeRequest(kind, body, DefaultMaxTokensLimit, nil)
	checkDecodeResult(t, kind, req, e)
	if req != nil && req.N < 1 {
		t.Fatalf("n = %d", req.N)
	}
}

// checkDecodeResult asserts the contract of every request decoder.
func checkDecodeResult(t *testing.T, kind Kind, req *GenerateRequest, e *Error) {
	if (req == nil) == (e == nil) {
		t.Fatalf("want exactly one of request and error, got %v and %v", req, e)
	}
	if e != nil {
		if e.Status != http.StatusBadRequest || e.Type != TypeInvalidRequest || e.Code == "" || e.Message == "" ||
			!utf8.ValidString(e.Message) || !utf8.ValidString(e.Param) {
			t.Fatalf("bad error %#v", e)
		}
		_ = marshal(e.envelope())
		return
	}
	if req.Kind != kind || req.Model == "" || len(req.Model) > maxModelNameLen || !utf8.ValidString(req.Model) ||
		!utf8.ValidString(req.Prompt) || !utf8.ValidString(req.User) {
		t.Fatalf("bad request %+v", req)
	}
	if kind == KindChat && len(req.Messages) == 0 {
		t.Fatal("chat request without messages")
	}
	for _, m := range req.Messages {
		if !strings.Contains("|system|user|assistant|developer|tool|", "|"+m.Role+"|") || !utf8.ValidString(m.Content) {
			t.Fatalf("bad message %+v", m)
		}
		for _, c := range m.ToolCalls {
			var args map[string]any
			if m.Role != "assistant" || c.ID == "" || c.Name == "" || json.Unmarshal([]byte(c.Arguments), &args) != nil {
				t.Fatalf("bad tool call %+v in %+v", c, m)
			}
		}
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs || (req.TopLogprobs > 0 && !req.Logprobs) {
		t.Fatalf("logprobs %v top %d", req.Logprobs, req.TopLogprobs)
	}
	checkTools(t, req)
	if req.MaxTokens != nil && (*req.MaxTokens < 1 || *req.MaxTokens > DefaultMaxTokensLimit) {
		t.Fatalf("max tokens %d", *req.MaxTokens)
	}
	if req.Temperature != nil && !(*req.Temperature >= 0 && *req.Temperature <= 2) {
		t.Fatalf("temperature %v", *req.Temperature)
	}
	if req.TopP != nil && !(*req.TopP > 0 && *req.TopP <= 1) {
		t.Fatalf("top_p %v", *req.TopP)
	}
	if req.Priority < 0 || req.Priority > MaxPriority {
		t.Fatalf("priority %d", req.Priority)
	}
	if len(req.Stop) > maxStopSequences {
		t.Fatalf("%d stop sequences", len(req.Stop))
	}
	for _, s := range req.Stop {
		if s == "" || !utf8.ValidString(s) {
			t.Fatalf("bad stop %q", s)
		}
	}
	if req.IncludeUsage && !req.Stream {
		t.Fatal("include_usage without stream")
	}
	if k, ok := req.PromptScoring(); ok && (k < 0 || k > MaxTopLogprobs || (req.PromptLogprobs != nil && req.Stream)) {
		t.Fatalf("prompt logprobs %d (prompt_logprobs %v) with stream %v", k, req.PromptLogprobs, req.Stream)
	}
}

// checkTools asserts the tools of a decoded request: unique valid names,
// template objects that are JSON, a named choice among them.
func checkTools(t *testing.T, req *GenerateRequest) {
	names := map[string]bool{}
	for _, tool := range req.Tools {
		var v map[string]any
		if names[tool.Name] || tool.Name == "" || json.Unmarshal(tool.Template, &v) != nil {
			t.Fatalf("bad tool %+v", tool)
		}
		names[tool.Name] = true
	}
	switch c := req.ToolChoice; c.Mode {
	case "", ToolChoiceAuto, ToolChoiceNone:
	case ToolChoiceRequired:
		if len(req.Tools) == 0 {
			t.Fatal("tool_choice required without tools")
		}
	case ToolChoiceFunction:
		if !names[c.Name] {
			t.Fatalf("tool_choice names %q, not among the tools", c.Name)
		}
	default:
		t.Fatalf("tool choice %+v", c)
	}
}

func FuzzDecodeChatRequest(f *testing.F) {
	for _, s := range append(fuzzSeeds(),
		`{"model":"m","messages":[{"role":"assistant","content":"a","reasoning_content":"r"}],"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"none"}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecoded(t, KindChat, body) })
}

func FuzzDecodeCompletionRequest(f *testing.F) {
	for _, s := range append(fuzzSeeds(),
		`{"model":"m","prompt":"p","echo":true,"logprobs":3,"prompt_logprobs":2}`, `{"model":"m","prompt":"p","prompt_logprobs":0,"stream":true}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecoded(t, KindCompletion, body) })
}

// FuzzChatHandler drives the whole handler: every body gets a well-formed
// answer with a request ID, never a panic or a 5xx.
func FuzzChatHandler(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, "application/json")
	}
	f.Add(goodChat, "text/plain")
	f.Add(goodChat, "application/json; charset=latin1")
	svc := &fakeService{gen: func(req *GenerateRequest) (Generation, error) {
		if req.Model != "tiny" {
			return nil, ModelNotFound(req.Model)
		}
		return newFakeGen(standardEvents()...), nil
	}}
	h := newTestHandler(svc)
	f.Fuzz(func(t *testing.T, body, contentType string) {
		header := authJSON()
		header.Set("Content-Type", contentType)
		rec := do(h, "POST", "/v1/chat/completions", body, header)
		if !requestIDPattern.MatchString(rec.Header().Get("X-Request-Id")) {
			t.Fatalf("no request ID")
		}
		switch rec.Code {
		case 200:
		case 400, 404, 413, 415:
			decodeEnvelope(t, rec.Body.Bytes())
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
