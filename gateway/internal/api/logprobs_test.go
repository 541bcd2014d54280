package api

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// logprobEvents is a generation with logprobs: "Hi" then " 🌍" split
// over two byte tokens, the first not valid UTF-8 on its own.
func logprobEvents() []Event {
	u := fakeUsage
	return []Event{
		{TextDelta: "Hi", Logprobs: []TokenLogprob{{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.25,
			Top: []TopLogprob{{Token: "Hi", Bytes: []byte("Hi"), Logprob: -0.25}, {Token: "Hello", Bytes: []byte("Hello"), Logprob: -1.5}}}}},
		{Logprobs: []TokenLogprob{{Token: `bytes:\xf0\x9f`, Bytes: []byte{0xf0, 0x9f}, Logprob: -2,
			Top: []TopLogprob{{Token: "!", Bytes: []byte("!"), Logprob: -0.5}, {Token: `bytes:\xf0\x9f`, Bytes: []byte{0xf0, 0x9f}, Logprob: -2}}}}},
		{TextDelta: "🌍", Logprobs: []TokenLogprob{{Token: `bytes:\x8c\x8d`, Bytes: []byte{0x8c, 0x8d}, Logprob: -0.125,
			Top: []TopLogprob{{Token: `bytes:\x8c\x8d`, Bytes: []byte{0x8c, 0x8d}, Logprob: -0.125}, {Token: "x", Bytes: []byte("x"), Logprob: -3}}}}},
		{FinishReason: "stop", Usage: &u},
	}
}

func logprobService() *fakeService {
	return &fakeService{gen: func(*GenerateRequest) (Generation, error) { return newFakeGen(logprobEvents()...), nil }}
}

func ints(b []byte) []int64 {
	out := make([]int64, len(b))
	for i, c := range b {
		out[i] = int64(c)
	}
	return out
}

// TestChatLogprobsWithOpenAIClient reads chat logprobs, whole and
// streamed, with the official client: every token with its text, bytes,
// logprob and alternatives, as the generation gave them.
func TestChatLogprobsWithOpenAIClient(t *testing.T) {
	svc := logprobService()
	client := newClient(t, svc, goodKey)
	p := chatParams()
	p.Logprobs, p.TopLogprobs = openai.Bool(true), openai.Int(2)
	resp, err := client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if req := svc.lastRequest(t); !req.Logprobs || req.TopLogprobs != 2 {
		t.Fatalf("request logprobs %v top %d, want true 2", req.Logprobs, req.TopLogprobs)
	}
	check := func(what string, got []openai.ChatCompletionTokenLogprob) {
		t.Helper()
		var want []TokenLogprob
		for _, ev := range logprobEvents() {
			want = append(want, ev.Logprobs...)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d logprobs, want %d", what, len(got), len(want))
		}
		for i, w := range want {
			g := got[i]
			if g.Token != w.Token || g.Logprob != w.Logprob || !reflect.DeepEqual(g.Bytes, ints(w.Bytes)) || len(g.TopLogprobs) != len(w.Top) {
				t.Fatalf("%s: token %d = %+v, want %+v", what, i, g, w)
			}
			for j, a := range w.Top {
				if ga := g.TopLogprobs[j]; ga.Token != a.Token || ga.Logprob != a.Logprob || !reflect.DeepEqual(ga.Bytes, ints(a.Bytes)) {
					t.Fatalf("%s: token %d alternative %d = %+v, want %+v", what, i, j, ga, a)
				}
			}
		}
	}
	if resp.Choices[0].Message.Content != "Hi🌍" {
		t.Fatalf("content %q", resp.Choices[0].Message.Content)
	}
	check("response", resp.Choices[0].Logprobs.Content)

	stream := client.Chat.Completions.NewStreaming(context.Background(), p)
	var streamed []openai.ChatCompletionTokenLogprob
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			streamed = append(streamed, c.Logprobs.Content...)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("stream", streamed)
}

