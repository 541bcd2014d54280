package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
)

// rawBody is a request body: postRaw sends it as it is, tg.post
// HTML-escaped (json.Marshal escapes a Marshaler's output), as a Go
// client does.
type rawBody string

func (b rawBody) MarshalJSON() ([]byte, error) { return []byte(b), nil }

// postRaw sends body unchanged to the chat API.
func postRaw(t *testing.T, tg *testGateway, body rawBody) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tg.base+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+tg.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tg.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// unescaped encodes v without HTML escaping, as most clients do.
func unescaped(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

func chatBody(t *testing.T, maxTokens int, extra map[string]any) rawBody {
	body := map[string]any{"model": "tiny", "max_tokens": maxTokens, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": "Pick one."}}}
	for k, v := range extra {
		body[k] = v
	}
	return rawBody(unescaped(t, body))
}

// checkRefused checks a 400 invalid_value naming param and holding each
// of want, and that the request was rejected before any worker.
func checkRefused(t *testing.T, tg *testGateway, code int, body []byte, param string, want ...string) {
	t.Helper()
	if code != 400 {
		t.Fatalf("status %d, want 400: %.300s", code, body)
	}
	e := decodeEnvelope(t, body)
	if e.Error.Type != api.TypeInvalidRequest || str(e.Error.Code) != api.CodeInvalidValue || str(e.Error.Param) != param {
		t.Errorf("error %+v, want invalid_request_error invalid_value on %s", e.Error, param)
	}
	for _, w := range want {
		if !strings.Contains(e.Error.Message, w) {
			t.Errorf("message %q does not say %q", e.Error.Message, w)
		}
	}
}

// TestRealConstraintLimits is the audit's reproduction on a real worker:
// an enum of 60 strings of 1,000 '<' (60 KB; its wire form was 360 KB,
// HTML-escaped, which the worker refused: 500) is served; 90 choices of
// 3,001 characters, over the workers' 256 KiB, are a 400 naming the limit
// and the size, before any worker is involved; string lengths up to the
// documented 1000 are served and held.
func TestRealConstraintLimits(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := startReal(t, workerConfig(t, "both-1", config.RoleBoth, config.TransferTCP, tg.RegistryAddr().String())).attach(tg)

	vals := make([]string, 60)
	for i := range vals {
		vals[i] = strings.Repeat("<", 998) + string(rune('A'+i%26)) + string(rune('a'+i/26))
	}
	format := func(schema any) map[string]any {
		return map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "strict": true, "schema": schema}}}
	}
	content := func(body []byte) string {
		t.Helper()
		var resp struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("not a completion: %.300s", body)
		}
		if resp.Choices[0].FinishReason != "stop" {
			t.Errorf("finish_reason %q", resp.Choices[0].FinishReason)
		}
		return resp.Choices[0].Message.Content
	}

	var got string
	enum := chatBody(t, 1100, format(map[string]any{"type": "string", "enum": vals}))
	if !strings.Contains(string(enum), "<<<") {
		t.Fatal("the body is escaped")
	}
	for _, escaped := range []bool{false, true} {
		code, _, body := postRaw(t, tg, enum)
		if escaped { // \u003c for each '<', 360 KB
			code, _, body = tg.post("/v1/chat/completions", enum)
		}
		if code != 200 {
			t.Fatalf("the '<' enum (escaped %v): %d %.300s", escaped, code, body)
		}
		if err := json.Unmarshal([]byte(content(body)), &got); err != nil || !strings.HasPrefix(got, strings.Repeat("<", 998)) || len(got) != 1000 {
			t.Errorf("the '<' enum: %.80q… is not one of its values (%v)", got, err)
		}
	}

	choices := make([]string, 90)
	for i := range choices {
		choices[i] = strings.Repeat("x", 2999) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	code, h, body := postRaw(t, tg, chatBody(t, 10, map[string]any{"guided_choice": choices}))
	checkRefused(t, tg, code, body, "guided_choice", "constraint size limit exceeded", "270", "bytes, the limit is 262144 bytes")
	// Refused when the request is decoded (the defaults), or at admission.
	if s, ok := tg.table.Get(h.Get("X-Request-Id")); ok && (s.State != lifecycle.Rejected || len(s.Workers) != 0) {
		t.Errorf("the refused request: %s with workers %v, want rejected before any worker", s.State, s.Workers)
	}

	for _, n := range []int{400, 1000, 1001} {
		code, _, body = postRaw(t, tg, chatBody(t, 1100, format(map[string]any{"type": "string", "maxLength": n})))
		if code != 200 {
			t.Fatalf("maxLength %d: %d %.300s", n, code, body)
		}
		if err := json.Unmarshal([]byte(content(body)), &got); err != nil || len([]rune(got)) > min(n, 1000) {
			t.Errorf("maxLength %d: %d characters (%v)", n, len([]rune(got)), err)
		}
	}
	w.poolQuiet()
}

// TestConstraintLimitsOfTheModelsWorkers: the gateway holds a constraint
// to the smallest limits the model's workers advertised (a worker that
// advertises none counts with the defaults) and refuses one over them
// with a 400 naming the limit, without contacting a worker.
func TestConstraintLimitsOfTheModelsWorkers(t *testing.T) {
	tg := startGateway(t, testConfig())
	plain := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil).start()
	small := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	small.limits = &controlpb.ConstraintLimits{Choices: 5, Insts: 1000}
	small.start()

	six := map[string]any{"guided_choice": []string{"a", "b", "c", "d", "e", "f"}}
	code, _, body := tg.post("/v1/chat/completions", chatBody(t, 10, six))
	checkRefused(t, tg, code, body, "guided_choice", "choices limit exceeded: 6 strings, the limit is 5 strings")
	code, _, body = tg.post("/v1/chat/completions", chatBody(t, 10, map[string]any{"guided_regex": "[a-z]{0,900}"}))
	checkRefused(t, tg, code, body, "guided_regex", "grammar instructions limit exceeded", "the limit is 1000 instructions")
	if calls := append(plain.requestCalls(), small.requestCalls()...); len(calls) != 0 {
		t.Errorf("workers were called: %v", calls)
	}
	code, _, body = tg.post("/v1/chat/completions", chatBody(t, 10, map[string]any{"guided_choice": []string{"a", "b", "c", "d", "e"}}))
	if code != 200 {
		t.Errorf("five choices: %d %.300s", code, body)
	}
}

// TestWorkerConstraintRefusalIs400: a worker that refuses a constraint
// the gateway let through (its limits are smaller than it advertised,
// or changed since) makes a 400 naming the limit, never a 500.
func TestWorkerConstraintRefusalIs400(t *testing.T) {
	tg := startGateway(t, testConfig())
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 64, nil)
	w.enforce = &constrain.Limits{SpecBytes: 1 << 20, RegexBytes: 1 << 20, Choices: 5, Insts: 1 << 20}
	w.start()
	code, h, body := tg.post("/v1/chat/completions", chatBody(t, 10, map[string]any{"guided_choice": []string{"a", "b", "c", "d", "e", "f"}}))
	checkRefused(t, tg, code, body, "guided_choice", "choices limit exceeded: 6 strings, the limit is 5 strings")
	if s := tg.finished(h.Get("X-Request-Id")); s.Cause != causeConstraintRefused {
		t.Errorf("cause %q, want %q", s.Cause, causeConstraintRefused)
	}
}
