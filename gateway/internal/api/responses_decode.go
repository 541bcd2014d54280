package api

import (
	"encoding/json"
	"fmt"

	"github.com/warden-ai/warden/internal/constrain"
)

// responseParams are the fields of a /v1/responses request that its
// response object echoes back.
type responseParams struct {
	instructions *string
	maxOutput    *int64
	temperature  float64
	topP         float64
	tools        []json.RawMessage // as sent
	toolChoice   any               // "auto", "none", "required" or {"type": "function", "name"}
	parallel     bool
	// previousID is previous_response_id, empty when not sent.
	previousID string
	// store is the request's "store"; nil when not sent (the server's
	// default applies).
	store *bool
	// conversation is the conversation without instructions, the
	// previous response's included (continueFrom).
	conversation []Message
	reasoning    respReasoning
}

// decodeResponsesRequest parses and validates a /v1/responses body into
// the chat form the core serves: instructions become a leading system
// message, input the messages after it. previous_response_id and store
// are only read here: the handler looks the previous response up and
// stores the new one (stored.go). conversation is refused.
//
// items resolves item_reference input items (an item of a stored
// response); nil refuses them.
func decodeResponsesRequest(body []byte, maxTokens int64, grammars *constrain.Cache, items itemLookup) (*GenerateRequest, *responseParams, *Error) {
	f, e := splitBody(body)
	if e != nil {
		return nil, nil, e
	}
	d := &decoder{f: f, r: &GenerateRequest{Kind: KindChat}, maxTokens: maxTokens, grammars: grammars}
	p := &responseParams{temperature: 1, topP: 1, tools: []json.RawMessage{}}
	if raw := f.get("tools"); raw != nil {
		_ = json.Unmarshal(raw, &p.tools) // checked by d.tools
	}
	for _, step := range []func() *Error{
		d.model, func() *Error { return d.responsesInput(p, items) }, func() *Error { return d.tools(true) }, d.maxOutputTokens, d.sampling, d.responsesStream,
		d.user, d.priority, d.responsesConstraint, func() *Error { return d.responsesOptions(p) }, func() *Error { return d.responsesReasoning(p) }, d.otherFields,
	} {
		if e := step(); e != nil {
			return nil, nil, e
		}
	}
	p.maxOutput = d.r.MaxTokens
	p.parallel = d.r.ParallelToolCalls
	switch tc := d.r.ToolChoice; tc.Mode {
	case "":
		p.toolChoice = ToolChoiceAuto
	case ToolChoiceFunction:
		p.toolChoice = map[string]string{"type": "function", "name": tc.Name}
	default:
		p.toolChoice = tc.Mode
	}
	if d.r.Temperature != nil {
		p.temperature = *d.r.Temperature
	}
	if d.r.TopP != nil {
		p.topP = *d.r.TopP
	}
	return d.r, p, nil
}

// responsesConstraint reads vLLM's structured-output extensions
// (guided_json, guided_choice, guided_regex, structured_outputs) as on
// chat; response_format is chat's own field, left to the field policy
// (text.format is the Responses API's).
func (d *decoder) responsesConstraint() *Error {
	rf, had := d.f["response_format"]
	delete(d.f, "response_format")
	e := d.constraint()
	if had {
		d.f["response_format"] = rf
	}
	return e
}

// responsesInput reads instructions and input (a string, or an array of
// message items).
func (d *decoder) responsesInput(p *responseParams, items itemLookup) *Error {
	if raw := d.f.get("instructions"); raw != nil {
		s, e := decodeString(raw, "instructions")
		if e != nil {
			return e
		}
		p.instructions = &s
		d.r.Messages = append(d.r.Messages, Message{Role: "system", Content: s})
	}
	raw := d.f.get("input")
	if raw == nil {
		return missing("input")
	}
	if raw[0] == '"' {
		s, e := decodeString(raw, "input")
		if e != nil {
			return e
		}
		d.r.Messages = append(d.r.Messages, Message{Role: "user", Content: s})
		return nil
	}
	return eachItem(raw, "input", "a string or an array of input items", func(item json.RawMessage, param string) *Error {
		var e *Error
		d.r.Messages, e = decodeInputItem(d.r.Messages, item, param, items)
		return e
	})
}

