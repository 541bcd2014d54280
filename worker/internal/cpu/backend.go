// Package cpu is warden's pure-Go compute backend: a Llama-family forward
// pass (with Qwen2's q/k/v biases and Qwen3's per-head q/k norms) in
// float32 over the paged KV pool, on the SIMD kernels of
// worker/internal/kernels.
//
// Every output element is computed by one deterministic code path whatever
// the batch, the prefill chunking or the thread count (see the kernels
// package), so a sequence's greedy tokens do not depend on its neighbours.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// Spec is the model geometry the backend needs.
type Spec struct {
	Hidden, Intermediate, Layers int
	Heads, KVHeads, HeadDim      int
	Vocab, MaxPositions          int
	RMSNormEps                   float32
	// InvFreq holds the HeadDim/2 RoPE inverse frequencies (scaling
	// already applied).
	InvFreq []float64
	// QKVBias: the q, k and v projections add a bias (Qwen2).
	QKVBias bool
	// QKNorm: every head of q and k is RMS-normalised over HeadDim (eps
	// RMSNormEps) before RoPE (Qwen3).
	QKNorm bool
}

// KVDim is the width of one position's K (or V) in one layer.
func (s Spec) KVDim() int { return s.KVHeads * s.HeadDim }

// PageBytes is the size of one KV page of pageTokens positions in the
// layout [layer][k|v][slot][kv_heads*head_dim]float32.
func (s Spec) PageBytes(pageTokens int) int { return s.Layers * 2 * pageTokens * s.KVDim() * 4 }

// LayerWeights are one decoder layer's tensors in Hugging Face layout
// ([out_features, in_features], row-major). The projection matrices may
// be in any kernels.Format; norms and biases are float32.
type LayerWeights struct {
	AttnNorm, MLPNorm []float32
	Wq, Wk, Wv, Wo    *kernels.Matrix
	WGate, WUp, WDown *kernels.Matrix
	// Bq, Bk and Bv are the projection biases when Spec.QKVBias, else nil.
	Bq, Bk, Bv []float32
	// QNorm and KNorm are the per-head norm weights ([HeadDim]) when
	// Spec.QKNorm, else nil.
	QNorm, KNorm []float32
}

// Weights are the whole model's tensors. LMHead may alias Embed (tied).
type Weights struct {
	Embed  *kernels.Matrix
	Layers []LayerWeights
	Norm   []float32
	LMHead *kernels.Matrix
}

// Format is the format of the layers' projection matrices (the one the
// decode matrix-vector products stream), F32 for a model without layers.
func (w *Weights) Format() kernels.Format {
	if len(w.Layers) == 0 || w.Layers[0].Wq == nil {
		return kernels.F32
	}
	return w.Layers[0].Wq.Format()
}

// StreamedBytes is what one decode step reads of the matrices: every
// projection and the LM head once (the embedding row is negligible).
func (w *Weights) StreamedBytes() int64 {
	n := w.LMHead.Bytes()
	add := func(m *kernels.Matrix) {
		if m != nil {
			n += m.Bytes()
		}
	}
	for _, l := range w.Layers {
		for _, m := range []*kernels.Matrix{l.Wq, l.Wk, l.Wv, l.Wo, l.WGate, l.WUp, l.WDown} {
			add(m)
		}
	}
	return n
}

// Pages gives the backend the bytes of KV pages; *kvpool.Pool satisfies it.
type Pages interface {
	Data(id kvpool.PageID) []byte
}

var _ Pages = (*kvpool.Pool)(nil)

// Options configure a Backend.
type Options struct {
	// Threads for the kernels' pool (0 = 1).
	Threads int
	// Spin is how long the pool's idle threads spin before blocking (0:
	// kernels.DefaultSpin).
	Spin time.Duration
	// MaxBatchTokens bounds the tokens of one Forward call.
	MaxBatchTokens int
	// PageTokens is the KV page size.
	PageTokens int
	// DType, when set (F32, F16 or BF16), converts the embedding, the LM
	// head and the projections to it at load (FromModel, ConvertWeights);
	// "" keeps the file's element type.
	DType model.DType
	// Quantize selects Q8 weights for the projections and the LM head
	// (FromModel); false keeps the file's element type.
	Quantize bool
	// BF16Dot multiplies the BF16 projections and LM head in bf16
	// products (FromModel, BF16Dot): the bf16 numerics mode, faster and
	// not exact; false keeps exact widening.
	BF16Dot bool
}

