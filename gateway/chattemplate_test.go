package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestChatTemplateErrorIs400: a template that fails in Python jinja2 fails
// in warden too, with 400 invalid_request_error naming the template's
// error, instead of rendering a prompt the model never saw (the arguments
// as a Python dict, a loop over no tools); a request the template renders
// still completes.
func TestChatTemplateErrorIs400(t *testing.T) {
	tg := startGateway(t, testConfig())
	var cfg map[string]any
	if err := json.Unmarshal(tokFiles.configJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	// DeepSeek-R1-Distill's way with tool calls; Phi-4-mini's with tools;
	// Hermes-format calls (<tool_call>), which warden parses.
	cfg["chat_template"] = "{%- for t in tools %}tool: {{ t.function.name }}, call as <tool_call>{...}</tool_call>\n{% endfor %}" +
		"{%- for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}" +
		"{{ 'call: ' + c.function.name + ' ' + c.function.arguments + '\n' }}{% endfor %}" +
		"{% else %}{{ m.role + ': ' + m.content + '\n' }}{% endif %}{% endfor %}assistant: "
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.assets.TokenizerConfigJson = raw
	w.reply = "ok"
	w.start()

	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}}
	user := map[string]any{"role": "user", "content": "Weather?"}
	history := []any{user,
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "get_weather", "arguments": `{"city": "Paris"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "21"}}
	for _, c := range []struct {
		name string
		body map[string]any
		want string // in the message; "" for 200
	}{
		{"tool history", map[string]any{"model": "tiny", "messages": history, "tools": tools}, `TypeError: can only concatenate str (not "dict") to str`},
		{"no tools", map[string]any{"model": "tiny", "messages": []any{user}}, "TypeError: 'NoneType' object is not iterable"},
		{"tools, no history", map[string]any{"model": "tiny", "messages": []any{user}, "tools": tools, "max_tokens": 4}, ""},
	} {
		code, _, body := tg.post("/v1/chat/completions", c.body)
		if c.want == "" {
			if code != http.StatusOK {
				t.Errorf("%s: %d %s", c.name, code, body)
			}
			continue
		}
		e := decodeEnvelope(t, body)
		if code != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || str(e.Error.Param) != "messages" ||
			!strings.Contains(e.Error.Message, "chat template") || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s: %d %s, want 400 invalid_request_error naming %s", c.name, code, body, c.want)
		}
	}
}
