package api

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// TestThinkingSwitches: chat_template_kwargs.enable_thinking and
// reasoning_effort (chat) and reasoning.effort (Responses) set the
// template's switch; anything else about them is a 400 naming the field.
func TestThinkingSwitches(t *testing.T) {
	svc := &fakeService{}
	h := newTestHandler(svc)
	on, off := true, false
	for _, tc := range []struct {
		path, body string
		want       *bool
	}{
		{"/v1/chat/completions", chatWith(`"chat_template_kwargs":{"enable_thinking":false}`), &off},
		{"/v1/chat/completions", chatWith(`"chat_template_kwargs":{"enable_thinking":true}`), &on},
		{"/v1/chat/completions", chatWith(`"chat_template_kwargs":{}`), nil},
		{"/v1/chat/completions", chatWith(`"reasoning_effort":"none"`), &off},
		{"/v1/chat/completions", chatWith(`"reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":true}`), &on},
		{"/v1/chat/completions", chatWith(`"reasoning_effort":null`), nil},
		{"/v1/responses", `{"model":"tiny","input":"hi","reasoning":{"effort":"none","summary":"auto"}}`, &off},
		{"/v1/responses", `{"model":"tiny","input":"hi","reasoning":{"effort":"high"}}`, &on},
		{"/v1/responses", `{"model":"tiny","input":"hi","reasoning":{}}`, nil},
		{"/v1/responses", `{"model":"tiny","input":"hi","reasoning":{"summary":"auto"},"include":["reasoning.encrypted_content"],"store":false}`, nil},
	} {
		if rec := do(h, "POST", tc.path, tc.body, authJSON()); rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.body, rec.Code, rec.Body.String())
		}
		got := svc.lastRequest(t).EnableThinking
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: EnableThinking %v, want %v", tc.body, got, tc.want)
		}
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"4","reasoning_content":"2+2"},{"role":"user","content":"ok"}]}`
	if rec := do(h, "POST", "/v1/chat/completions", body, authJSON()); rec.Code != 200 || svc.lastRequest(t).Messages[1].ReasoningContent != "2+2" {
		t.Fatalf("reasoning_content in the history: %d %+v", rec.Code, svc.lastRequest(t).Messages)
	}
	// Responses: a reasoning item sent back is the reasoning of the
	// assistant message after it.
	body = `{"model":"tiny","input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"2+2"}]},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"4"}]},{"type":"reasoning","summary":[{"type":"summary_text","text":"call"}]},` +
		`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f"}]}`
	if rec := do(h, "POST", "/v1/responses", body, authJSON()); rec.Code != 200 {
		t.Fatalf("reasoning items: %d %s", rec.Code, rec.Body.String())
	}
	if ms := svc.lastRequest(t).Messages; len(ms) != 4 || ms[1].ReasoningContent != "2+2" || ms[1].Content != "4" ||
		ms[2].ReasoningContent != "call" || len(ms[2].ToolCalls) != 1 || ms[3].Role != "tool" {
		t.Fatalf("reasoning items became %+v", ms)
	}
	// Responses: vLLM's structured-output extensions, not chat's
	// response_format, and not together with text.format.
	if rec := do(h, "POST", "/v1/responses", `{"model":"tiny","input":"hi","structured_outputs":{"regex":"<think>[a-z]+</think>[a-z]+"}}`, authJSON()); rec.Code != 200 ||
		svc.lastRequest(t).ConstraintParam != "structured_outputs" {
		t.Fatalf("structured_outputs on responses: %d %s", rec.Code, rec.Body.String())
	}
	for _, tc := range []struct{ body, param string }{
		{`{"model":"tiny","input":"hi","response_format":{"type":"json_object"}}`, "response_format"},
		{`{"model":"tiny","input":"hi","guided_regex":"a+","text":{"format":{"type":"json_object"}}}`, "text.format"},
	} {
		rec := do(h, "POST", "/v1/responses", tc.body, authJSON())
		if _, _, param, _ := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 400 || param != tc.param {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body.String())
		}
	}
	for _, tc := range []struct{ body, param, code string }{
		{`{"model":"tiny","messages":[{"role":"assistant","content":"4","reasoning_content":4}]}`, "messages[0].reasoning_content", CodeInvalidType},
		{chatWith(`"chat_template_kwargs":{"thinking":true}`), "chat_template_kwargs.thinking", CodeUnsupportedParameter},
		{chatWith(`"chat_template_kwargs":{"enable_thinking":"yes"}`), "chat_template_kwargs.enable_thinking", CodeInvalidType},
		{chatWith(`"chat_template_kwargs":[]`), "chat_template_kwargs", CodeInvalidType},
		{chatWith(`"reasoning_effort":"max"`), "reasoning_effort", CodeInvalidValue},
		{chatWith(`"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}`), "reasoning_effort", CodeInvalidValue},
	} {
		rec := do(h, "POST", "/v1/chat/completions", tc.body, authJSON())
		_, code, param, _ := decodeEnvelope(t, rec.Body.Bytes())
		if rec.Code != 400 || code != tc.code || param != tc.param {
			t.Errorf("%s: %d %s/%s, want %s/%s", tc.body, rec.Code, code, param, tc.code, tc.param)
		}
	}
}

