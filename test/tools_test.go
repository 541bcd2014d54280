package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// renderCase is a conversation a client sent, as the chat template sees
// it, with the prompt_tokens warden reported for it.
type renderCase struct {
	Name         string          `json:"name"`
	Messages     json.RawMessage `json:"messages"`
	Tools        json.RawMessage `json:"tools"`
	PromptTokens int             `json:"prompt_tokens"`
}

// checkRender renders a conversation (JSON, keys in the client's order)
// with the model's template in Python jinja2 set up as transformers sets it
// up (internal/tokenizer/testdata/chat_reference.py), with the tokenizer's
// bos_token as transformers passes it, tokenizes the text with the
// template's special tokens (the conversation holds none) and checks
// warden counted as many prompt tokens.
func checkRender(t *testing.T, dir string, raw []byte) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("python3 is not installed: no reference render")
	}
	var c renderCase
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("render line %s: %v", raw, err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := tok.ChatTemplate()
	vars := map[string]any{"messages": c.Messages, "tools": c.Tools, "documents": nil, "add_generation_prompt": true}
	if bos, ok := tok.BOS(); ok {
		text, err := tok.TokenBytes(bos)
		if err != nil {
			t.Fatal(err)
		}
		vars["bos_token"] = string(text)
	}
	in, err := json.Marshal(map[string]any{"now": "2026-02-03T04:05:06", "templates": map[string]string{"t": tmpl},
		"cases": []any{map[string]any{"template": "t", "vars": vars}}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", filepath.Join("..", "internal", "tokenizer", "testdata", "chat_reference.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference render: %v\n%s", err, stderr.String())
	}
	var res []struct {
		Text  *string `json:"text"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res) != 1 || res[0].Text == nil {
		t.Fatalf("reference render: %v %s", err, out)
	}
	ids, err := tok.EncodeSpecial(*res[0].Text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != c.PromptTokens {
		t.Errorf("%s: warden counted %d prompt tokens, the reference render has %d:\n%s", c.Name, c.PromptTokens, len(ids), *res[0].Text)
	}
	if !strings.Contains(*res[0].Text, "<tool_response>") || !strings.Contains(*res[0].Text, "<tool_call>") {
		t.Errorf("%s: the reference render holds no tool call and result:\n%s", c.Name, *res[0].Text)
	}
}

// checkGoTools: openai-go with tool_choice "required" and one strict
// function (parallel calls off) gets one call whose arguments match the
// schema, and its result round-trips into the next prompt.
func checkGoTools(t *testing.T, info upInfo, dir string) {
	t.Helper()
	client := goCallsClient(t, info)
	params := shared.FunctionParameters{
		"type":                 "object",
		"properties":           map[string]any{"a": map[string]any{"type": "integer", "minimum": 0, "maximum": 99}, "op": map[string]any{"enum": []string{"add", "mul"}}},
		"required":             []string{"a", "op"},
		"additionalProperties": false,
	}
	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "calc", Description: openai.String("Compute."),
		Parameters: params, Strict: openai.Bool(true)})
	question := openai.UserMessage("Compute something.")
	req := openai.ChatCompletionNewParams{Model: harness.ModelTiny, Messages: []openai.ChatCompletionMessageParamUnion{question},
		Tools: []openai.ChatCompletionToolUnionParam{tool}, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		ParallelToolCalls: openai.Bool(false), MaxTokens: openai.Int(256), Temperature: openai.Float(0)}
	resp, err := client.Chat.Completions.New(context.Background(), req)
	if err != nil {
		t.Fatalf("openai-go chat with tools: %v", err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "calc" ||
		!strings.HasPrefix(ch.Message.ToolCalls[0].ID, "call_") {
		t.Fatalf("openai-go chat with tools: %s", resp.RawJSON())
	}
	call := ch.Message.ToolCalls[0]
	var args struct {
		A  *int    `json:"a"`
		Op *string `json:"op"`
	}
	dec := json.NewDecoder(strings.NewReader(call.Function.Arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil || args.A == nil || *args.A < 0 || *args.A > 99 || args.Op == nil || (*args.Op != "add" && *args.Op != "mul") {
		t.Fatalf("arguments %s do not match the schema: %v", call.Function.Arguments, err)
	}
	result := `{"value": 42}`
	req.Messages = append(req.Messages, ch.Message.ToParam(), openai.ToolMessage(result, call.ID))
	req.ToolChoice, req.MaxTokens = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}, openai.Int(4)
	next, err := client.Chat.Completions.New(context.Background(), req)
	if err != nil {
		t.Fatalf("openai-go tool result: %v", err)
	}
	// tool_choice "none": the template sees no tools, only the history.
	var argsObj json.RawMessage = json.RawMessage(call.Function.Arguments)
	msgs, _ := json.Marshal([]any{
		map[string]any{"role": "user", "content": "Compute something."},
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": call.ID, "type": "function",
			"function": map[string]any{"name": "calc", "arguments": argsObj}}}},
		map[string]any{"role": "tool", "content": result, "tool_call_id": call.ID},
	})
	rc, _ := json.Marshal(renderCase{Name: "openai-go chat with tools", Messages: msgs, Tools: json.RawMessage("null"), PromptTokens: int(next.Usage.PromptTokens)})
	checkRender(t, dir, rc)
}

// goCallsClient is an openai-go client of a `warden up`.
func goCallsClient(t *testing.T, info upInfo) openai.Client {
	t.Helper()
	return openai.NewClient(option.WithBaseURL(info.baseURL), option.WithAPIKey(info.key),
		option.WithHTTPClient(upClient(t, info)), option.WithMaxRetries(0))
}

// goCall is a tool call less its request-bound ID.
type goCall struct{ Name, Arguments string }

func goCalls(m openai.ChatCompletionMessage) []goCall {
	var out []goCall
	for _, c := range m.ToolCalls {
		out = append(out, goCall{c.Function.Name, c.Function.Arguments})
	}
	return out
}

// checkGoToolsStream: openai-go streams a chat completion whose calls
// (tool_choice "required", parallel calls allowed, temperature 0, fixed
// seed) arrive as deltas, no content delta carries tool-call markup, and
// the accumulated answer equals the non-streamed one; on the single
// worker, n: 3 with tools gives three choices with those same calls, each
// with its own IDs.
func checkGoToolsStream(t *testing.T, pd, single upInfo) {
	t.Helper()
	tool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "calc", Description: openai.String("Compute."),
		Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer", "minimum": 0, "maximum": 99}},
			"required": []string{"a"}, "additionalProperties": false}, Strict: openai.Bool(true)})
	req := openai.ChatCompletionNewParams{Model: harness.ModelTiny, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Compute twice.")},
		Tools: []openai.ChatCompletionToolUnionParam{tool}, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		MaxTokens: openai.Int(96), Temperature: openai.Float(0), Seed: openai.Int(11)}
	client := goCallsClient(t, pd)
	resp, err := client.Chat.Completions.New(context.Background(), req)
	if err != nil {
		t.Fatalf("openai-go chat with tools: %v", err)
	}
	want := resp.Choices[0]
	if len(want.Message.ToolCalls) == 0 || want.FinishReason != "tool_calls" {
		t.Fatalf("non-streamed answer has no calls: %s", resp.RawJSON())
	}
	stream := client.Chat.Completions.NewStreaming(context.Background(), req)
	var acc openai.ChatCompletionAccumulator
	deltas := 0
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		for _, c := range chunk.Choices {
			if strings.Contains(c.Delta.Content, "<tool_call") || strings.Contains(c.Delta.Content, "</tool_call") {
				t.Errorf("content delta %q leaks tool-call markup", c.Delta.Content)
			}
			deltas += len(c.Delta.ToolCalls)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go streamed chat with tools: %v", err)
	}
	got := acc.Choices[0]
	if !slices.Equal(goCalls(got.Message), goCalls(want.Message)) || got.Message.Content != want.Message.Content ||
		got.FinishReason != want.FinishReason || deltas < 2*len(want.Message.ToolCalls) {
		t.Fatalf("streamed %q %+v %s (%d deltas), non-streamed %q %+v %s", got.Message.Content, goCalls(got.Message), got.FinishReason, deltas,
			want.Message.Content, goCalls(want.Message), want.FinishReason)
	}

	req.N = openai.Int(3)
	singleClient := goCallsClient(t, single)
	resp, err = singleClient.Chat.Completions.New(context.Background(), req)
	if err != nil {
		t.Fatalf("openai-go n: 3 with tools: %v", err)
	}
	ids := map[string]bool{}
	for k, c := range resp.Choices {
		for _, tc := range c.Message.ToolCalls {
			ids[tc.ID] = true
		}
		if !slices.Equal(goCalls(c.Message), goCalls(want.Message)) || c.FinishReason != "tool_calls" {
			t.Errorf("n: 3 choice %d: %+v %s, want %+v", k, goCalls(c.Message), c.FinishReason, goCalls(want.Message))
		}
	}
	if len(resp.Choices) != 3 || len(ids) != 3*len(want.Message.ToolCalls) {
		t.Errorf("n: 3 with tools: %d choices, %d distinct call IDs: %s", len(resp.Choices), len(ids), resp.RawJSON())
	}
}
