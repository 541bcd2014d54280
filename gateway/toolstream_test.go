package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

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
	var cfg map[string]any
	if err := json.Unmarshal(tokFiles.configJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}" +
		"{%- if tools %}Call tools as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>\n{% endif %}assistant: "
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func toolParams() openai.ChatCompletionNewParams {
	fn := func(name string) openai.ChatCompletionToolUnionParam {
		return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: name, Parameters: shared.FunctionParameters{"type": "object"}})
	}
	return openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{fn("get_weather"), fn("add")}, MaxTokens: openai.Int(256),
		Temperature: openai.Float(0), Seed: openai.Int(7)}
}

// TestToolCallsStream: with openai-go, a streamed chat completion carries
// the text before the calls without any of their markup, each call's
// first delta (index, ID, name) before its arguments, the arguments in
// several fragments as the tokens arrive, and reassembles into the
// non-streamed answer.
func TestToolCallsStream(t *testing.T) {
	tg := startGateway(t, testConfig())
	hermesToolsWorker(t, tg)
	client := tg.openai()
	ctx := context.Background()

	resp, err := client.Chat.Completions.New(ctx, toolParams())
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

	stream := client.Chat.Completions.NewStreaming(ctx, toolParams())
	var acc openai.ChatCompletionAccumulator
	fragments := map[int64]int{} // argument deltas of each call
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			if strings.Contains(c.Delta.Content, "<") {
				t.Errorf("content delta %q leaks markup", c.Delta.Content)
			}
			for _, d := range c.Delta.ToolCalls {
				switch {
				case d.ID != "":
					if d.Index != int64(len(fragments)) || d.Function.Name == "" || d.Function.Arguments != "" {
						t.Errorf("first delta of a call: %s", d.RawJSON())
					}
					fragments[d.Index] = 0
				case d.Index != int64(len(fragments)-1) || d.Function.Name != "":
					t.Errorf("argument delta out of order: %s", d.RawJSON())
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
	client := tg.openai()
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather?")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object"}, false),
			responses.ToolParamOfFunction("add", map[string]any{"type": "object"}, false)},
		Temperature: openai.Float(0)}
	items := func(out []responses.ResponseOutputItemUnion) (text string, calls []toolCallOut) {
		for _, it := range out {
			switch it.Type {
			case "message":
				text += it.Content[0].Text
			case "function_call":
				calls = append(calls, toolCallOut{it.Name, it.Arguments.OfString})
			}
		}
		return text, calls
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if text, calls := items(resp.Output); text != "Let me check." || !equalCalls(calls, toolReplyCalls) {
		t.Fatalf("non-streamed response: %s", resp.RawJSON())
	}

	stream := client.Responses.NewStreaming(ctx, params)
	args := map[string]string{}
	deltas := map[string]int{}
	var opened []string // function_call items, in order
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			if strings.Contains(ev.Delta, "<") {
				t.Errorf("text delta %q leaks markup", ev.Delta)
			}
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				if ev.Item.Name == "" || ev.Item.Arguments.OfString != "" {
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
			if ev.Item.Type == "function_call" && ev.Item.Arguments.OfString != args[ev.Item.ID] {
				t.Errorf("done item %s, deltas %q", ev.RawJSON(), args[ev.Item.ID])
			}
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text, calls := items(final.Output); text != "Let me check." || !equalCalls(calls, toolReplyCalls) || len(opened) != 2 {
		t.Fatalf("streamed response: %s", final.RawJSON())
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
