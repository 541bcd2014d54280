package cpu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// attendRowByRow is the attention of one query head at a time (a Dot per
// key, Softmax, an Axpy per value): the contract the tiled attention must
// meet bit for bit, and the baseline of its benchmark.
func (b *Backend) attendRowByRow(scratch []float32) {
	s := &b.spec
	hd, kvDim, pt := s.HeadDim, s.KVDim(), b.opt.PageTokens
	r := 0
	for _, c := range b.batch {
		for i := range c.Tokens {
			n := c.Start + i + 1
			for head := 0; head < s.Heads; head++ {
				g := head / (s.Heads / s.KVHeads)
				q := b.q[(r*s.Heads+head)*hd : (r*s.Heads+head+1)*hd]
				scores := scratch[:n]
				kBase := (b.layer*2+0)*pt*kvDim + g*hd
				vBase := (b.layer*2+1)*pt*kvDim + g*hd
				for p := 0; p*pt < n; p++ {
					cnt := min(pt, n-p*pt)
					kernels.DotStrided(scores[p*pt:p*pt+cnt], q, asFloats(b.pages.Data(c.Pages[p]))[kBase:], kvDim)
				}
				kernels.Scale(scores, b.scale)
				kernels.Softmax(scores)
				out := b.att[(r*s.Heads+head)*hd : (r*s.Heads+head+1)*hd]
				clear(out)
				for p := 0; p*pt < n; p++ {
					cnt := min(pt, n-p*pt)
					kernels.AxpyStrided(out, scores[p*pt:p*pt+cnt], asFloats(b.pages.Data(c.Pages[p]))[vBase:], kvDim)
				}
			}
			r++
		}
	}
}

// attnSetup is a backend whose q scratch and KV pages hold random values,
// with batch set for one attention pass over its last layer.
func attnSetup(tb testing.TB, s Spec, pt, threads int, chunks []engine.Chunk) *Backend {
	tb.Helper()
	rows, pages := 0, 0
	for _, c := range chunks {
		rows += len(c.Tokens)
		for _, p := range c.Pages {
			pages = max(pages, int(p)+1)
		}
	}
	tp := newTestPages(pages, s.PageBytes(pt))
	b, err := New(s, randWeights(s, 9), tp, Options{Threads: threads, MaxBatchTokens: rows, PageTokens: pt})
	if err != nil {
		tb.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, uint64(rows)))
	for i := range b.q[:rows*s.Heads*s.HeadDim] {
		b.q[i] = float32(3 * r.NormFloat64())
	}
	for _, p := range tp {
		f := asFloats(p)
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
	}
	b.batch = chunks
	b.buildTiles()
	b.layer = s.Layers - 1
	return b
}

// attnCases are batches over testSpec-like geometries: one long prefill
// chunk, chunks that start mid-sequence and mid-page, and decode rows.
func attnCases() map[string][]engine.Chunk {
	return map[string][]engine.Chunk{
		"prefill": {{Tokens: make([]int32, 45), Pages: pageIDs(0, 12)}},
		"mixed": {
			{Tokens: make([]int32, 13), Start: 6, Pages: pageIDs(0, 5)},
			{Tokens: make([]int32, 1), Start: 30, Pages: pageIDs(5, 8)},
			{Tokens: make([]int32, 7), Start: 0, Pages: pageIDs(13, 2)},
		},
		"decode": {
			{Tokens: make([]int32, 1), Start: 0, Pages: pageIDs(0, 1)},
			{Tokens: make([]int32, 1), Start: 17, Pages: pageIDs(1, 5)},
		},
	}
}

// attnSpecs are geometries with 1, 2, 3 and 4 query heads per KV head and
// head sizes on and off the kernels' 16-float steps.
func attnSpecs() map[string]Spec {
	out := map[string]Spec{}
	for _, g := range []struct{ heads, kv, hd int }{{4, 4, 16}, {4, 2, 8}, {6, 2, 40}, {12, 3, 64}, {8, 2, 20}} {
		s := testSpec()
		s.Heads, s.KVHeads, s.HeadDim = g.heads, g.kv, g.hd
		s.InvFreq = make([]float64, s.HeadDim/2)
		out[fmt.Sprintf("h%d-kv%d-d%d", g.heads, g.kv, g.hd)] = s
	}
	return out
}