// itemLookup returns the output item id of a stored response as an
// assistant message: its text, or one tool call.
type itemLookup func(id, param string) (Message, *Error)

// decodeInputItem reads one input item onto msgs: a message with a role
// and text content, a function_call (a tool call of the assistant,
// joined to the assistant message just before it, if any), an
// item_reference to a stored response's output item (resolved by items,
// and joined the same way), a function_call_output (a tool message) or a
// reasoning item (the reasoning_content of the assistant message after
// it). Other tools' items are not supported.
func decodeInputItem(msgs []Message, raw json.RawMessage, param string, items itemLookup) ([]Message, *Error) {
	f, e := decodeObject(raw, param)
	if e != nil {
		return msgs, e
	}
	if rawType := f.get("type"); rawType != nil {
		typ, e := decodeString(rawType, param+".type")
		if e != nil {
			return msgs, e
		}
		switch typ {
		case "message":
		case "function_call":
			c, e := decodeCall(f.get("call_id"), f.get("name"), f.get("arguments"), param+".call", param)
			if e != nil {
				return msgs, e
			}
			return appendAssistant(msgs, Message{Role: "assistant", ToolCalls: []ToolCall{c}}), nil
		case "item_reference":
			if items == nil {
				return msgs, InvalidRequest(param+".type", CodeUnsupportedValue,
					"Unsupported input item type \"item_reference\": no stored responses are kept here; send the items whole.")
			}
			rawID := f.get("id")
			if rawID == nil {
				return msgs, missing(param + ".id")
			}
			id, e := decodeString(rawID, param+".id")
			if e != nil {
				return msgs, e
			}
			m, e := items(id, param+".id")
			if e != nil {
				return msgs, e
			}
			return appendAssistant(msgs, m), nil
		case "function_call_output":
			return decodeCallOutput(msgs, f, param)
		case "reasoning":
			return decodeReasoningItem(msgs, f, param)
		case "file_search_call",
			"web_search_call", "computer_call", "computer_call_output", "image_generation_call",
			"code_interpreter_call", "local_shell_call", "local_shell_call_output", "mcp_call",
			"mcp_list_tools", "mcp_approval_request", "mcp_approval_response", "custom_tool_call",
			"custom_tool_call_output":
			return msgs, InvalidRequest(param+".type", CodeUnsupportedValue, fmt.Sprintf(
				"Unsupported input item type %q: this server supports message, function_call and function_call_output items only (no built-in tools, no stored items).", typ))
		default:
			return msgs, InvalidRequest(param+".type", CodeInvalidValue,
				fmt.Sprintf("Invalid value for '%s.type': expected \"message\", \"function_call\", \"function_call_output\" or \"reasoning\", got %q.", param, typ))
		}
	}
	rawRole := f.get("role")
	if rawRole == nil {
		return msgs, missing(param + ".role")
	}
	role, e := decodeString(rawRole, param+".role")
	if e != nil {
		return msgs, e
	}
	switch role {
	case "system", "user", "assistant", "developer":
	default:
		return msgs, InvalidRequest(param+".role", CodeInvalidValue, fmt.Sprintf(
			"Invalid value for '%s.role': expected one of system, user, assistant, developer; got %q.", param, role))
	}
	content, e := decodeTextParts(f.get("content"), param+".content", "input_text", "output_text", "text")
	if e != nil {
		return msgs, e
	}
	if n := len(msgs); role == "assistant" && n > 0 && isReasoningOnly(msgs[n-1]) {
		msgs[n-1].Content = content // the answer of the reasoning item before it
		return msgs, nil
	}
	return append(msgs, Message{Role: role, Content: content}), nil
}

// appendAssistant appends m, an assistant message (a stored item or a
// function_call), to msgs as one turn with the assistant message just
// before it: its tool calls join that message, and its text answers a
// reasoning item's message; a reasoning-only m starts a message of its
// own, as a reasoning item does.
func appendAssistant(msgs []Message, m Message) []Message {
	n := len(msgs)
	if isReasoningOnly(m) || n == 0 || msgs[n-1].Role != "assistant" {
		return append(msgs, m)
	}
	last := &msgs[n-1]
	switch {
	case m.Content == "":
		last.ToolCalls = append(last.ToolCalls, m.ToolCalls...)
	case isReasoningOnly(*last):
		last.Content = m.Content
		last.ToolCalls = append(last.ToolCalls, m.ToolCalls...)
	default:
		return append(msgs, m)
	}
	return msgs
}

