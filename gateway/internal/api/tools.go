package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Limits on tool definitions, as OpenAI's.
const (
	maxTools        = 128
	maxToolNameLen  = 64
	maxToolCallsMsg = 128 // tool calls in one assistant message
)

// Tool is one function the model may call.
type Tool struct {
	Name string
	// Parameters is the JSON Schema of the arguments, an object; nil when
	// the client sent none (any object).
	Parameters json.RawMessage
	// Strict asks for arguments that match Parameters exactly.
	Strict bool
	// Template is the tool as the chat template sees it, in the chat API's
	// shape whatever the endpoint: {"type": "function", "function":
	// {"name", "description", "parameters"}}, the client's values verbatim.
	Template json.RawMessage
}

// Tool choices (ToolChoice.Mode).
const (
	ToolChoiceAuto     = "auto"     // text or calls, as the model decides
	ToolChoiceNone     = "none"     // text only
	ToolChoiceRequired = "required" // one call or more
	ToolChoiceFunction = "function" // one call to ToolChoice.Name
)

// ToolChoice is tool_choice. The zero value means auto (none without
// tools).
type ToolChoice struct {
	Mode string // one of the ToolChoice constants; "" is auto
	Name string // ToolChoiceFunction only
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON text, as the OpenAI API carries it
}

// ToolCallDelta is one step of a tool call in an Event, as OpenAI streams
// it: the first delta of a call has its ID and Name, the next ones
// fragments of its arguments (a JSON text once joined).
type ToolCallDelta struct {
	Index     int // 0, 1, ... in the order of the calls
	ID        string
	Name      string
	Arguments string
}

// toolsFlat says where a tool's fields are: in the chat API under
// "function", in the Responses API at the top.
type toolsFlat bool

// tools reads tools, tool_choice and parallel_tool_calls. flat is the
// Responses API's shape.
func (d *decoder) tools(flat toolsFlat) *Error {
	if raw := d.f.take("tools"); raw != nil {
		items, e := decodeArray(raw, "tools", "an array of tools")
		if e != nil {
			return e
		}
		if len(items) > maxTools {
			return InvalidRequest("tools", CodeArrayTooLong, fmt.Sprintf(
				"Invalid 'tools': array too long. Expected an array with at most %d elements, but got %d instead.", maxTools, len(items)))
		}
		seen := map[string]bool{}
		for i, item := range items {
			param := fmt.Sprintf("tools[%d]", i)
			t, e := decodeTool(item, param, flat)
			if e != nil {
				return e
			}
			if seen[t.Name] {
				return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf("Invalid '%s': the function name %q is used twice.", param, t.Name))
			}
			seen[t.Name] = true
			d.r.Tools = append(d.r.Tools, t)
		}
	}
	d.r.ParallelToolCalls = true
	if raw := d.f.take("parallel_tool_calls"); raw != nil {
		var e *Error
		if d.r.ParallelToolCalls, e = decodeBool(raw, "parallel_tool_calls"); e != nil {
			return e
		}
	}
	return d.toolChoice(flat)
}

// decodeTool reads one tool: a function with a name, optionally a
// description, parameters (a JSON Schema object) and strict.
func decodeTool(raw json.RawMessage, param string, flat toolsFlat) (Tool, *Error) {
	f, e := decodeObject(raw, param)
	if e != nil {
		return Tool{}, e
	}
	if e := functionType(f, param, "tools"); e != nil {
		return Tool{}, e
	}
	fn, fp := f, param
	if !flat {
		fp = param + ".function"
		rawFn := f.get("function")
		if rawFn == nil {
			return Tool{}, missing(fp)
		}
		if fn, e = decodeObject(rawFn, fp); e != nil {
			return Tool{}, e
		}
	}
	name, e := toolName(fn.get("name"), fp+".name")
	if e != nil {
		return Tool{}, e
	}
	t := Tool{Name: name, Parameters: fn.get("parameters")}
	var tmpl bytes.Buffer
	tmpl.WriteString(`{"type": "function", "function": {"name": `)
	tmpl.Write(fn["name"])
	if raw := fn.get("description"); raw != nil {
		if _, e := decodeString(raw, fp+".description"); e != nil {
			return Tool{}, e
		}
		tmpl.WriteString(`, "description": `)
		tmpl.Write(raw)
	}
	if t.Parameters != nil {
		if t.Parameters[0] != '{' {
			return Tool{}, wrongType(fp+".parameters", "a JSON Schema object", t.Parameters)
		}
		tmpl.WriteString(`, "parameters": `)
		tmpl.Write(t.Parameters)
	}
	tmpl.WriteString("}}")
	t.Template = tmpl.Bytes()
	if raw := fn.get("strict"); raw != nil {
		if t.Strict, e = decodeBool(raw, fp+".strict"); e != nil {
			return Tool{}, e
		}
	}
	return t, nil
}

