package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// specConfig is the model config a Spec's adapters are checked against.
func specConfig(s Spec) *model.Config {
	return &model.Config{HiddenSize: s.Hidden, IntermediateSize: s.Intermediate, NumHiddenLayers: s.Layers,
		NumAttentionHeads: s.Heads, NumKeyValueHeads: s.KVHeads, HeadDim: s.HeadDim}
}

// testAdapters are three adapters of different ranks, scales and targets,
// written as PEFT files and parsed back as a worker does: the first with
// float32 values, the second's all bfloat16 and the third's all float16
// values (held in those formats, see TestAdapterHeldCompactly).
func testAdapters(t testing.TB, base *model.Config) []*lora.Adapter {
	t.Helper()
	cfgs := []lora.Config{
		{Rank: 4, Alpha: 8, Targets: lora.Modules[:]},
		{Rank: 8, Alpha: 8, Targets: []lora.Module{lora.Q, lora.V}},
		{Rank: 2, Alpha: 1, Targets: []lora.Module{lora.K, lora.O, lora.Gate, lora.Down}},
	}
	round := []func(dst []uint16, src []float32){nil, kernels.F32ToBF16, kernels.F32ToF16}
	widen := []func(dst []float32, src []uint16){nil, kernels.BF16ToF32, kernels.F16ToF32}
	out := make([]*lora.Adapter, len(cfgs))
	for i, c := range cfgs {
		cj, wt, err := lora.Random(base, c, 0.12, uint64(100+i))
		if err != nil {
			t.Fatal(err)
		}
		a, err := lora.Parse(cj, wt, base)
		if err != nil {
			t.Fatal(err)
		}
		if round[i] != nil {
			for _, l := range a.Layers {
				for _, p := range l {
					for _, v := range [][]float32{p.A, p.B} {
						u := make([]uint16, len(v))
						round[i](u, v)
						widen[i](v, u)
					}
				}
			}
			if cj, wt, err = lora.Encode(a.Config, a.Layers); err != nil {
				t.Fatal(err)
			}
			if a, err = lora.Parse(cj, wt, base); err != nil {
				t.Fatal(err)
			}
		}
		out[i] = a
	}
	return out
}

func prepare(t testing.TB, b *Backend, as []*lora.Adapter) []engine.Adapter {
	t.Helper()
	out := make([]engine.Adapter, len(as))
	for i, a := range as {
		p, err := b.PrepareAdapter(a)
		if err != nil {
			t.Fatal(err)
		}
		if p.Hash() != a.Hash || p.Bytes() <= 0 || p.Bytes() > a.Bytes {
			t.Fatalf("prepared adapter: hash %q bytes %d, want %q and at most %d", p.Hash(), p.Bytes(), a.Hash, a.Bytes)
		}
		out[i] = p
	}
	return out
}

// TestAdapterForwardMatchesFloat64Reference: every position's logits under
// each adapter are within 1e-4 of the float64 reference with the adapter
// merged into the weights, for every family, and the adapter moves them
// far from the base model's.
func TestAdapterForwardMatchesFloat64Reference(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) {
			w := randWeights(s, 7)
			const pt = 4
			b, err := New(s, w, newTestPages(16, s.PageBytes(pt)), Options{Threads: 2, MaxBatchTokens: 96, PageTokens: pt})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			as := testAdapters(t, specConfig(s))
			tokens := randTokens(rand.New(rand.NewPCG(1, 2)), 29, s.Vocab)
			base := Reference(s, w, tokens)
			for i, ad := range prepare(t, b, as) {
				want := ReferenceAdapter(s, w, as[i], tokens)
				got := runPromptUnder(t, b, ad, tokens, pageIDs(0, 8), 1)
				var moved float64
				for pos := range tokens {
					var maxDiff, maxRef, maxMove float64
					for j, v := range got[pos] {
						maxDiff = math.Max(maxDiff, math.Abs(float64(v)-want[pos][j]))
						maxRef = math.Max(maxRef, math.Abs(want[pos][j]))
						maxMove = math.Max(maxMove, math.Abs(want[pos][j]-base[pos][j]))
					}
					if rel := maxDiff / maxRef; rel > 1e-4 || math.IsNaN(rel) {
						t.Fatalf("adapter %d position %d: relative error %.3g exceeds 1e-4", i, pos, rel)
					}
					moved = math.Max(moved, maxMove/maxRef)
				}
				if moved < 0.05 {
					t.Fatalf("adapter %d moves the logits by at most %.3g (relative): too weak a test", i, moved)
				}
			}
		})
	}
}