// TestChatWithoutLogprobsSaysNull keeps logprobs null when not asked for.
func TestChatWithoutLogprobsSaysNull(t *testing.T) {
	rec := do(newTestHandler(&fakeService{}), "POST", "/v1/chat/completions", chatWith(`"logprobs":false`), authJSON())
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"logprobs":null`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// TestCompletionLogprobsLegacyShape checks the legacy object: tokens,
// token_logprobs, top_logprobs (with the sampled token added when it is
// not among the alternatives) and byte text_offset, whole and streamed.
func TestCompletionLogprobsLegacyShape(t *testing.T) {
	svc := logprobService()
	want := `{"tokens":["Hi","bytes:\\xf0\\x9f","bytes:\\x8c\\x8d"],"token_logprobs":[-0.25,-2,-0.125],` +
		`"top_logprobs":[{"Hello":-1.5,"Hi":-0.25},{"!":-0.5,"bytes:\\xf0\\x9f":-2},{"bytes:\\x8c\\x8d":-0.125,"x":-3}],"text_offset":[0,2,4]}`
	rec := do(newTestHandler(svc), "POST", "/v1/completions", `{"model":"tiny","prompt":"x","logprobs":2}`, authJSON())
	var resp struct {
		Choices []struct {
			Logprobs json.RawMessage `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := string(resp.Choices[0].Logprobs); got != want {
		t.Fatalf("logprobs\n got %s\nwant %s", got, want)
	}
	if req := svc.lastRequest(t); !req.Logprobs || req.TopLogprobs != 2 {
		t.Fatalf("request logprobs %v top %d", req.Logprobs, req.TopLogprobs)
	}

	// Streamed, text_offset continues across chunks; the client reads it.
	client := newClient(t, svc, goodKey)
	stream := client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, Logprobs: openai.Int(0)})
	var tokens []string
	var offsets []int64
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			tokens = append(tokens, c.Logprobs.Tokens...)
			offsets = append(offsets, c.Logprobs.TextOffset...)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tokens, []string{"Hi", `bytes:\xf0\x9f`, `bytes:\x8c\x8d`}) || !reflect.DeepEqual(offsets, []int64{0, 2, 4}) {
		t.Fatalf("streamed tokens %q offsets %v", tokens, offsets)
	}
}

// TestResponsesLogprobs asks through include and reads output_text's
// logprobs with the official client.
func TestResponsesLogprobs(t *testing.T) {
	svc := logprobService()
	client := newClient(t, svc, goodKey)
	resp, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Include:     []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs},
		TopLogprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if req := svc.lastRequest(t); !req.Logprobs || req.TopLogprobs != 2 {
		t.Fatalf("request logprobs %v top %d", req.Logprobs, req.TopLogprobs)
	}
	part := resp.Output[0].Content[0]
	if part.Text != "Hi🌍" || len(part.Logprobs) != 3 || part.Logprobs[1].Token != `bytes:\xf0\x9f` ||
		part.Logprobs[1].Logprob != -2 || len(part.Logprobs[1].TopLogprobs) != 2 || part.Logprobs[1].TopLogprobs[0].Token != "!" {
		t.Fatalf("output text %+v", part)
	}

	// Streamed: each delta event carries its tokens' entries, the done
	// event all of them.
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "tiny", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Include: []responses.ResponseIncludable{responses.ResponseIncludableMessageOutputTextLogprobs},
	})
	var deltas []float64
	done := 0
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			for _, lp := range ev.AsResponseOutputTextDelta().Logprobs {
				deltas = append(deltas, lp.Logprob)
			}
		case "response.output_text.done":
			done = len(ev.AsResponseOutputTextDone().Logprobs)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(deltas, []float64{-0.25, -2, -0.125}) || done != 3 {
		t.Fatalf("streamed logprobs %v, done event has %d", deltas, done)
	}
}
