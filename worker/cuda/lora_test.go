//go:build cuda

package cuda

import (
	"context"
	"math"
	"testing"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// loraConfigs are adapters of different ranks and targets: every
// projection (the unfused gate/up path), attention only, and a mix.
var loraConfigs = []lora.Config{
	{Rank: 4, Alpha: 8, Targets: lora.Modules[:]},
	{Rank: 8, Alpha: 8, Targets: []lora.Module{lora.Q, lora.V}},
	{Rank: 2, Alpha: 1, Targets: []lora.Module{lora.K, lora.O, lora.Gate, lora.Down}},
}

// prepareBoth parses the test adapters for m and prepares each on both
// backends.
func prepareBoth(t *testing.T, m *model.Model, cb engine.AdapterBackend, gb *Backend) (cpuAds, gpuAds []engine.Adapter) {
	t.Helper()
	for i, c := range loraConfigs {
		cj, w, err := lora.Random(&m.Config, c, 0.12, uint64(100+i))
		if err != nil {
			t.Fatal(err)
		}
		a, err := lora.Parse(cj, w, &m.Config)
		if err != nil {
			t.Fatal(err)
		}
		ca, err := cb.PrepareAdapter(a)
		if err != nil {
			t.Fatal(err)
		}
		ga, err := gb.PrepareAdapter(a)
		if err != nil {
			t.Fatal(err)
		}
		if ga.Hash() != a.Hash || ga.Bytes() != a.Bytes {
			t.Fatalf("prepared adapter %d: hash %.12s, %d bytes; want %.12s, %d", i, ga.Hash(), ga.Bytes(), a.Hash, a.Bytes)
		}
		cpuAds, gpuAds = append(cpuAds, ca), append(gpuAds, ga)
	}
	return cpuAds, gpuAds
}

// TestLoRAMatchesCPU: a batch mixing the base model and three adapters
// (one per sequence, chunked prefill then batched decode) gives on the
// device the cpu backend's greedy tokens, with logits within 1e-4, for
// every family; and each adapter moves its sequence's logits away from
// the base model's.
func TestLoRAMatchesCPU(t *testing.T) {
	for _, family := range model.FamilyNames() {
		t.Run(family, func(t *testing.T) {
			m := openTinyFamily(t, family, model.BF16)
			vocab := m.Config.VocabSize
			cb, cpool := newCPU(t, m, 32, false)
			gb, gpool := newGPU(t, m, 32, kvpool.Config{}, false)
			cAds, gAds := prepareBoth(t, m, cb, gb)
			const decode = 12
			prompt := testPrompt(31, vocab, 7)
			mk := func(pool *kvpool.Pool, ads []engine.Adapter) []*seq {
				seqs := []*seq{newSeq(t, pool, "base", "r", prompt, decode)}
				for i, ad := range ads {
					seqs = append(seqs, newSeqUnder(t, pool, "t", string(rune('a'+i)), prompt, decode, ad))
				}
				return seqs
			}
			limits := []int{16, 9, 31, 5}
			cs, gs := mk(cpool, cAds), mk(gpool, gAds)
			cOut := runAll(t, cb, cpool, cs, limits, decode)
			gOut := runAll(t, gb, gpool, gs, limits, decode)
			for i := range cs {
				for j := range cOut[i] {
					if diff, mag := maxDiff(gOut[i][j], cOut[i][j]); diff > 1e-4*(1+mag) {
						t.Fatalf("sequence %d output %d: logits differ by %g (largest %g)", i, j, diff, mag)
					}
				}
				for j := range cs[i].tokens {
					if cs[i].tokens[j] != gs[i].tokens[j] {
						t.Fatalf("sequence %d token %d: %d on cuda, %d on cpu", i, j, gs[i].tokens[j], cs[i].tokens[j])
					}
				}
				if i > 0 {
					if diff, _ := maxDiff(gOut[i][0], gOut[0][0]); diff < 1e-3 {
						t.Errorf("adapter %d leaves the first logits within %g of the base model's", i-1, diff)
					}
				}
			}
		})
	}
}

// TestLoRABatchInvariance: on the device a sequence's logits are
// bit-identical alone and in a batch mixing other adapters (the gate/up
// update makes that step unfused), under an adapter and on the base model.
func TestLoRABatchInvariance(t *testing.T) {
	m := openTiny(t, model.BF16)
	vocab := m.Config.VocabSize
	cb, _ := newCPU(t, m, 8, false)
	gb, pool := newGPU(t, m, 64, kvpool.Config{}, false)
	_, ads := prepareBoth(t, m, cb, gb)
	const decode = 6
	prompt := testPrompt(23, vocab, 9)
	for k, ad := range []engine.Adapter{nil, ads[1]} {
		req := string(rune('a' + k))
		alone := newSeqUnder(t, pool, "alone", req, prompt, decode, ad)
		ref := runAll(t, gb, pool, []*seq{alone}, []int{64}, decode)[0]
		crowd := []*seq{
			newSeqUnder(t, pool, "crowd", req, prompt, decode, ad),
			newSeqUnder(t, pool, "other", req+"0", testPrompt(17, vocab, 10), decode, ads[0]),
			newSeqUnder(t, pool, "other", req+"2", testPrompt(9, vocab, 11), decode, ads[2]),
		}
		got := runAll(t, gb, pool, crowd, []int{5, 11, 3}, decode)[0]
		for i := range ref {
			for j := range ref[i] {
				if math.Float32bits(ref[i][j]) != math.Float32bits(got[i][j]) {
					t.Fatalf("adapter %v output %d logit %d: %g alone, %g in a mixed batch", ad != nil, i, j, ref[i][j], got[i][j])
				}
			}
		}
	}
}

// TestHiddenMatchesCPU: the final hidden states the device returns for
// embeddings (every position of a chunked prompt, beside a chunk that
// wants logits) are the cpu backend's within 1e-4, for every family.
func TestHiddenMatchesCPU(t *testing.T) {
	for _, family := range model.FamilyNames() {
		t.Run(family, func(t *testing.T) {
			m := openTinyFamily(t, family, model.BF16)
			vocab, hid := m.Config.VocabSize, m.Config.HiddenSize
			cb, cpool := newCPU(t, m, 16, false)
			gb, gpool := newGPU(t, m, 16, kvpool.Config{}, false)
			prompt := testPrompt(21, vocab, 12)
			run := func(be engine.Backend, pool *kvpool.Pool) [][]float32 {
				embed := newSeq(t, pool, "e", "r", prompt, 1)
				other := newSeq(t, pool, "o", "r", testPrompt(9, vocab, 13), 1)
				var out [][]float32
				for embed.pos < len(prompt) {
					end := min(len(prompt), embed.pos+8)
					c := engine.Chunk{Owner: embed.owner, Start: embed.pos, Pages: embed.pages, Tokens: prompt[embed.pos:end],
						Hidden: make([]float32, (end-embed.pos)*hid)}
					batch := []engine.Chunk{c, other.chunk(64, vocab)}
					if err := be.Forward(context.Background(), batch); err != nil {
						t.Fatal(err)
					}
					for _, s := range []*seq{embed, other} {
						i := 0
						if s == other {
							i = 1
						}
						s.pos = batch[i].Start + len(batch[i].Tokens)
						if err := pool.MarkTokensWritten(s.owner, s.pages, s.pos); err != nil {
							t.Fatal(err)
						}
					}
					out = append(out, batch[0].Hidden)
				}
				return out
			}
			want, got := run(cb, cpool), run(gb, gpool)
			for i := range want {
				if diff, mag := maxDiff(got[i], want[i]); diff > 1e-4*(1+mag) {
					t.Fatalf("chunk %d: hidden states differ by %g (largest %g)", i, diff, mag)
				}
			}
		})
	}
}
