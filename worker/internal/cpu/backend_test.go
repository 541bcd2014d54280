package cpu

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
)

// testPages is a plain page store for backend tests.
type testPages [][]byte

func (p testPages) Data(id kvpool.PageID) []byte { return p[id] }

func newTestPages(n, pageBytes int) testPages {
	p := make(testPages, n)
	for i := range p {
		p[i] = make([]byte, pageBytes)
	}
	return p
}

func testSpec() Spec {
	s := Spec{Hidden: 32, Intermediate: 72, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: 61, MaxPositions: 96, RMSNormEps: 1e-5}
	s.InvFreq = make([]float64, s.HeadDim/2)
	for i := range s.InvFreq {
		s.InvFreq[i] = 1 / math.Pow(10000, float64(2*i)/float64(s.HeadDim))
	}
	return s
}

// familySpecs are testSpec with each combination of the family features:
// plain (Llama, Mistral), q/k/v bias (Qwen2), q/k norm with a head_dim
// other than hidden/heads (Qwen3), and both.
func familySpecs() map[string]Spec {
	plain := testSpec()
	bias, norm := plain, plain
	bias.QKVBias = true
	norm.QKNorm = true
	norm.HeadDim = 12
	norm.InvFreq = make([]float64, norm.HeadDim/2)
	for i := range norm.InvFreq {
		norm.InvFreq[i] = 1 / math.Pow(1e6, float64(2*i)/float64(norm.HeadDim))
	}
	both := norm
	both.QKVBias = true
	return map[string]Spec{"llama": plain, "qkv-bias": bias, "qk-norm": norm, "bias+norm": both}
}

func randWeights(s Spec, seed uint64) Weights {
	r := rand.New(rand.NewPCG(seed, 1))
	raw := func(out, in int) []float32 {
		m := make([]float32, out*in)
		std := 1 / math.Sqrt(float64(in))
		for i := range m {
			m[i] = float32(r.NormFloat64() * std)
		}
		return m
	}
	mat := func(out, in int) *kernels.Matrix { return kernels.NewF32(out, in, raw(out, in)) }
	norm := func() []float32 {
		v := make([]float32, s.Hidden)
		for i := range v {
			v[i] = float32(1 + 0.1*r.NormFloat64())
		}
		return v
	}
	vec := func(n int, mean, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + std*r.NormFloat64())
		}
		return v
	}
	qDim := s.Heads * s.HeadDim
	w := Weights{Embed: mat(s.Vocab, s.Hidden), Norm: norm()}
	for range s.Layers {
		l := LayerWeights{
			AttnNorm: norm(), Wq: mat(qDim, s.Hidden), Wk: mat(s.KVDim(), s.Hidden), Wv: mat(s.KVDim(), s.Hidden),
			Wo: mat(s.Hidden, qDim), MLPNorm: norm(),
			WGate: mat(s.Intermediate, s.Hidden), WUp: mat(s.Intermediate, s.Hidden), WDown: mat(s.Hidden, s.Intermediate),
		}
		if s.QKVBias {
			l.Bq, l.Bk, l.Bv = vec(qDim, 0, 0.5), vec(s.KVDim(), 0, 0.5), vec(s.KVDim(), 0, 0.5)
		}
		if s.QKNorm {
			l.QNorm, l.KNorm = vec(s.HeadDim, 1.5, 0.2), vec(s.HeadDim, 1.5, 0.2)
		}
		w.Layers = append(w.Layers, l)
	}
	lm := raw(s.Vocab, s.Hidden)
	for i := range lm {
		lm[i] *= 4
	}
	w.LMHead = kernels.NewF32(s.Vocab, s.Hidden, lm)
	return w
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(vocab))
	}
	return t
}

// runPrompt feeds tokens through b in chunks of chunk tokens and returns
// the logits after every chunk's last position.
func runPrompt(t *testing.T, b *Backend, tokens []int32, pages []kvpool.PageID, chunk int) map[int][]float32 {
	t.Helper()
	return runPromptUnder(t, b, nil, tokens, pages, chunk)
}

// runPromptUnder is runPrompt under adapter ad (nil: the base model).
func runPromptUnder(t *testing.T, b *Backend, ad engine.Adapter, tokens []int32, pages []kvpool.PageID, chunk int) map[int][]float32 {
	t.Helper()
	out := map[int][]float32{}
	for start := 0; start < len(tokens); start += chunk {
		end := min(start+chunk, len(tokens))
		logits := make([]float32, b.VocabSize())
		c := engine.Chunk{Tokens: tokens[start:end], Start: start, Pages: pages, Logits: logits, Adapter: ad}
		if err := b.Forward(context.Background(), []engine.Chunk{c}); err != nil {
			t.Fatal(err)
		}
		out[end-1] = logits
	}
	return out
}

