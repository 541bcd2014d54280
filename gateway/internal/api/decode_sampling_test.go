package api

import (
	"context"
	"net/http"

	"encoding/json"
	"fmt"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestSamplingControlsDecoded(t *testing.T) {
	body := chatWith(`"presence_penalty":-1.5,"frequency_penalty":2,"repetition_penalty":1.2,"top_k":-1,"min_p":0.05,` +
		`"logit_bias":{"50256":-100,"7":2.5,"0":100}`)
	req, e := decodeRequest(KindChat, []byte(body), DefaultMaxTokensLimit, nil)
	if e != nil {
		t.Fatal(e)
	}
	want := []LogitBias{{0, 100}, {7, 2.5}, {50256, -100}}
	if req.PresencePenalty != -1.5 || req.FrequencyPenalty != 2 || req.RepetitionPenalty != 1.2 || req.TopK != 0 || req.MinP != 0.05 ||
		!slices.Equal(req.LogitBias, want) || req.Echo {
		t.Fatalf("decoded %+v", req)
	}
	req, e = decodeRequest(KindCompletion, []byte(`{"model":"tiny","prompt":"x","top_k":40,"echo":true}`), DefaultMaxTokensLimit, nil)
	if e != nil {
		t.Fatal(e)
	}
	if req.TopK != 40 || !req.Echo {
		t.Fatalf("decoded %+v", req)
	}
}

func TestLogitBiasBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range MaxLogitBias + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"%d":1`, i)
	}
	b.WriteString("}")
	if _, e := decodeLogitBias(json.RawMessage(b.String())); e == nil || e.Param != "logit_bias" {
		t.Fatalf("%d entries: %v", MaxLogitBias+1, e)
	}
	for _, key := range []string{"", "+1", " 1", "1.0", "2147483648", "1e3", "0x10"} {
		if _, e := decodeLogitBias(json.RawMessage(`{"` + key + `":1}`)); e == nil {
			t.Errorf("key %q accepted", key)
		}
	}
}

// FuzzLogitBias: decodeLogitBias never panics; what it accepts is bounded,
// sorted, distinct and is exactly the object's entries.
func FuzzLogitBias(f *testing.F) {
	for _, s := range []string{`{}`, `{"1":1}`, `{"0":-100,"2147483647":100}`, `{"1":1,"01":1}`, `{"a":1}`, `{"1":"x"}`,
		`{"1":1e999}`, `{"-0":1}`, `[]`, `null`, `{"1":1,"1":2}`, `{"3":-0.5,"2":0}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var probe map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &probe) != nil {
			return // decodeLogitBias sees values encoding/json split out
		}
		lb, e := decodeLogitBias(json.RawMessage(strings.TrimSpace(s)))
		if e != nil {
			if e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
			return
		}
		if len(lb) > MaxLogitBias || len(lb) != len(probe) {
			t.Fatalf("%d entries from %d keys", len(lb), len(probe))
		}
		for i, b := range lb {
			if b.Token < 0 || (i > 0 && b.Token <= lb[i-1].Token) || math.IsNaN(b.Bias) || math.Abs(b.Bias) > MaxBias {
				t.Fatalf("bad entry %d: %+v", i, b)
			}
			// Keys may have leading zeros ("07"); exactly one names the id.
			var raw json.RawMessage
			for k, v := range probe {
				if id, err := strconv.ParseUint(k, 10, 31); err == nil && int32(id) == b.Token {
					raw = v
				}
			}
			var v float64
			if raw == nil || json.Unmarshal(raw, &v) != nil || v != b.Bias {
				t.Fatalf("entry %+v is not the object's", b)
			}
		}
	})
}

