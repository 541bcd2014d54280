package worker

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
)

// TestSamplingFromCarriesControls: every sampling control of the control
// plane reaches the engine, and a malformed logit_bias is InvalidArgument.
func TestSamplingFromCarriesControls(t *testing.T) {
	s, err := samplingFrom(&controlpb.SamplingParams{Temperature: 0.5, MaxTokens: 3, TopK: 7, MinP: 0.1,
		PresencePenalty: -1, FrequencyPenalty: 1.5, RepetitionPenalty: 1.2,
		LogitBias: []*controlpb.LogitBias{{Token: 2, Bias: -3}, {Token: 9, Bias: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.TopK != 7 || s.MinP != 0.1 || s.PresencePenalty != -1 || s.FrequencyPenalty != 1.5 || s.RepetitionPenalty != 1.2 ||
		!slices.Equal(s.LogitBias, []engine.Bias{{Token: 2, Bias: -3}, {Token: 9, Bias: 100}}) {
		t.Fatalf("converted %+v", s)
	}
	for _, lb := range [][]*controlpb.LogitBias{
		{{Token: 9, Bias: 1}, {Token: 2, Bias: 1}},
		{{Token: 2, Bias: 101}},
		{{Token: -1, Bias: 1}},
		make([]*controlpb.LogitBias, engine.MaxLogitBias+1),
	} {
		_, err := samplingFrom(&controlpb.SamplingParams{MaxTokens: 1, LogitBias: lb})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("logit_bias %v: %v", lb, err)
		}
	}
}