// TestAdapterBatchInvariance: chunks under three adapters and the base
// model computed in one batch, with the base model's and the adapters'
// chunks interleaved, give each chunk the logits (every row: a
// speculative chunk's) and KV pages it gets alone, bit for bit; and so do
// other prefill chunkings and thread counts.
func TestAdapterBatchInvariance(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) { checkAdapterInvariance(t, s) })
	}
}

func checkAdapterInvariance(t *testing.T, s Spec) {
	w := randWeights(s, 3)
	as := testAdapters(t, specConfig(s))
	const pt, perSeq = 4, 12
	r := rand.New(rand.NewPCG(5, 6))
	// Sequence i runs under adapter i%4 (3: the base model); two use the
	// first adapter, so a group holds rows of several chunks.
	lens := []int{23, 5, 41, 17, 9}
	under := []int{0, 1, 2, 3, 0}
	prompts := make([][]int32, len(lens))
	for i, n := range lens {
		prompts[i] = randTokens(r, n, s.Vocab)
	}
	adapterOf := func(prep []engine.Adapter, i int) engine.Adapter {
		if under[i] == 3 {
			return nil
		}
		return prep[under[i]]
	}
	// Alone: one sequence per backend call, in one chunk, every row's
	// logits.
	type result struct {
		logits []float32
		pages  [][]byte
	}
	alone := make([]result, len(prompts))
	for i, p := range prompts {
		pages := newTestPages(perSeq, s.PageBytes(pt))
		b, err := New(s, w, pages, Options{Threads: 1, MaxBatchTokens: 128, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		c := engine.Chunk{Tokens: p, Pages: pageIDs(0, perSeq), Logits: make([]float32, len(p)*s.Vocab), Adapter: adapterOf(prepare(t, b, as), i)}
		if err := b.Forward(context.Background(), []engine.Chunk{c}); err != nil {
			t.Fatal(err)
		}
		b.Close()
		alone[i] = result{c.Logits, pages}
	}
	for _, threads := range []int{1, 3} {
		pages := newTestPages(perSeq*len(prompts), s.PageBytes(pt))
		b, err := New(s, w, pages, Options{Threads: threads, MaxBatchTokens: 128, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		prep := prepare(t, b, as)
		// The batch order interleaves the groups: base, 0, 2, 1, 0.
		order := []int{3, 0, 2, 1, 4}
		batch := make([]engine.Chunk, 0, len(order))
		for _, i := range order {
			batch = append(batch, engine.Chunk{Tokens: prompts[i], Pages: pageIDs(i*perSeq, perSeq),
				Logits: make([]float32, len(prompts[i])*s.Vocab), Adapter: adapterOf(prep, i)})
		}
		if err := b.Forward(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		for k, i := range order {
			if !bitsEqual(batch[k].Logits, alone[i].logits) {
				t.Fatalf("threads %d: sequence %d (adapter %d) has other logits in the batch than alone", threads, i, under[i])
			}
			for p := range perSeq {
				if string(pages[i*perSeq+p]) != string(alone[i].pages[p]) {
					t.Fatalf("threads %d: sequence %d KV page %d differs between batched and alone", threads, i, p)
				}
			}
		}
		// Prefill in chunks of 7 then decode-like steps of one token, all
		// sequences together, for the same last-row logits.
		pages2 := newTestPages(perSeq*len(prompts), s.PageBytes(pt))
		b2, err := New(s, w, pages2, Options{Threads: threads, MaxBatchTokens: 128, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		prep2 := prepare(t, b2, as)
		last := make([][]float32, len(prompts))
		for start := 0; ; start += 7 {
			var step []engine.Chunk
			var who []int
			for i, p := range prompts {
				if start < len(p) {
					end := min(start+7, len(p))
					c := engine.Chunk{Tokens: p[start:end], Start: start, Pages: pageIDs(i*perSeq, perSeq), Adapter: adapterOf(prep2, i)}
					if end == len(p) {
						c.Logits = make([]float32, s.Vocab)
					}
					step, who = append(step, c), append(who, i)
				}
			}
			if len(step) == 0 {
				break
			}
			if err := b2.Forward(context.Background(), step); err != nil {
				t.Fatal(err)
			}
			for k, c := range step {
				if c.Logits != nil {
					last[who[k]] = c.Logits
				}
			}
		}
		b2.Close()
		b.Close()
		for i := range prompts {
			n := len(prompts[i])
			if !bitsEqual(last[i], alone[i].logits[(n-1)*s.Vocab:]) {
				t.Fatalf("threads %d: sequence %d (adapter %d): chunked prefill gives other logits", threads, i, under[i])
			}
		}
	}
	// The adapters change the output: the same prompt under each gives
	// other logits than under the base model.
	pages := newTestPages(perSeq*4, s.PageBytes(pt))
	b, err := New(s, w, pages, Options{Threads: 2, MaxBatchTokens: 128, PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prep := append(prepare(t, b, as), nil)
	batch := make([]engine.Chunk, len(prep))
	for i, ad := range prep {
		batch[i] = engine.Chunk{Tokens: prompts[0], Pages: pageIDs(i*perSeq, perSeq), Logits: make([]float32, s.Vocab), Adapter: ad}
	}
	if err := b.Forward(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for i := range as {
		if bitsEqual(batch[i].Logits, batch[len(as)].Logits) {
			t.Fatalf("adapter %d gives the base model's logits", i)
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestAdapterHeldCompactly: an adapter whose values are all bfloat16 (or
// float16) is held in half the memory of float32; one with other values
// in float32.
func TestAdapterHeldCompactly(t *testing.T) {
	s := testSpec()
	b, err := New(s, randWeights(s, 1), newTestPages(1, s.PageBytes(4)), Options{Threads: 1, MaxBatchTokens: 4, PageTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	as := testAdapters(t, specConfig(s))
	for i, p := range prepare(t, b, as) {
		want := as[i].Bytes
		if i > 0 {
			want /= 2
		}
		if p.Bytes() != want {
			t.Errorf("adapter %d is held in %d bytes, want %d", i, p.Bytes(), want)
		}
	}
}

// TestAdapterRefusals: an adapter another backend prepared, or one for
// another model, is refused rather than served wrong.
func TestAdapterRefusals(t *testing.T) {
	s := testSpec()
	const pt = 4
	b, err := New(s, randWeights(s, 1), newTestPages(8, s.PageBytes(pt)), Options{Threads: 1, MaxBatchTokens: 16, PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := engine.Chunk{Tokens: []int32{1, 2}, Pages: pageIDs(0, 1), Adapter: foreignAdapter{}}
	if err := b.Forward(context.Background(), []engine.Chunk{c}); err == nil {
		t.Error("Forward accepted an adapter another backend prepared")
	}
	wide := s
	wide.Hidden *= 2
	if _, err := b.PrepareAdapter(testAdapters(t, specConfig(wide))[0]); err == nil {
		t.Error("PrepareAdapter accepted an adapter of another model's shapes")
	}
	deep := s
	deep.Layers++
	if _, err := b.PrepareAdapter(testAdapters(t, specConfig(deep))[1]); err == nil {
		t.Error("PrepareAdapter accepted an adapter of another layer count")
	}
}

type foreignAdapter struct{}

func (foreignAdapter) Hash() string { return fmt.Sprintf("%064x", 1) }
func (foreignAdapter) Bytes() int64 { return 0 }

// TestPublishedFamiliesUnderAdapters runs the tiny preset shaped as each
// family (Llama, Mistral, Qwen2 with q/k/v biases, Qwen3 with q/k norms)
// through the engine with the same prompt under the base model and three
// adapters batched together: every sequence's greedy tokens are the
// float64 reference's with its adapter merged, and each adapter's differ
// from the base model's.
func TestPublishedFamiliesUnderAdapters(t *testing.T) {
	for _, family := range []string{"llama", "mistral", "qwen2", "qwen3"} {
		t.Run(family, func(t *testing.T) {
			cfg, err := model.FamilyPresetConfig(model.PresetTiny, family)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxPositionEmbeddings = 1024
			dir := t.TempDir()
			if err := model.WriteRandom(dir, cfg, 5, model.BF16); err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			spec := SpecFor(&m.Config)
			w, err := WeightsOf(m)
			if err != nil {
				t.Fatal(err)
			}
			as := append([]*lora.Adapter{nil}, testAdapters(t, &m.Config)...)
			p := randTokens(rand.New(rand.NewPCG(21, 22)), 30, spec.Vocab)
			gens := runFamily(t, m, spec, w, [][]int32{p, p, p, p}, as)
			for i := 1; i < len(gens); i++ {
				if slices.Equal(gens[i], gens[0]) {
					t.Errorf("adapter %d generates the base model's tokens %v", i, gens[0])
				}
			}
		})
	}
}

// BenchmarkLoRA is a forward step of a batch of 16 sequences through
// the small preset's geometry (12 layers, f32 weights, 32000-token LM
// head) on the base model and with the sequences spread over 8
// adapters of rank 16 on every projection (bf16 values, as PEFT saves a
// bf16-trained adapter), interleaved: "lora/base" is the adapter batch's
// throughput over the base batch's (fastest runs of each; goal ≥ 0.8).
// decode: one token per sequence; prefill: 32 each.
func BenchmarkLoRA(b *testing.B) {
	s := smallAttnSpec()
	s.Layers, s.Intermediate, s.Vocab = 12, 2048, 32000
	s.InvFreq = make([]float64, s.HeadDim/2)
	const pt, seqs, adapters = 16, 16, 8
	w := randWeights(s, 5)
	base := specConfig(s)
	for _, tc := range []struct {
		name   string
		tokens int
	}{{"decode", 1}, {"prefill", 32}} {
		b.Run(tc.name, func(b *testing.B) {
			perSeq := (64 + tc.tokens + pt - 1) / pt
			be, err := New(s, w, newTestPages(seqs*perSeq, s.PageBytes(pt)), Options{Threads: 2, MaxBatchTokens: seqs * tc.tokens, PageTokens: pt})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			ads := make([]engine.Adapter, adapters)
			for i := range ads {
				cj, wt, err := lora.Random(base, lora.Config{Rank: 16, Alpha: 32, Targets: lora.Modules[:]}, 0.02, uint64(i+1))
				if err != nil {
					b.Fatal(err)
				}
				a, err := lora.Parse(cj, wt, base)
				if err != nil {
					b.Fatal(err)
				}
				for _, l := range a.Layers {
					for _, p := range l {
						for _, v := range [][]float32{p.A, p.B} {
							u := make([]uint16, len(v))
							kernels.F32ToBF16(u, v)
							kernels.BF16ToF32(v, u)
						}
					}
				}
				if ads[i], err = be.PrepareAdapter(a); err != nil {
					b.Fatal(err)
				}
			}
			batch := make([]engine.Chunk, seqs)
			tokens := randTokens(rand.New(rand.NewPCG(1, 1)), tc.tokens, s.Vocab)
			for i := range batch {
				batch[i] = engine.Chunk{Tokens: tokens, Start: 64, Pages: pageIDs(i*perSeq, perSeq), Logits: make([]float32, s.Vocab)}
			}
			step := func(under bool) time.Duration {
				for i := range batch {
					batch[i].Adapter = nil
					if under {
						batch[i].Adapter = ads[i%adapters]
					}
				}
				start := time.Now()
				if err := be.Forward(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			step(true) // sizes the adapter scratch
			bestBase, bestLoRA := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			b.ResetTimer()
			for range b.N {
				bestBase = min(bestBase, step(false))
				bestLoRA = min(bestLoRA, step(true))
			}
			b.ReportMetric(float64(bestBase.Microseconds()), "base-µs")
			b.ReportMetric(float64(bestLoRA.Microseconds()), "lora-µs")
			b.ReportMetric(bestBase.Seconds()/bestLoRA.Seconds(), "lora/base")
		})
	}
}