// TestTiledAttentionEqualsRowByRow: the tiled attention's outputs are the
// row-by-row attention's bit for bit, at every thread count.
func TestTiledAttentionEqualsRowByRow(t *testing.T) {
	const pt = 4
	for sname, s := range attnSpecs() {
		for cname, chunks := range attnCases() {
			for _, threads := range []int{1, 3} {
				b := attnSetup(t, s, pt, threads, chunks)
				b.attend()
				got := append([]float32(nil), b.att...)
				b.attendRowByRow(make([]float32, s.MaxPositions))
				b.Close()
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(b.att[i]) {
						t.Fatalf("%s %s threads %d: att[%d] = %v, row by row %v", sname, cname, threads, i, got[i], b.att[i])
					}
				}
			}
		}
	}
}

// TestTiledAttentionMatchesFloat64: the tiled attention against softmax
// attention computed in float64 from the same queries, keys and values.
func TestTiledAttentionMatchesFloat64(t *testing.T) {
	const pt = 4
	for sname, s := range attnSpecs() {
		chunks := attnCases()["mixed"]
		b := attnSetup(t, s, pt, 2, chunks)
		b.attend()
		b.Close()
		hd, kvDim, grp := s.HeadDim, s.KVDim(), s.Heads/s.KVHeads
		kv := func(c engine.Chunk, which, pos, g, d int) float64 {
			page := asFloats(b.pages.Data(c.Pages[pos/pt]))
			return float64(page[((b.layer*2+which)*pt+pos%pt)*kvDim+g*hd+d])
		}
		r := 0
		for _, c := range chunks {
			for i := range c.Tokens {
				n := c.Start + i + 1
				for head := 0; head < s.Heads; head++ {
					q := b.q[(r*s.Heads+head)*hd:]
					w := make([]float64, n)
					mx := math.Inf(-1)
					for p := range w {
						for d := 0; d < hd; d++ {
							w[p] += float64(q[d]) * kv(c, 0, p, head/grp, d)
						}
						w[p] /= math.Sqrt(float64(hd))
						mx = math.Max(mx, w[p])
					}
					var sum float64
					for p := range w {
						w[p] = math.Exp(w[p] - mx)
						sum += w[p]
					}
					for d := 0; d < hd; d++ {
						var want float64
						for p := range w {
							want += w[p] / sum * kv(c, 1, p, head/grp, d)
						}
						got := float64(b.att[(r*s.Heads+head)*hd+d])
						if math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
							t.Fatalf("%s row %d head %d [%d]: %v, float64 %v", sname, r, head, d, got, want)
						}
					}
				}
				r++
			}
		}
	}
}

// smallAttnSpec is the attention geometry of the small preset (12 query
// and 4 KV heads of 64) with one layer.
func smallAttnSpec() Spec {
	s := testSpec()
	s.Hidden, s.Layers, s.Heads, s.KVHeads, s.HeadDim, s.MaxPositions = 768, 1, 12, 4, 64, 1024
	s.InvFreq = make([]float64, s.HeadDim/2)
	return s
}

// BenchmarkPrefillAttention is one layer's attention over a 512-token
// prefill chunk of the small preset's geometry (16-token pages), tiled
// and row by row, interleaved: "x-row-by-row" is the speed-up of the
// tiled attention (fastest runs of each). The row-by-row baseline runs on
// one thread, so at t2 the figure includes the threads' gain.
func BenchmarkPrefillAttention(b *testing.B) {
	s := smallAttnSpec()
	const pt, n = 16, 512
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			be := attnSetup(b, s, pt, threads, []engine.Chunk{{Tokens: make([]int32, n), Pages: pageIDs(0, n/pt)}})
			defer be.Close()
			scratch := make([]float32, s.MaxPositions)
			tiled, rowByRow := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
			for i := 0; i < b.N; i++ {
				start := time.Now()
				be.attend()
				mid := time.Now()
				be.attendRowByRow(scratch)
				tiled, rowByRow = min(tiled, mid.Sub(start)), min(rowByRow, time.Since(mid))
			}
			b.ReportMetric(float64(tiled.Microseconds()), "tiled-µs")
			b.ReportMetric(float64(rowByRow.Microseconds()), "row-by-row-µs")
			b.ReportMetric(rowByRow.Seconds()/tiled.Seconds(), "x-row-by-row")
		})
	}
}

