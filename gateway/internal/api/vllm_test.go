package api

import (
	"strings"
	"testing"
)

// TestEngineExtensionsRefused: vLLM-style fields that would change the
// output are refused naming the field, never silently dropped; at their
// default values they are accepted.
func TestEngineExtensionsRefused(t *testing.T) {
	h := newTestHandler(&fakeService{})
	for _, extra := range []string{
		`"guided_grammar":"root ::= x"`, `"guided_whitespace_pattern":" "`,
		`"chat_template":"{{x}}"`,
		`"add_generation_prompt":false`, `"continue_final_message":true`, `"bad_words":["x"]`, `"skip_special_tokens":false`,
		`"spaces_between_special_tokens":false`, `"include_stop_str_in_output":true`, `"allowed_token_ids":[1]`,
		`"truncate_prompt_tokens":5`, `"use_beam_search":true`, `"length_penalty":2`,
		`"logits_processors":["x"]`, `"add_special_tokens":true`, `"min_tokens":3`,
	} {
		name := strings.Trim(strings.SplitN(extra, ":", 2)[0], `"`)
		rec := do(h, "POST", "/v1/chat/completions", chatWith(extra), authJSON())
		_, code, param, msg := decodeEnvelope(t, rec.Body.Bytes())
		if rec.Code != 400 || code != CodeUnsupportedParameter || param != name || !strings.Contains(msg, "'"+name+"'") {
			t.Errorf("%s: %d %s/%s %q", extra, rec.Code, code, param, msg)
		}
	}
	defaults := chatWith(`"add_generation_prompt":true,"continue_final_message":false,"bad_words":[],"skip_special_tokens":true,` +
		`"chat_template_kwargs":{},"guided_json":null,"include_stop_str_in_output":false`)
	if rec := do(h, "POST", "/v1/chat/completions", defaults, authJSON()); rec.Code != 200 {
		t.Errorf("engine extensions at their defaults: %d %s", rec.Code, rec.Body.String())
	}
}

// TestErrorMessages: messages say what is wrong in plain numbers.
func TestErrorMessages(t *testing.T) {
	h := newTestHandler(&fakeService{})
	for _, tc := range []struct{ path, body, want, not string }{
		{"/v1/chat/completions", chatWith(`"max_tokens":1e9`), "Expected a value <= 16777216, but got 1000000000 instead", "e+"},
		{"/v1/chat/completions", chatWith(`"temperature":2.5`), "Expected a value <= 2, but got 2.5 instead", ""},
		{"/v1/completions", `{"model":"tiny","prompt":[1,2,3]}`, "token-ID prompts are not supported", "batch"},
		{"/v1/completions", `{"model":"tiny","prompt":[[1,2],[3]]}`, "token-ID prompts are not supported", "batch"},
		{"/v1/completions", `{"model":"tiny","prompt":["a","b"]}`, "batches are not supported", "token"},
	} {
		rec := do(h, "POST", tc.path, tc.body, authJSON())
		_, _, _, msg := decodeEnvelope(t, rec.Body.Bytes())
		if rec.Code != 400 || !strings.Contains(msg, tc.want) || (tc.not != "" && strings.Contains(msg, tc.not)) {
			t.Errorf("%s: %d %q, want it to say %q", tc.body, rec.Code, msg, tc.want)
		}
	}
}
