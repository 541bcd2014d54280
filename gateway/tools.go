package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/internal/toolcall"
)

// chatInput converts a chat request for the model's template: messages
// with their tool calls, and the tools unless tool_choice is "none" (then
// the model is not shown them and its output is text). Rejections are
// *api.Error: tools, or tool calls in the history, for a template that
// cannot serve them.
func (mt *modelTokenizer) chatInput(req *api.GenerateRequest) ([]tokenizer.Message, tokenizer.ChatOptions, error) {
	opts := tokenizer.ChatOptions{AddGenerationPrompt: true}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = tokenizer.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, tokenizer.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
		}
		if len(m.ToolCalls) > 0 && mt.tools == toolcall.FormatNone {
			return nil, opts, api.InvalidRequest(fmt.Sprintf("messages[%d].tool_calls", i), api.CodeUnsupportedValue,
				fmt.Sprintf("The chat template of model %q has no tool support, so it cannot render tool calls.", req.Model))
		}
	}
	if !usesTools(req) {
		return msgs, opts, nil
	}
	switch mt.tools {
	case toolcall.FormatNone:
		return nil, opts, api.InvalidRequest("tools", api.CodeUnsupportedValue,
			fmt.Sprintf("The chat template of model %q has no tool support; send no tools (or tool_choice \"none\").", req.Model))
	case toolcall.FormatUnsupported:
		return nil, opts, api.InvalidRequest("tools", api.CodeUnsupportedValue,
			fmt.Sprintf("The chat template of model %q uses a tool-call format this server cannot parse (it serves the Hermes/Qwen and Llama 3 JSON formats).", req.Model))
	}
	for _, t := range req.Tools {
		opts.Tools = append(opts.Tools, t.Template)
	}
	return msgs, opts, nil
}

// usesTools reports whether the model is offered tools: some are sent
// and tool_choice is not "none".
func usesTools(req *api.GenerateRequest) bool {
	return len(req.Tools) > 0 && req.ToolChoice.Mode != api.ToolChoiceNone
}

// toolParsers returns what starts the parser of a request's choice k, or
// nil when it is offered no tools. Each choice is parsed on its own.
// Forced calls (toolConstraint) come in the model's own format too, so
// one parser reads every tool_choice. Call IDs derive from the request
// ID, unique per call: call_<id>_<i> in the first choice, call_<id>_<k>_<i>
// in choice k > 0.
func (mt *modelTokenizer) toolParsers(req *api.GenerateRequest) func(k int) *toolcall.Parser {
	if !usesTools(req) {
		return nil
	}
	names := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		names[i] = t.Name
	}
	id := strings.TrimPrefix(req.RequestID, "req_")
	return func(k int) *toolcall.Parser {
		o := toolcall.Options{Format: mt.tools, Single: !req.ParallelToolCalls, Names: names}
		o.ID = func(i int) string { return fmt.Sprintf("call_%s_%d", id, i) }
		if k > 0 {
			o.ID = func(i int) string { return fmt.Sprintf("call_%s_%d_%d", id, k, i) }
		}
		return toolcall.NewParser(o)
	}
}

// toolEvent turns what the parser released into an event's text and tool
// calls.
func toolEvent(out toolcall.Output) api.Event {
	ev := api.Event{TextDelta: out.Content}
	for _, d := range out.Calls {
		ev.ToolCalls = append(ev.ToolCalls, api.ToolCallDelta{Index: d.Index, ID: d.ID, Name: d.Name, Arguments: d.Arguments})
	}
	return ev
}