// Backend implements engine.Backend on the CPU.
type Backend struct {
	spec  Spec
	w     Weights
	pages Pages
	opt   Options
	pool  *kernels.Pool
	scale float32

	ropeCos, ropeSin []float32 // [MaxPositions][HeadDim/2]

	// Scratch, sized for MaxBatchTokens rows.
	x, h, q, k, v, att, gate, up []float32
	logits                       []float32
	scratch                      []attnScratch // per attention worker
	tiles                        []attnTile

	// Per-call state read by the pool's workers.
	batch            []engine.Chunk
	rowChunk, rowPos []int32 // each batch row's chunk and position
	rowJob           rowJob
	layer            int
	nextTile         atomic.Int64
	attnFunc         func(lo, hi int)
	lora             loraState    // the batch's adapter rows (lora.go)
	outs             [3][]float32 // a layer's product outputs, reused
}

var (
	_ engine.Backend      = (*Backend)(nil)
	_ engine.HiddenStates = (*Backend)(nil)
)

// ErrShape reports weights that do not match the Spec.
var ErrShape = errors.New("cpu: weight shape mismatch")

// New builds a backend. It checks every weight's length against spec.
func New(spec Spec, w Weights, pages Pages, opt Options) (*Backend, error) {
	if err := checkWeights(spec, w); err != nil {
		return nil, err
	}
	if opt.MaxBatchTokens <= 0 || opt.PageTokens <= 0 {
		return nil, fmt.Errorf("cpu: MaxBatchTokens and PageTokens must be > 0")
	}
	if opt.Threads <= 0 {
		opt.Threads = 1
	}
	b := &Backend{
		spec:  spec,
		w:     w,
		pages: pages,
		opt:   opt,
		pool:  kernels.NewPool(opt.Threads, opt.Spin),
		scale: float32(1 / math.Sqrt(float64(spec.HeadDim))),
	}
	b.buildRope()
	t := opt.MaxBatchTokens
	qDim := spec.Heads * spec.HeadDim
	b.x = make([]float32, t*spec.Hidden)
	b.h = make([]float32, t*spec.Hidden)
	b.q = make([]float32, t*qDim)
	b.k = make([]float32, t*spec.KVDim())
	b.v = make([]float32, t*spec.KVDim())
	b.att = make([]float32, t*qDim)
	b.gate = make([]float32, t*spec.Intermediate)
	b.up = make([]float32, t*spec.Intermediate)
	b.scratch = make([]attnScratch, opt.Threads)
	for i := range b.scratch {
		b.scratch[i] = newAttnScratch(spec)
	}
	b.tiles = make([]attnTile, 0, t*spec.KVHeads)
	b.rowChunk = make([]int32, t)
	b.rowPos = make([]int32, t)
	b.attnFunc = b.attendRange
	return b, nil
}

// WeightFormat names the format of the projection weights (f32, f16,
// bf16 or q8).
func (b *Backend) WeightFormat() string { return b.w.Format().String() }

// StreamedWeightBytes is what one decode step reads of the weights.
func (b *Backend) StreamedWeightBytes() int64 { return b.w.StreamedBytes() }

// Close releases the kernel threads.
func (b *Backend) Close() { b.pool.Close() }

// VocabSize implements engine.Backend.
func (b *Backend) VocabSize() int { return b.spec.Vocab }

// HiddenSize implements engine.HiddenStates.
func (b *Backend) HiddenSize() int { return b.spec.Hidden }

// MaxBatchTokens implements engine.Backend.
func (b *Backend) MaxBatchTokens() int { return b.opt.MaxBatchTokens }