// decodeReasoningItem reads a reasoning item (one the server returned
// earlier): its reasoning_text content, else its summary text, becomes
// the reasoning_content of an assistant message that the message or
// function_call items after it join. encrypted_content is ignored.
func decodeReasoningItem(msgs []Message, f fields, param string) ([]Message, *Error) {
	text := ""
	for _, field := range []struct{ name, typ string }{{"content", "reasoning_text"}, {"summary", "summary_text"}} {
		raw := f.get(field.name)
		if raw == nil || text != "" {
			continue
		}
		t, e := decodeTextParts(raw, param+"."+field.name, field.typ)
		if e != nil {
			return msgs, e
		}
		text = t
	}
	return append(msgs, Message{Role: "assistant", ReasoningContent: text}), nil
}

// isReasoningOnly reports whether m holds only a reasoning item's text.
func isReasoningOnly(m Message) bool {
	return m.Role == "assistant" && m.Content == "" && len(m.ToolCalls) == 0 && m.ReasoningContent != ""
}

// decodeCallOutput reads a function_call_output item: the tool message
// answering call_id.
func decodeCallOutput(msgs []Message, f fields, param string) ([]Message, *Error) {
	rawID := f.get("call_id")
	if rawID == nil {
		return msgs, missing(param + ".call_id")
	}
	id, e := decodeString(rawID, param+".call_id")
	if e != nil {
		return msgs, e
	}
	out, e := decodeTextParts(f.get("output"), param+".output", "input_text", "output_text", "text")
	if e != nil {
		return msgs, e
	}
	return append(msgs, Message{Role: "tool", Content: out, ToolCallID: id}), nil
}

// maxOutputTokens reads max_output_tokens, the Responses API's
// max_tokens.
func (d *decoder) maxOutputTokens() *Error {
	if raw := d.f.get("max_output_tokens"); raw != nil {
		v, e := decodeIntIn(raw, "max_output_tokens", 1, d.maxTokens)
		if e != nil {
			return e
		}
		d.r.MaxTokens = &v
	}
	return nil
}

// responsesStream reads stream; a responses stream always ends with the
// whole response, usage included.
func (d *decoder) responsesStream() *Error {
	if raw := d.f.get("stream"); raw != nil {
		var e *Error
		if d.r.Stream, e = decodeBool(raw, "stream"); e != nil {
			return e
		}
	}
	return nil
}

// responsesOptions reads store and previous_response_id and applies the
// policy for the Responses API's other own fields that change the output
// or need state: refused unless at their default.
func (d *decoder) responsesOptions(p *responseParams) *Error {
	if d.f.get("conversation") != nil {
		return InvalidRequest("conversation", CodeUnsupportedParameter,
			"Unsupported parameter: 'conversation'. This server does not keep conversation objects; chain responses with 'previous_response_id' or send the whole conversation in 'input'.")
	}
	if raw := d.f.get("previous_response_id"); raw != nil && string(raw) != "null" {
		id, e := decodeString(raw, "previous_response_id")
		if e != nil {
			return e
		}
		if !validResponseID(id) {
			return InvalidRequest("previous_response_id", CodeInvalidValue,
				fmt.Sprintf("Invalid 'previous_response_id': %.60q is not a response ID (resp_ followed by up to 128 letters, digits, '-' or '_').", id))
		}
		p.previousID = id
	}
	if raw := d.f.get("store"); raw != nil && string(raw) != "null" {
		v, e := decodeBool(raw, "store")
		if e != nil {
			return e
		}
		p.store = &v
	}
	checks := []struct {
		name     string
		defaults []any
	}{
		{"background", []any{false}},
		{"truncation", []any{"disabled"}},
		{"prompt", nil},
	}
	for _, c := range checks {
		if raw := d.f.get(c.name); raw != nil && (c.defaults == nil || !isDefault(raw, c.defaults...)) {
			return InvalidRequest(c.name, CodeUnsupportedParameter,
				fmt.Sprintf("Unsupported parameter: '%s' is only accepted at its default value by this server.", c.name))
		}
	}
	if e := d.responsesLogprobs(); e != nil {
		return e
	}
	return d.textOptions()
}

