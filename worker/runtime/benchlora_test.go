package runtime

import (
	"context"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/model"
)

// TestBenchLoRA runs `warden bench lora`'s measurement on the tiny
// preset: it loads the adapters (bf16 values, held in half the bytes of
// f32), runs both batches and reports every figure.
func TestBenchLoRA(t *testing.T) {
	dir := t.TempDir()
	if err := model.Init(dir, model.PresetTiny, 1, model.F32); err != nil {
		t.Fatal(err)
	}
	r := start(t, Options{ModelDir: dir, Threads: 1, PageTokens: 16, KVBytes: 64 << 13, ChunkTokens: 32, MaxBatch: 4})
	rep, err := r.BenchLoRA(context.Background(), LoRABenchOptions{Adapters: 3, Rank: 4, Batch: 4, PromptTokens: 8, DecodeTokens: 4, Rounds: 1, BF16: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &r.Model.Config
	// Rank 4 on the seven projections of every layer, 2 bytes a value.
	perLayer := 4 * (2*c.QDim() + 2*c.HiddenSize + 2*(c.KVDim()+c.HiddenSize) + 3*(c.IntermediateSize+c.HiddenSize))
	if want := int64(c.NumHiddenLayers * perLayer * 2); rep.AdapterBytes != want {
		t.Errorf("adapter of %d bytes, want %d", rep.AdapterBytes, want)
	}
	if rep.Load <= 0 || rep.BaseDecode <= 0 || rep.LoRADecode <= 0 || rep.BasePrefill <= 0 || rep.LoRAPrefill <= 0 {
		t.Fatalf("report %+v lacks a figure", rep)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !strings.Contains(b.String(), "3 adapters of rank 4 (all projections, bf16 values)") {
		t.Errorf("table:\n%s", b.String())
	}
	if _, err := r.BenchLoRA(context.Background(), LoRABenchOptions{Adapters: 1, Rank: 4, Batch: 1, PromptTokens: 8, DecodeTokens: 1, Rounds: 1}); err == nil {
		t.Error("a decode of one token was accepted")
	}
}
