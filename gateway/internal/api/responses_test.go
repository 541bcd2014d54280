package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
)

func newResponseParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           "tiny",
		Instructions:    openai.String("Be brief."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello.")},
		MaxOutputTokens: openai.Int(32),
		Temperature:     openai.Float(0.5),
	}
}

func TestOpenAIClientResponses(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	resp, err := client.Responses.New(context.Background(), newResponseParams())
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != fakeText || resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") ||
		resp.Model != "tiny" || resp.Instructions.OfString != "Be brief." || resp.MaxOutputTokens != 32 || resp.Temperature != 0.5 || !strings.Contains(resp.RawJSON(), `"store":false`) {
		t.Errorf("response = %+v", resp)
	}
	checkUsage(t, resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.Usage.TotalTokens)
	req := svc.lastRequest(t)
	want := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say hello."}}
	if !reflect.DeepEqual(req.Messages, want) || req.Kind != KindChat || *req.MaxTokens != 32 || req.Stream {
		t.Errorf("normalised request = %+v", req)
	}
}

func TestOpenAIClientResponsesItems(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	p := newResponseParams()
	p.Instructions = param.Opt[string]{}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Hi", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage("Hello!", responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
			{OfInputText: &responses.ResponseInputTextParam{Text: "Again, "}},
			{OfInputText: &responses.ResponseInputTextParam{Text: "please."}},
		}, responses.EasyInputMessageRoleUser),
	}}
	if _, err := client.Responses.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	want := []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "Again, please."}}
	if got := svc.lastRequest(t).Messages; !reflect.DeepEqual(got, want) {
		t.Errorf("messages = %+v, want %+v", got, want)
	}
}

func TestOpenAIClientResponsesStream(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	stream := client.Responses.NewStreaming(context.Background(), newResponseParams())
	var (
		types  []string
		deltas strings.Builder
		final  responses.Response
		seq    int64
	)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq {
			t.Errorf("event %q has sequence_number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq++
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.output_text.done":
			if ev.Text != fakeText {
				t.Errorf("output_text.done text = %q", ev.Text)
			}
		case "response.completed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range fakeDeltas {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	if !slices.Equal(types, want) {
		t.Errorf("event types:\n got %v\nwant %v", types, want)
	}
	if deltas.String() != fakeText || final.OutputText() != fakeText || final.Status != "completed" {
		t.Errorf("deltas %q, final %+v", deltas.String(), final)
	}
	checkUsage(t, final.Usage.InputTokens, final.Usage.OutputTokens, final.Usage.TotalTokens)
}

func TestResponsesIncomplete(t *testing.T) {
	u := fakeUsage
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		return newFakeGen(Event{TextDelta: "Hel"}, Event{FinishReason: "length", Usage: &u}), nil
	}}
	client := newClient(t, svc, goodKey)
	resp, err := client.Responses.New(context.Background(), newResponseParams())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.OutputText() != "Hel" {
		t.Errorf("response = %+v", resp)
	}
	stream := client.Responses.NewStreaming(context.Background(), newResponseParams())
	last := ""
	for stream.Next() {
		last = stream.Current().Type
	}
	if stream.Err() != nil || last != "response.incomplete" {
		t.Errorf("stream ended with %q, err %v; want response.incomplete", last, stream.Err())
	}
}

func TestResponsesStreamErrorEvent(t *testing.T) {
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		g := newFakeGen(Event{TextDelta: "Hel"})
		g.err = errors.New("worker lost at 10.1.2.3")
		return g, nil
	}}
	rec := do(newTestHandler(svc), "POST", "/v1/responses", `{"model":"tiny","input":"hi","stream":true}`, authJSON())
	body := rec.Body.String()
	if !strings.Contains(body, "event: error\ndata: {") || strings.Contains(body, "response.completed") ||
		strings.Contains(body, "10.1.2.3") || !strings.Contains(body, `"code":"internal_error"`) {
		t.Errorf("stream after a failure:\n%s", body)
	}
}

