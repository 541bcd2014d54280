package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// embedThroughEngine runs prompts as one batch of embedding requests
// through an engine over the cpu backend, with prefill chunks of chunk
// tokens, prompt i under adapter ads[i] (base model when ads is short or
// the entry nil), and returns each prompt's embedding.
func embedThroughEngine(t *testing.T, s Spec, w Weights, prompts [][]int32, ads []*lora.Adapter, p engine.Pooling, chunk int) [][]float32 {
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
		var ad engine.Adapter
		if i < len(ads) && ads[i] != nil {
			ad = prepare(t, b, ads[i:i+1])[0]
			o.Adapter = ad.Hash()
		}
		pages, err := pool.Reserve(o, len(pr))
		if err != nil {
			t.Fatal(err)
		}
		if streams[i], err = eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: pr, Embed: p, Adapter: ad}); err != nil {
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
// 1e-4), and does not depend on the chunking (bit-identical). Under LoRA
// adapters, beside a base-model prompt in the same batch, each matches
// the reference with its adapter merged, far from the base model's.
func TestEmbeddingsMatchFloat64Reference(t *testing.T) {
	for name, s := range familySpecs() {
		for _, p := range []engine.Pooling{engine.PoolingLast, engine.PoolingMean} {
			t.Run(name+"/"+p.String(), func(t *testing.T) {
				w := randWeights(s, 11)
				r := rand.New(rand.NewPCG(3, 4))
				prompts := [][]int32{randTokens(r, 37, s.Vocab), randTokens(r, 9, s.Vocab), randTokens(r, 1, s.Vocab)}
				as := testAdapters(t, specConfig(s))
				for _, ads := range [][]*lora.Adapter{nil, {as[0], nil, as[1]}} {
					got := embedThroughEngine(t, s, w, prompts, ads, p, 7)
					for i, pr := range prompts {
						var ad *lora.Adapter
						if ads != nil {
							ad = ads[i]
						}
						want := ReferenceEmbedding(s, w, ad, pr, p)
						checkEmbedding(t, i, got[i], want)
						// An adapter that hardly moves the embedding would make a weak test.
						if ad != nil {
							if c := cosine(want, ReferenceEmbedding(s, w, nil, pr, p)); c > 0.999 {
								t.Fatalf("prompt %d: the adapter leaves the embedding at cosine %.5f to the base model's", i, c)
							}
						}
						// The same prompt prefilled in one chunk, alone.
						one := embedThroughEngine(t, s, w, [][]int32{pr}, []*lora.Adapter{ad}, p, 40)[0]
						for j := range one {
							if math.Float32bits(one[j]) != math.Float32bits(got[i][j]) {
								t.Fatalf("prompt %d: element %d is %v alone in one chunk, %v batched in chunks of 7", i, j, one[j], got[i][j])
							}
						}
					}
				}
			})
		}
	}
}

// checkEmbedding fails t unless prompt i's embedding got has want's
// dimensions, is within 1e-4 of it in every element, at cosine > 0.9999,
// and has norm 1.
func checkEmbedding(t *testing.T, i int, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("prompt %d: %d dimensions, want %d", i, len(got), len(want))
	}
	g := make([]float64, len(got))
	var maxDiff float64
	for j, v := range got {
		g[j] = float64(v)
		maxDiff = math.Max(maxDiff, math.Abs(g[j]-want[j]))
	}
	if cos := cosine(g, want); !(cos > 0.9999) || maxDiff > 1e-4 {
		t.Fatalf("prompt %d: cosine %.7f, max element error %.3g (want > 0.9999, <= 1e-4)", i, cos, maxDiff)
	}
	if norm := math.Sqrt(dot64(g, g)); math.Abs(norm-1) > 1e-5 {
		t.Fatalf("prompt %d: norm %v, want 1", i, norm)
	}
}

func dot64(a, b []float64) float64 {
	var d float64
	for i := range a {
		d += a[i] * b[i]
	}
	return d
}

func cosine(a, b []float64) float64 { return dot64(a, b) / math.Sqrt(dot64(a, a)*dot64(b, b)) }
