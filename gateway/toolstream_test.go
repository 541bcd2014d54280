package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// toolReply is a Hermes-format answer: text, then two parallel calls.
const toolReply = "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": [1, 2]}}\n</tool_call>\n" +
	"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": \"}\"}}\n</tool_call>"

// toolCallOut is a call as a client sees it, less its request-bound ID.
type toolCallOut struct{ Name, Arguments string }

var toolReplyCalls = []toolCallOut{{"get_weather", `{"city": "Zürich", "days": [1, 2]}`}, {"add", `{"a": 1, "b": "}"}`}}

// hermesToolsWorker starts a both worker whose chat template uses the
// Hermes tool format and whose reply is toolReply (3 byte tokens an event).
func hermesToolsWorker(t *testing.T, tg *testGateway) {
	t.Helper()
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.assets.TokenizerConfigJson = hermesTokenizerConfig(t)
	w.reply = toolReply
	w.start()
}

// hermesTokenizerConfig is the tiny model's tokenizer_config.json with a
// chat template that offers tools in the Hermes format (and renders
// nothing of them but a line saying how to call them).
func hermesTokenizerConfig(t testing.TB) []byte {
	t.Helper()
	return tokenizerConfigWith(t, "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"+
		"{%- if tools %}Call tools as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>\n{% endif %}assistant: ")
}

