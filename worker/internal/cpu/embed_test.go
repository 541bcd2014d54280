package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// embedThroughEngine runs prompts as one batch of embedding requests
// through an engine over the cpu backend, with prefill chunks of chunk
// tokens, and returns each prompt's embedding.
func embedThroughEngine(t *testing.T, s Spec, w Weights, prompts [][]int32, p engine.Pooling, chunk int) [][]float32 {
	t.Helper()
	const pt = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := kvpool.New(kvpool.Config{Pages: 64, PageTokens: pt, PageBytes: s.PageBytes(pt)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(s, w, pool, Options{Threads: 2, MaxBatchTokens: chunk + len(prompts), PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eng, err := engine.New(engine.Config{PageTokens: pt, ChunkTokens: chunk, MaxBatch: len(prompts), VocabSize: s.Vocab}, b, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	streams := make([]*engine.Stream, len(prompts))
	for i, pr := range prompts {
		o := kvpool.Owner{Tenant: "t", Request: fmt.Sprint(i), Epoch: 1}
		pages, err := pool.Reserve(o, len(pr))
		if err != nil {
			t.Fatal(err)
		}
		if streams[i], err = eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: pr, Embed: p}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([][]float32, len(prompts))
	for i, st := range streams {
		for {
			ev, err := st.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == engine.EventToken {
				t.Fatalf("prompt %d: an embedding request sampled token %d", i, ev.Token)
			}
			if ev.Kind == engine.EventDone {
				r := ev.Result
				if r.Finish != engine.FinishEmbedded || r.PromptTokens != len(prompts[i]) || r.CompletionTokens != 0 {
					t.Fatalf("prompt %d: result %+v, want embedded with %d prompt tokens and none generated", i, r, len(prompts[i]))
				}
				out[i] = r.Embedding
				break
			}
		}
	}
	return out
}

// TestEmbeddingsMatchFloat64Reference: the pooled, normalised final
// hidden state the engine computes on the cpu backend, for last and mean
// pooling, several prompts in one batch and prompts split into chunks,
// matches the float64 reference (cosine > 0.9999, every element within
// 1e-4), and does not depend on the chunking (bit-identical).
func TestEmbeddingsMatchFloat64Reference(t *testing.T) {
	for name, s := range familySpecs() {
		for _, p := range []engine.Pooling{engine.PoolingLast, engine.PoolingMean} {
			t.Run(name+"/"+p.String(), func(t *testing.T) {
				w := randWeights(s, 11)
				r := rand.New(rand.NewPCG(3, 4))
				prompts := [][]int32{randTokens(r, 37, s.Vocab), randTokens(r, 9, s.Vocab), randTokens(r, 1, s.Vocab)}
				got := embedThroughEngine(t, s, w, prompts, p, 7)
				for i, pr := range prompts {
					want := ReferenceEmbedding(s, w, pr, p)
					if len(got[i]) != s.Hidden {
						t.Fatalf("prompt %d: %d dimensions, want %d", i, len(got[i]), s.Hidden)
					}
					var dot, gg, ww, maxDiff float64
					for j, v := range got[i] {
						dot += float64(v) * want[j]
						gg += float64(v) * float64(v)
						ww += want[j] * want[j]
						maxDiff = math.Max(maxDiff, math.Abs(float64(v)-want[j]))
					}
					if cos := dot / math.Sqrt(gg*ww); !(cos > 0.9999) || maxDiff > 1e-4 {
						t.Fatalf("prompt %d: cosine %.7f, max element error %.3g (want > 0.9999, <= 1e-4)", i, cos, maxDiff)
					}
					if norm := math.Sqrt(gg); math.Abs(norm-1) > 1e-5 {
						t.Fatalf("prompt %d: norm %v, want 1", i, norm)
					}
				}
				// The same prompts prefilled in one chunk each, one at a time.
				for i, pr := range prompts {
					one := embedThroughEngine(t, s, w, [][]int32{pr}, p, 40)[0]
					for j := range one {
						if math.Float32bits(one[j]) != math.Float32bits(got[i][j]) {
							t.Fatalf("prompt %d: element %d is %v alone in one chunk, %v batched in chunks of 7", i, j, one[j], got[i][j])
						}
					}
				}
			})
		}
	}
}
