package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
)

// TestStructuredOutputFieldsBecomeConstraints: response_format, the
// guided_* fields, structured_outputs and the Responses API's text.format
// reach the service as the constraint they ask for.
func TestStructuredOutputFieldsBecomeConstraints(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	for _, tc := range []struct {
		path, body string
		want       constrain.Spec
	}{
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":` + schema + `}}`),
			constrain.Spec{JSONSchema: json.RawMessage(schema)}},
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_object"}`), constrain.Spec{JSONObject: true}},
		{"/v1/chat/completions", chatWith(`"guided_json":` + schema + `,"guided_decoding_backend":"xgrammar"`), constrain.Spec{JSONSchema: json.RawMessage(schema)}},
		{"/v1/completions", `{"model":"tiny","prompt":"x","guided_choice":["yes","no"]}`, constrain.Spec{Choice: []string{"yes", "no"}}},
		{"/v1/chat/completions", chatWith(`"guided_regex":"[0-9]+"`), constrain.Spec{Regex: "[0-9]+"}},
		{"/v1/chat/completions", chatWith(`"structured_outputs":{"choice":["a","b"]}`), constrain.Spec{Choice: []string{"a", "b"}}},
		{"/v1/responses", `{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":` + schema + `}}}`,
			constrain.Spec{JSONSchema: json.RawMessage(schema)}},
		{"/v1/responses", `{"model":"tiny","input":"hi","text":{"format":{"type":"json_object"}}}`, constrain.Spec{JSONObject: true}},
	} {
		svc := &fakeService{}
		rec := do(newTestHandler(svc), "POST", tc.path, tc.body, authJSON())
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.body, rec.Code, rec.Body.String())
		}
		got, err := constrain.DecodeSpec(svc.last.Constraint)
		if err != nil || got.Hash() != tc.want.Hash() {
			t.Errorf("%s: constraint %q (%v), want %+v", tc.body, svc.last.Constraint, err, tc.want)
		}
	}
	// A schema sent as a string (vLLM accepts both).
	svc := &fakeService{}
	quoted, _ := json.Marshal(schema)
	if rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", chatWith(`"guided_json":`+string(quoted)), authJSON()); rec.Code != 200 {
		t.Fatalf("guided_json as a string: %d %s", rec.Code, rec.Body.String())
	}
	if got, _ := constrain.DecodeSpec(svc.last.Constraint); string(got.JSONSchema) != schema {
		t.Errorf("guided_json as a string: %q", svc.last.Constraint)
	}
	// Plain text is no constraint.
	if rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", chatWith(`"response_format":{"type":"text"}`), authJSON()); rec.Code != 200 || svc.last.Constraint != "" {
		t.Errorf("response_format text: %d %q", rec.Code, svc.last.Constraint)
	}
}

// TestUnsupportedSchemaKeywordsRefused: a schema warden cannot enforce is
// a 400 unsupported_parameter naming the keyword, never best effort.
func TestUnsupportedSchemaKeywordsRefused(t *testing.T) {
	h := newTestHandler(&fakeService{})
	for _, tc := range []struct{ path, body, param, code, keyword string }{
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^a"}}}`),
			"response_format", CodeUnsupportedParameter, "pattern"},
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"oneOf":[{"type":"string"}]}}}}}`),
			"response_format", CodeUnsupportedParameter, "oneOf"},
		{"/v1/chat/completions", chatWith(`"guided_json":{"type":"string","format":"email"}`), "guided_json", CodeUnsupportedParameter, "format"},
		{"/v1/chat/completions", chatWith(`"guided_regex":"\\bword"`), "guided_regex", CodeUnsupportedParameter, "regular expression"},
		{"/v1/responses", `{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"array","uniqueItems":true}}}}`,
			"text.format", CodeUnsupportedParameter, "uniqueItems"},
		{"/v1/chat/completions", chatWith(`"guided_regex":"(","response_format":{"type":"text"}`), "guided_regex", CodeInvalidValue, "regex"},
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_schema","json_schema":{"schema":{}}}`), "response_format.json_schema.name", CodeMissingParameter, "name"},
		{"/v1/chat/completions", chatWith(`"response_format":{"type":"json_object"},"guided_choice":["a"]`), "guided_choice", CodeInvalidValue, "only one"},
		{"/v1/chat/completions", chatWith(`"guided_choice":[]`), "guided_choice", CodeEmptyArray, "at least one"},
		{"/v1/chat/completions", chatWith(`"structured_outputs":{"grammar":"x"}`), "structured_outputs.grammar", CodeUnsupportedParameter, "grammar"},
		{"/v1/chat/completions", chatWith(`"guided_json":{"type":"strng"}`), "guided_json", CodeInvalidValue, "strng"},
	} {
		rec := do(h, "POST", tc.path, tc.body, authJSON())
		typ, code, param, msg := decodeEnvelope(t, rec.Body.Bytes())
		if rec.Code != 400 || typ != TypeInvalidRequest || code != tc.code || param != tc.param || !strings.Contains(msg, tc.keyword) {
			t.Errorf("%s: %d %s %s/%s %q", tc.body, rec.Code, typ, code, param, msg)
		}
	}
}
