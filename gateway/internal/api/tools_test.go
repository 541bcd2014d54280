package api

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

const weatherTool = `{"type":"function","function":{"name":"get_weather","description":"Weather «now»","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}`

// TestToolsDecode: tools, tool_choice, parallel_tool_calls and a history
// with tool calls come through normalised; the tool as the template sees
// it keeps the client's values (and key order) verbatim.
func TestToolsDecode(t *testing.T) {
	body := `{"model":"tiny","tools":[` + weatherTool + `],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,
	"messages":[{"role":"user","content":"Weather?"},
	{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Bern\"}"}}]},
	{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"sunny"}]}]}`
	req, e := decodeRequest(KindChat, []byte(body), 1000, nil)
	if e != nil {
		t.Fatal(e)
	}
	want := []Message{{Role: "user", Content: "Weather?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Bern"}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "call_1"}}
	if !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("messages %+v, want %+v", req.Messages, want)
	}
	tmpl := `{"type": "function", "function": {"name": "get_weather", "description": "Weather «now»", "parameters": {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`
	if len(req.Tools) != 1 || string(req.Tools[0].Template) != tmpl || !req.Tools[0].Strict || req.Tools[0].Name != "get_weather" ||
		req.ToolChoice != (ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}) || req.ParallelToolCalls {
		t.Errorf("tools %+v choice %+v parallel %v", req.Tools, req.ToolChoice, req.ParallelToolCalls)
	}
	var v any
	if err := json.Unmarshal(req.Tools[0].Template, &v); err != nil {
		t.Errorf("template tool is not JSON: %v", err)
	}

	// The Responses API's flat shapes become the same request.
	rbody := `{"model":"tiny","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"tool_choice":"required",
	"input":[{"role":"user","content":"Weather?"},{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},
	{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}`
	rreq, _, e := decodeResponsesRequest([]byte(rbody), 1000, nil, nil)
	if e != nil {
		t.Fatal(e)
	}
	rwant := []Message{{Role: "user", Content: "Weather?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{}`}}},
		{Role: "tool", Content: "sunny", ToolCallID: "call_1"}}
	if !reflect.DeepEqual(rreq.Messages, rwant) || rreq.ToolChoice.Mode != ToolChoiceRequired || !rreq.ParallelToolCalls ||
		string(rreq.Tools[0].Template) != `{"type": "function", "function": {"name": "get_weather", "parameters": {"type":"object"}}}` {
		t.Errorf("responses request %+v", rreq)
	}
}

