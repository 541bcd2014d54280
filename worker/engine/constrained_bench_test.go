package engine_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
)

// smallModel loads the small preset from the cache `warden bench` uses
// (generating it there on first use).
func smallModel(b *testing.B) *model.Model {
	b.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "warden", "models", model.PresetSmall+"-seed1")
	if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err != nil {
		tmp := dir + ".tmp"
		os.RemoveAll(tmp)
		if err := model.Init(tmp, model.PresetSmall, 1, model.F32); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			b.Fatal(err)
		}
	}
	m, err := model.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

// BenchmarkStructuredDecodeSmall measures the per-token cost of masking
// on the small model (32000-token vocabulary): each iteration decodes one
// unmasked and one masked sequence of the same length, alternately, and
// reports both per-token times and their ratio (target ≤ 1.10). "warm"
// reuses one grammar (masks cached, as for repeated schemas); "cold"
// compiles a fresh grammar per sequence (every mask computed).
// Run with: go test -run '^$' -bench StructuredDecodeSmall -benchtime 3x ./worker/engine/
func BenchmarkStructuredDecodeSmall(b *testing.B) {
	m := smallModel(b)
	r := newRig(b, rigOptions{model: m, threads: 2, chunk: 32, maxBatch: 1, pages: 64})
	st := newStructured(b, r)
	const tokens = 48
	schema := json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},"required":["title","tags","score"]}`)
	p := prompt(3, 8, m.Config.VocabSize)
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			warm := st.sampling(b, constrain.Spec{JSONSchema: schema}, 1, tokens)
			var plain, masked time.Duration
			var nPlain, nMasked int
			seed := uint64(0)
			for b.Loop() {
				seed++
				s := engine.Sampling{Temperature: 1, Seed: seed, MaxTokens: tokens, IgnoreEOS: true}
				start := time.Now()
				out := r.run(b, owner("plain"), p, s)
				plain += time.Since(start)
				nPlain += len(out.tokens)

				ms := warm
				if mode == "cold" {
					ms = st.sampling(b, constrain.Spec{JSONSchema: schema}, seed, tokens)
				}
				ms.Seed, ms.IgnoreEOS = seed, true
				start = time.Now()
				out = r.run(b, owner("masked"), p, ms)
				masked += time.Since(start)
				nMasked += len(out.tokens)
			}
			perPlain := float64(plain.Nanoseconds()) / float64(nPlain)
			perMasked := float64(masked.Nanoseconds()) / float64(nMasked)
			b.ReportMetric(perPlain, "ns/token-unmasked")
			b.ReportMetric(perMasked, "ns/token-masked")
			b.ReportMetric(perMasked/perPlain, "mask-ratio")
		})
	}
}
