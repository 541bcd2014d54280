package api

import (
	"encoding/json"
	"fmt"
	"slices"
)

// thinking reads the switches of a reasoning model's thinking (chat
// only; see docs/api.md): chat_template_kwargs.enable_thinking, as vLLM
// passes it to the chat template (no other key is supported), and
// reasoning_effort, mapped onto the same switch. Both, when sent, must
// agree.
func (d *decoder) thinking() *Error {
	if d.r.Kind != KindChat {
		return nil // completions have no template: the policy of checkOtherField applies
	}
	if raw := d.f.take("chat_template_kwargs"); raw != nil {
		kw, e := decodeObject(raw, "chat_template_kwargs")
		if e != nil {
			return e
		}
		names := make([]string, 0, len(kw))
		for name := range kw {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			param := "chat_template_kwargs." + name
			if name != "enable_thinking" {
				return InvalidRequest(param, CodeUnsupportedParameter, fmt.Sprintf(
					"Unsupported parameter: '%s'. This server passes only enable_thinking to chat templates.", param))
			}
			if raw := kw.get(name); raw != nil {
				on, e := decodeBool(raw, param)
				if e != nil {
					return e
				}
				d.r.EnableThinking = &on
			}
		}
	}
	if raw := d.f.take("reasoning_effort"); raw != nil {
		return d.effort(raw, "reasoning_effort")
	}
	return nil
}

// effort reads a reasoning effort (reasoning_effort, or the Responses
// API's reasoning.effort): "none" turns the template's thinking off,
// "minimal", "low", "medium" and "high" on. warden has no finer control
// of how long a model thinks.
func (d *decoder) effort(raw json.RawMessage, param string) *Error {
	v, e := decodeString(raw, param)
	if e != nil {
		return e
	}
	var on bool
	switch v {
	case "none":
	case "minimal", "low", "medium", "high":
		on = true
	default:
		return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf(
			"Invalid value for '%s': %q. Supported values are: 'none', 'minimal', 'low', 'medium' and 'high'.", param, v))
	}
	if d.r.EnableThinking != nil && *d.r.EnableThinking != on {
		return InvalidRequest(param, CodeInvalidValue, fmt.Sprintf(
			"Invalid value for '%s': %q disagrees with chat_template_kwargs.enable_thinking.", param, v))
	}
	d.r.EnableThinking = &on
	return nil
}
