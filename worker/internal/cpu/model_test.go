package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

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
