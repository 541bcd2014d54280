package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// messages reads the chat messages: a non-empty array of objects with a
// known role and text content.
func (d *decoder) messages() *Error {
	raw := d.f.get("messages")
	if raw == nil {
		return missing("messages")
	}
	return eachItem(raw, "messages", "an array", func(item json.RawMessage, param string) *Error {
		m, e := decodeMessage(item, param)
		d.r.Messages = append(d.r.Messages, m)
		return e
	})
}

// eachItem walks a non-empty array at param (want describes it in the
// type error), calling item for each element with its param ("name[i]").
func eachItem(raw json.RawMessage, param, want string, item func(raw json.RawMessage, param string) *Error) *Error {
	items, e := decodeArray(raw, param, want)
	if e != nil {
		return e
	}
	if len(items) == 0 {
		return InvalidRequest(param, CodeEmptyArray,
			fmt.Sprintf("Invalid '%s': empty array. Expected an array with at least 1 element.", param))
	}
	for i, it := range items {
		if e := item(it, fmt.Sprintf("%s[%d]", param, i)); e != nil {
			return e
		}
	}
	return nil
}

// decodeMessage reads one chat message. An assistant message may carry
// tool_calls (its content may then be null or absent); a tool message
// answers one call, named by tool_call_id.
func decodeMessage(raw json.RawMessage, param string) (Message, *Error) {
	f, e := decodeObject(raw, param)
	if e != nil {
		return Message{}, e
	}
	rawRole := f.get("role")
	if rawRole == nil {
		return Message{}, missing(param + ".role")
	}
	role, e := decodeString(rawRole, param+".role")
	if e != nil {
		return Message{}, e
	}
	switch role {
	case "system", "user", "assistant", "developer", "tool":
	default:
		return Message{}, InvalidRequest(param+".role", CodeInvalidValue, fmt.Sprintf(
			"Invalid value for '%s.role': expected one of system, user, assistant, developer, tool; got %q.", param, role))
	}
	// Legacy function calls and audio are not supported, so a history
	// holding them cannot be rendered faithfully.
	for _, name := range []string{"function_call", "audio"} {
		if v := f.get(name); v != nil && string(v) != "[]" {
			return Message{}, unsupportedParameter(param + "." + name)
		}
	}
	m := Message{Role: role}
	if raw := f.get("reasoning_content"); raw != nil && role == "assistant" {
		if m.ReasoningContent, e = decodeString(raw, param+".reasoning_content"); e != nil {
			return Message{}, e
		}
	}
	rawContent := f.get("content")
	if raw := f.get("tool_calls"); raw != nil && string(raw) != "[]" {
		if role != "assistant" {
			return Message{}, InvalidRequest(param+".tool_calls", CodeInvalidValue,
				fmt.Sprintf("Invalid '%s.tool_calls': only assistant messages carry tool calls.", param))
		}
		if m.ToolCalls, e = decodeToolCalls(raw, param+".tool_calls"); e != nil {
			return Message{}, e
		}
		if rawContent == nil {
			return m, nil // content null or absent beside tool calls
		}
	}
	if role == "tool" {
		rawID := f.get("tool_call_id")
		if rawID == nil {
			return Message{}, missing(param + ".tool_call_id")
		}
		if m.ToolCallID, e = decodeString(rawID, param+".tool_call_id"); e != nil {
			return Message{}, e
		}
	}
	m.Content, e = decodeContent(rawContent, param+".content")
	return m, e
}

// decodeContent accepts a string or an array of text parts.
func decodeContent(raw json.RawMessage, param string) (string, *Error) {
	return decodeTextParts(raw, param, "text")
}

// decodeTextParts accepts a string or an array of parts whose type is one
// of textTypes (each with a "text"), concatenated in order.
func decodeTextParts(raw json.RawMessage, param string, textTypes ...string) (string, *Error) {
	if raw == nil {
		return "", missing(param)
	}
	if raw[0] == '"' {
		return decodeString(raw, param)
	}
	parts, e := decodeArray(raw, param, "a string or an array of content parts")
	if e != nil {
		return "", e
	}
	var b strings.Builder
	for i, part := range parts {
		pp := fmt.Sprintf("%s[%d]", param, i)
		f, e := decodeObject(part, pp)
		if e != nil {
			return "", e
		}
		rawType := f.get("type")
		if rawType == nil {
			return "", missing(pp + ".type")
		}
		typ, e := decodeString(rawType, pp+".type")
		if e != nil {
			return "", e
		}
		switch {
		case slices.Contains(textTypes, typ):
		case slices.Contains(nonTextParts, typ):
			return "", InvalidRequest(pp+".type", CodeUnsupportedValue,
				fmt.Sprintf("Unsupported content part type %q: only text parts are supported.", typ))
		default:
			return "", InvalidRequest(pp+".type", CodeInvalidValue,
				fmt.Sprintf("Invalid value for '%s.type': expected %s, got %q.", pp, quotedList(textTypes), typ))
		}
		rawText := f.get("text")
		if rawText == nil {
			return "", missing(pp + ".text")
		}
		text, e := decodeString(rawText, pp+".text")
		if e != nil {
			return "", e
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// nonTextParts are content part types of chat and responses that carry
// something other than text.
var nonTextParts = []string{"image_url", "input_audio", "file", "refusal", "input_image", "input_file"}

// quotedList formats names as "a", "b" or "c" for messages.
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// prompt reads a completion prompt: a string, or an array holding exactly
// one string. Batches and token-ID prompts are not supported.
func (d *decoder) prompt() *Error {
	raw := d.f.get("prompt")
	if raw == nil {
		return missing("prompt")
	}
	if raw[0] == '"' {
		p, e := decodeString(raw, "prompt")
		d.r.Prompt = p
		if e == nil && p == "" {
			return emptyPrompt("prompt")
		}
		return e
	}
	items, e := decodeArray(raw, "prompt", "a string or an array of one string")
	switch {
	case e != nil:
		return e
	case len(items) == 0:
		return InvalidRequest("prompt", CodeEmptyArray, "Invalid 'prompt': empty array. Expected one string.")
	case items[0][0] == '[' || describe(items[0]) == "a number":
		return InvalidRequest("prompt", CodeUnsupportedValue, "Unsupported value for 'prompt': token-ID prompts are not supported; send the prompt as text.")
	case len(items) > 1:
		return InvalidRequest("prompt", CodeUnsupportedValue,
			fmt.Sprintf("Unsupported value for 'prompt': batches are not supported, send one prompt per request (got %d prompts).", len(items)))
	}
	p, e := decodeString(items[0], "prompt[0]")
	d.r.Prompt = p
	if e == nil && p == "" {
		return emptyPrompt("prompt[0]")
	}
	return e
}

// emptyPrompt is the documented 400 for an empty completion prompt (the
// BOS token alone is no prompt).
func emptyPrompt(param string) *Error {
	return InvalidRequest(param, CodeInvalidValue, "Invalid '"+param+"': the prompt is empty. Send at least one character.")
}