// functionType checks an object's "type" is "function"; what names the
// object in messages ("tools", "tool_choice").
func functionType(f fields, param, what string) *Error {
	rawType := f.get("type")
	if rawType == nil {
		return missing(param + ".type")
	}
	typ, e := decodeString(rawType, param+".type")
	switch {
	case e != nil:
		return e
	case typ != "function":
		return InvalidRequest(param+".type", CodeUnsupportedValue, fmt.Sprintf(
			"Unsupported value for '%s.type': %q. Only function %s are supported by this server.", param, typ, what))
	}
	return nil
}

// toolName reads a function name: 1-64 characters of [A-Za-z0-9_-].
func toolName(raw json.RawMessage, param string) (string, *Error) {
	if raw == nil {
		return "", missing(param)
	}
	name, e := decodeString(raw, param)
	if e != nil {
		return "", e
	}
	ok := name != "" && len(name) <= maxToolNameLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return "", InvalidRequest(param, CodeInvalidValue, fmt.Sprintf(
			"Invalid '%s': %q. Function names are 1-%d characters of a-z, A-Z, 0-9, '_' and '-'.", param, name, maxToolNameLen))
	}
	return name, nil
}

// toolChoice reads tool_choice: "auto", "none", "required", or one named
// function ({"type": "function", "function": {"name"}} in chat,
// {"type": "function", "name"} in the Responses API).
func (d *decoder) toolChoice(flat toolsFlat) *Error {
	raw := d.f.take("tool_choice")
	if raw == nil {
		return nil
	}
	const param = "tool_choice"
	if raw[0] == '"' {
		s, e := decodeString(raw, param)
		if e != nil {
			return e
		}
		switch s {
		case ToolChoiceAuto, ToolChoiceNone:
		case ToolChoiceRequired:
			if len(d.r.Tools) == 0 {
				return InvalidRequest(param, CodeInvalidValue, "Invalid value for 'tool_choice': \"required\" needs at least one tool in 'tools'.")
			}
		default:
			return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf(
				"Invalid value for 'tool_choice': expected \"none\", \"auto\", \"required\" or a named function, got %q.", s))
		}
		d.r.ToolChoice = ToolChoice{Mode: s}
		return nil
	}
	f, e := decodeObject(raw, param)
	if e != nil {
		return wrongType(param, "a string or an object", raw)
	}
	if e := functionType(f, param, "tool choices"); e != nil {
		return e
	}
	fn, fp := f, param
	if !flat {
		fp = param + ".function"
		rawFn := f.get("function")
		if rawFn == nil {
			return missing(fp)
		}
		if fn, e = decodeObject(rawFn, fp); e != nil {
			return e
		}
	}
	name, e := toolName(fn.get("name"), fp+".name")
	if e != nil {
		return e
	}
	for _, t := range d.r.Tools {
		if t.Name == name {
			d.r.ToolChoice = ToolChoice{Mode: ToolChoiceFunction, Name: name}
			return nil
		}
	}
	return InvalidRequest(fp+".name", CodeInvalidValue, fmt.Sprintf("Invalid '%s.name': no function named %q in 'tools'.", fp, name))
}

// decodeToolCalls reads an assistant message's tool_calls.
func decodeToolCalls(raw json.RawMessage, param string) ([]ToolCall, *Error) {
	items, e := decodeArray(raw, param, "an array of tool calls")
	if e != nil {
		return nil, e
	}
	if len(items) > maxToolCallsMsg {
		return nil, InvalidRequest(param, CodeArrayTooLong, fmt.Sprintf("Invalid '%s': more than %d tool calls.", param, maxToolCallsMsg))
	}
	calls := make([]ToolCall, 0, len(items))
	for i, item := range items {
		cp := fmt.Sprintf("%s[%d]", param, i)
		f, e := decodeObject(item, cp)
		if e != nil {
			return nil, e
		}
		if e := functionType(f, cp, "tool calls"); e != nil {
			return nil, e
		}
		rawFn := f.get("function")
		if rawFn == nil {
			return nil, missing(cp + ".function")
		}
		fn, e := decodeObject(rawFn, cp+".function")
		if e != nil {
			return nil, e
		}
		c, e := decodeCall(f.get("id"), fn.get("name"), fn.get("arguments"), cp, cp+".function")
		if e != nil {
			return nil, e
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// decodeCall reads one call's id (idParam.id), name and arguments (at
// fnParam): arguments a string holding a JSON object, as the API returned
// it.
func decodeCall(rawID, rawName, rawArgs json.RawMessage, idParam, fnParam string) (ToolCall, *Error) {
	var c ToolCall
	var e *Error
	if rawID == nil {
		return c, missing(idParam + ".id")
	}
	if c.ID, e = decodeString(rawID, idParam+".id"); e != nil {
		return c, e
	}
	if c.Name, e = toolName(rawName, fnParam+".name"); e != nil {
		return c, e
	}
	if rawArgs == nil {
		return c, missing(fnParam + ".arguments")
	}
	if c.Arguments, e = decodeString(rawArgs, fnParam+".arguments"); e != nil {
		return c, e
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(c.Arguments), &obj) != nil {
		return c, InvalidRequest(fnParam+".arguments", CodeInvalidValue, fmt.Sprintf(
			"Invalid '%s.arguments': not a JSON object. Send the arguments as the API returned them.", fnParam))
	}
	return c, nil
}
