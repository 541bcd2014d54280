package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// envelope is a decoded OpenAI error body; null param/code decode as "".
type envelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeEnvelope(t *testing.T, body []byte) (typ, code, param, msg string) {
	t.Helper()
	var env envelope
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("body %q is not an error envelope: %v", body, err)
	}
	if env.Error.Param != nil {
		param = *env.Error.Param
	}
	if env.Error.Code != nil {
		code = *env.Error.Code
	}
	return env.Error.Type, code, param, env.Error.Message
}

const goodChat = `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`

// chatWith returns goodChat with extra top-level fields.
func chatWith(extra string) string {
	return `{"model":"tiny","messages":[{"role":"user","content":"hi"}],` + extra + `}`
}

func TestBadInput(t *testing.T) {
	svc := &fakeService{}
	h := newTestHandler(svc)
	const chat, compl = "/v1/chat/completions", "/v1/completions"
	noAuth := http.Header{"Content-Type": {"application/json"}}
	withKey := func(auth string) http.Header {
		return http.Header{"Authorization": {auth}, "Content-Type": {"application/json"}}
	}
	big := chatWith(`"user":"` + strings.Repeat("x", 70<<10) + `"`)
	inv := TypeInvalidRequest

	cases := []struct {
		name         string
		method, path string
		header       http.Header // nil: authJSON()
		body         string
		status       int
		typ, code    string
		param        string
	}{
		{"malformed JSON", "POST", chat, nil, `{"model":"tiny",`, 400, inv, CodeInvalidJSON, ""},
		{"trailing garbage", "POST", chat, nil, goodChat + `x`, 400, inv, CodeInvalidJSON, ""},
		{"not an object", "POST", chat, nil, `["tiny"]`, 400, inv, CodeInvalidJSON, ""},
		{"null body", "POST", chat, nil, `null`, 400, inv, CodeInvalidJSON, ""},
		{"empty body", "POST", chat, nil, ``, 400, inv, CodeInvalidJSON, ""},
		{"invalid UTF-8", "POST", chat, nil, "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, inv, CodeInvalidEncoding, ""},
		{"max_tokens string", "POST", chat, nil, chatWith(`"max_tokens":"ten"`), 400, inv, CodeInvalidType, "max_tokens"},
		{"max_tokens fraction", "POST", chat, nil, chatWith(`"max_tokens":1.5`), 400, inv, CodeInvalidType, "max_tokens"},
		{"max_tokens 0", "POST", chat, nil, chatWith(`"max_tokens":0`), 400, inv, CodeIntegerTooSmall, "max_tokens"},
		{"max_tokens -1", "POST", chat, nil, chatWith(`"max_tokens":-1`), 400, inv, CodeIntegerTooSmall, "max_tokens"},
		{"max_tokens 1e12", "POST", chat, nil, chatWith(`"max_tokens":1e12`), 400, inv, CodeIntegerTooLarge, "max_tokens"},
		{"max_tokens 1e400", "POST", chat, nil, chatWith(`"max_tokens":1e400`), 400, inv, CodeIntegerTooLarge, "max_tokens"},
		{"max_completion_tokens 0", "POST", chat, nil, chatWith(`"max_completion_tokens":0`), 400, inv, CodeIntegerTooSmall, "max_completion_tokens"},
		{"max token aliases differ", "POST", chat, nil, chatWith(`"max_tokens":5,"max_completion_tokens":6`), 400, inv, CodeInvalidValue, "max_completion_tokens"},
		{"messages object", "POST", chat, nil, `{"model":"tiny","messages":{}}`, 400, inv, CodeInvalidType, "messages"},
		{"messages empty", "POST", chat, nil, `{"model":"tiny","messages":[]}`, 400, inv, CodeEmptyArray, "messages"},
		{"messages missing", "POST", chat, nil, `{"model":"tiny"}`, 400, inv, CodeMissingParameter, "messages"},
		{"message not object", "POST", chat, nil, `{"model":"tiny","messages":["hi"]}`, 400, inv, CodeInvalidType, "messages[0]"},
		{"role missing", "POST", chat, nil, `{"model":"tiny","messages":[{"content":"hi"}]}`, 400, inv, CodeMissingParameter, "messages[0].role"},
		{"role unknown", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user","content":"a"},{"role":"wizard","content":"hi"}]}`, 400, inv, CodeInvalidValue, "messages[1].role"},
		{"content missing", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user"}]}`, 400, inv, CodeMissingParameter, "messages[0].content"},
		{"content number", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user","content":5}]}`, 400, inv, CodeInvalidType, "messages[0].content"},
		{"image part", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, inv, CodeUnsupportedValue, "messages[0].content[1].type"},
		{"unknown part", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, inv, CodeInvalidValue, "messages[0].content[0].type"},
		{"part text number", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, 400, inv, CodeInvalidType, "messages[0].content[0].text"},
		{"tool calls", "POST", chat, nil, `{"model":"tiny","messages":[{"role":"assistant","content":"","tool_calls":[{"id":"1"}]}]}`, 400, inv, CodeMissingParameter, "messages[0].tool_calls[0].type"},
		{"model missing", "POST", chat, nil, `{"messages":[{"role":"user","content":"hi"}]}`, 400, inv, CodeMissingParameter, "model"},
		{"model empty", "POST", chat, nil, `{"model":"","messages":[{"role":"user","content":"hi"}]}`, 400, inv, CodeMissingParameter, "model"},
		{"model number", "POST", chat, nil, `{"model":7,"messages":[{"role":"user","content":"hi"}]}`, 400, inv, CodeInvalidType, "model"},
		{"unknown model", "POST", chat, nil, `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, 404, inv, CodeModelNotFound, "model"},
		{"n=9", "POST", chat, nil, chatWith(`"n":9`), 400, inv, CodeIntegerTooLarge, "n"},
		{"n=0", "POST", chat, nil, chatWith(`"n":0`), 400, inv, CodeIntegerTooSmall, "n"},
		{"temperature 2.5", "POST", chat, nil, chatWith(`"temperature":2.5`), 400, inv, CodeDecimalTooLarge, "temperature"},
		{"temperature negative", "POST", chat, nil, chatWith(`"temperature":-0.1`), 400, inv, CodeDecimalTooSmall, "temperature"},
		{"temperature string", "POST", chat, nil, chatWith(`"temperature":"hot"`), 400, inv, CodeInvalidType, "temperature"},
		{"top_p 0", "POST", chat, nil, chatWith(`"top_p":0`), 400, inv, CodeDecimalTooSmall, "top_p"},
		{"top_p 1.1", "POST", chat, nil, chatWith(`"top_p":1.1`), 400, inv, CodeDecimalTooLarge, "top_p"},
		{"seed overflow", "POST", chat, nil, chatWith(`"seed":99999999999999999999`), 400, inv, CodeIntegerTooLarge, "seed"},
		{"stop array of 5", "POST", chat, nil, chatWith(`"stop":["a","b","c","d","e"]`), 400, inv, CodeArrayTooLong, "stop"},
		{"stop empty string", "POST", chat, nil, chatWith(`"stop":["a",""]`), 400, inv, CodeInvalidValue, "stop[1]"},
		{"stop number", "POST", chat, nil, chatWith(`"stop":5`), 400, inv, CodeInvalidType, "stop"},
		{"stream string", "POST", chat, nil, chatWith(`"stream":"yes"`), 400, inv, CodeInvalidType, "stream"},
		{"stream_options array", "POST", chat, nil, chatWith(`"stream":true,"stream_options":[]`), 400, inv, CodeInvalidType, "stream_options"},
		{"logprobs string", "POST", chat, nil, chatWith(`"logprobs":"yes"`), 400, inv, CodeInvalidType, "logprobs"},
		{"top_logprobs 21", "POST", chat, nil, chatWith(`"logprobs":true,"top_logprobs":21`), 400, inv, CodeIntegerTooLarge, "top_logprobs"},
		{"top_logprobs without logprobs", "POST", chat, nil, chatWith(`"top_logprobs":2`), 400, inv, CodeInvalidValue, "top_logprobs"},
		{"speculative string", "POST", chat, nil, chatWith(`"speculative":"yes"`), 400, inv, CodeInvalidType, "speculative"},
		{"completions logprobs true", "POST", "/v1/completions", nil, `{"model":"tiny","prompt":"x","logprobs":true}`, 400, inv, CodeInvalidType, "logprobs"},
		{"presence_penalty 2.5", "POST", chat, nil, chatWith(`"presence_penalty":2.5`), 400, inv, CodeDecimalTooLarge, "presence_penalty"},
		{"frequency_penalty -3", "POST", chat, nil, chatWith(`"frequency_penalty":-3`), 400, inv, CodeDecimalTooSmall, "frequency_penalty"},
		{"frequency_penalty string", "POST", chat, nil, chatWith(`"frequency_penalty":"1"`), 400, inv, CodeInvalidType, "frequency_penalty"},
		{"repetition_penalty 0", "POST", chat, nil, chatWith(`"repetition_penalty":0`), 400, inv, CodeDecimalTooSmall, "repetition_penalty"},
		{"min_p 1.5", "POST", chat, nil, chatWith(`"min_p":1.5`), 400, inv, CodeDecimalTooLarge, "min_p"},
		{"logit_bias array", "POST", chat, nil, chatWith(`"logit_bias":[1]`), 400, inv, CodeInvalidType, "logit_bias"},
		{"logit_bias word key", "POST", chat, nil, chatWith(`"logit_bias":{"hello":1}`), 400, inv, CodeInvalidValue, "logit_bias"},
		{"logit_bias negative id", "POST", chat, nil, chatWith(`"logit_bias":{"-1":1}`), 400, inv, CodeInvalidValue, "logit_bias"},
		{"logit_bias 101", "POST", chat, nil, chatWith(`"logit_bias":{"5":101}`), 400, inv, CodeDecimalTooLarge, "logit_bias.5"},
		{"logit_bias same token twice", "POST", chat, nil, chatWith(`"logit_bias":{"5":1,"05":2}`), 400, inv, CodeInvalidValue, "logit_bias"},
		{"chat echo", "POST", chat, nil, chatWith(`"echo":true`), 400, inv, CodeUnsupportedParameter, "echo"},
		{"tools", "POST", chat, nil, chatWith(`"tools":[{"type":"function"}]`), 400, inv, CodeMissingParameter, "tools[0].function"},
		{"top_k -2", "POST", chat, nil, chatWith(`"top_k":-2`), 400, inv, CodeIntegerTooSmall, "top_k"},
		{"top_k fraction", "POST", chat, nil, chatWith(`"top_k":1.5`), 400, inv, CodeInvalidType, "top_k"},
		{"cache salt (I8)", "POST", chat, nil, chatWith(`"cache_salt":"other-tenant"`), 400, inv, CodeUnsupportedParameter, "cache_salt"},
		{"transfer params (I8)", "POST", chat, nil, chatWith(`"kv_transfer_params":{"remote_host":"10.0.0.1"}`), 400, inv, CodeUnsupportedParameter, "kv_transfer_params"},
		{"P/D bootstrap (I8)", "POST", chat, nil, chatWith(`"bootstrap_room":1`), 400, inv, CodeUnsupportedParameter, "bootstrap_room"},
		{"LoRA adapter", "POST", chat, nil, chatWith(`"lora_request":{"lora_name":"x"}`), 400, inv, CodeUnsupportedParameter, "lora_request"},
		{"priority negative", "POST", chat, nil, chatWith(`"priority":-1`), 400, inv, CodeIntegerTooSmall, "priority"},
		{"priority fraction", "POST", chat, nil, chatWith(`"priority":1.5`), 400, inv, CodeInvalidType, "priority"},
		{"priority string", "POST", chat, nil, chatWith(`"priority":"high"`), 400, inv, CodeInvalidType, "priority"},
		{"priority numeric string", "POST", chat, nil, chatWith(`"priority":"1"`), 400, inv, CodeInvalidType, "priority"},
		{"priority boolean", "POST", chat, nil, chatWith(`"priority":true`), 400, inv, CodeInvalidType, "priority"},
		{"priority 1001", "POST", chat, nil, chatWith(`"priority":1001`), 400, inv, CodeIntegerTooLarge, "priority"},
		{"priority 1e400", "POST", chat, nil, chatWith(`"priority":1e400`), 400, inv, CodeIntegerTooLarge, "priority"},
		{"completion priority negative", "POST", compl, nil, `{"model":"tiny","prompt":"a","priority":-100}`, 400, inv, CodeIntegerTooSmall, "priority"},
		{"completion priority fraction", "POST", compl, nil, `{"model":"tiny","prompt":"a","priority":0.5}`, 400, inv, CodeInvalidType, "priority"},
		{"completion priority string", "POST", compl, nil, `{"model":"tiny","prompt":"a","priority":"high"}`, 400, inv, CodeInvalidType, "priority"},
		{"completion priority 1001", "POST", compl, nil, `{"model":"tiny","prompt":"a","priority":1001}`, 400, inv, CodeIntegerTooLarge, "priority"},
		{"warden field (I8)", "POST", chat, nil, chatWith(`"warden_worker":"w1"`), 400, inv, CodeUnsupportedParameter, "warden_worker"},
		{"prompt missing", "POST", compl, nil, `{"model":"tiny"}`, 400, inv, CodeMissingParameter, "prompt"},
		{"prompt empty", "POST", compl, nil, `{"model":"tiny","prompt":""}`, 400, inv, CodeInvalidValue, "prompt"},
		{"prompt empty in array", "POST", compl, nil, `{"model":"tiny","prompt":[""]}`, 400, inv, CodeInvalidValue, "prompt[0]"},
		{"prompt tokens", "POST", compl, nil, `{"model":"tiny","prompt":[1,2,3]}`, 400, inv, CodeUnsupportedValue, "prompt"},
		{"prompt batch", "POST", compl, nil, `{"model":"tiny","prompt":["a","b"]}`, 400, inv, CodeUnsupportedValue, "prompt"},
		{"prompt object", "POST", compl, nil, `{"model":"tiny","prompt":{}}`, 400, inv, CodeInvalidType, "prompt"},
		{"best_of 3", "POST", compl, nil, `{"model":"tiny","prompt":"a","best_of":3}`, 400, inv, CodeUnsupportedParameter, "best_of"},
		{"oversized body", "POST", chat, nil, big, 413, inv, CodeRequestTooLarge, ""},
		{"text/plain", "POST", chat, http.Header{"Authorization": {"Bearer " + goodKey}, "Content-Type": {"text/plain"}}, goodChat, 415, inv, CodeUnsupportedMedia, ""},
		{"missing key", "POST", chat, noAuth, goodChat, 401, inv, CodeInvalidAPIKey, ""},
		{"basic auth", "POST", chat, withKey("Basic dXNlcjpwYXNz"), goodChat, 401, inv, CodeInvalidAPIKey, ""},
		{"empty bearer", "POST", chat, withKey("Bearer "), goodChat, 401, inv, CodeInvalidAPIKey, ""},
		{"wrong key", "POST", chat, withKey("Bearer sk-wrong"), goodChat, 401, inv, CodeInvalidAPIKey, ""},
		{"revoked key", "POST", chat, withKey("Bearer " + revokedKey), goodChat, 401, inv, CodeInvalidAPIKey, ""},
		{"key store down", "POST", chat, withKey("Bearer " + brokenKey), goodChat, 500, TypeServer, CodeInternal, ""},
		{"models without key", "GET", "/v1/models", noAuth, "", 401, inv, CodeInvalidAPIKey, ""},
		{"unknown path", "GET", "/v1/engines", nil, "", 404, inv, CodeNotFound, ""},
		{"wrong method", "DELETE", chat, nil, "", 405, inv, CodeMethodNotAllowed, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			header := tc.header
			if header == nil {
				header = authJSON()
			}
			rec := do(h, tc.method, tc.path, tc.body, header)
			if rec.Code != tc.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tc.status, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			typ, code, param, msg := decodeEnvelope(t, rec.Body.Bytes())
			if typ != tc.typ || code != tc.code || param != tc.param {
				t.Errorf("type/code/param = %q/%q/%q, want %q/%q/%q (message %q)", typ, code, param, tc.typ, tc.code, tc.param, msg)
			}
			if msg == "" {
				t.Error("empty message")
			}
			if strings.Contains(msg, "10.0.0.7") || strings.Contains(msg, "sk-") {
				t.Errorf("message leaks internals or the key: %q", msg)
			}
		})
	}

	// After all that, the same handler still serves a good request.
	rec := do(h, "POST", chat, goodChat, authJSON())
	var resp chatCompletion
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); rec.Code != 200 || err != nil || resp.Choices[0].Message.Content == nil || *resp.Choices[0].Message.Content != fakeText {
		t.Fatalf("good request after bad ones: %d %s", rec.Code, rec.Body)
	}
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	rec := do(newTestHandler(&fakeService{}), "PUT", "/v1/models", "", authJSON())
	if rec.Code != 405 || rec.Header().Get("Allow") != "GET" {
		t.Fatalf("status %d Allow %q, want 405 GET", rec.Code, rec.Header().Get("Allow"))
	}
}

// TestChunkedOversizedBody: a body without Content-Length is cut at the
// limit while reading.
func TestChunkedOversizedBody(t *testing.T) {
	h := newTestHandler(&fakeService{})
	req := newRequest("POST", "/v1/chat/completions", chatWith(`"user":"`+strings.Repeat("x", 70<<10)+`"`))
	req.ContentLength = -1
	req.Header = authJSON()
	rec := serve(h, req)
	if rec.Code != 413 {
		t.Fatalf("status = %d, want 413; body %s", rec.Code, rec.Body)
	}
	if _, code, _, _ := decodeEnvelope(t, rec.Body.Bytes()); code != CodeRequestTooLarge {
		t.Errorf("code = %q", code)
	}
}

// TestLenientInput: standard fields at their defaults, unknown fields,
// nulls and alternative forms are accepted and normalised.
func TestLenientInput(t *testing.T) {
	cases := []struct {
		name, path, body string
		check            func(*GenerateRequest) bool
	}{
		{"defaults of unsupported fields", "/v1/chat/completions", chatWith(
			`"logprobs":false,"top_logprobs":0,"presence_penalty":0,"frequency_penalty":0.0,"logit_bias":{},` +
				`"tools":[],"tool_choice":"none","response_format":{"type":"text"},"n":1,"top_k":-1`),
			func(r *GenerateRequest) bool { return r.Model == "tiny" }},
		{"ignored standard and unknown fields", "/v1/chat/completions", chatWith(
			`"store":true,"metadata":{"a":"b"},"service_tier":"auto","prompt_cache_key":"k","parallel_tool_calls":true,"some_future_field":{"x":1}`),
			func(r *GenerateRequest) bool { return r.Model == "tiny" }},
		{"nulls mean absent", "/v1/chat/completions", chatWith(
			`"max_tokens":null,"temperature":null,"top_p":null,"seed":null,"stop":null,"stream":null,"n":null,"user":null,"logprobs":null,"cache_salt":null,"priority":null`),
			func(r *GenerateRequest) bool {
				return r.MaxTokens == nil && r.Temperature == nil && r.TopP == nil && r.Seed == nil && r.Stop == nil && !r.Stream && r.Priority == 0
			}},
		{"speculative null", "/v1/chat/completions", chatWith(`"speculative":null`),
			func(r *GenerateRequest) bool { return r.Speculative == nil }},
		{"speculative true", "/v1/chat/completions", chatWith(`"speculative":true`),
			func(r *GenerateRequest) bool { return r.Speculative != nil && *r.Speculative }},
		{"speculative false", "/v1/completions", `{"model":"tiny","prompt":"x","speculative":false}`,
			func(r *GenerateRequest) bool { return r.Speculative != nil && !*r.Speculative }},
		{"no priority is 0", "/v1/chat/completions", goodChat,
			func(r *GenerateRequest) bool { return r.Priority == 0 }},
		{"priority", "/v1/chat/completions", chatWith(`"priority":7`),
			func(r *GenerateRequest) bool { return r.Priority == 7 }},
		{"priority at its maximum, as a float", "/v1/chat/completions", chatWith(`"priority":1e3`),
			func(r *GenerateRequest) bool { return r.Priority == MaxPriority }},
		{"completion priority", "/v1/completions", `{"model":"tiny","prompt":"x","priority":0}`,
			func(r *GenerateRequest) bool { return r.Kind == KindCompletion && r.Priority == 0 }},
		{"completion priority 2", "/v1/completions", `{"model":"tiny","prompt":"x","priority":2.0}`,
			func(r *GenerateRequest) bool { return r.Priority == 2 }},
		{"content parts", "/v1/chat/completions",
			`{"model":"tiny","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"c","name":"bob"}]}`,
			func(r *GenerateRequest) bool {
				return len(r.Messages) == 2 && reflect.DeepEqual(r.Messages[0], Message{Role: "developer", Content: "ab"}) && r.Messages[1].Content == "c"
			}},
		{"aliases and forms", "/v1/chat/completions", chatWith(
			`"max_completion_tokens":1e3,"stop":"END","temperature":0,"top_p":1,"seed":-5,"user":"u-1","stream":false,"stream_options":{"include_usage":true}`),
			func(r *GenerateRequest) bool {
				return *r.MaxTokens == 1000 && len(r.Stop) == 1 && r.Stop[0] == "END" && *r.Temperature == 0 &&
					*r.TopP == 1 && *r.Seed == -5 && r.User == "u-1" && !r.IncludeUsage
			}},
		{"same value in both max aliases", "/v1/chat/completions", chatWith(`"max_tokens":7,"max_completion_tokens":7`),
			func(r *GenerateRequest) bool { return *r.MaxTokens == 7 }},
		{"prompt array of one", "/v1/completions", `{"model":"tiny","prompt":["x y"],"echo":false,"suffix":null,"logprobs":0,"best_of":1,"max_tokens":16}`,
			func(r *GenerateRequest) bool {
				return r.Kind == KindCompletion && r.Prompt == "x y" && *r.MaxTokens == 16
			}},
		{"UTF-8 and escapes", "/v1/completions", `{"model":"tiny","prompt":"h\u00e9 \ud83c\udf0d 日本"}`,
			func(r *GenerateRequest) bool { return r.Prompt == "hé 🌍 日本" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{}
			h := newTestHandler(svc)
			header := authJSON()
			header.Set("Content-Type", "application/json; charset=utf-8")
			rec := do(h, "POST", tc.path, tc.body, header)
			if rec.Code != 200 {
				t.Fatalf("status = %d; body %s", rec.Code, rec.Body)
			}
			if req := svc.lastRequest(t); !tc.check(req) {
				t.Errorf("normalised request = %+v", req)
			}
		})
	}
}