// tokenizerConfigWith is the tiny model's tokenizer_config.json with
// another chat template.
func tokenizerConfigWith(t testing.TB, template string) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(tokFiles.configJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = template
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func toolParams() chatCompletionRequest {
	fn := func(name string) chatTool { return functionTool(name, map[string]any{"type": "object"}) }
	return chatCompletionRequest{Model: "tiny", Messages: []chatMessage{userMessage("Weather?")},
		Tools: []chatTool{fn("get_weather"), fn("add")}, MaxTokens: new(int64(256)),
		Temperature: new(0.0), Seed: new(int64(7))}
}

// TestToolCallsStream: a streamed chat completion carries the text before
// the calls without any of their markup, each call's first delta (index,
// ID, name) before its arguments, the arguments in several fragments as
// the tokens arrive, and reassembles into the non-streamed answer.
func TestToolCallsStream(t *testing.T) {
	tg := startGateway(t, testConfig())
	hermesToolsWorker(t, tg)
	client := tg.api()
	ctx := context.Background()

	resp, err := client.chat(ctx, toolParams())
	if err != nil {
		t.Fatal(err)
	}
	want := resp.Choices[0]
	var wantCalls []toolCallOut
	for _, c := range want.Message.ToolCalls {
		wantCalls = append(wantCalls, toolCallOut{c.Function.Name, c.Function.Arguments})
	}
	if want.Message.Content != "Let me check." || want.FinishReason != "tool_calls" || !equalCalls(wantCalls, toolReplyCalls) {
		t.Fatalf("non-streamed answer: %s", resp.RawJSON())
	}

	stream := client.chatStream(ctx, toolParams())
	var acc chatAccumulator
	fragments := map[int64]int{} // argument deltas of each call
	for stream.Next() {
		chunk := stream.Current()
		acc.add(chunk)
		for _, c := range chunk.Choices {
			if strings.Contains(c.Delta.Content, "<") {
				t.Errorf("content delta %q leaks markup", c.Delta.Content)
			}
			for _, d := range c.Delta.ToolCalls {
				switch {
				case d.ID != "":
					if d.Index != int64(len(fragments)) || d.Function.Name == "" || d.Function.Arguments != "" {
						t.Errorf("first delta of a call: %+v", d)
					}
					fragments[d.Index] = 0
				case d.Index != int64(len(fragments)-1) || d.Function.Name != "":
					t.Errorf("argument delta out of order: %+v", d)
				default:
					fragments[d.Index]++
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0]
	var gotCalls []toolCallOut
	for _, c := range got.Message.ToolCalls {
		gotCalls = append(gotCalls, toolCallOut{c.Function.Name, c.Function.Arguments})
		if !strings.HasPrefix(c.ID, "call_") {
			t.Errorf("call ID %q", c.ID)
		}
	}
	if got.Message.Content != want.Message.Content || got.FinishReason != "tool_calls" || !equalCalls(gotCalls, wantCalls) {
		t.Fatalf("streamed %q/%s %+v, non-streamed %q %+v", got.Message.Content, got.FinishReason, gotCalls, want.Message.Content, wantCalls)
	}
	// 3 bytes an event: each call's arguments come in several fragments.
	for i, n := range fragments {
		if n < len(toolReplyCalls[i].Arguments)/3 {
			t.Errorf("call %d: %d argument fragments; its arguments were not streamed", i, n)
		}
	}
}

// TestResponsesToolCallsStream: the Responses API streams each call as
// output_item.added, its argument deltas, function_call_arguments.done and
// output_item.done, and equals the non-streamed response.
func TestResponsesToolCallsStream(t *testing.T) {
	tg := startGateway(t, testConfig())
	hermesToolsWorker(t, tg)
	client := tg.api()
	ctx := context.Background()
	params := responseRequest{Model: "tiny", Input: "Weather?",
		Tools: []responseTool{responseFunction("get_weather", map[string]any{"type": "object"}),
			responseFunction("add", map[string]any{"type": "object"})},
		Temperature: new(0.0)}
	items := func(out []responseItem) (text string, calls []toolCallOut) {
		for _, it := range out {
			switch it.Type {
			case "message":
				text += it.Content[0].Text
			case "function_call":
				calls = append(calls, toolCallOut{it.Name, it.Arguments})
			}
		}
		return text, calls
	}
	resp, err := client.createResponse(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if text, calls := items(resp.Output); text != "Let me check." || !equalCalls(calls, toolReplyCalls) {
		t.Fatalf("non-streamed response: %s", resp.RawJSON())
	}

	stream := client.responseStream(ctx, params)
	args := map[string]string{}
	deltas := map[string]int{}
	var opened []string // function_call items, in order
	var final responseObject
	var finalJSON string
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			if strings.Contains(ev.Delta, "<") {
				t.Errorf("text delta %q leaks markup", ev.Delta)
			}
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				if ev.Item.Name == "" || ev.Item.Arguments != "" {
					t.Errorf("added function_call item: %s", ev.RawJSON())
				}
				opened = append(opened, ev.Item.ID)
			}
		case "response.function_call_arguments.delta":
			if len(opened) == 0 || ev.ItemID != opened[len(opened)-1] {
				t.Errorf("arguments delta of item %s, open %v", ev.ItemID, opened)
			}
			args[ev.ItemID] += ev.Delta
			deltas[ev.ItemID]++
		case "response.function_call_arguments.done":
			if args[ev.ItemID] != ev.Arguments {
				t.Errorf("arguments deltas %q, done %q", args[ev.ItemID], ev.Arguments)
			}
		case "response.output_item.done":
			if ev.Item.Type == "function_call" && ev.Item.Arguments != args[ev.Item.ID] {
				t.Errorf("done item %s, deltas %q", ev.RawJSON(), args[ev.Item.ID])
			}
		case "response.completed":
			final, finalJSON = ev.Response, ev.RawJSON()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text, calls := items(final.Output); text != "Let me check." || !equalCalls(calls, toolReplyCalls) || len(opened) != 2 {
		t.Fatalf("streamed response: %s", finalJSON)
	}
	for i, id := range opened {
		if deltas[id] < len(toolReplyCalls[i].Arguments)/3 {
			t.Errorf("item %s: %d argument deltas; its arguments were not streamed", id, deltas[id])
		}
	}
}

func equalCalls(a, b []toolCallOut) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// thinkingWorker starts a both worker whose chat template reasons in
// <think> (Qwen3 style, with tools in the Hermes format and the
// enable_thinking switch) and whose reply thinks, says something and
// calls tools (3 byte tokens an event, so the tags are cut everywhere).
func thinkingWorker(t *testing.T, tg *testGateway) {
	t.Helper()
	w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
	w.assets.TokenizerConfigJson = tokenizerConfigWith(t, "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"+
		"{%- if tools %}Call tools as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>\n{% endif %}assistant: "+
		"{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}")
	w.reply = "<think>\nWeather first, then the sum: ü.\n</think>\n\n" + toolReply
	w.start()
}

// TestReasoningContent: a reasoning model's thinking is reasoning_content,
// apart from the content and the tool calls parsed after it, in the
// non-streamed answer, in the stream's deltas (whose cuts fall inside the
// tags) and as the Responses API's reasoning item;
// chat_template_kwargs.enable_thinking reaches the template.
func TestReasoningContent(t *testing.T) {
	tg := startGateway(t, testConfig())
	thinkingWorker(t, tg)
	client := tg.api()
	ctx := context.Background()
	const thought = "Weather first, then the sum: ü."

	resp, err := client.chat(ctx, toolParams())
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Choices[0].Message
	var calls []toolCallOut
	for _, c := range m.ToolCalls {
		calls = append(calls, toolCallOut{c.Function.Name, c.Function.Arguments})
	}
	if m.ReasoningContent != thought || m.Content != "Let me check." || !equalCalls(calls, toolReplyCalls) {
		t.Fatalf("non-streamed answer: %s", resp.RawJSON())
	}

	stream := client.chatStream(ctx, toolParams())
	var acc chatAccumulator
	var reasoning strings.Builder
	deltas := 0
	for stream.Next() {
		chunk := stream.Current()
		acc.add(chunk)
		for _, c := range chunk.Choices {
			if r := c.Delta.ReasoningContent; r != "" {
				reasoning.WriteString(r)
				deltas++
			}
			if strings.Contains(c.Delta.Content, "think") {
				t.Errorf("content delta %q leaks the reasoning", c.Delta.Content)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	calls = nil
	for _, c := range acc.Choices[0].Message.ToolCalls {
		calls = append(calls, toolCallOut{c.Function.Name, c.Function.Arguments})
	}
	if reasoning.String() != thought || deltas < 5 || acc.Choices[0].Message.Content != "Let me check." || !equalCalls(calls, toolReplyCalls) {
		t.Fatalf("streamed: reasoning %q in %d deltas, content %q, calls %+v", reasoning.String(), deltas, acc.Choices[0].Message.Content, calls)
	}

	r, err := client.createResponse(ctx, responseRequest{Model: "tiny", Input: "Weather?"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output[0].Type != "reasoning" || r.Output[0].Content[0].Text != thought || r.outputText() != toolReply {
		t.Fatalf("response: %s", r.RawJSON())
	}

	// enable_thinking false renders the empty thinking into the prompt.
	on := toolParams()
	off := toolParams()
	off.Extra = map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}
	a, err := client.chat(ctx, on)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.chat(ctx, off)
	if err != nil {
		t.Fatal(err)
	}
	if b.Usage.PromptTokens <= a.Usage.PromptTokens {
		t.Errorf("enable_thinking false: %d prompt tokens, default %d", b.Usage.PromptTokens, a.Usage.PromptTokens)
	}
}

// TestReasoningStartsInThinking: a DeepSeek-R1 distill's template opens
// <think> in the prompt; its output is reasoning up to </think>. An
// output constrained from its first token (structured output) holds no
// thinking: it is all content.
func TestReasoningStartsInThinking(t *testing.T) {
	r1 := func(reply string) *testGateway {
		tg := startGateway(t, testConfig())
		w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
		w.assets.TokenizerConfigJson = tokenizerConfigWith(t,
			"{%- for m in messages %}<｜User｜>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}")
		w.reply = reply
		w.start()
		return tg
	}
	tg := r1("Okay, so 2+2 </thin is 4.\n</think>\n\nFour.")
	resp, err := tg.api().chat(context.Background(), chatCompletionRequest{Model: "tiny",
		Messages: []chatMessage{userMessage("2+2?")}})
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Choices[0].Message; m.ReasoningContent != "Okay, so 2+2 </thin is 4." || m.Content != "Four." {
		t.Fatalf("answer: %s", resp.RawJSON())
	}
	resp, err = r1(`{"answer": 4}`).api().chat(context.Background(), chatCompletionRequest{Model: "tiny",
		Messages:       []chatMessage{userMessage("2+2?")},
		ResponseFormat: &responseFormat{Type: "json_object"}})
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Choices[0].Message; m.ReasoningContent != "" || m.Content != `{"answer": 4}` {
		t.Fatalf("structured answer: %s", resp.RawJSON())
	}
}

// mistralTemplate renders tool calls and results as Mistral's templates
// do, and fails, as they do, on a call ID that is not 9 letters and
// digits.
const mistralTemplate = `{%- for m in messages %}
{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls %}[TOOL_CALLS][
{%- for c in m.tool_calls %}{%- if c.id is not string or c.id|length != 9 %}{{ raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{% endif %}{"name": "{{ c.function.name }}", "id": "{{ c.id }}"}{% endfor %}]</s>
{%- elif m.role == 'tool' %}{%- if m.tool_call_id|length != 9 %}{{ raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}{% endif %}[TOOL_RESULTS]{"call_id": "{{ m.tool_call_id }}", "content": {{ m.content|tojson }}}[/TOOL_RESULTS]
{%- else %}{{ m.content }}{% endif %}
{%- endfor %}{% if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}`

// TestMistralToolCalls: a Mistral template's calls ([TOOL_CALLS] in both
// forms) parse streamed and not, with 9-character call IDs that its
// template takes back in the next turn, as it takes an OpenAI-style ID
// (mapped to 9 characters).
func TestMistralToolCalls(t *testing.T) {
	for name, reply := range map[string]string{
		"array": "Let me check. [TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": [1, 2]}}, " +
			"{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": \"}\"}}]",
		"named": "Let me check. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Zürich\", \"days\": [1, 2]}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": \"}\"}",
	} {
		t.Run(name, func(t *testing.T) {
			tg := startGateway(t, testConfig())
			w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil)
			w.assets.TokenizerConfigJson = tokenizerConfigWith(t, mistralTemplate)
			w.reply = reply
			w.start()
			client := tg.api()
			ctx := context.Background()
			resp, err := client.chat(ctx, toolParams())
			if err != nil {
				t.Fatal(err)
			}
			m := resp.Choices[0].Message
			var calls []toolCallOut
			for _, c := range m.ToolCalls {
				calls = append(calls, toolCallOut{c.Function.Name, c.Function.Arguments})
				if len(c.ID) != 9 || strings.Trim(c.ID, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
					t.Errorf("call ID %q is not 9 letters and digits", c.ID)
				}
			}
			if m.Content != "Let me check." || resp.Choices[0].FinishReason != "tool_calls" || !equalCalls(calls, toolReplyCalls) {
				t.Fatalf("non-streamed: %s", resp.RawJSON())
			}
			stream := client.chatStream(ctx, toolParams())
			var acc chatAccumulator
			for stream.Next() {
				acc.add(stream.Current())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			got := acc.Choices[0].Message
			calls = nil
			for _, c := range got.ToolCalls {
				calls = append(calls, toolCallOut{c.Function.Name, c.Function.Arguments})
			}
			if got.Content != "Let me check." || !equalCalls(calls, toolReplyCalls) {
				t.Fatalf("streamed %q %+v", got.Content, calls)
			}
			// The next turn: the calls and their results, with our IDs and
			// with another provider's.
			for _, id := range []string{m.ToolCalls[0].ID, "call_abc123_0"} {
				next := toolParams()
				next.Messages = append(next.Messages,
					chatMessage{Role: "assistant", ToolCalls: []toolCall{{ID: id, Type: "function",
						Function: functionCall{Name: "get_weather", Arguments: `{"city": "Bern"}`}}}},
					toolMessage("sunny", id))
				if _, err := client.chat(ctx, next); err != nil {
					t.Errorf("next turn with call ID %q: %v", id, err)
				}
			}
		})
	}
}
