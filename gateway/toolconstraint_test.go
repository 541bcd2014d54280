package gateway

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/toolcall"
)

// TestAutoRegexHermes: the text allowed before Hermes (Mistral) calls
// is exactly the text without "<tool_call>" ("[TOOL_CALLS]"), checked on
// many strings over the tag's own letters.
func TestAutoRegexHermes(t *testing.T) {
	for f, tag := range map[toolcall.Format]string{toolcall.FormatHermes: "<tool_call>", toolcall.FormatMistral: "[TOOL_CALLS]"} {
		re := regexp.MustCompile("^(?:" + autoRegex(f) + ")$")
		rng := rand.New(rand.NewPCG(1, 2))
		letters := tag[:len(tag)-3] + "x\n"
		for range 50000 {
			b := make([]byte, rng.IntN(16))
			for i := range b {
				b[i] = letters[rng.IntN(len(letters))]
			}
			s := string(b)
			if rng.IntN(4) == 0 {
				s += tag[:rng.IntN(len(tag)+1)]
			}
			if got, want := re.MatchString(s), !strings.Contains(s, tag); got != want {
				t.Fatalf("%s %q: matched %v, want %v", f, s, got, want)
			}
		}
	}
	llama := regexp.MustCompile("^(?:" + autoRegex(toolcall.FormatLlama3JSON) + ")$")
	for s, want := range map[string]bool{"": true, "  hello {x}": true, "\n{": false, "{}": false, " \t": true} {
		if llama.MatchString(s) != want {
			t.Errorf("llama text %q: matched %v, want %v", s, !want, want)
		}
	}
}