func TestResponsesRefusals(t *testing.T) {
	h := newTestHandler(&fakeService{})
	for _, tc := range []struct{ body, param, code string }{
		{`{"model":"tiny","input":"hi","previous_response_id":"msg_1"}`, "previous_response_id", CodeInvalidValue},
		{`{"model":"tiny","input":"hi","previous_response_id":7}`, "previous_response_id", CodeInvalidType},
		{`{"model":"tiny","input":"hi","conversation":"conv_1"}`, "conversation", CodeUnsupportedParameter},
		{`{"model":"tiny","input":"hi","background":true}`, "background", CodeUnsupportedParameter},
		{`{"model":"tiny","input":"hi","include":["file_search_call.results"]}`, "include[0]", CodeUnsupportedValue},
		{`{"model":"tiny","input":"hi","top_logprobs":21}`, "top_logprobs", CodeIntegerTooLarge},
		{`{"model":"tiny","input":"hi","truncation":"auto"}`, "truncation", CodeUnsupportedParameter},
		{`{"model":"tiny","input":"hi","reasoning":{"summary":"long"}}`, "reasoning.summary", CodeInvalidValue},
		{`{"model":"tiny","input":"hi","reasoning":{"effort":"max"}}`, "reasoning.effort", CodeInvalidValue},
		{`{"model":"tiny","input":"hi","reasoning":{"generate_summary":"auto"}}`, "reasoning.generate_summary", CodeUnsupportedParameter},
		{`{"model":"tiny","input":"hi","tools":[{"type":"web_search"}]}`, "tools[0].type", CodeUnsupportedValue},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"string","pattern":"a"}}}}`, "text.format", CodeUnsupportedParameter},
		{`{"model":"tiny","input":"hi","text":{"format":{"type":"grammar"}}}`, "text.format.type", CodeInvalidValue},
		{`{"model":"tiny","input":"hi","store":"yes"}`, "store", CodeInvalidType},
		{`{"model":"tiny"}`, "input", CodeMissingParameter},
		{`{"model":"tiny","input":[]}`, "input", CodeEmptyArray},
		{`{"model":"tiny","input":[{"type":"reasoning","summary":[{"type":"input_text","text":"x"}]}]}`, "input[0].summary[0].type", CodeInvalidValue},
		{`{"model":"tiny","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", CodeMissingParameter},
		{`{"model":"tiny","input":[{"role":"tool","content":"x"}]}`, "input[0].role", CodeInvalidValue},
		{`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, "input[0].content[0].type", CodeUnsupportedValue},
		{`{"model":"tiny","input":"hi","max_output_tokens":0}`, "max_output_tokens", CodeIntegerTooSmall},
	} {
		rec := do(h, "POST", "/v1/responses", tc.body, authJSON())
		var env struct {
			Error struct{ Param, Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if rec.Code != http.StatusBadRequest || env.Error.Param != tc.param || env.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want 400 %s param %s", tc.body, rec.Code, rec.Body.String(), tc.code, tc.param)
		}
	}
	// Without a response store nothing is stored, so nothing is found.
	rec := do(h, "POST", "/v1/responses", `{"model":"tiny","input":"hi","previous_response_id":"resp_1"}`, authJSON())
	if _, code, param, _ := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 404 || code != "previous_response_not_found" || param != "previous_response_id" {
		t.Errorf("previous_response_id without a store: %d %s", rec.Code, rec.Body.String())
	}
	for _, m := range []string{"GET", "DELETE"} {
		rec := do(h, m, "/v1/responses/resp_123", "", authJSON())
		if _, code, _, msg := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 404 || code != CodeNotFound || !strings.Contains(msg, "not found") {
			t.Errorf("%s /v1/responses/resp_123: %d %s", m, rec.Code, rec.Body.String())
		}
	}
	// store: true is accepted (nothing is stored, and the response says so).
	if rec := do(h, "POST", "/v1/responses", `{"model":"tiny","input":"hi","store":true}`, authJSON()); rec.Code != 200 ||
		!strings.Contains(rec.Body.String(), `"store":false`) {
		t.Errorf("store: true: %d %s", rec.Code, rec.Body.String())
	}
}

func TestOpenAIClientModelsRetrieve(t *testing.T) {
	client := newClient(t, &fakeService{}, goodKey)
	m, err := client.Models.Get(context.Background(), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "tiny" || m.OwnedBy != "warden" || m.Created != 1700000000 || !strings.Contains(m.RawJSON(), `"context_length":2048`) {
		t.Errorf("model = %+v", m)
	}
	_, err = client.Models.Get(context.Background(), "org/other-model")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != CodeModelNotFound ||
		!strings.Contains(apiErr.Message, "org/other-model") {
		t.Errorf("unknown model: %v", err)
	}
}