func checkWeights(s Spec, w Weights) error {
	if s.HeadDim%2 != 0 || s.Heads%s.KVHeads != 0 || len(s.InvFreq) != s.HeadDim/2 {
		return fmt.Errorf("%w: head_dim %d, heads %d, kv heads %d, %d rope frequencies",
			ErrShape, s.HeadDim, s.Heads, s.KVHeads, len(s.InvFreq))
	}
	check := func(name string, got []float32, want int) error {
		if len(got) != want {
			return fmt.Errorf("%w: %s has %d elements, want %d", ErrShape, name, len(got), want)
		}
		return nil
	}
	checkM := func(name string, got *kernels.Matrix, rows, cols int) error {
		if got == nil || got.Rows() != rows || got.Cols() != cols {
			return fmt.Errorf("%w: %s is not %d×%d", ErrShape, name, rows, cols)
		}
		return nil
	}
	qDim, kv := s.Heads*s.HeadDim, s.KVDim()
	errs := []error{
		checkM("embed", w.Embed, s.Vocab, s.Hidden),
		check("norm", w.Norm, s.Hidden),
		checkM("lm_head", w.LMHead, s.Vocab, s.Hidden),
	}
	if len(w.Layers) != s.Layers {
		errs = append(errs, fmt.Errorf("%w: %d layers, want %d", ErrShape, len(w.Layers), s.Layers))
	}
	for i, l := range w.Layers {
		p := fmt.Sprintf("layer %d ", i)
		errs = append(errs,
			check(p+"attn_norm", l.AttnNorm, s.Hidden),
			checkM(p+"q_proj", l.Wq, qDim, s.Hidden),
			checkM(p+"k_proj", l.Wk, kv, s.Hidden),
			checkM(p+"v_proj", l.Wv, kv, s.Hidden),
			checkM(p+"o_proj", l.Wo, s.Hidden, qDim),
			check(p+"mlp_norm", l.MLPNorm, s.Hidden),
			checkM(p+"gate_proj", l.WGate, s.Intermediate, s.Hidden),
			checkM(p+"up_proj", l.WUp, s.Intermediate, s.Hidden),
			checkM(p+"down_proj", l.WDown, s.Hidden, s.Intermediate),
		)
		// Absent optional tensors must be nil (want 0), so a spec and its
		// weights cannot disagree about the family.
		bias, norm := 0, 0
		if s.QKVBias {
			bias = 1
		}
		if s.QKNorm {
			norm = 1
		}
		errs = append(errs,
			check(p+"q_proj.bias", l.Bq, bias*qDim),
			check(p+"k_proj.bias", l.Bk, bias*kv),
			check(p+"v_proj.bias", l.Bv, bias*kv),
			check(p+"q_norm", l.QNorm, norm*s.HeadDim),
			check(p+"k_norm", l.KNorm, norm*s.HeadDim),
		)
	}
	return errors.Join(errs...)
}

// buildRope tabulates cos and sin for every position, computed in float64
// and rounded once, so prefill and decode use the same values.
func (b *Backend) buildRope() {
	half := b.spec.HeadDim / 2
	n := b.spec.MaxPositions * half
	b.ropeCos = make([]float32, n)
	b.ropeSin = make([]float32, n)
	for p := 0; p < b.spec.MaxPositions; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) * b.spec.InvFreq[i]
			b.ropeCos[p*half+i] = float32(math.Cos(a))
			b.ropeSin[p*half+i] = float32(math.Sin(a))
		}
	}
}

// Forward implements engine.Backend.
func (b *Backend) Forward(ctx context.Context, batch []engine.Chunk) error {
	s := &b.spec
	rows := 0
	for i, c := range batch {
		if end := c.Start + len(c.Tokens); end > s.MaxPositions {
			return fmt.Errorf("cpu: chunk %d reaches position %d, beyond the model's %d", i, end, s.MaxPositions)
		}
		if need := (c.Start + len(c.Tokens) + b.opt.PageTokens - 1) / b.opt.PageTokens; len(c.Pages) < need {
			return fmt.Errorf("cpu: chunk %d has %d pages, needs %d", i, len(c.Pages), need)
		}
		if n := len(c.Hidden) / s.Hidden; c.Hidden != nil && (len(c.Hidden)%s.Hidden != 0 || n < 1 || n > len(c.Tokens)) {
			return fmt.Errorf("cpu: chunk %d's hidden buffer has %d entries, want 1 to %d rows of %d", i, len(c.Hidden), len(c.Tokens), s.Hidden)
		}
		rows += len(c.Tokens)
	}
	if rows > b.opt.MaxBatchTokens {
		return fmt.Errorf("cpu: batch of %d tokens exceeds %d", rows, b.opt.MaxBatchTokens)
	}
	b.batch = batch
	defer func() { b.batch = nil }()

	hid := s.Hidden
	r := 0
	for ci, c := range batch {
		for i, t := range c.Tokens {
			if t < 0 || int(t) >= s.Vocab {
				return fmt.Errorf("cpu: token %d outside the vocabulary", t)
			}
			b.w.Embed.Row(int(t), b.x[r*hid:(r+1)*hid])
			b.rowChunk[r], b.rowPos[r] = int32(ci), int32(c.Start+i)
			r++
		}
	}
	if err := b.planLoRA(batch); err != nil {
		return err
	}
	b.buildTiles()
	for l := range b.w.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.layerForward(l, rows)
	}
	if n := len(b.w.Layers); n > 0 {
		b.runStage(stageResidual, n-1, rows)
	}
	return b.computeLogits(batch)
}

