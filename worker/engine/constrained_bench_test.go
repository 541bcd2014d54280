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

// timedConstraint adds the time spent in a constraint to *spent (the
// engine calls it on one goroutine; the benchmark reads it after the
// sequence's last event).
type timedConstraint struct {
	c     engine.Constraint
	spent *time.Duration
}

func (t timedConstraint) Mask(logits []float32, remaining int) {
	start := time.Now()
	t.c.Mask(logits, remaining)
	*t.spent += time.Since(start)
}

func (t timedConstraint) Advance(tok int32) {
	start := time.Now()
	t.c.Advance(tok)
	*t.spent += time.Since(start)
}

// BenchmarkStructuredDecodeSmall measures the per-token cost of masking
// on the small model (32000-token vocabulary) as a ratio to unmasked
// decode: each iteration decodes one unmasked sequence, timed per token,
// and one masked sequence whose Mask and Advance calls are timed, so the
// ratio (unmasked + mask time) / unmasked is measured in one run and
// barely moved by the machine's load. "warm" reuses one grammar (masks
// cached, as for a repeated schema); "cold" compiles a fresh grammar per
// sequence (every mask computed on the way). The target is ≤ 1.10.
// Run with: go test -run '^$' -bench StructuredDecodeSmall -benchtime 3x ./worker/engine/
func BenchmarkStructuredDecodeSmall(b *testing.B) {
	m := smallModel(b)
	r := newRig(b, rigOptions{model: m, threads: 2, chunk: 32, maxBatch: 1, pages: 64})
	st := newStructured(b, r)
	const tokens = 32
	schema := json.RawMessage(`{"type":"object","properties":{"title":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}},"score":{"type":"number"}},"required":["title","tags","score"]}`)
	p := prompt(3, 8, m.Config.VocabSize)
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			g, err := constrain.Compile(constrain.Spec{JSONSchema: schema})
			if err != nil {
				b.Fatal(err)
			}
			var plain, masking time.Duration
			var nPlain, nMasked int
			seed := uint64(0)
			for b.Loop() {
				seed++
				s := engine.Sampling{Temperature: 1, Seed: seed, MaxTokens: tokens, IgnoreEOS: true}
				start := time.Now()
				out := r.run(b, owner("plain"), p, s)
				plain += time.Since(start)
				nPlain += len(out.tokens)

				if mode == "cold" {
					if g, err = constrain.Compile(constrain.Spec{JSONSchema: schema}); err != nil {
						b.Fatal(err)
					}
				}
				gs := g
				s.Constraint = func() engine.Constraint {
					return timedConstraint{c: gs.NewMatcher(st.vocab), spent: &masking}
				}
				out = r.run(b, owner("masked"), p, s)
				nMasked += len(out.tokens)
			}
			perPlain := float64(plain.Nanoseconds()) / float64(nPlain)
			perMask := float64(masking.Nanoseconds()) / float64(nMasked)
			b.ReportMetric(perPlain, "ns/token-unmasked")
			b.ReportMetric(perMask, "ns/token-mask")
			b.ReportMetric((perPlain+perMask)/perPlain, "mask-ratio")
		})
	}
}