func pageIDs(first, n int) []kvpool.PageID {
	ids := make([]kvpool.PageID, n)
	for i := range ids {
		ids[i] = kvpool.PageID(first + i)
	}
	return ids
}

func TestForwardMatchesFloat64Reference(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) {
			w := randWeights(s, 7)
			const pt = 4
			pages := newTestPages(64, s.PageBytes(pt))
			b, err := New(s, w, pages, Options{Threads: 2, MaxBatchTokens: 96, PageTokens: pt})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			tokens := randTokens(rand.New(rand.NewPCG(1, 2)), 37, s.Vocab)
			want := Reference(s, w, tokens)
			got := runPrompt(t, b, tokens, pageIDs(0, 10), 1) // one position per step: every position's logits
			for pos := range tokens {
				var maxDiff, maxRef float64
				for j, v := range got[pos] {
					maxDiff = math.Max(maxDiff, math.Abs(float64(v)-want[pos][j]))
					maxRef = math.Max(maxRef, math.Abs(want[pos][j]))
				}
				if rel := maxDiff / maxRef; rel > 1e-4 || math.IsNaN(rel) {
					t.Fatalf("position %d: relative error %.3g exceeds 1e-4", pos, rel)
				}
			}
		})
	}
}

func TestChunkingAndBatchingAreBitIdentical(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) { checkBitIdentical(t, s, randWeights(s, 3)) })
	}
}