// TestToolsBadInput: every malformed tools field is a 400 naming it.
func TestToolsBadInput(t *testing.T) {
	h := newTestHandler(&fakeService{})
	tool := func(fn string) string { return `{"type":"function","function":` + fn + `}` }
	for _, tc := range []struct{ extra, param, code string }{
		{`"tools":{}`, "tools", CodeInvalidType},
		{`"tools":[{"type":"custom","custom":{"name":"x"}}]`, "tools[0].type", CodeUnsupportedValue},
		{`"tools":[{"function":{"name":"x"}}]`, "tools[0].type", CodeMissingParameter},
		{`"tools":[` + tool(`{}`) + `]`, "tools[0].function.name", CodeMissingParameter},
		{`"tools":[` + tool(`{"name":"bad name"}`) + `]`, "tools[0].function.name", CodeInvalidValue},
		{`"tools":[` + tool(`{"name":"`+strings.Repeat("x", 65)+`"}`) + `]`, "tools[0].function.name", CodeInvalidValue},
		{`"tools":[` + tool(`{"name":"f","parameters":[]}`) + `]`, "tools[0].function.parameters", CodeInvalidType},
		{`"tools":[` + tool(`{"name":"f","strict":"yes"}`) + `]`, "tools[0].function.strict", CodeInvalidType},
		{`"tools":[` + tool(`{"name":"f","description":3}`) + `]`, "tools[0].function.description", CodeInvalidType},
		{`"tools":[` + tool(`{"name":"f"}`) + `,` + tool(`{"name":"f"}`) + `]`, "tools[1]", CodeInvalidValue},
		{`"tools":[` + strings.TrimSuffix(strings.Repeat(tool(`{"name":"f"}`)+",", 129), ",") + `]`, "tools", CodeArrayTooLong},
		{`"tool_choice":"required"`, "tool_choice", CodeInvalidValue},
		{`"tool_choice":"always"`, "tool_choice", CodeInvalidValue},
		{`"tool_choice":3`, "tool_choice", CodeInvalidType},
		{`"tools":[` + tool(`{"name":"f"}`) + `],"tool_choice":{"type":"function","function":{"name":"g"}}`, "tool_choice.function.name", CodeInvalidValue},
		{`"tools":[` + tool(`{"name":"f"}`) + `],"tool_choice":{"type":"function"}`, "tool_choice.function", CodeMissingParameter},
		{`"tools":[` + tool(`{"name":"f"}`) + `],"tool_choice":{"type":"allowed_tools"}`, "tool_choice.type", CodeUnsupportedValue},
		{`"parallel_tool_calls":"no"`, "parallel_tool_calls", CodeInvalidType},
		{`"functions":[{"name":"f"}]`, "functions", CodeUnsupportedParameter},
	} {
		rec := do(h, "POST", "/v1/chat/completions", chatWith(tc.extra), authJSON())
		checkToolError(t, tc.extra, rec.Code, rec.Body.Bytes(), tc.param, tc.code)
	}
	msg := func(m string) string {
		return `{"model":"tiny","messages":[{"role":"user","content":"hi"},` + m + `]}`
	}
	call := func(args string) string {
		return `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":` + args + `}}]}`
	}
	for _, tc := range []struct{ body, param, code string }{
		{msg(call(`"{\"a\":1}"`)), "", ""}, // valid: content absent beside tool calls
		{msg(call(`{"a":1}`)), "messages[1].tool_calls[0].function.arguments", CodeInvalidType},
		{msg(call(`"not json"`)), "messages[1].tool_calls[0].function.arguments", CodeInvalidValue},
		{msg(call(`"[1]"`)), "messages[1].tool_calls[0].function.arguments", CodeInvalidValue},
		{msg(`{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}`), "messages[1].tool_calls[0].id", CodeMissingParameter},
		{msg(`{"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}`), "messages[1].tool_calls", CodeInvalidValue},
		{msg(`{"role":"tool","content":"x"}`), "messages[1].tool_call_id", CodeMissingParameter},
		{msg(`{"role":"assistant","content":"x","function_call":{"name":"f","arguments":"{}"}}`), "messages[1].function_call", CodeUnsupportedParameter},
	} {
		rec := do(h, "POST", "/v1/chat/completions", tc.body, authJSON())
		if tc.param == "" {
			if rec.Code != 200 {
				t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
			}
			continue
		}
		checkToolError(t, tc.body, rec.Code, rec.Body.Bytes(), tc.param, tc.code)
	}
	for _, tc := range []struct{ body, param, code string }{
		{`{"model":"tiny","input":[{"type":"function_call","call_id":"c","name":"f"}]}`, "input[0].arguments", CodeMissingParameter},
		{`{"model":"tiny","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call.id", CodeMissingParameter},
		{`{"model":"tiny","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice.name", CodeInvalidValue},
		{`{"model":"tiny","input":"x","tools":[{"type":"file_search"}]}`, "tools[0].type", CodeUnsupportedValue},
	} {
		rec := do(h, "POST", "/v1/responses", tc.body, authJSON())
		checkToolError(t, tc.body, rec.Code, rec.Body.Bytes(), tc.param, tc.code)
	}
}

func checkToolError(t *testing.T, what string, status int, body []byte, param, code string) {
	t.Helper()
	var env struct{ Error Error }
	if err := json.Unmarshal(body, &env); err != nil || status != 400 || env.Error.Param != param || env.Error.Code != code {
		t.Errorf("%s: %d %s, want 400 %s %s", what, status, body, param, code)
	}
}

// toolEvents is a generation with some text and two calls, their
// arguments in fragments.
func toolEvents() []Event {
	u := fakeUsage
	return []Event{
		{TextDelta: "Checking."},
		{ToolCalls: []ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather"}, {Index: 0, Arguments: `{"city":`}}},
		{ToolCalls: []ToolCallDelta{{Index: 0, Arguments: ` "Bern"}`}, {Index: 1, ID: "call_b", Name: "get_weather"}, {Index: 1, Arguments: `{"city": "Zug"}`}}},
		{FinishReason: "tool_calls", Usage: &u},
	}
}

var wantCalls = []ToolCall{{ID: "call_a", Name: "get_weather", Arguments: `{"city": "Bern"}`}, {ID: "call_b", Name: "get_weather", Arguments: `{"city": "Zug"}`}}

// TestOpenAIClientToolCalls: openai-go reads tool calls from a response
// and from a stream (its accumulator joins the deltas).
func TestOpenAIClientToolCalls(t *testing.T) {
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) { return newFakeGen(toolEvents()...), nil }}
	client := newClient(t, svc, goodKey)
	params := openai.ChatCompletionNewParams{Model: "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Bern and Zug?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object"}})}}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, msg openai.ChatCompletionMessage, finish string) {
		t.Helper()
		var got []ToolCall
		for _, c := range msg.ToolCalls {
			if c.Type != "function" {
				t.Errorf("%s: call type %q", how, c.Type)
			}
			got = append(got, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		if !reflect.DeepEqual(got, wantCalls) || msg.Content != "Checking." || finish != "tool_calls" {
			t.Errorf("%s: calls %+v content %q finish %q", how, got, msg.Content, finish)
		}
	}
	check("response", resp.Choices[0].Message, resp.Choices[0].FinishReason)
	if svc.lastRequest(t).Tools[0].Name != "get_weather" {
		t.Errorf("request tools %+v", svc.lastRequest(t).Tools)
	}

	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	var firsts int
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			for _, d := range c.Delta.ToolCalls {
				if d.ID != "" {
					firsts++
					if d.Type != "function" || d.Function.Name == "" || d.Function.Arguments != "" {
						t.Errorf("first delta of a call: %s", d.RawJSON())
					}
				} else if d.Function.Name != "" || strings.Contains(d.RawJSON(), `"type"`) {
					t.Errorf("later delta names the call again: %s", d.RawJSON())
				}
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if firsts != 2 {
		t.Errorf("%d first deltas, want 2", firsts)
	}
	check("stream", acc.Choices[0].Message, acc.Choices[0].FinishReason)

	// Only calls: content is null.
	svc.gen = func(*GenerateRequest) (Generation, error) { return newFakeGen(toolEvents()[1:]...), nil }
	rec := do(newTestHandler(svc), "POST", "/v1/chat/completions", chatWith(`"tools":[`+weatherTool+`]`), authJSON())
	if !strings.Contains(rec.Body.String(), `"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a"`) {
		t.Errorf("calls only: %s", rec.Body)
	}
}

// TestResponsesToolCalls: function_call output items, streamed with
// their argument deltas, and the final response equal to the
// non-streamed one.
func TestResponsesToolCalls(t *testing.T) {
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) { return newFakeGen(toolEvents()...), nil }}
	client := newClient(t, svc, goodKey)
	params := responses.ResponseNewParams{Model: "tiny",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather?")},
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object"}, false)}}
	resp, err := client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	calls := func(out []responses.ResponseOutputItemUnion) (text string, got []ToolCall) {
		for _, it := range out {
			switch it.Type {
			case "message":
				text += it.Content[0].Text
			case "function_call":
				got = append(got, ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments.OfString})
			}
		}
		return text, got
	}
	if text, got := calls(resp.Output); text != "Checking." || !reflect.DeepEqual(got, wantCalls) || len(resp.Tools) != 1 {
		t.Errorf("response: %q %+v (%s)", text, got, resp.RawJSON())
	}

	stream := client.Responses.NewStreaming(context.Background(), params)
	var types []string
	args := map[string]string{}
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.function_call_arguments.done":
			if args[ev.ItemID] != ev.Arguments {
				t.Errorf("arguments deltas %q, done %q", args[ev.ItemID], ev.Arguments)
			}
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("events\n%v\nwant\n%v", types, want)
	}
	if text, got := calls(final.Output); text != "Checking." || !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("streamed final response: %q %+v", text, got)
	}
}