// responsesReasoning reads reasoning: effort switches the template's
// thinking (see effort); summary ("auto", "concise" or "detailed", all
// alike) asks for the reasoning text as the reasoning item's summary too
// (warden has no summarizer; clients such as the AI SDK read only
// summaries).
func (d *decoder) responsesReasoning(p *responseParams) *Error {
	raw := d.f.get("reasoning")
	if raw == nil {
		return nil
	}
	r, e := decodeObject(raw, "reasoning")
	if e != nil {
		return e
	}
	for name := range r {
		if name != "effort" && name != "summary" && r.get(name) != nil {
			param := "reasoning." + name
			return InvalidRequest(param, CodeUnsupportedParameter, fmt.Sprintf("Unsupported parameter: '%s'.", param))
		}
	}
	if raw := r.get("effort"); raw != nil {
		if e := d.effort(raw, "reasoning.effort"); e != nil {
			return e
		}
		v, _ := decodeString(raw, "reasoning.effort")
		p.reasoning.Effort = &v
	}
	if raw := r.get("summary"); raw != nil {
		v, e := decodeString(raw, "reasoning.summary")
		if e != nil {
			return e
		}
		if v != "auto" && v != "concise" && v != "detailed" {
			return InvalidRequest("reasoning.summary", CodeInvalidValue,
				"Invalid value for 'reasoning.summary': expected \"auto\", \"concise\" or \"detailed\".")
		}
		p.reasoning.Summary = &v
	}
	return nil
}

// The include items: output text logprobs, and encrypted reasoning
// (accepted, never returned).
const (
	includeLogprobs           = "message.output_text.logprobs"
	includeEncryptedReasoning = "reasoning.encrypted_content"
)

// responsesLogprobs reads include ("message.output_text.logprobs", and
// "reasoning.encrypted_content", accepted and ignored: warden has no
// encrypted reasoning, reasoning items carry their text, which clients
// send back as is) and top_logprobs. Logprobs are returned when include
// asks for them or top_logprobs is above 0.
func (d *decoder) responsesLogprobs() *Error {
	if raw := d.f.get("include"); raw != nil {
		items, e := decodeArray(raw, "include", "an array of strings")
		if e != nil {
			return e
		}
		for i, item := range items {
			param := fmt.Sprintf("include[%d]", i)
			v, e := decodeString(item, param)
			if e != nil {
				return e
			}
			switch v {
			case includeLogprobs:
				d.r.Logprobs = true
			case includeEncryptedReasoning:
			default:
				return InvalidRequest(param, CodeUnsupportedValue, fmt.Sprintf(
					"Unsupported value for '%s': %q. This server supports only %q and %q.", param, v, includeLogprobs, includeEncryptedReasoning))
			}
		}
	}
	raw := d.f.get("top_logprobs")
	if raw == nil {
		return nil
	}
	n, e := decodeIntIn(raw, "top_logprobs", 0, MaxTopLogprobs)
	if e != nil {
		return e
	}
	d.r.TopLogprobs = int(n)
	d.r.Logprobs = d.r.Logprobs || n > 0
	return nil
}

// textOptions reads text.format (text, json_object or json_schema) and
// checks text.verbosity.
func (d *decoder) textOptions() *Error {
	raw := d.f.get("text")
	if raw == nil {
		return nil
	}
	text, e := decodeObject(raw, "text")
	if e != nil {
		return e
	}
	if raw := text.get("format"); raw != nil {
		format, e := decodeObject(raw, "text.format")
		if e != nil {
			return e
		}
		spec, e := formatSpec(format, "text.format", true)
		if e != nil {
			return e
		}
		if spec != nil && d.r.Constraint != "" {
			return InvalidRequest("text.format", CodeInvalidValue, fmt.Sprintf(
				"Invalid 'text.format': '%s' already asks for structured output; send only one of them.", d.r.ConstraintParam))
		}
		if e := d.setConstraint(spec, "text.format"); e != nil {
			return e
		}
	}
	if raw := text.get("verbosity"); raw != nil && !isDefault(raw, "medium") {
		return InvalidRequest("text.verbosity", CodeUnsupportedValue,
			"Unsupported value for 'text.verbosity': only \"medium\" is supported by this server.")
	}
	return nil
}