// checkBitIdentical checks that a prompt's logits and KV pages do not
// depend on the prefill chunking, the thread count or batch neighbours.
func checkBitIdentical(t *testing.T, s Spec, w Weights) {
	const pt = 4
	r := rand.New(rand.NewPCG(5, 6))
	tokens := randTokens(r, 41, s.Vocab)
	var ref []float32
	var refPages [][]byte
	for i, cfg := range []struct{ chunk, threads int }{{41, 1}, {1, 1}, {7, 2}, {16, 3}, {41, 4}} {
		pages := newTestPages(12, s.PageBytes(pt))
		b, err := New(s, w, pages, Options{Threads: cfg.threads, MaxBatchTokens: 96, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		got := runPrompt(t, b, tokens, pageIDs(0, 11), cfg.chunk)[len(tokens)-1]
		b.Close()
		if i == 0 {
			ref, refPages = got, pages
			continue
		}
		for j := range ref {
			if math.Float32bits(got[j]) != math.Float32bits(ref[j]) {
				t.Fatalf("chunk %d threads %d: logit %d = %v, want %v (bit-identical)", cfg.chunk, cfg.threads, j, got[j], ref[j])
			}
		}
		for p := 0; p < 11; p++ {
			if string(pages[p]) != string(refPages[p]) {
				t.Fatalf("chunk %d threads %d: KV page %d differs", cfg.chunk, cfg.threads, p)
			}
		}
	}

	// The same chunk computed alone and inside a batch with neighbours.
	pages := newTestPages(40, s.PageBytes(pt))
	b, err := New(s, w, pages, Options{Threads: 2, MaxBatchTokens: 96, PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	alone := runPrompt(t, b, tokens, pageIDs(0, 11), 41)[len(tokens)-1]
	other1, other2 := randTokens(r, 9, s.Vocab), randTokens(r, 23, s.Vocab)
	batch := []engine.Chunk{
		{Tokens: other1, Pages: pageIDs(11, 3), Logits: make([]float32, s.Vocab)},
		{Tokens: tokens, Pages: pageIDs(14, 11), Logits: make([]float32, s.Vocab)},
		{Tokens: other2, Pages: pageIDs(25, 6)},
	}
	if err := b.Forward(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for j := range alone {
		if math.Float32bits(alone[j]) != math.Float32bits(batch[1].Logits[j]) {
			t.Fatalf("logit %d differs between alone and batched", j)
		}
	}
}

func TestForwardRejectsBadChunks(t *testing.T) {
	s := testSpec()
	const pt = 4
	b, err := New(s, randWeights(s, 1), newTestPages(8, s.PageBytes(pt)), Options{Threads: 1, MaxBatchTokens: 16, PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	cases := map[string]engine.Chunk{
		"too few pages":      {Tokens: make([]int32, 9), Pages: pageIDs(0, 2)},
		"token out of vocab": {Tokens: []int32{int32(s.Vocab)}, Pages: pageIDs(0, 1)},
		"beyond positions":   {Tokens: []int32{1}, Start: s.MaxPositions, Pages: pageIDs(0, 8)},
		"too many tokens":    {Tokens: make([]int32, 17), Pages: pageIDs(0, 8)},
	}
	for name, c := range cases {
		if err := b.Forward(ctx, []engine.Chunk{c}); err == nil {
			t.Errorf("%s: Forward succeeded", name)
		}
	}
	bad := randWeights(s, 1)
	bad.Layers[1].Wk = kernels.NewF32(1, 10, make([]float32, 10))
	if _, err := New(s, bad, newTestPages(1, 1), Options{MaxBatchTokens: 1, PageTokens: 1}); err == nil {
		t.Error("New accepted a wrong-size k_proj")
	}
	// Weights and spec must agree on the family's tensors.
	qwen3 := familySpecs()["qk-norm"]
	noNorm := randWeights(qwen3, 1)
	noNorm.Layers[1].KNorm = nil
	if _, err := New(qwen3, noNorm, newTestPages(1, 1), Options{MaxBatchTokens: 1, PageTokens: 1}); err == nil {
		t.Error("New accepted a q/k-norm spec with weights lacking the norms")
	}
	withBias := randWeights(familySpecs()["qkv-bias"], 1)
	if _, err := New(s, withBias, newTestPages(1, 1), Options{MaxBatchTokens: 1, PageTokens: 1}); err == nil {
		t.Error("New accepted biases the spec does not have")
	}
}

func TestDecodeStepDoesNotAllocate(t *testing.T) {
	for name, s := range familySpecs() {
		t.Run(name, func(t *testing.T) { checkDecodeAllocs(t, s) })
	}
}

func checkDecodeAllocs(t *testing.T, s Spec) {
	const pt = 4
	pages := newTestPages(64, s.PageBytes(pt))
	b, err := New(s, randWeights(s, 2), pages, Options{Threads: 2, MaxBatchTokens: 96, PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	batch := make([]engine.Chunk, 4)
	tok := make([][1]int32, len(batch))
	for i := range batch {
		batch[i] = engine.Chunk{Tokens: tok[i][:], Start: 10 + i, Pages: pageIDs(i*8, 8), Logits: make([]float32, s.Vocab)}
	}
	ctx := context.Background()
	if err := b.Forward(ctx, batch); err != nil { // warm up lazily sized buffers
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := b.Forward(ctx, batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("a decode step allocates %.1f times", allocs)
	}
	// Nor under adapters, mixed with the base model.
	for i, ad := range prepare(t, b, testAdapters(t, specConfig(s))) {
		batch[i].Adapter = ad
	}
	if err := b.Forward(ctx, batch); err != nil { // sizes the adapter scratch
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(20, func() {
		if err := b.Forward(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("a decode step under adapters allocates %.1f times", allocs)
	}
}

// TestComputeSpin: the backend's pool spins as Options.Spin says
// (kernels.DefaultSpin when 0), and a spin so short that its threads
// block between loops computes the same logits, bit for bit.
func TestComputeSpin(t *testing.T) {
	s := familySpecs()["llama"]
	w := randWeights(s, 7)
	const pt = 4
	tokens := randTokens(rand.New(rand.NewPCG(1, 2)), 37, s.Vocab)
	var logits []map[int][]float32
	for _, c := range []struct{ spin, want time.Duration }{{0, kernels.DefaultSpin}, {time.Microsecond, time.Microsecond}} {
		b, err := New(s, w, newTestPages(16, s.PageBytes(pt)), Options{Threads: 2, Spin: c.spin, MaxBatchTokens: 96, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		if got := b.pool.Spin(); got != c.want {
			t.Fatalf("Options.Spin %v: the pool spins %v, want %v", c.spin, got, c.want)
		}
		logits = append(logits, runPrompt(t, b, tokens, pageIDs(0, 10), 5))
		b.Close()
	}
	for pos, want := range logits[0] {
		for j, v := range logits[1][pos] {
			if math.Float32bits(v) != math.Float32bits(want[j]) {
				t.Fatalf("position %d logit %d: %v with a 1µs spin, %v with the default", pos, j, v, want[j])
			}
		}
	}
}