func weatherTools(strict bool) []api.Tool {
	return []api.Tool{
		{Name: "get_weather", Strict: strict, Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}`)},
		{Name: "add", Parameters: json.RawMessage(`{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/$defs/n"}}, "required": ["a", "b"], "$defs": {"n": {"type": "number"}}}`)},
	}
}

// TestToolConstraint: each tool_choice's constraint accepts the calls the
// parser reads and nothing else that matters.
func TestToolConstraint(t *testing.T) {
	weather := `{"name":"get_weather","arguments":{"city":"Bern","unit":"c"}}`
	add := `{"name":"add","arguments":{"a":1,"b":2.5}}`
	llamaWeather := `{"name":"get_weather","parameters":{"city":"Bern","unit":"c"}}`
	for _, tc := range []struct {
		name   string
		f      toolcall.Format
		choice api.ToolChoice
		strict bool
		single bool
		accept []string
		reject []string
	}{
		{"hermes named", toolcall.FormatHermes, api.ToolChoice{Mode: api.ToolChoiceFunction, Name: "get_weather"}, false, false,
			[]string{"<tool_call>\n" + weather + "\n</tool_call>"},
			[]string{"<tool_call>\n" + add + "\n</tool_call>", weather, "<tool_call>\n" + strings.Replace(weather, `"c"`, `"k"`, 1) + "\n</tool_call>"}},
		{"hermes required parallel", toolcall.FormatHermes, api.ToolChoice{Mode: api.ToolChoiceRequired}, false, false,
			[]string{"<tool_call>\n" + add + "\n</tool_call>", "<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + add + "\n</tool_call>"},
			[]string{"", "hello", "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":\"x\",\"b\":1}}\n</tool_call>"}},
		{"hermes required single", toolcall.FormatHermes, api.ToolChoice{Mode: api.ToolChoiceRequired}, false, true,
			[]string{"<tool_call>\n" + add + "\n</tool_call>"},
			[]string{"<tool_call>\n" + weather + "\n</tool_call>\n<tool_call>\n" + add + "\n</tool_call>"}},
		{"hermes strict auto", toolcall.FormatHermes, api.ToolChoice{}, true, false,
			[]string{"", "Just text <b>x</b>", "Let me see.<tool_call>\n" + weather + "\n</tool_call>"},
			[]string{"<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n</tool_call>", "x<tool_call>{}"}},
		{"mistral named", toolcall.FormatMistral, api.ToolChoice{Mode: api.ToolChoiceFunction, Name: "get_weather"}, false, false,
			[]string{"[TOOL_CALLS][" + weather + "]"}, []string{weather, "[TOOL_CALLS][" + add + "]"}},
		{"mistral required parallel", toolcall.FormatMistral, api.ToolChoice{Mode: api.ToolChoiceRequired}, false, false,
			[]string{"[TOOL_CALLS][" + add + "]", "[TOOL_CALLS][" + weather + "][TOOL_CALLS][" + add + "]"},
			[]string{"", "hello", "[TOOL_CALLS][{\"name\":\"add\",\"arguments\":{\"a\":\"x\",\"b\":1}}]"}},
		{"mistral strict auto", toolcall.FormatMistral, api.ToolChoice{}, true, false,
			[]string{"", "Just text [1, 2]", "Let me see.[TOOL_CALLS][" + weather + "]"},
			[]string{"[TOOL_CALLS][{\"name\":\"get_weather\",\"arguments\":{}}]", "x[TOOL_CALLS]{}"}},
		{"llama named", toolcall.FormatLlama3JSON, api.ToolChoice{Mode: api.ToolChoiceFunction, Name: "get_weather"}, false, false,
			[]string{llamaWeather}, []string{weather}},
		{"llama strict auto", toolcall.FormatLlama3JSON, api.ToolChoice{}, true, false,
			[]string{"Sure: {x}", llamaWeather, llamaWeather + "; " + llamaWeather},
			[]string{"{\"answer\":1}", " {\"name\":\"get_weather\",\"parameters\":{}}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &api.GenerateRequest{Tools: weatherTools(tc.strict), ToolChoice: tc.choice, ParallelToolCalls: !tc.single}
			wire, err := toolConstraint(req, tc.f, nil)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := constrain.DecodeSpec(wire)
			if err != nil {
				t.Fatal(err)
			}
			expr, err := spec.Regexp()
			if err != nil {
				t.Fatal(err)
			}
			re := regexp.MustCompile("^(?:" + expr + ")$")
			for _, s := range tc.accept {
				if !re.MatchString(s) {
					t.Errorf("refuses %q", s)
				}
			}
			for _, s := range tc.reject {
				if re.MatchString(s) {
					t.Errorf("accepts %q", s)
				}
			}
		})
	}
}

// TestToolConstraintRefusals: a strict function with a keyword warden
// cannot enforce is a 400 naming it; a non-strict one falls back to any
// object; no constraint without a reason for one.
func TestToolConstraintRefusals(t *testing.T) {
	bad := json.RawMessage(`{"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$"}}}`)
	req := &api.GenerateRequest{Tools: []api.Tool{{Name: "f", Strict: true, Parameters: bad}}, ParallelToolCalls: true}
	_, err := toolConstraint(req, toolcall.FormatHermes, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != "tools[0].function.parameters" || !strings.Contains(ae.Message, "pattern") {
		t.Fatalf("strict unsupported schema: %v", err)
	}
	req.Tools[0].Strict, req.ToolChoice = false, api.ToolChoice{Mode: api.ToolChoiceRequired}
	if wire, err := toolConstraint(req, toolcall.FormatHermes, nil); err != nil || wire == "" {
		t.Fatalf("non-strict unsupported schema: %q %v", wire, err)
	}
	req.ToolChoice = api.ToolChoice{Mode: api.ToolChoiceAuto}
	if wire, err := toolConstraint(req, toolcall.FormatHermes, nil); err != nil || wire != "" {
		t.Fatalf("auto without strict: %q %v", wire, err)
	}
	req.ToolChoice, req.Constraint = api.ToolChoice{Mode: api.ToolChoiceRequired}, `{"json_object":true}`
	if _, err := toolConstraint(req, toolcall.FormatHermes, nil); !errors.As(err, &ae) || ae.Param != "tool_choice" {
		t.Fatalf("response_format with required: %v", err)
	}
}

// TestThinkingAllowed: outputs constrained to a value from their first
// token are not parsed for reasoning; a client's regex and tool_choice
// auto are.
func TestThinkingAllowed(t *testing.T) {
	enc := func(s constrain.Spec) string {
		w, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	auto, forced := &api.GenerateRequest{}, &api.GenerateRequest{ToolChoice: api.ToolChoice{Mode: api.ToolChoiceRequired}}
	for _, tc := range []struct {
		req        *api.GenerateRequest
		constraint string
		param      string
		want       bool
	}{
		{auto, enc(constrain.Spec{Regex: "<think>[a-z]+</think>[a-z]+"}), "structured_outputs", true},
		{auto, enc(constrain.Spec{JSONObject: true}), "response_format", false},
		{auto, enc(constrain.Spec{Choice: []string{"a", "b"}}), "guided_choice", false},
		{auto, enc(constrain.Spec{Regex: "x"}), "tools", true},
		{forced, enc(constrain.Spec{Regex: "x"}), "tools", false},
	} {
		if got := thinkingAllowed(tc.req, tc.constraint, tc.param); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.param, tc.constraint, got, tc.want)
		}
	}
}
