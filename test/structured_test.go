package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/warden-ai/warden/internal/constrain/constraintest"
	"github.com/warden-ai/warden/test/harness"
)

// Schemas of the structured-output end-to-end test.
var structuredSchemas = []string{
	`{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","unit"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"ok":{"type":"boolean"}},"required":["id","ok"]},"minItems":1,"maxItems":3}`,
	`{"anyOf":[{"type":"object","properties":{"error":{"type":"string","maxLength":20}},"required":["error"]},{"type":"object","properties":{"result":{"type":"number","minimum":-5,"maximum":5}},"required":["result"]}]}`,
}

// testStructuredOutputs: openai-go's response_format json_schema through
// every worker shape (P/D over TCP and shm, one worker) at temperature 1
// gives outputs that validate against the schema (an independent
// validator), streamed or not; the Responses API's text.format too; a
// keyword warden cannot enforce is a typed 400 naming it.
func testStructuredOutputs(t *testing.T, c *harness.Cluster) {
	ctx := context.Background()
	key := c.NewKey(t, "structured")
	client := c.Gateway().OpenAI(key)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Give me the weather as JSON.")}
	for _, model := range []string{harness.ModelTiny, modelShm, modelSingle} {
		t.Run(model, func(t *testing.T) {
			for i, schema := range structuredSchemas {
				var s map[string]any
				if err := json.Unmarshal([]byte(schema), &s); err != nil {
					t.Fatal(err)
				}
				params := openai.ChatCompletionNewParams{
					Model: model, Messages: msgs, MaxTokens: openai.Int(200), Temperature: openai.Float(1), Seed: openai.Int(int64(i + 1)),
					ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
						JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Strict: openai.Bool(true), Schema: s},
					}},
				}
				resp, err := client.Chat.Completions.New(ctx, params)
				if err != nil {
					t.Fatalf("schema %d: %v", i, err)
				}
				ch := resp.Choices[0]
				if ch.FinishReason != "stop" {
					t.Fatalf("schema %d: finish %s, content %q", i, ch.FinishReason, ch.Message.Content)
				}
				constraintest.Validate(t, schema, ch.Message.Content)

				stream := client.Chat.Completions.NewStreaming(ctx, params)
				var text strings.Builder
				for stream.Next() {
					if chunk := stream.Current(); len(chunk.Choices) > 0 {
						text.WriteString(chunk.Choices[0].Delta.Content)
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("schema %d stream: %v", i, err)
				}
				if text.String() != ch.Message.Content {
					t.Fatalf("schema %d: streamed %q, not streamed %q (same seed)", i, text.String(), ch.Message.Content)
				}
			}
		})
	}

	// The Responses API's text.format.
	body := `{"model":"tiny","input":"JSON please","max_output_tokens":200,"temperature":1,` +
		`"text":{"format":{"type":"json_schema","name":"answer","strict":true,"schema":` + structuredSchemas[0] + `}}}`
	resp, err := c.Gateway().Post(ctx, key, "/v1/responses", body)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Status string
		Output []struct {
			Content []struct{ Text string }
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || len(out.Output) != 1 || len(out.Output[0].Content) != 1 {
		t.Fatalf("responses: %d %s", resp.StatusCode, raw)
	}
	constraintest.Validate(t, structuredSchemas[0], out.Output[0].Content[0].Text)

	testConstraintLimits(t, c, key)

	// Unenforceable keyword: a typed 400 naming it.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: harness.ModelTiny, Messages: msgs,
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: map[string]any{"type": "string", "pattern": "^[a-z]+$"}},
		}},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "unsupported_parameter" ||
		apiErr.Param != "response_format" || apiErr.Type != "invalid_request_error" || !strings.Contains(apiErr.Message, "'pattern'") {
		t.Fatalf("pattern keyword: %v", err)
	}
}

// testConstraintLimits is issue 25's reproduction through P/D (prefill
// compiles the constraint too): an enum of 60 strings of 1,000 '<' is
// served, whether the client escaped them or not (the wire form was 360
// KB HTML-escaped, over the workers' 256 KiB: a 500 after a wasted
// prefill); 90 choices of 3,001 characters are a 400 naming the limit
// and the size.
func testConstraintLimits(t *testing.T, c *harness.Cluster, key string) {
	ctx := context.Background()
	vals := make([]string, 60)
	for i := range vals {
		vals[i] = `"` + strings.Repeat("<", 998) + string(rune('A'+i%26)) + string(rune('a'+i/26)) + `"`
	}
	enum := `{"model":"tiny","max_tokens":1100,"temperature":1,"messages":[{"role":"user","content":"Pick."}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","enum":[` + strings.Join(vals, ",") + `]}}}}`
	escaped := strings.ReplaceAll(enum, "<", `\u003c`)
	for _, body := range []string{enum, escaped} {
		resp, err := c.Gateway().Post(ctx, key, "/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Choices []struct{ Message struct{ Content string } }
		}
		var got string
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || len(out.Choices) != 1 ||
			json.Unmarshal([]byte(out.Choices[0].Message.Content), &got) != nil || !strings.HasPrefix(got, strings.Repeat("<", 998)) || len(got) != 1000 {
			t.Fatalf("the '<' enum (%d-byte body): %d %.300s", len(body), resp.StatusCode, raw)
		}
	}
	choices := make([]string, 90)
	for i := range choices {
		choices[i] = `"` + strings.Repeat("y", 2999) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `"`
	}
	resp, err := c.Gateway().Post(ctx, key, "/v1/chat/completions",
		`{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"Pick."}],"guided_choice":[`+strings.Join(choices, ",")+`]}`)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Message, Type, Param, Code string }
	}
	if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &e) != nil || e.Error.Param != "guided_choice" || e.Error.Code != "invalid_value" ||
		!strings.Contains(e.Error.Message, "constraint size limit exceeded: 270") || !strings.Contains(e.Error.Message, "the limit is 262144 bytes") {
		t.Fatalf("90 choices of 3,001 characters: %d %.300s", resp.StatusCode, raw)
	}
}
