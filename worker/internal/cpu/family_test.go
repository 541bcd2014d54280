package cpu

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// scaledConfig reads a published config.json (worker/model/testdata) and
// scales its sizes down, keeping every other key as published: the
// family, RoPE base, norm eps, tied embeddings, sliding-window keys. The
// ratio head_dim : hidden/heads is kept (Qwen3's head_dim is twice
// hidden/heads), and token ids are moved into the smaller vocabulary.
func scaledConfig(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "model", "testdata", "configs", file))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if hd, ok := m["head_dim"].(float64); ok {
		ratio := hd / (m["hidden_size"].(float64) / m["num_attention_heads"].(float64))
		m["head_dim"] = 16 * ratio
	}
	scaled := map[string]any{
		"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 384,
		"max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2,
	}
	if m["max_window_layers"] != nil {
		scaled["max_window_layers"] = 2
	}
	if w, ok := m["sliding_window"].(float64); ok {
		// Qwen2.5 publishes a window equal to the context; Mistral 7B v0.1
		// one an eighth of it.
		scaled["sliding_window"] = 1024 * w / m["max_position_embeddings"].(float64)
	}
	for k, v := range scaled {
		m[k] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPublishedFamiliesMatchFloat64Reference runs random models of the
// published Qwen2.5, Qwen3 and Mistral config shapes, written by the
// project's own writer and loaded from disk as a real checkpoint is,
// through the engine (two greedy requests batched together, prompts
// prefilled in chunks) and checks every generated token against the
// argmax of the float64 reference's logits at that position, with the
// engine's logits within 1e-4 (relative) of the reference's.
func TestPublishedFamiliesMatchFloat64Reference(t *testing.T) {
	for _, tc := range []struct {
		file   string
		dtype  model.DType
		bias   bool
		norm   bool
		window int // the context the engine serves, when a window clamps it
	}{
		{"qwen2.5-0.5b-instruct.json", model.BF16, true, false, 0},
		{"qwen3-0.6b.json", model.BF16, false, true, 0},
		{"mistral-7b-instruct-v0.3.json", model.F32, false, false, 0},
		{"mistral-7b-v0.1.json", model.F16, false, false, 128},
	} {
		t.Run(tc.file, func(t *testing.T) {
			cfgJSON := scaledConfig(t, tc.file)
			cfg, err := model.ParseConfig(cfgJSON)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := model.WriteRandom(dir, cfg, 5, tc.dtype); err != nil {
				t.Fatal(err)
			}
			// The checkpoint's config.json is the published one, scaled.
			if err := os.WriteFile(filepath.Join(dir, model.ConfigFile), cfgJSON, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			spec := SpecFor(&m.Config)
			if spec.QKVBias != tc.bias || spec.QKNorm != tc.norm {
				t.Fatalf("spec bias %v norm %v, want %v %v", spec.QKVBias, spec.QKNorm, tc.bias, tc.norm)
			}
			if tc.window > 0 && spec.MaxPositions != tc.window {
				t.Fatalf("context %d, want the sliding window %d", spec.MaxPositions, tc.window)
			}
			w, err := WeightsOf(m)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(21, 22))
			runFamily(t, m, spec, w, [][]int32{randTokens(r, 37, spec.Vocab), randTokens(r, 9, spec.Vocab)}, nil)
		})
	}
}

// runFamily generates from the prompts at once through the engine, prompt
// i under adapters[i] (nil or absent: the base model), and compares each
// sequence with the reference under the same adapter. It returns the
// generated tokens.
func runFamily(t *testing.T, m *model.Model, spec Spec, w Weights, prompts [][]int32, adapters []*lora.Adapter) [][]int32 {
	const (
		pt        = 8
		maxTokens = 24
		chunk     = 16
	)
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := kvpool.New(kvpool.Config{Pages: max(32, 16*len(prompts)), PageTokens: pt, PageBytes: spec.PageBytes(pt)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromModel(m, pool, Options{Threads: 2, MaxBatchTokens: chunk + len(prompts), PageTokens: pt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eng, err := engine.New(engine.Config{PageTokens: pt, ChunkTokens: chunk, MaxBatch: len(prompts), VocabSize: spec.Vocab}, b, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	stop := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel = nil
		}
	}
	defer stop()

	prepared := make([]engine.Adapter, len(prompts))
	for i, a := range adapters {
		if a != nil {
			if prepared[i], err = b.PrepareAdapter(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	streams := make([]*engine.Stream, len(prompts))
	for i, p := range prompts {
		o := kvpool.Owner{Tenant: "t", Request: fmt.Sprint(i), Epoch: 1}
		if prepared[i] != nil {
			o.Adapter = prepared[i].Hash()
		}
		pages, err := pool.Reserve(o, len(p)+maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		streams[i], err = eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: p,
			Sampling: engine.Sampling{MaxTokens: maxTokens}, Adapter: prepared[i]})
		if err != nil {
			t.Fatal(err)
		}
	}
	gens := make([][]int32, len(streams))
	for i, st := range streams {
		var got []int32
		for {
			ev, err := st.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind == engine.EventToken {
				got = append(got, ev.Token)
			}
			if ev.Kind == engine.EventDone {
				if ev.Result.Err != nil {
					t.Fatal(ev.Result.Err)
				}
				break
			}
		}
		if len(got) != maxTokens {
			t.Fatalf("prompt %d: %d tokens, want %d", i, len(got), maxTokens)
		}
		gens[i] = got
	}
	// The engine is idle now; stop it so that checkGreedy has the backend
	// to itself.
	stop()
	for i, p := range prompts {
		var a *lora.Adapter
		if i < len(adapters) {
			a = adapters[i]
		}
		checkGreedy(t, b, spec, w, a, prepared[i], p, gens[i])
	}
	// A sequence cannot go past the context the engine serves.
	c := engine.Chunk{Tokens: []int32{1}, Start: spec.MaxPositions, Pages: pageIDs(0, 32)}
	if err := b.Forward(context.Background(), []engine.Chunk{c}); err == nil {
		t.Errorf("a token at position %d (the context is %d) was accepted", spec.MaxPositions, spec.MaxPositions)
	}
	return gens
}

// checkGreedy checks that every token of gen is the reference argmax
// after prompt and the tokens before it, and that the backend's logits
// (recomputed one position per step) are within 1e-4 of the reference's,
// both under adapter a (prepared: ad; nil: the base model).
func checkGreedy(t *testing.T, b *Backend, spec Spec, w Weights, a *lora.Adapter, ad engine.Adapter, prompt, gen []int32) {
	t.Helper()
	seq := slices.Concat(prompt, gen)
	want := ReferenceAdapter(spec, w, a, seq)
	pages := pageIDs(0, (len(seq)+b.opt.PageTokens-1)/b.opt.PageTokens)
	// The pool's pages are free again: reuse them for a step-by-step run.
	got := runPromptUnder(t, b, ad, seq[:len(seq)-1], pages, 1)
	worst := 0.0
	for i, tok := range gen {
		pos := len(prompt) - 1 + i
		if ref := argmax64(want[pos]); ref != tok {
			t.Fatalf("token %d: engine %d, reference %d (after %v)", i, tok, ref, seq[:pos+1])
		}
		var maxDiff, maxRef float64
		for j, v := range got[pos] {
			maxDiff = math.Max(maxDiff, math.Abs(float64(v)-want[pos][j]))
			maxRef = math.Max(maxRef, math.Abs(want[pos][j]))
		}
		worst = math.Max(worst, maxDiff/maxRef)
	}
	if worst > 1e-4 || math.IsNaN(worst) {
		t.Fatalf("worst relative logit error %.3g exceeds 1e-4", worst)
	}
	// A model that repeats itself would make the comparison weak.
	distinct := map[int32]bool{}
	for _, tok := range gen {
		distinct[tok] = true
	}
	if len(distinct) < len(gen)/4 {
		t.Errorf("greedy output %v has only %d distinct tokens", gen, len(distinct))
	}
	t.Logf("%d tokens (%d distinct) equal the reference's; worst relative logit error %.3g", len(gen), len(distinct), worst)
}

func argmax64(v []float64) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}
