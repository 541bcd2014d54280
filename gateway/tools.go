package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/reasoning"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/internal/toolcall"
)

// chatInput converts a chat request for the model's template: messages
// with their tool calls, and the tools unless tool_choice is "none" (then
// the model is not shown them and its output is text). Rejections are
// *api.Error: tools, or tool calls in the history, for a template that
// cannot serve them.
func (mt *modelTokenizer) chatInput(req *api.GenerateRequest) ([]tokenizer.Message, tokenizer.ChatOptions, error) {
	opts := tokenizer.ChatOptions{AddGenerationPrompt: true, EnableThinking: req.EnableThinking}
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = tokenizer.Message{Role: m.Role, Content: m.Content, ToolCallID: mt.callID(m.ToolCallID), ReasoningContent: m.ReasoningContent}
		for _, c := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, tokenizer.ToolCall{ID: mt.callID(c.ID), Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
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
			fmt.Sprintf("The chat template of model %q uses a tool-call format this server cannot parse (it serves the Hermes/Qwen, Llama 3 JSON and Mistral formats).", req.Model))
	}
	for _, t := range req.Tools {
		opts.Tools = append(opts.Tools, t.Template)
	}
	return msgs, opts, nil
}

// callID is a call ID as the model's template gets it: Mistral's
// templates accept only IDs of 9 letters and digits, so any other ID
// (from another provider, say) is mapped to one, the same way in the
// assistant's call and in the tool message answering it.
func (mt *modelTokenizer) callID(id string) string {
	if mt.tools != toolcall.FormatMistral || id == "" {
		return id
	}
	return toolcall.MistralCallID(id)
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
// in choice k > 0 (for a Mistral model, 9 letters and digits derived
// from those, as its template requires them back).
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
		o.ID = func(i int) string { return mt.newCallID(fmt.Sprintf("call_%s_%d", id, i)) }
		if k > 0 {
			o.ID = func(i int) string { return mt.newCallID(fmt.Sprintf("call_%s_%d_%d", id, k, i)) }
		}
		return toolcall.NewParser(o)
	}
}

// newCallID is the ID of a call the model made: id, or for a Mistral
// model its 9-character form.
func (mt *modelTokenizer) newCallID(id string) string {
	if mt.tools == toolcall.FormatMistral {
		return toolcall.MistralCallID(id)
	}
	return id
}

// reasoningParsers returns what starts the reasoning parser of choice k
// of a chat request, or nil for a completion, a model without a
// reasoning format, or an output constrained from its first token to
// something that holds no thinking (constrained: structured output, a
// forced tool call), which is all answer. The output starts inside the
// thinking when the rendered prompt ends with an open <think>
// (DeepSeek-R1 distills' templates open it).
func (mt *modelTokenizer) reasoningParsers(req *api.GenerateRequest, prompt []int32, constrained bool) func(k int) *reasoning.Parser {
	if req.Kind != api.KindChat || mt.reasoning == "" || mt.reasoning == reasoning.FormatNone || constrained {
		return nil
	}
	const tail = 16 // tokens: enough to hold "<think>" and whitespace in any tokenizer
	text, _ := mt.tok.Decode(prompt[max(0, len(prompt)-tail):])
	o := reasoning.Options{Format: mt.reasoning, InThinking: reasoning.PromptOpensThinking(string(text))}
	return func(int) *reasoning.Parser { return reasoning.NewParser(o) }
}

// thinkingAllowed reports whether an output under constraint (wire form,
// from field constraintParam) may still think first: tool_choice auto
// with strict functions, whose constraint allows any text before the
// calls, and a client's regular expression, which writes the whole
// output's shape, thinking included if it wants. JSON, choices and forced
// calls start with their value.
func thinkingAllowed(req *api.GenerateRequest, constraint, constraintParam string) bool {
	if constraintParam == "tools" {
		return req.ToolChoice.Mode != api.ToolChoiceFunction && req.ToolChoice.Mode != api.ToolChoiceRequired
	}
	spec, err := constrain.DecodeSpec(constraint)
	return err == nil && spec.Regex != ""
}

// keptMarkers are the special tokens among the markup a request's parsers
// read (tool-call markers with tools, <think> and </think> with
// reasoning): the output text keeps them, where special tokens are
// otherwise dropped. nil when there are none.
func (mt *modelTokenizer) keptMarkers(tools, reasons bool) map[int32]bool {
	var marks []string
	if tools {
		marks = append(marks, mt.tools.Markers()...)
	}
	if reasons {
		marks = append(marks, reasoning.OpenTag, reasoning.CloseTag)
	}
	var keep map[int32]bool
	for _, m := range marks {
		if id, ok := mt.tok.TokenID(m); ok && mt.tok.IsSpecial(id) {
			if keep == nil {
				keep = make(map[int32]bool)
			}
			keep[id] = true
		}
	}
	return keep
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
