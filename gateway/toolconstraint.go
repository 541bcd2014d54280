package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/toolcall"
)

// toolConstraint returns the constraint (wire form) that guarantees a
// request's tool calls parse against their schemas, or "" when none is
// needed. The output is constrained in the model's own format, so the
// parser reads it like any other output:
//
//   - tool_choice named: exactly one call to that function;
//   - tool_choice required: one call to any offered function, or (with
//     parallel_tool_calls) one or more when the composed expression fits
//     the constraint size limit;
//   - tool_choice auto with a strict function: text, or calls whose
//     arguments match their schemas (see autoRegex).
//
// A strict function's parameters must be enforceable (else 400 naming the
// keyword); a non-strict one's arguments are held to its schema when it can
// be enforced, and to any JSON object otherwise.
func toolConstraint(req *api.GenerateRequest, f toolcall.Format, grammars *constrain.Cache) (string, error) {
	if !usesTools(req) {
		return "", nil
	}
	strict := false
	for _, t := range req.Tools {
		strict = strict || t.Strict
	}
	choice := req.ToolChoice.Mode
	if choice != api.ToolChoiceFunction && choice != api.ToolChoiceRequired && !strict {
		return "", nil
	}
	if req.Constraint != "" {
		return "", api.InvalidRequest("tool_choice", api.CodeUnsupportedValue,
			"Unsupported combination: structured output (response_format) together with tool_choice \"required\", a named function or strict functions; send one of them.")
	}
	prefix, suffix, argsKey := "", "", "parameters"
	switch f {
	case toolcall.FormatHermes:
		prefix, suffix, argsKey = "<tool_call>\n", "\n</tool_call>", "arguments"
	case toolcall.FormatMistral:
		prefix, suffix, argsKey = "[TOOL_CALLS][", "]", "arguments"
	}
	// Each call's schema standalone (for expressions) and as a branch of
	// an anyOf (references inside point to where the parameters sit).
	var calls, branches []json.RawMessage
	for i, t := range req.Tools {
		if choice == api.ToolChoiceFunction && t.Name != req.ToolChoice.Name {
			continue
		}
		s, err := callSchema(t, argsKey, "properties/"+argsKey)
		if err != nil {
			return "", toolSchemaError(i, err)
		}
		b, _ := callSchema(t, argsKey, fmt.Sprintf("anyOf/%d/properties/%s", len(branches), argsKey))
		calls, branches = append(calls, s), append(branches, b)
	}
	var spec constrain.Spec
	switch {
	case choice == api.ToolChoiceFunction:
		spec = constrain.Spec{Prefix: prefix, JSONSchema: calls[0], Suffix: suffix}
	case choice == api.ToolChoiceRequired:
		spec = constrain.Spec{Prefix: prefix, JSONSchema: anyOf(branches), Suffix: suffix}
		if req.ParallelToolCalls {
			if re, err := callsRegex(calls, prefix, suffix, f); err == nil {
				spec = constrain.Spec{Regex: re}
			}
		}
	default:
		re, err := callsRegex(calls, prefix, suffix, f)
		if err != nil {
			return "", toolSchemaError(-1, err)
		}
		spec = constrain.Spec{Regex: autoRegex(f) + "(?:" + re + ")?"}
		if f == toolcall.FormatLlama3JSON {
			spec.Regex = autoRegex(f) + "|" + re
		}
	}
	if _, err := grammars.Compile(spec); err != nil {
		return "", toolSchemaError(-1, err)
	}
	return spec.Encode()
}

