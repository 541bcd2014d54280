package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// choicesGen interleaves two choices' events; choice 1 ends first.
func choicesGen(*GenerateRequest) (Generation, error) {
	u := Usage{PromptTokens: 7, CompletionTokens: 5}
	return newFakeGen(
		Event{Choice: 0, TextDelta: "a"},
		Event{Choice: 1, TextDelta: "x"},
		Event{Choice: 1, TextDelta: "y", FinishReason: "stop"},
		Event{Choice: 0, TextDelta: "bc"},
		Event{Choice: 0, FinishReason: "length", Usage: &u},
	), nil
}

// TestChoicesResponse: n = 2 gives choices[i] with their index, text and
// finish reason, and one usage; the request carries N.
func TestChoicesResponse(t *testing.T) {
	svc := &fakeService{gen: choicesGen}
	h := newTestHandler(svc)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := chatWith(`"n":2`)
		if path == "/v1/completions" {
			body = `{"model":"tiny","prompt":"hi","n":2}`
		}
		rec := do(h, "POST", path, body, authJSON())
		if rec.Code != 200 {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		if n := svc.lastRequest(t).N; n != 2 {
			t.Fatalf("%s: N = %d", path, n)
		}
		var resp struct {
			Choices []struct {
				Index        int    `json:"index"`
				Text         string `json:"text"`
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		want := []struct{ text, finish string }{{"abc", "length"}, {"xy", "stop"}}
		if len(resp.Choices) != 2 || resp.Usage.PromptTokens != 7 || resp.Usage.CompletionTokens != 5 {
			t.Fatalf("%s: %s", path, rec.Body)
		}
		for k, c := range resp.Choices {
			if c.Index != k || c.Text+c.Message.Content != want[k].text || c.FinishReason != want[k].finish {
				t.Fatalf("%s: choice %d: %+v, want %+v", path, k, c, want[k])
			}
		}
	}
}

// TestChoicesStream: every chunk names its choice; chat sends each
// choice's role chunk first.
func TestChoicesStream(t *testing.T) {
	h := newTestHandler(&fakeService{gen: choicesGen})
	rec := do(h, "POST", "/v1/chat/completions", chatWith(`"n":2,"stream":true`), authJSON())
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	texts, finish, roles := map[int]string{}, map[int]string{}, 0
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index int
				Delta struct {
					Role    string
					Content string
				}
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Role != "" {
				roles++
			}
			texts[ch.Index] += ch.Delta.Content
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	if roles != 2 || texts[0] != "abc" || texts[1] != "xy" || finish[0] != "length" || finish[1] != "stop" {
		t.Fatalf("roles %d, texts %v, finish %v\n%s", roles, texts, finish, rec.Body)
	}
}

// TestChoicesBrokenContract: a generation that leaves a choice without a
// finish reason fails.
func TestChoicesBrokenContract(t *testing.T) {
	u := Usage{PromptTokens: 1, CompletionTokens: 1}
	h := newTestHandler(&fakeService{gen: func(*GenerateRequest) (Generation, error) {
		return newFakeGen(Event{Choice: 0, TextDelta: "a", FinishReason: "stop", Usage: &u}), nil
	}})
	if rec := do(h, "POST", "/v1/chat/completions", chatWith(`"n":2`), authJSON()); rec.Code != 500 {
		t.Fatalf("one of two choices finished: %d %s", rec.Code, rec.Body)
	}
}