// TestCompletionEcho: echo puts the prompt's text before every choice's
// completion, streamed or not, and the generation's headers still come
// with the response.
func TestCompletionEcho(t *testing.T) {
	svc := &fakeService{}
	client := newClient(t, svc, goodKey)
	params := openai.CompletionNewParams{
		Model:  "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon ")},
		Echo:   openai.Bool(true),
	}
	var raw *http.Response
	resp, err := client.Completions.New(context.Background(), params, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text != "Once upon "+fakeText {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if raw.Header.Get("X-Ratelimit-Remaining-Requests") != "41" {
		t.Errorf("headers lost: %v", raw.Header)
	}
	stream := client.Completions.NewStreaming(context.Background(), params)
	var text string
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text += c.Text
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != "Once upon "+fakeText {
		t.Fatalf("stream text %q", text)
	}

	h := newTestHandler(&fakeService{gen: choicesGen})
	rec := do(h, "POST", "/v1/completions", `{"model":"tiny","prompt":"hi ","n":2,"echo":true}`, authJSON())
	var out struct {
		Choices []struct {
			Index int    `json:"index"`
			Text  string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || len(out.Choices) != 2 ||
		out.Choices[0].Text != "hi abc" || out.Choices[1].Text != "hi xy" {
		t.Fatalf("n=2 echo: %s", rec.Body.String())
	}
	// Without the prompt's logprobs on its first event, a generation
	// asked for echo with logprobs broke the contract.
	rec = do(h, "POST", "/v1/completions", `{"model":"tiny","prompt":"hi","echo":true,"logprobs":1}`, authJSON())
	if rec.Code != 500 {
		t.Fatalf("echo with logprobs, none sent: %d %s", rec.Code, rec.Body.String())
	}
}

// promptGen answers with the prompt "<s>hi!" (a special BOS, then "hi"
// and "!") scored, then the token "ok".
func promptGen(req *GenerateRequest) (Generation, error) {
	u := fakeUsage
	return newFakeGen(
		Event{PromptLogprobs: []PromptToken{
			{ID: 1, Token: "<s>", Bytes: []byte("<s>"), Special: true},
			{ID: 7, Token: "hi", Bytes: []byte("hi"), Logprob: -2, Rank: 3, Top: []PromptAlternative{{ID: 9, Token: "yo", Logprob: -0.5}, {ID: 8, Token: "he", Logprob: -1}}},
			{ID: 5, Token: "!", Bytes: []byte("!"), Logprob: -0.25, Rank: 1, Top: []PromptAlternative{{ID: 5, Token: "!", Logprob: -0.25}, {ID: 4, Token: "?", Logprob: -3}}},
		}},
		Event{TextDelta: "ok", Logprobs: []TokenLogprob{{Token: "ok", Bytes: []byte("ok"), Logprob: -1, Top: []TopLogprob{{Token: "ok", Logprob: -1}}}}},
		Event{FinishReason: "stop", Usage: &u}), nil
}

// TestEchoLogprobsAndPromptLogprobs: echo with logprobs lists the
// prompt's tokens first — null logprob and top_logprobs for the first,
// the asked number of alternatives (and the token) for the others — then
// the completion's, text_offset indexing the echoed text (a special
// token takes no bytes); streamed, the first chunk carries the prompt
// and its logprobs. prompt_logprobs is vLLM's list: null first, then a
// map from token id to {logprob, rank, decoded_token} holding the token
// and the asked alternatives (ranks 1..k), on the completion's choice
// and at the chat response's top level.
func TestEchoLogprobsAndPromptLogprobs(t *testing.T) {
	svc := &fakeService{gen: promptGen}
	h := newTestHandler(svc)
	rec := do(h, "POST", "/v1/completions", `{"model":"tiny","prompt":"hi!","echo":true,"logprobs":1}`, authJSON())
	want := `{"tokens":["<s>","hi","!","ok"],"token_logprobs":[null,-2,-0.25,-1],"top_logprobs":[null,{"hi":-2,"yo":-0.5},{"!":-0.25},{"ok":-1}],"text_offset":[0,0,2,3]}`
	var out struct {
		Choices []struct {
			Text           string          `json:"text"`
			Logprobs       json.RawMessage `json:"logprobs"`
			PromptLogprobs json.RawMessage `json:"prompt_logprobs"`
		} `json:"choices"`
		PromptLogprobs json.RawMessage `json:"prompt_logprobs"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 || out.Choices[0].Text != "hi!ok" ||
		string(out.Choices[0].Logprobs) != want || out.Choices[0].PromptLogprobs != nil {
		t.Fatalf("echo with logprobs: %d %s\nwant logprobs %s", rec.Code, rec.Body.String(), want)
	}
	if k, ok := svc.last.PromptScoring(); !ok || k != 1 {
		t.Fatalf("echo with logprobs 1 asks for the prompt's logprobs with %d alternatives (%v)", k, ok)
	}
	rec = do(h, "POST", "/v1/completions", `{"model":"tiny","prompt":"hi!","echo":true,"logprobs":1,"stream":true}`, authJSON())
	first := `"choices":[{"text":"hi!","index":0,"logprobs":{"tokens":["<s>","hi","!"],"token_logprobs":[null,-2,-0.25],"top_logprobs":[null,{"hi":-2,"yo":-0.5},{"!":-0.25}],"text_offset":[0,0,2]},"finish_reason":null}]`
	second := `"logprobs":{"tokens":["ok"],"token_logprobs":[-1],"top_logprobs":[{"ok":-1}],"text_offset":[3]}`
	if body := rec.Body.String(); !strings.Contains(body, first) || !strings.Contains(body, second) || strings.Index(body, first) > strings.Index(body, second) {
		t.Fatalf("streamed echo with logprobs:\n%s\nwant first %s\nthen %s", body, first, second)
	}

	wantPrompt := `[null,{"7":{"logprob":-2,"rank":3,"decoded_token":"hi"},"9":{"logprob":-0.5,"rank":1,"decoded_token":"yo"}},{"5":{"logprob":-0.25,"rank":1,"decoded_token":"!"}}]`
	rec = do(h, "POST", "/v1/completions", `{"model":"tiny","prompt":"hi!","prompt_logprobs":1}`, authJSON())
	out.Choices, out.PromptLogprobs = nil, nil
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || string(out.Choices[0].PromptLogprobs) != wantPrompt || out.PromptLogprobs != nil {
		t.Fatalf("completions prompt_logprobs: %s\nwant %s", rec.Body.String(), wantPrompt)
	}
	rec = do(h, "POST", "/v1/chat/completions", chatWith(`"prompt_logprobs":1`), authJSON())
	out.Choices, out.PromptLogprobs = nil, nil
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || string(out.PromptLogprobs) != wantPrompt || out.Choices[0].PromptLogprobs != nil {
		t.Fatalf("chat prompt_logprobs: %s\nwant %s", rec.Body.String(), wantPrompt)
	}
	// At 0 only the prompt's own tokens; streaming at 0 asks for nothing.
	rec = do(h, "POST", "/v1/chat/completions", chatWith(`"prompt_logprobs":0`), authJSON())
	if !strings.Contains(rec.Body.String(), `"prompt_logprobs":[null,{"7":{"logprob":-2,"rank":3,"decoded_token":"hi"}},{"5":`) {
		t.Fatalf("prompt_logprobs 0: %s", rec.Body.String())
	}
	do(h, "POST", "/v1/chat/completions", chatWith(`"prompt_logprobs":0,"stream":true`), authJSON())
	if _, ok := svc.last.PromptScoring(); ok {
		t.Fatalf("a stream with prompt_logprobs 0 asked for the prompt's logprobs")
	}
}
