//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// TestSpeculationOnDevice: with n-gram speculation (every single-token
// match proposes up to 6 tokens, so the device computes multi-row logits
// chunks and most proposals fail), greedy and seeded requests with
// logprobs, alone and four at a time, give exactly the tokens and logprobs
// of the same device engine without speculation.
func TestSpeculationOnDevice(t *testing.T) {
	m := openTiny(t, model.BF16)
	vocab := m.Config.VocabSize
	b, pool := newGPU(t, m, 256, kvpool.Config{PoisonOnReserve: true}, false)
	g := startEngineSpec(t, m, b, pool, engine.Speculation{K: 6, NgramMax: 3, NgramMin: 1})
	seg := testPrompt(5, vocab, 3)
	var p []int32
	for range 8 {
		p = append(p, seg...)
	}
	on, off := true, false
	for _, sp := range []engine.Sampling{
		{MaxTokens: 40, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3},
		{Temperature: 1, Seed: 42, MaxTokens: 40, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3},
	} {
		sp.Speculate = &off
		want := g.generate(t, kvpool.Owner{Tenant: "a", Request: "plain", Epoch: 1}, nil, p, sp)
		sp.Speculate = &on
		got := g.generate(t, kvpool.Owner{Tenant: "a", Request: "spec", Epoch: 1}, nil, p, sp)
		if !slices.Equal(got.tokens, want.tokens) || !sameLogprobs(got.lps, want.lps, 0) {
			t.Fatalf("temperature %v: speculative %v, plain %v", sp.Temperature, got.tokens, want.tokens)
		}
		var owners []kvpool.Owner
		var streams []*engine.Stream
		for i := range 4 {
			o := kvpool.Owner{Tenant: "a", Request: fmt.Sprint("batched-", i), Epoch: 1}
			pages, _ := g.reserve(t, o, nil, p, len(p)+sp.MaxTokens)
			st, err := g.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: sp})
			if err != nil {
				t.Fatal(err)
			}
			owners, streams = append(owners, o), append(streams, st)
		}
		for i, st := range streams {
			o := collect(t, owners[i], st)
			g.release(t, owners[i], o.res, nil)
			if !slices.Equal(o.tokens, want.tokens) || !sameLogprobs(o.lps, want.lps, 0) {
				t.Fatalf("temperature %v batched: speculative %v, plain %v", sp.Temperature, o.tokens, want.tokens)
			}
		}
	}
	s := g.eng.Stats()
	if s.SpecProposed == 0 || pool.Stats().Violations != 0 {
		t.Fatalf("engine %+v, pool %+v", s, pool.Stats())
	}
	t.Logf("SPECULATION on the device equals plain decoding: %d proposed, %d accepted", s.SpecProposed, s.SpecAccepted)
}
