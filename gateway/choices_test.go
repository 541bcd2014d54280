package gateway

import (
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestCheckDoneChoices: a Done is accepted only when it agrees with what
// the relay counted for every choice (I7): the prompt once, each choice's
// tokens (plus an unsent final stop token), and their sum.
func TestCheckDoneChoices(t *testing.T) {
	counted := func(received ...int64) []*choice {
		cs := make([]*choice, len(received))
		for k, n := range received {
			cs[k] = &choice{received: n}
		}
		return cs
	}
	outcome := func(reason string, n int64) *controlpb.NChoicesDone {
		return &controlpb.NChoicesDone{FinishReason: reason, CompletionTokens: n}
	}
	for _, tc := range []struct {
		name string
		done *controlpb.Done
		cs   []*choice
		ok   bool
	}{
		{"one choice", &controlpb.Done{FinishReason: "length", PromptTokens: 7, CompletionTokens: 4}, counted(4), true},
		{"one choice, stop token", &controlpb.Done{FinishReason: "stop", PromptTokens: 7, CompletionTokens: 5}, counted(4), true},
		{"three choices", &controlpb.Done{PromptTokens: 7, CompletionTokens: 9,
			Choices: []*controlpb.NChoicesDone{outcome("length", 4), outcome("stop", 2), outcome("length", 3)}}, counted(4, 1, 3), true},
		{"prompt counted per choice", &controlpb.Done{PromptTokens: 21, CompletionTokens: 9,
			Choices: []*controlpb.NChoicesDone{outcome("length", 4), outcome("stop", 2), outcome("length", 3)}}, counted(4, 1, 3), false},
		{"a choice short", &controlpb.Done{PromptTokens: 7, CompletionTokens: 8,
			Choices: []*controlpb.NChoicesDone{outcome("length", 4), outcome("length", 1), outcome("length", 3)}}, counted(4, 2, 3), false},
		{"sum differs", &controlpb.Done{PromptTokens: 7, CompletionTokens: 10,
			Choices: []*controlpb.NChoicesDone{outcome("length", 4), outcome("stop", 2), outcome("length", 3)}}, counted(4, 1, 3), false},
		{"a choice missing", &controlpb.Done{PromptTokens: 7, CompletionTokens: 7,
			Choices: []*controlpb.NChoicesDone{outcome("length", 4), outcome("length", 3)}}, counted(4, 1, 3), false},
		{"unknown reason", &controlpb.Done{PromptTokens: 7, CompletionTokens: 4,
			Choices: []*controlpb.NChoicesDone{outcome("length", 3), outcome("error", 1)}}, counted(3, 1), false},
	} {
		if err := checkDone(tc.done, 7, tc.cs); (err == nil) != tc.ok {
			t.Errorf("%s: checkDone = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
