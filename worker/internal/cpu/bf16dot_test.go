package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// bf16DotWeights returns w rounded to bf16 and multiplied in bf16
// products (BF16Dot), and the same bf16 weights with exact products.
func bf16DotWeights(t *testing.T, w Weights) (dot, exact Weights) {
	t.Helper()
	exact, err := ConvertWeights(w, model.BF16)
	if err != nil {
		t.Fatal(err)
	}
	return BF16Dot(exact), exact
}

// TestBF16DotChunkingAndBatchingAreBitIdentical: the bf16 numerics mode
// keeps the backend's contract, logits and KV pages independent of the
// chunking, the thread count and the batch neighbours, for every family.
func TestBF16DotChunkingAndBatchingAreBitIdentical(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) {
			dot, _ := bf16DotWeights(t, randWeights(s, 3))
			checkBitIdentical(t, s, dot)
		})
	}
}

// TestBF16DotCloseToExact: in the bf16 numerics mode the projections whose
// columns are whole 32-column runs (q, k, v, gate, up and the LM head of
// the test geometry; not o_proj at head_dim 12, nor down_proj at 72) use
// bf16 products, the others stay exact, and every position's logits lie
// within the error of rounding the activations to bf16 (8 significant
// bits) of the exact bf16 model's, without being equal to them.
func TestBF16DotCloseToExact(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) {
			dot, exact := bf16DotWeights(t, randWeights(s, 7))
			l := dot.Layers[0]
			wantO := kernels.BF16Dot
			if s.Heads*s.HeadDim%kernels.BF16DotBlock != 0 {
				wantO = kernels.BF16
			}
			if l.Wq.Format() != kernels.BF16Dot || l.WUp.Format() != kernels.BF16Dot || dot.LMHead.Format() != kernels.BF16Dot ||
				l.Wo.Format() != wantO || l.WDown.Format() != kernels.BF16 || dot.Embed.Format() != kernels.BF16 {
				t.Fatalf("formats q %v, up %v, LM head %v, o %v, down %v, embedding %v",
					l.Wq.Format(), l.WUp.Format(), dot.LMHead.Format(), l.Wo.Format(), l.WDown.Format(), dot.Embed.Format())
			}
			const pt = 4
			tokens := randTokens(rand.New(rand.NewPCG(1, 2)), 37, s.Vocab)
			var logits [2]map[int][]float32
			for i, w := range []Weights{exact, dot} {
				b, err := New(s, w, newTestPages(12, s.PageBytes(pt)), Options{Threads: 2, MaxBatchTokens: 96, PageTokens: pt})
				if err != nil {
					t.Fatal(err)
				}
				logits[i] = runPrompt(t, b, tokens, pageIDs(0, 10), 1)
				b.Close()
			}
			var differ bool
			for pos := range tokens {
				var maxDiff, maxRef float64
				for j, v := range logits[1][pos] {
					ref := float64(logits[0][pos][j])
					maxDiff = math.Max(maxDiff, math.Abs(float64(v)-ref))
					maxRef = math.Max(maxRef, math.Abs(ref))
					differ = differ || v != logits[0][pos][j]
				}
				if rel := maxDiff / maxRef; rel > 0.05 || math.IsNaN(rel) {
					t.Fatalf("position %d: relative difference %.3g from the exact bf16 model exceeds 0.05", pos, rel)
				}
			}
			if !differ {
				t.Fatal("bf16 products gave exactly the exact model's logits: the mode did not run")
			}
		})
	}
}