// BenchmarkPrefillSmallLayers is a 512-token prefill through two layers
// of the small preset's geometry (random f32 weights), for profiles of
// where prefill time goes (-cpuprofile).
func BenchmarkPrefillSmallLayers(b *testing.B) {
	s := smallAttnSpec()
	s.Layers, s.Intermediate, s.Vocab = 2, 2048, 32000
	const pt, n = 16, 512
	w := randWeights(s, 5)
	be, err := New(s, w, newTestPages(n/pt, s.PageBytes(pt)), Options{Threads: 1, MaxBatchTokens: n, PageTokens: pt})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	tokens := randTokens(rand.New(rand.NewPCG(3, 4)), n, s.Vocab)
	c := []engine.Chunk{{Tokens: tokens, Pages: pageIDs(0, n/pt), Logits: make([]float32, s.Vocab)}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.Forward(context.Background(), c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSmallLayers is batch-1 decode steps through two layers
// of the small preset's geometry with f16 or q8 weights (and LM head),
// for profiles of where decode time goes (-cpuprofile).
func BenchmarkDecodeSmallLayers(b *testing.B) {
	s := smallAttnSpec()
	s.Layers, s.Intermediate, s.Vocab = 2, 2048, 32000
	const pt = 16
	base := randWeights(s, 5)
	for _, f := range []kernels.Format{kernels.F16, kernels.Q8} {
		b.Run(f.String(), func(b *testing.B) {
			w := base
			w.Layers = slices.Clone(base.Layers)
			for i := range w.Layers {
				l := &w.Layers[i]
				for _, m := range []**kernels.Matrix{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.WGate, &l.WUp, &l.WDown} {
					*m = reformat(b, *m, f)
				}
			}
			w.LMHead = reformat(b, w.LMHead, f)
			be, err := New(s, w, newTestPages(4, s.PageBytes(pt)), Options{Threads: 1, MaxBatchTokens: 1, PageTokens: pt})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			c := []engine.Chunk{{Tokens: []int32{7}, Start: 16, Pages: pageIDs(0, 2), Logits: make([]float32, s.Vocab)}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := be.Forward(context.Background(), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrefillBF16Converted is a 256-token prefill through two layers
// of the small preset's geometry with bf16 weights — widened to float32
// inside the kernels, as a bf16 checkpoint runs by default — with the
// same weights converted to f16 at load (ConvertWeights, worker.dtype
// f16), and with them in bf16 products (BF16Dot, worker.numerics bf16),
// interleaved: "x-bf16" is the converted model's speed-up over the
// widened one, "x-dot" the bf16 products' (fastest runs of each).
func BenchmarkPrefillBF16Converted(b *testing.B) {
	s := smallAttnSpec()
	s.Layers, s.Intermediate, s.Vocab = 2, 2048, 32000
	const pt, n = 16, 256
	bf16 := randWeights(s, 5)
	bf16.Layers = slices.Clone(bf16.Layers)
	for i := range bf16.Layers {
		l := &bf16.Layers[i]
		for _, m := range []**kernels.Matrix{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.WGate, &l.WUp, &l.WDown} {
			*m = reformat(b, *m, kernels.BF16)
		}
	}
	bf16.Embed, bf16.LMHead = reformat(b, bf16.Embed, kernels.BF16), reformat(b, bf16.LMHead, kernels.BF16)
	f16, err := ConvertWeights(bf16, model.F16)
	if err != nil {
		b.Fatal(err)
	}
	tokens := randTokens(rand.New(rand.NewPCG(3, 4)), n, s.Vocab)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			var bes [3]*Backend
			for i, w := range []Weights{bf16, f16, BF16Dot(bf16)} {
				if bes[i], err = New(s, w, newTestPages(n/pt, s.PageBytes(pt)), Options{Threads: threads, MaxBatchTokens: n, PageTokens: pt}); err != nil {
					b.Fatal(err)
				}
				defer bes[i].Close()
			}
			c := []engine.Chunk{{Tokens: tokens, Pages: pageIDs(0, n/pt), Logits: make([]float32, s.Vocab)}}
			best := [3]time.Duration{math.MaxInt64, math.MaxInt64, math.MaxInt64}
			for i := 0; i < b.N; i++ {
				for j, be := range bes {
					start := time.Now()
					if err := be.Forward(context.Background(), c); err != nil {
						b.Fatal(err)
					}
					best[j] = min(best[j], time.Since(start))
				}
			}
			b.ReportMetric(n/best[0].Seconds(), "bf16-tok/s")
			b.ReportMetric(n/best[1].Seconds(), "f16-tok/s")
			b.ReportMetric(n/best[2].Seconds(), "dot-tok/s")
			b.ReportMetric(best[0].Seconds()/best[1].Seconds(), "x-bf16")
			b.ReportMetric(best[0].Seconds()/best[2].Seconds(), "x-dot")
		})
	}
}

// reformat converts a float32 matrix to F16, BF16 or Q8.
func reformat(tb testing.TB, m *kernels.Matrix, f kernels.Format) *kernels.Matrix {
	convert := m.Convert
	if f == kernels.Q8 {
		convert = func(kernels.Format) (*kernels.Matrix, error) { return m.QuantizeQ8() }
	}
	r, err := convert(f)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}