// TestToolCallsPerChoice: with n > 1, each choice carries its own tool
// calls (indices from 0 in each), in the answer and in the stream, even
// when their deltas interleave.
func TestToolCallsPerChoice(t *testing.T) {
	u := fakeUsage
	events := []Event{
		{Choice: 1, ToolCalls: []ToolCallDelta{{Index: 0, ID: "call_x_1_0", Name: "get_weather"}, {Index: 0, Arguments: `{"city":`}}},
		{Choice: 0, TextDelta: "Checking."},
		{Choice: 0, ToolCalls: []ToolCallDelta{{Index: 0, ID: "call_a", Name: "get_weather"}, {Index: 0, Arguments: `{"city": "Bern"}`}}},
		{Choice: 1, ToolCalls: []ToolCallDelta{{Index: 0, Arguments: ` "Uri"}`}}},
		{Choice: 0, ToolCalls: []ToolCallDelta{{Index: 1, ID: "call_b", Name: "get_weather"}, {Index: 1, Arguments: `{"city": "Zug"}`}}},
		{Choice: 1, FinishReason: "tool_calls"},
		{Choice: 0, FinishReason: "tool_calls", Usage: &u},
	}
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) { return newFakeGen(events...), nil }}
	client := newClient(t, svc, goodKey)
	params := openai.ChatCompletionNewParams{Model: "tiny", N: openai.Int(2),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object"}})}}
	want := [][]ToolCall{wantCalls, {{ID: "call_x_1_0", Name: "get_weather", Arguments: `{"city": "Uri"}`}}}
	check := func(how string, choices []openai.ChatCompletionChoice) {
		t.Helper()
		if len(choices) != 2 {
			t.Fatalf("%s: %d choices", how, len(choices))
		}
		for k, c := range choices {
			var got []ToolCall
			for _, tc := range c.Message.ToolCalls {
				got = append(got, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			if int(c.Index) != k || !reflect.DeepEqual(got, want[k]) || c.FinishReason != "tool_calls" {
				t.Errorf("%s: choice %d: calls %+v finish %q", how, k, got, c.FinishReason)
			}
		}
	}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if svc.lastRequest(t).N != 2 {
		t.Fatalf("request n = %d", svc.lastRequest(t).N)
	}
	check("response", resp.Choices)
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("stream", acc.Choices)
}