// reasoningEvents is a generation that reasons, answers and calls a tool.
func reasoningEvents() []Event {
	u := fakeUsage
	return []Event{
		{ReasoningDelta: "Let me"}, {ReasoningDelta: " think ü."},
		{TextDelta: "It is 4."},
		{ToolCalls: []ToolCallDelta{{Index: 0, ID: "call_1", Name: "add"}, {Index: 0, Arguments: `{"a": 2}`}}},
		{FinishReason: "tool_calls", Usage: &u},
	}
}

// TestReasoningContent: with openai-go, reasoning is reasoning_content
// beside the content and tool calls, whole and in stream deltas, and a
// reasoning item before the message and call in the Responses API,
// whole and streamed.
func TestReasoningContent(t *testing.T) {
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) { return newFakeGen(reasoningEvents()...), nil }}
	client := newClient(t, svc, goodKey)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("2+2?")}}

	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		ReasoningContent string `json:"reasoning_content"`
	}
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.RawJSON()), &msg); err != nil {
		t.Fatal(err)
	}
	m := resp.Choices[0].Message
	if msg.ReasoningContent != "Let me think ü." || m.Content != "It is 4." || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"a": 2}` {
		t.Fatalf("message %s", m.RawJSON())
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var reasoning, content strings.Builder
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			var d struct {
				ReasoningContent *string `json:"reasoning_content"`
			}
			if err := json.Unmarshal([]byte(c.Delta.RawJSON()), &d); err != nil {
				t.Fatal(err)
			}
			if d.ReasoningContent != nil {
				if c.Delta.Content != "" {
					t.Fatalf("reasoning and content in one delta: %s", c.Delta.RawJSON())
				}
				reasoning.WriteString(*d.ReasoningContent)
			}
			content.WriteString(c.Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if reasoning.String() != "Let me think ü." || content.String() != "It is 4." {
		t.Fatalf("streamed reasoning %q, content %q", reasoning.String(), content.String())
	}

	rp := responses.ResponseNewParams{Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("2+2?")}}
	r, err := client.Responses.New(ctx, rp)
	if err != nil {
		t.Fatal(err)
	}
	checkReasoningOutput(t, r)
	rs := client.Responses.NewStreaming(ctx, rp)
	var deltas strings.Builder
	var final *responses.Response
	for rs.Next() {
		switch ev := rs.Current(); ev.Type {
		case "response.reasoning_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			final = &ev.Response
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas.String() != "Let me think ü." || final == nil {
		t.Fatalf("reasoning deltas %q, final %v", deltas.String(), final)
	}
	checkReasoningOutput(t, final)

	// Asked for a summary (as the AI SDK's reasoningSummary asks), the
	// reasoning is the summary too, streamed as summary events between
	// the item's added and done events.
	rp.Reasoning = shared.ReasoningParam{Summary: shared.ReasoningSummaryAuto}
	r, err = client.Responses.New(ctx, rp)
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Output[0].AsReasoning().Summary; len(s) != 1 || s[0].Text != "Let me think ü." || s[0].Type != "summary_text" {
		t.Fatalf("summary: %s", r.RawJSON())
	}
	rs = client.Responses.NewStreaming(ctx, rp)
	var order []string
	var summary strings.Builder
	for rs.Next() {
		switch ev := rs.Current(); ev.Type {
		case "response.reasoning_summary_text.delta":
			summary.WriteString(ev.Delta)
			if len(order) == 0 || order[len(order)-1] != ev.Type {
				order = append(order, ev.Type)
			}
		case "response.output_item.added", "response.output_item.done":
			order = append(order, ev.Type+":"+ev.Item.Type)
		case "response.reasoning_summary_part.added", "response.reasoning_summary_part.done", "response.reasoning_summary_text.done":
			order = append(order, ev.Type)
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.output_item.added:reasoning", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done:reasoning"}
	if summary.String() != "Let me think ü." || len(order) < len(want) || !slices.Equal(order[:len(want)], want) {
		t.Fatalf("summary stream %q: %v", summary.String(), order)
	}
}

func checkReasoningOutput(t *testing.T, r *responses.Response) {
	t.Helper()
	if len(r.Output) != 3 {
		t.Fatalf("output %s", r.RawJSON())
	}
	rs, msg, call := r.Output[0].AsReasoning(), r.Output[1].AsMessage(), r.Output[2].AsFunctionCall()
	if r.Output[0].Type != "reasoning" || len(rs.Content) != 1 || rs.Content[0].Text != "Let me think ü." || rs.Content[0].Type != "reasoning_text" ||
		len(rs.Summary) != 0 || msg.Content[0].Text != "It is 4." || call.Name != "add" || r.OutputText() != "It is 4." {
		t.Fatalf("output %s", r.RawJSON())
	}
}