// callSchema is the JSON Schema of one call in the model's format:
// {"name": <const>, argsKey: <parameters>}. A non-strict tool whose
// parameters cannot be enforced gets any object. References inside the
// parameters ("#/...") are rewritten to where they now sit (path).
func callSchema(t api.Tool, argsKey, path string) (json.RawMessage, error) {
	params := t.Parameters
	if params == nil {
		params = json.RawMessage(`{"type": "object"}`)
	}
	if _, err := constrain.SchemaRegex(params); err != nil {
		if t.Strict || !errors.Is(err, constrain.ErrUnsupported) {
			return nil, err
		}
		params = json.RawMessage(`{"type": "object"}`)
	}
	if bytes.Contains(params, []byte(`"$ref"`)) {
		params = bytes.ReplaceAll(params, []byte(`"#/`), []byte(`"#/`+path+`/`))
		params = bytes.ReplaceAll(params, []byte(`"#"`), []byte(`"#/`+path+`"`))
	}
	name, _ := json.Marshal(t.Name)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"type": "object", "properties": {"name": {"const": %s}, %q: `, name, argsKey)
	b.Write(params)
	fmt.Fprintf(&b, `}, "required": ["name", %q], "additionalProperties": false}`, argsKey)
	return b.Bytes(), nil
}

func anyOf(schemas []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"anyOf": [`)
	for i, s := range schemas {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(s)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// callsRegex is one or more calls in the model's format: Hermes calls
// one per line, Llama's separated by "; ", Mistral's each in its own
// [TOOL_CALLS][...].
func callsRegex(calls []json.RawMessage, prefix, suffix string, f toolcall.Format) (string, error) {
	alts := make([]string, len(calls))
	for i, c := range calls {
		re, err := constrain.SchemaRegex(c)
		if err != nil {
			return "", err
		}
		alts[i] = re
	}
	one := regexp.QuoteMeta(prefix) + "(?:" + strings.Join(alts, "|") + ")" + regexp.QuoteMeta(suffix)
	sep := map[toolcall.Format]string{toolcall.FormatHermes: "\n", toolcall.FormatMistral: ""}[f]
	if f == toolcall.FormatLlama3JSON {
		sep = "; "
	}
	re := one + "(?:" + regexp.QuoteMeta(sep) + one + ")*"
	if len(re) > constrain.MaxRegexBytes {
		return "", fmt.Errorf("%w: the tools' schemas make an expression of %d bytes, the limit is %d", constrain.ErrTooLarge, len(re), constrain.MaxRegexBytes)
	}
	return re, nil
}

// autoRegex is the text an answer may hold instead of (Llama) or before
// (Hermes, Mistral) calls, with strict functions and tool_choice auto:
// exactly the text the parser does not take for a call. Llama: any text
// whose first non-space character is not "{". Hermes and Mistral: any
// text without the tag that starts calls, "<tool_call>" or "[TOOL_CALLS]"
// (every occurrence of the tag's first character starts a proper prefix
// of it that ends the text or is followed by that character again, or
// one that turns away from it; the tags hold their first character once).
func autoRegex(f toolcall.Format) string {
	tag := "<tool_call>"
	switch f {
	case toolcall.FormatLlama3JSON:
		return `[ \t\r\n]*(?:[^{ \t\r\n][\s\S]*)?`
	case toolcall.FormatMistral:
		tag = "[TOOL_CALLS]"
	}
	c := func(i int) string { return regexp.QuoteMeta(tag[i : i+1]) }
	first, last := c(0), len(tag)-1
	prefix, away := "", "[^"+c(last)+first+"]"
	for i := last - 1; i >= 1; i-- {
		prefix = "(?:" + c(i) + prefix + ")?"
		away = "(?:[^" + c(i) + first + "]|" + c(i) + away + ")"
	}
	p, m := "(?:"+first+prefix+")", "(?:"+first+away+")"
	return "(?:[^" + first + "]|" + p + "*" + m + ")*" + p + "*"
}

// toolSchemaError maps a constraint error for tools[i] (i < 0: the tools
// together) to the client's 400.
func toolSchemaError(i int, err error) error {
	param := "tools"
	if i >= 0 {
		param = fmt.Sprintf("tools[%d].function.parameters", i)
	}
	var ue *constrain.UnsupportedError
	if errors.As(err, &ue) {
		return api.InvalidRequest(param, api.CodeUnsupportedParameter, fmt.Sprintf(
			"Unsupported parameter: '%s' uses the JSON Schema keyword '%s' (at #%s), which this server cannot enforce for a strict function or a forced call. The supported subset is listed in the API documentation.", param, ue.Keyword, ue.Path))
	}
	return api.InvalidRequest(param, api.CodeInvalidValue, fmt.Sprintf("Invalid '%s': the tool calls cannot be constrained: %v.", param, err))
}
