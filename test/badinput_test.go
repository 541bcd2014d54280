package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// badCase is one bad request and the exact answer it must get.
type badCase struct {
	name    string
	method  string // default POST
	path    string // default /v1/chat/completions
	key     string // "" sends no Authorization header
	rawAuth string // Authorization header as is, instead of key
	ctype   string // default application/json
	body    []byte
	status  int
	code    string
	param   string // "" expects null
	message string // a substring the message must contain
}

// chatBody is a chat request body with extra top-level fields (raw JSON).
func chatBody(extra string) []byte {
	b := `{"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4`
	if extra != "" {
		b += ", " + extra
	}
	return []byte(b + "}")
}

// testBadInput: every bad request gets its exact status, error code and
// param in OpenAI's envelope with an x-request-id, and the gateway keeps
// serving correct content afterwards.
func testBadInput(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	g := c.Gateway()
	key := c.NewKey(t, "bad-input")

	issued := c.IssueKey(t, "bad-input-revoked")
	revoked := issued.Key
	if _, err := g.Admin.RevokeKey(ctx, issued.ID); err != nil {
		t.Fatal(err)
	}

	long := strings.Repeat("word ", 12000) // far above the 8192-token context
	cases := []badCase{
		{name: "malformed JSON", key: key, body: []byte(`{"model": "tiny", "messages": [`), status: 400, code: "invalid_json"},
		{name: "not an object", key: key, body: []byte(`[1, 2]`), status: 400, code: "invalid_json"},
		{name: "empty body", key: key, body: []byte(``), status: 400, code: "invalid_json"},
		{name: "model not a string", key: key, body: []byte(`{"model": 5, "messages": [{"role": "user", "content": "x"}]}`), status: 400, code: "invalid_type", param: "model"},
		{name: "messages not an array", key: key, body: []byte(`{"model": "tiny", "messages": "hi"}`), status: 400, code: "invalid_type", param: "messages"},
		{name: "content not a string", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": 5}]}`), status: 400, code: "invalid_type", param: "messages[0].content"},
		{name: "max_tokens a string", key: key, body: chatBody(`"max_completion_tokens": "ten"`), status: 400, code: "invalid_type", param: "max_completion_tokens"},
		{name: "temperature a string", key: key, body: chatBody(`"temperature": "hot"`), status: 400, code: "invalid_type", param: "temperature"},
		{name: "stream a string", key: key, body: chatBody(`"stream": "yes"`), status: 400, code: "invalid_type", param: "stream"},
		{name: "missing model", key: key, body: []byte(`{"messages": [{"role": "user", "content": "x"}]}`), status: 400, code: "missing_required_parameter", param: "model"},
		{name: "missing messages", key: key, body: []byte(`{"model": "tiny"}`), status: 400, code: "missing_required_parameter", param: "messages"},
		{name: "unknown model", key: key, body: []byte(`{"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}`), status: 404, code: "model_not_found", param: "model", message: "gpt-17"},
		{name: "empty messages", key: key, body: []byte(`{"model": "tiny", "messages": []}`), status: 400, code: "empty_array", param: "messages"},
		{name: "unknown role", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}`), status: 400, code: "invalid_value", param: "messages[0].role"},
		{name: "max_tokens 0", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}`), status: 400, code: "integer_below_min_value", param: "max_tokens"},
		{name: "max_tokens negative", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": -5}`), status: 400, code: "integer_below_min_value", param: "max_tokens"},
		{name: "max_tokens absurd", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1099511627776}`), status: 400, code: "integer_above_max_value", param: "max_tokens"},
		{name: "max_tokens beyond context", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}`), status: 400, code: "context_length_exceeded", param: "max_tokens", message: "maximum context length is 8192 tokens"},
		{name: "prompt beyond context", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "` + long + `"}], "max_tokens": 4}`), status: 400, code: "context_length_exceeded", param: "messages", message: "maximum context length is 8192 tokens"},
		{name: "completion prompt beyond context", key: key, path: "/v1/completions", body: []byte(`{"model": "tiny", "prompt": "` + long + `", "max_tokens": 4}`), status: 400, code: "context_length_exceeded", param: "prompt", message: "maximum context length is 8192 tokens"},
		{name: "completion token prompt", key: key, path: "/v1/completions", body: []byte(`{"model": "tiny", "prompt": [[1, 2, 3]]}`), status: 400, code: "unsupported_value", param: "prompt"},
		{name: "completion missing prompt", key: key, path: "/v1/completions", body: []byte(`{"model": "tiny"}`), status: 400, code: "missing_required_parameter", param: "prompt"},
		{name: "invalid UTF-8", key: key, body: []byte("{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}"), status: 400, code: "invalid_encoding"},
		{name: "n above max_n", key: key, body: chatBody(`"n": 9`), status: 400, code: "integer_above_max_value", param: "n"},
		{name: "temperature too high", key: key, body: chatBody(`"temperature": 3`), status: 400, code: "decimal_above_max_value", param: "temperature"},
		{name: "top_logprobs above 20", key: key, body: chatBody(`"logprobs": true, "top_logprobs": 21`), status: 400, code: "integer_above_max_value", param: "top_logprobs"},
		{name: "client KV transfer params", key: key, body: chatBody(`"kv_transfer_params": {"remote_host": "10.0.0.1"}`), status: 400, code: "unsupported_parameter", param: "kv_transfer_params"},
		{name: "client cache salt", key: key, body: chatBody(`"cache_salt": "other-tenant"`), status: 400, code: "unsupported_parameter", param: "cache_salt"},
		{name: "oversized body", key: key, body: []byte(`{"model": "tiny", "messages": [{"role": "user", "content": "` + strings.Repeat("a", 5<<20) + `"}]}`), status: 413, code: "request_too_large"},
		{name: "wrong content type", key: key, ctype: "text/plain", body: chatBody(""), status: 415, code: "unsupported_media_type"},
		{name: "missing key", body: chatBody(""), status: 401, code: "invalid_api_key"},
		{name: "wrong key", key: "wdn_aaaaaaaa_" + strings.Repeat("b", 52), body: chatBody(""), status: 401, code: "invalid_api_key"},
		{name: "garbage key", key: "not-a-key", body: chatBody(""), status: 401, code: "invalid_api_key"},
		{name: "basic auth", rawAuth: "Basic dXNlcjpwYXNz", body: chatBody(""), status: 401, code: "invalid_api_key"},
		{name: "missing key on a bad body", body: []byte(`{`), status: 401, code: "invalid_api_key"},
		{name: "GET on a POST route", method: http.MethodGet, key: key, status: 405, code: "method_not_allowed"},
		{name: "unknown route", key: key, path: "/v1/audio/speech", body: chatBody(""), status: 404, code: "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectError(t, g, tc) })
	}

	// A revoked key stops working once the gateway's authentication cache
	// (tenants.auth_cache_ttl, 1s) forgets it.
	t.Run("revoked key", func(t *testing.T) {
		deadline := time.Now().Add(harness.WaitTimeout)
		for {
			resp, err := g.Post(ctx, revoked, "/v1/chat/completions", chatBody(`"max_tokens": 1`))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		expectError(t, g, badCase{key: revoked, body: chatBody(""), status: 401, code: "invalid_api_key"})
	})

	// The gateway still serves, with the right content.
	msgs := []tokenizer.Message{{Role: "user", Content: "Still there?"}}
	want, err := reference(t, harness.ModelTiny).Chat(ctx, msgs, 16)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := g.Post(ctx, key, "/v1/chat/completions", map[string]any{
		"model": "tiny", "messages": wireMessages(msgs), "max_tokens": 16, "temperature": 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkChatAnswer(t, "after the bad requests", resp, want)
	c.WaitPoolsFree(t)
}

// expectError sends tc and checks the answer.
func expectError(t *testing.T, g *harness.Gateway, tc badCase) {
	t.Helper()
	method, path, ctype := tc.method, tc.path, tc.ctype
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/chat/completions"
	}
	if ctype == "" {
		ctype = "application/json"
	}
	req, err := http.NewRequest(method, g.APIURL+path, strings.NewReader(string(tc.body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	switch {
	case tc.rawAuth != "":
		req.Header.Set("Authorization", tc.rawAuth)
	case tc.key != "":
		req.Header.Set("Authorization", "Bearer "+tc.key)
	}
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != tc.status {
		t.Errorf("status %d, want %d; body %s", resp.StatusCode, tc.status, body)
	}
	if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "req_") {
		t.Errorf("x-request-id %q", id)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type %q", ct)
	}
	e, err := errenvelope.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.CodeOrEmpty(); got != tc.code {
		t.Errorf("code %q, want %q (message %q)", got, tc.code, e.Message)
	}
	if got := e.ParamOrEmpty(); got != tc.param {
		t.Errorf("param %q, want %q (message %q)", got, tc.param, e.Message)
	}
	if e.Message == "" || e.Type == "" {
		t.Errorf("empty message or type: %+v", e)
	}
	if tc.message != "" && !strings.Contains(e.Message, tc.message) {
		t.Errorf("message %q does not say %q", e.Message, tc.message)
	}
	if strings.Contains(e.Message, "wdn_") {
		t.Errorf("message echoes a key: %q", e.Message)
	}
}

// decodeJSON reads a 200 JSON response into v.
// checkChatAnswer checks that resp is a 200 chat completion whose one
// choice is want's text, with want's usage.
func checkChatAnswer(t *testing.T, what string, resp *http.Response, want harness.Output) {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %s: %s", what, resp.Status, body)
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	if len(out.Choices) != 1 || out.Choices[0].Message.Content != want.Text ||
		out.Usage.PromptTokens != want.PromptTokens || out.Usage.CompletionTokens != want.CompletionTokens {
		t.Errorf("%s: answered %+v, want %q with usage %d+%d", what, out, want.Text, want.PromptTokens, want.CompletionTokens)
	}
}
