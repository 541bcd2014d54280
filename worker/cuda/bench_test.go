//go:build cuda

package cuda

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// llama1B is a ~1.1B-parameter Llama geometry (TinyLlama's: 22 layers,
// hidden 2048, 32 query and 4 KV heads of 64, MLP 5632, vocabulary 32000).
func llama1B(tb testing.TB) model.Config {
	c, err := model.PresetConfig(model.PresetSmall)
	if err != nil {
		tb.Fatal(err)
	}
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 2048, 5632, 22
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 32, 4, 64
	c.VocabSize, c.MaxPositionEmbeddings = 32000, 2048
	c.TieWordEmbeddings = false
	c.TorchDType = model.BF16.TorchName()
	if err := c.Validate(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// writeRandomModel writes c with random bfloat16 weights into dir:
// matrices uniform in ±1/√in, norm weights 1. The values only need to be
// finite: the benchmark measures speed.
func writeRandomModel(tb testing.TB, dir string, c model.Config) {
	cfg, err := json.Marshal(c)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, model.ConfigFile), cfg, 0o644); err != nil {
		tb.Fatal(err)
	}
	var tensors []*model.Tensor
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for i, s := range c.TensorSpecs() {
		n := int(s.NumElements())
		t := &model.Tensor{Name: s.Name, DType: model.BF16, Shape: s.Shape, Data: make([]byte, 2*n)}
		tensors = append(tensors, t)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if len(s.Shape) == 1 {
				for j := 0; j < n; j++ {
					t.Data[2*j], t.Data[2*j+1] = 0x80, 0x3f // 1.0
				}
				return
			}
			scale := float32(1 / math.Sqrt(float64(s.Shape[1])))
			x := uint64(i)*0x9e3779b97f4a7c15 + 1
			for j := 0; j < n; j++ {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				v := (float32(x>>40)/(1<<24)*2 - 1) * scale
				bits := math.Float32bits(v) >> 16
				t.Data[2*j], t.Data[2*j+1] = byte(bits), byte(bits>>8)
			}
		})
	}
	wg.Wait()
	if err := model.WriteWeights(dir, tensors, 0); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkLlama1B measures prefill and batch-1 decode of a generated
// ~1.1B-parameter bfloat16 model, and in the same run the device's copy
// bandwidth, reporting decode against its roofline (weight bytes per
// token ÷ copy bandwidth); then batch-1 decode of the same model with q8
// weights (decode1_q8). scripts/gpu-check.sh runs it on an H200.
func BenchmarkLlama1B(b *testing.B) {
	dir := b.TempDir()
	c := llama1B(b)
	writeRandomModel(b, dir, c)
	m, err := model.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var bw float64
	for _, q8 := range []bool{false, true} {
		const prompt, maxBatch = 1024, 64
		be, err := FromModel(m, Options{MaxBatchTokens: prompt + maxBatch, MaxLogitRows: maxBatch, PageTokens: testPageTokens, Quantize: q8})
		if err != nil {
			b.Fatal(err)
		}
		pool, err := be.NewPool(kvpool.Config{Pages: 2 * c.MaxPositionEmbeddings / testPageTokens, PageTokens: testPageTokens,
			PageBytes: cpu.SpecFor(&c).PageBytes(testPageTokens)})
		if err != nil {
			b.Fatal(err)
		}
		if bw == 0 {
			if bw, err = be.MeasureCopyBandwidth(1 << 30); err != nil {
				b.Fatal(err)
			}
		}
		roofline := bw / float64(be.DecodeWeightBytes())
		b.Logf("device %s, q8 %v: %.1f M parameters, %.2f GB read per decode token, copy bandwidth %.0f GB/s, roofline %.0f tokens/s",
			be.DeviceName(), q8, float64(c.NumParameters())/1e6, float64(be.DecodeWeightBytes())/1e9, bw/1e9, roofline)
		tokens := testPrompt(prompt, c.VocabSize, 1)
		if q8 {
			b.Run("decode1_q8", func(b *testing.B) { benchDecode1(b, be, pool, tokens, bw, roofline) })
		} else {
			b.Run("prefill", func(b *testing.B) { benchPrefill(b, be, pool, tokens) })
			b.Run("decode1", func(b *testing.B) { benchDecode1(b, be, pool, tokens, bw, roofline) })
		}
		be.Close()
	}
}

// benchPrefill prefills tokens as one chunk.
func benchPrefill(b *testing.B, be *Backend, pool *kvpool.Pool, tokens []int32) {
	ctx := context.Background()
	o := kvpool.Owner{Tenant: "bench", Request: "prefill", Epoch: 1}
	pages, err := pool.Reserve(o, len(tokens))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Release(o)
	logits := make([]float32, be.VocabSize())
	b.ResetTimer()
	for range b.N {
		if err := be.Forward(ctx, []engine.Chunk{{Tokens: tokens, Pages: pages, Logits: logits}}); err != nil {
			b.Fatal(err)
		}
		if err := pool.MarkTokensWritten(o, pages, len(tokens)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(tokens))/b.Elapsed().Seconds(), "tok/s")
}

// benchDecode1 decodes one sequence greedily, one token a step, and
// reports tokens/s against the roofline.
func benchDecode1(b *testing.B, be *Backend, pool *kvpool.Pool, tokens []int32, bw, roofline float64) {
	const start, span = 16, 1024
	ctx := context.Background()
	o := kvpool.Owner{Tenant: "bench", Request: "decode", Epoch: 1}
	pages, err := pool.Reserve(o, start+span)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Release(o)
	next := []int32{0}
	chunk := engine.Chunk{Tokens: tokens[:start], Pages: pages, Logits: []float32{}}
	if err := be.Greedy(ctx, []engine.Chunk{chunk}, next); err != nil {
		b.Fatal(err)
	}
	if err := pool.MarkTokensWritten(o, pages, start); err != nil {
		b.Fatal(err)
	}
	tok := []int32{next[0]}
	b.ResetTimer()
	for i := range b.N {
		// Positions cycle through [start, start+span): a long run
		// re-decodes them rather than outgrowing the pages.
		pos := start + i%span
		chunk := engine.Chunk{Tokens: tok, Start: pos, Pages: pages, Logits: []float32{}}
		if err := be.Greedy(ctx, []engine.Chunk{chunk}, next); err != nil {
			b.Fatal(err)
		}
		if err := pool.MarkTokensWritten(o, pages, pos+1); err != nil {
			b.Fatal(err)
		}
		tok[0] = next[0]
	}
	tps := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(100*tps/roofline, "pct_roofline")
	b.ReportMetric(bw/1e9, "copy_GB/s")
	b.ReportMetric(float64(be.DecodeWeightBytes())/1e9, "weight_GB/tok")
}
