package serve

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// clock returns successive instants one millisecond apart.
func clock() func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time {
		t = t.Add(time.Millisecond)
		return t
	}
}

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name, in           string
		text               string
		arrivals           int
		prompt, completion int64
		err                error
		errText            string
	}{
		{name: "content and usage",
			in: "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n" +
				": keep-alive comment\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2}}\n\n" +
				"data: [DONE]\n\n",
			text: "Hello", arrivals: 2, prompt: 12, completion: 2},
		{name: "reasoning counts as generated text",
			in:   "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n",
			text: "hmok", arrivals: 2},
		{name: "no [DONE]", in: "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", text: "a", arrivals: 1, err: errNoDone},
		{name: "error event", in: "data: {\"error\":{\"message\":\"overloaded\"}}\n\n", errText: "error event: overloaded"},
		{name: "malformed chunk", in: "data: {\"choices\":\n\n", errText: "malformed chunk"},
		{name: "overlong line", in: "data: " + strings.Repeat("x", maxEventBytes+1) + "\n", err: errEventTooLong},
		{name: "final line without newline", in: "data: [DONE]", arrivals: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := readStream(strings.NewReader(tc.in), clock())
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("error %v, want %v", err, tc.err)
			case tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)):
				t.Fatalf("error %v, want one containing %q", err, tc.errText)
			case tc.err == nil && tc.errText == "" && err != nil:
				t.Fatalf("error %v", err)
			}
			if res.Text != tc.text || len(res.Arrivals) != tc.arrivals || res.PromptTokens != tc.prompt || res.OutputTokens != tc.completion {
				t.Errorf("got text %q, %d arrivals, usage %d/%d; want %q, %d, %d/%d",
					res.Text, len(res.Arrivals), res.PromptTokens, res.OutputTokens, tc.text, tc.arrivals, tc.prompt, tc.completion)
			}
			for i := 1; i < len(res.Arrivals); i++ {
				if !res.Arrivals[i].After(res.Arrivals[i-1]) {
					t.Errorf("arrivals out of order: %v", res.Arrivals)
				}
			}
		})
	}
}

// FuzzReadStream: any bytes an endpoint sends end in a result or an error,
// never a panic; every arrival is a chunk that carried text.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":1e99}}\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\r\ndata:[DONE]"))
	f.Add([]byte("event: x\nid: 1\ndata: null\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		res, _ := readStream(strings.NewReader(string(in)), clock())
		if len(res.Arrivals) > strings.Count(string(in), "data:") {
			t.Fatalf("%d arrivals from %d data lines", len(res.Arrivals), strings.Count(string(in), "data:"))
		}
		if len(res.Arrivals) > 0 && res.Text == "" {
			t.Fatal("arrivals without text")
		}
	})
}
