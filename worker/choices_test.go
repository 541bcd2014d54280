package worker

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
)

// TestBothServesChoicesFromOnePrefill: Generate with n = 3 on a both
// worker streams three choices, each equal to a single Generate with the
// choice's seed (engine.ChoiceSeed); Done counts the prompt once and sums
// the completions; the engine prefilled the prompt once.
func TestBothServesChoicesFromOnePrefill(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleBoth, config.TransferTCP, testPages))
	p := prompt(37, 5)
	for name, sp := range map[string]*controlpb.SamplingParams{
		"greedy": greedy(10),
		"seeded": {Temperature: 1, Seed: 7, MaxTokens: 10, IgnoreEos: true},
	} {
		n := proto.Clone(sp).(*controlpb.SamplingParams)
		n.N = 3
		before := w.rt.Engine.Stats()
		got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", name, 1), Prompt: p, Sampling: n})
		after := w.rt.Engine.Stats()
		if got.err != nil {
			t.Fatalf("%s: %v", name, got.err)
		}
		if after.Prefills-before.Prefills != 1 || after.PrefillTokens-before.PrefillTokens != uint64(len(p)) {
			t.Fatalf("%s: %d prefills of %d tokens for n = 3, want 1 of %d", name,
				after.Prefills-before.Prefills, after.PrefillTokens-before.PrefillTokens, len(p))
		}
		d := got.done
		if d.GetPromptTokens() != int64(len(p)) || d.GetCompletionTokens() != 30 || len(d.GetChoices()) != 3 {
			t.Fatalf("%s: Done %v", name, d)
		}
		for k := range 3 {
			single := proto.Clone(sp).(*controlpb.SamplingParams)
			single.Seed = engine.ChoiceSeed(sp.GetSeed(), k)
			alone := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", fmt.Sprintf("%s-%d", name, k), 1), Prompt: p, Sampling: single})
			if !slices.Equal(got.choices[int32(k)], alone.tokens) || d.GetChoices()[k].GetFinishReason() != "length" {
				t.Fatalf("%s choice %d: %v (%v), alone %v", name, k, got.choices[int32(k)], d.GetChoices()[k], alone.tokens)
			}
		}
	}
	waitQuiet(t, w)
	if st := w.rt.Pool.Stats(); st.Free != st.Total {
		t.Fatalf("pages left held: %+v", st)
	}
}

// TestChoicesRefusedWithoutLocalPrefill: a decode worker refuses n > 1.
func TestChoicesRefusedWithoutLocalPrefill(t *testing.T) {
	w := startWorker(t, testConfig(t, config.RoleDecode, config.TransferTCP, testPages))
	sp := greedy(4)
	sp.N = 2
	got := generate(t, w.client, &controlpb.GenerateRequest{Owner: owner("acme", "n", 1), Prompt: prompt(8, 1), Sampling: sp})
	if code(got.err) != 3 { // InvalidArgument
		t.Fatalf("n = 2 on a decode worker: %v", got.err)
	}
}
