package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// TestTinyPresetMatchesFloat64Reference runs the real tiny preset, in each
// weight dtype, against the float64 reference computed from the float32
// weights: f32 within 1e-4, bf16 and f16 within their precision.
func TestTinyPresetMatchesFloat64Reference(t *testing.T) {
	load := func(dt model.DType) *model.Model {
		dir := t.TempDir()
		if err := model.Init(dir, model.PresetTiny, 1, dt); err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	ref32 := load(model.F32)
	spec := SpecFor(&ref32.Config)
	w32, err := WeightsOf(ref32)
	if err != nil {
		t.Fatal(err)
	}
	tokens := randTokens(rand.New(rand.NewPCG(11, 12)), 70, spec.Vocab)
	want := Reference(spec, w32, tokens)

	for _, c := range []struct {
		dt    model.DType
		bound float64
	}{{model.F32, 1e-4}, {model.F16, 1e-2}, {model.BF16, 6e-2}} {
		m := ref32
		if c.dt != model.F32 {
			m = load(c.dt)
		}
		const pt = 16
		pages := newTestPages(8, spec.PageBytes(pt))
		b, err := FromModel(m, pages, Options{Threads: 2, MaxBatchTokens: 128, PageTokens: pt})
		if err != nil {
			t.Fatal(err)
		}
		got := runPrompt(t, b, tokens, pageIDs(0, 5), 1)
		b.Close()
		worst := 0.0
		for pos := range tokens {
			var maxDiff, maxRef float64
			for j, v := range got[pos] {
				maxDiff = math.Max(maxDiff, math.Abs(float64(v)-want[pos][j]))
				maxRef = math.Max(maxRef, math.Abs(want[pos][j]))
			}
			worst = math.Max(worst, maxDiff/maxRef)
		}
		if worst > c.bound || math.IsNaN(worst) {
			t.Errorf("%s: worst relative logit error %.3g exceeds %.0g", c.dt, worst, c.bound)
		} else {
			t.Logf("%s: worst relative logit error %.3g (bound %.0g)", c.dt, worst, c.bound)
		}
	}
}

// mapMatrices returns w with fn applied to every matrix (a tied LM head
// stays tied).
func mapMatrices(w Weights, fn func(*kernels.Matrix) *kernels.Matrix) Weights {
	out := w
	out.Embed = fn(w.Embed)
	out.LMHead = out.Embed
	if w.LMHead != w.Embed {
		out.LMHead = fn(w.LMHead)
	}
	out.Layers = nil
	for _, l := range w.Layers {
		l.Wq, l.Wk, l.Wv, l.Wo = fn(l.Wq), fn(l.Wk), fn(l.Wv), fn(l.Wo)
		l.WGate, l.WUp, l.WDown = fn(l.WGate), fn(l.WUp), fn(l.WDown)
		out.Layers = append(out.Layers, l)
	}
	return out
}

// widened returns w with every matrix widened to float32 (exact for F16
// and BF16), the layout the backend used before it kept 16-bit weights.
func widened(w Weights) Weights {
	return mapMatrices(w, func(m *kernels.Matrix) *kernels.Matrix {
		return kernels.NewF32(m.Rows(), m.Cols(), dense(m))
	})
}

// narrowedBF16 returns w with every matrix rounded to bfloat16, as a
// bfloat16 checkpoint of the same weights would hold them.
func narrowedBF16(w Weights) Weights {
	return mapMatrices(w, func(m *kernels.Matrix) *kernels.Matrix {
		d := dense(m)
		bits := make([]uint16, len(d))
		kernels.F32ToBF16(bits, d)
		raw := make([]byte, 2*len(bits))
		for i, b := range bits {
			raw[2*i], raw[2*i+1] = byte(b), byte(b>>8)
		}
		return kernels.New16(kernels.BF16, m.Rows(), m.Cols(), raw)
	})
}

// TestHalfWeightsEqualWidened: a model whose F16 or BF16 weights stay
// 16-bit in memory gives the same logits, bit for bit, as the same
// weights widened to float32 at load; and Q8 stays close to them.
func TestHalfWeightsEqualWidened(t *testing.T) {
	for _, dt := range []model.DType{model.F16, model.BF16} {
		dir := t.TempDir()
		if err := model.Init(dir, model.PresetTiny, 1, dt); err != nil {
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
		if got := w.Format().String(); got != strings.ToLower(string(dt)) {
			t.Fatalf("%s model kept as %s", dt, got)
		}
		tokens := randTokens(rand.New(rand.NewPCG(13, 14)), 40, spec.Vocab)
		const pt = 16
		run := func(w Weights) map[int][]float32 {
			b, err := New(spec, w, newTestPages(8, spec.PageBytes(pt)), Options{Threads: 2, MaxBatchTokens: 64, PageTokens: pt})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			return runPrompt(t, b, tokens, pageIDs(0, 3), 1)
		}
		wide32 := widened(w)
		if got, f32 := w.StreamedBytes(), wide32.StreamedBytes(); 2*got != f32 {
			t.Errorf("%s: decode streams %d bytes, want half of f32's %d", dt, got, f32)
		}
		half, wide := run(w), run(wide32)
		for pos := range half {
			for j := range half[pos] {
				if math.Float32bits(half[pos][j]) != math.Float32bits(wide[pos][j]) {
					t.Fatalf("%s: logit [%d][%d] = %v in %s, %v widened", dt, pos, j, half[pos][j], dt, wide[pos][j])
				}
			}
		}
		wq := QuantizeQ8(w)
		if wq.Format() != kernels.Q8 || wq.LMHead.Format() != kernels.Q8 || wq.Embed.Format().String() != strings.ToLower(string(dt)) {
			t.Fatalf("q8 weights: layers %v, lm_head %v, embed %v", wq.Format(), wq.LMHead.Format(), wq.Embed.Format())
		}
		q := run(wq)
		worst := 0.0
		for pos := range q {
			var maxDiff, maxRef float64
			for j, v := range q[pos] {
				maxDiff = math.Max(maxDiff, math.Abs(float64(v-half[pos][j])))
				maxRef = math.Max(maxRef, math.Abs(float64(half[pos][j])))
			}
			worst = math.Max(worst, maxDiff/maxRef)
		}
		t.Logf("%s → q8: worst relative logit difference %.3g", dt, worst)
		if worst > 0.1 || math.IsNaN(worst) {
			t.Errorf("%s → q8: worst relative logit difference %.3g exceeds 0.1", dt, worst)
		}
	}
}

// TestConvertWeights: a bf16 model's matrices converted to f16 are all
// f16 (a tied LM head stays the embedding), stream as many bytes as the
// bf16 ones and hold each weight as kernels.Matrix.Convert rounds it; a
// dtype that is not a float format is refused.
func TestConvertWeights(t *testing.T) {
	dir := t.TempDir()
	if err := model.Init(dir, model.PresetTiny, 3, model.BF16); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, err := WeightsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ConvertWeights(w, model.F16)
	if err != nil {
		t.Fatal(err)
	}
	mats := []*kernels.Matrix{c.Embed, c.LMHead}
	for _, l := range c.Layers {
		mats = append(mats, l.Wq, l.Wk, l.Wv, l.Wo, l.WGate, l.WUp, l.WDown)
	}
	for i, mt := range mats {
		if mt.Format() != kernels.F16 {
			t.Fatalf("matrix %d is %v after conversion to f16", i, mt.Format())
		}
	}
	if (w.LMHead == w.Embed) != (c.LMHead == c.Embed) {
		t.Fatal("conversion changed whether the LM head is tied")
	}
	if got, want := c.StreamedBytes(), w.StreamedBytes(); got != want {
		t.Fatalf("f16 decode streams %d bytes, bf16 %d", got, want)
	}
	row, want := make([]float32, w.Layers[1].WUp.Cols()), make([]float32, w.Layers[1].WUp.Cols())
	ref, err := w.Layers[1].WUp.Convert(kernels.F16)
	if err != nil {
		t.Fatal(err)
	}
	c.Layers[1].WUp.Row(5, row)
	ref.Row(5, want)
	if !slices.Equal(row, want) {
		t.Fatal("converted up_proj row differs from kernels.Matrix.Convert's")
	}
	if _, err := ConvertWeights(w, "Q8_0"); !errors.Is(err, model.ErrUnsupportedDType) {
		t.Fatalf("ConvertWeights to Q8_0: %v", err)
	}
}
