package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of tool definitions and arguments.
const maxJSONDepth = 64

// chatData builds the template variables transformers passes: messages,
// tools (none when absent), documents (none), add_generation_prompt and,
// when set, enable_thinking. bos_token, eos_token and the filters are added
// by the caller.
func chatData(msgs []Message, opts ChatOptions) (map[string]jinja.Value, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		v, err := messageValue(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		list[i] = v
	}
	tools := jinja.None()
	if opts.Tools != nil {
		items := make([]jinja.Value, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := parseJSONValue(raw)
			if err != nil {
				return nil, fmt.Errorf("tool %d: %w", i, err)
			}
			if !v.IsDict() {
				return nil, fmt.Errorf("%w: tool %d: not a JSON object", ErrInvalidMessage, i)
			}
			items[i] = v
		}
		tools = jinja.NewList(items)
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"tools":                 tools,
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
	}
	if opts.EnableThinking != nil {
		data["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	return data, nil
}

// messageValue is m as the template sees it, keys in the OpenAI API's order;
// empty optional fields are absent.
func messageValue(m Message) (jinja.Value, error) {
	if err := checkRole(m.Role); err != nil {
		return jinja.Value{}, err
	}
	v := jinja.NewDict()
	d := v.AsDict()
	set := func(key, s string, always bool) error {
		if err := validUTF8(s); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if always || s != "" {
			d.Set(key, jinja.NewString(s))
		}
		return nil
	}
	if err := errors.Join(set("role", m.Role, true), set("content", m.Content, true), set("name", m.Name, false)); err != nil {
		return jinja.Value{}, err
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i, c := range m.ToolCalls {
			cv, err := toolCallValue(c)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("tool call %d: %w", i, err)
			}
			calls[i] = cv
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if err := errors.Join(set("tool_call_id", m.ToolCallID, false), set("reasoning_content", m.ReasoningContent, false)); err != nil {
		return jinja.Value{}, err
	}
	return v, nil
}

func toolCallValue(c ToolCall) (jinja.Value, error) {
	if err := errors.Join(validUTF8(c.ID), validUTF8(c.Name)); err != nil {
		return jinja.Value{}, err
	}
	args := jinja.NewDict()
	if len(bytes.TrimSpace(c.Arguments)) > 0 {
		var err error
		if args, err = parseJSONValue(c.Arguments); err != nil {
			return jinja.Value{}, fmt.Errorf("arguments: %w", err)
		}
	}
	fn := jinja.NewDict()
	fn.AsDict().Set("name", jinja.NewString(c.Name))
	fn.AsDict().Set("arguments", args)
	v := jinja.NewDict()
	if c.ID != "" {
		v.AsDict().Set("id", jinja.NewString(c.ID))
	}
	v.AsDict().Set("type", jinja.NewString("function"))
	v.AsDict().Set("function", fn)
	return v, nil
}

// parseJSONValue decodes one JSON value, keeping object keys in order (as
// Python's json.loads does) and integers apart from floats.
func parseJSONValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return v, nil
		}
		err = errors.New("data after the JSON value")
	}
	return jinja.Value{}, fmt.Errorf("%w: invalid JSON: %w", ErrInvalidMessage, err)
}

func decodeJSON(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			out := jinja.NewDict()
			for dec.More() {
				key, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				val, err := decodeJSON(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				out.AsDict().Set(key.(string), val)
			}
			_, err = dec.Token()
			return out, err
		}
		var items []jinja.Value
		for dec.More() {
			val, err := decodeJSON(dec, depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			items = append(items, val)
		}
		_, err = dec.Token()
		return jinja.NewList(items), err
	case string:
		return jinja.NewString(v), nil
	case bool:
		return jinja.NewBool(v), nil
	case nil:
		return jinja.None(), nil
	case json.Number:
		s := string(v)
		if !strings.ContainsAny(s, ".eE") {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return jinja.Value{}, fmt.Errorf("integer %s out of range", s)
			}
			return jinja.NewInt(n), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !math.IsInf(f, 0) {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}