func (b *Backend) layerForward(l, rows int) {
	s := &b.spec
	w := &b.w.Layers[l]
	hid, qDim, kvDim, inter := s.Hidden, s.Heads*s.HeadDim, s.KVDim(), s.Intermediate
	h := b.h[:rows*hid]
	b.runStage(stageAttnIn, l, rows)
	q, k, v := b.q[:rows*qDim], b.k[:rows*kvDim], b.v[:rows*kvDim]
	b.outs[0], b.outs[1], b.outs[2] = q, k, v
	b.pool.MatMulTWShared(h, rows, b.outs[:3], []*kernels.Matrix{w.Wq, w.Wk, w.Wv})
	b.applyLoRA(l, h, hid, stageModsQKV, b.outs[:3])
	b.runStage(stageQKV, l, rows)
	b.layer = l
	b.attend()
	att := b.att[:rows*qDim]
	b.pool.MatMulTW(h, att, w.Wo, rows)
	b.outs[0] = h
	b.applyLoRA(l, att, qDim, stageModsO, b.outs[:1])
	b.runStage(stageMLPIn, l, rows)
	gate, up := b.gate[:rows*inter], b.up[:rows*inter]
	b.outs[0], b.outs[1] = gate, up
	b.pool.MatMulTWShared(h, rows, b.outs[:2], []*kernels.Matrix{w.WGate, w.WUp})
	b.applyLoRA(l, h, hid, stageModsGateUp, b.outs[:2])
	b.runStage(stageSiLU, l, rows)
	b.pool.MatMulTW(h, gate, w.WDown, rows)
	b.outs[0] = h
	b.applyLoRA(l, gate, inter, stageModsDown, b.outs[:1])
}

// computeLogits normalises the rows of every chunk that wants logits (its
// last len(Logits)/Vocab positions) and multiplies them by the LM head;
// the normalised rows a chunk's Hidden asks for go there.
func (b *Backend) computeLogits(batch []engine.Chunk) error {
	s := &b.spec
	hid := s.Hidden
	m := 0
	r := 0
	for _, c := range batch {
		r += len(c.Tokens)
		if c.Hidden != nil {
			n := len(c.Hidden) / hid
			for i, row := 0, r-n; row < r; i, row = i+1, row+1 {
				kernels.RMSNorm(c.Hidden[i*hid:(i+1)*hid], b.x[row*hid:(row+1)*hid], b.w.Norm, s.RMSNormEps)
			}
		}
		if c.Logits == nil {
			continue
		}
		n := len(c.Logits) / s.Vocab
		if len(c.Logits)%s.Vocab != 0 || n < 1 || n > len(c.Tokens) {
			return fmt.Errorf("cpu: logits buffer has %d entries, want 1 to %d rows of %d", len(c.Logits), len(c.Tokens), s.Vocab)
		}
		for row := r - n; row < r; row++ {
			kernels.RMSNorm(b.h[m*hid:(m+1)*hid], b.x[row*hid:(row+1)*hid], b.w.Norm, s.RMSNormEps)
			m++
		}
	}
	if m == 0 {
		return nil
	}
	if need := m * s.Vocab; len(b.logits) < need {
		b.logits = make([]float32, need)
	}
	b.pool.MatMulTW(b.logits[:m*s.Vocab], b.h[:m*hid], b.w.LMHead, m)
	at := 0
	for _, c := range batch {
		at += copy(c.Logits, b.logits[at:])
	}
	return nil
}

// asFloats views a page's bytes as float32s (pages are 4-byte aligned).
func asFloats(p []byte) []float32 {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&p[0])), len(p)/4)
}
