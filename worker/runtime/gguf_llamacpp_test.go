package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/model"
)

// TestGGUFLlamaCppLlama31MatchesSafetensors: a Llama 3.1-style model (the
// tiny preset with Llama 3.1's RoPE: theta 500000, llama3 factor 8, low 1,
// high 4, original context 8192) written as llama.cpp's
// convert_hf_to_gguf.py lays it out — rope_freqs.weight computed in
// float32 as it computes it, placed first, no warden.* keys, no
// key_length/value_length (Llama 3.1's config.json has no head_dim) —
// loads and generates the same greedy tokens as the safetensors model
// with the same (F32) weights. The same file with all factors 1 (RoPE
// unscaled) generates other tokens, so the factors are used.
func TestGGUFLlamaCppLlama31MatchesSafetensors(t *testing.T) {
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "st")
	if err := model.InitWithTokenizer(dir, model.PresetTiny, tokDir, 17, model.F32); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RopeScaling.OriginalMaxPositionEmbeddings = 8192
	if err := model.WriteRandom(dir, cfg, 17, model.F32); err != nil {
		t.Fatal(err)
	}
	exported := filepath.Join(t.TempDir(), "warden.gguf")
	if err := model.ExportGGUF(dir, exported, model.GGMLF32); err != nil {
		t.Fatal(err)
	}
	factors := llamaCppRopeFreqs(cfg)
	if factors[0] != 1 || factors[len(factors)-1] != 8 || slices.IndexFunc(factors, func(v float32) bool { return v > 1 && v < 8 }) < 0 {
		t.Fatalf("factors %v do not use all three llama3 branches", factors)
	}
	ones := slices.Repeat([]float32{1}, len(factors))
	prompts := [][]int32{{1, 2, 3, 4, 5}, make([]int32, 300)}
	for j := range prompts[1] {
		prompts[1][j] = int32((j*131 + 17) % 700)
	}
	opt := func(dir string) Options {
		return Options{ModelDir: dir, Threads: 2, PageTokens: 16, ChunkTokens: 32, MaxBatch: 4, KVBytes: 16 << 20}
	}
	st := start(t, opt(dir))
	llamaCpp := start(t, opt(llamaCppLayout(t, exported, factors)))
	if c := llamaCpp.Model.Config; c.RopeScaling != nil || len(c.RopeFactors) != len(factors) {
		t.Fatalf("llama.cpp file loaded with rope scaling %+v, factors %v", c.RopeScaling, c.RopeFactors)
	}
	unscaled := start(t, opt(llamaCppLayout(t, exported, ones)))
	differs := false
	for i, p := range prompts {
		name := fmt.Sprint("prompt-", i)
		want := greedy(t, st, name, p, 16)
		if got := greedy(t, llamaCpp, name, p, 16); !slices.Equal(got, want) {
			t.Errorf("prompt %d: llama.cpp-layout GGUF generated %v, safetensors %v", i, got, want)
		}
		differs = differs || !slices.Equal(greedy(t, unscaled, name, p, 16), want)
	}
	if !differs {
		t.Error("unscaled RoPE generates the same tokens: the prompts do not test the factors")
	}
}

// llamaCppRopeFreqs computes rope_freqs.weight as convert_hf_to_gguf.py
// does for rope_type llama3, in float32 like its torch tensors: 1 for
// wavelengths under L/high, factor over L/low, 1/((1-s)/factor + s)
// between, s = (L/wavelength - low)/(high - low).
func llamaCppRopeFreqs(c model.Config) []float32 {
	s := c.RopeScaling
	factor, low, high, old := float32(s.Factor), float32(s.LowFreqFactor), float32(s.HighFreqFactor), float32(s.OriginalMaxPositionEmbeddings)
	var out []float32
	for i := 0; i < c.HeadDim; i += 2 {
		freq := 1 / float32(math.Pow(c.RopeTheta, float64(float32(i)/float32(c.HeadDim))))
		wavelen := float32(2*math.Pi) / freq
		switch {
		case wavelen < old/high:
			out = append(out, 1)
		case wavelen > old/low:
			out = append(out, factor)
		default:
			smooth := (old/wavelen - low) / (high - low)
			out = append(out, 1/((1-smooth)/factor+smooth))
		}
	}
	return out
}

// llamaCppLayout rewrites the GGUF file ExportGGUF wrote at path as
// llama.cpp lays out a Llama 3.1 conversion, with factors as
// rope_freqs.weight, and returns the new file's directory.
func llamaCppLayout(t *testing.T, path string, factors []float32) string {
	t.Helper()
	f, err := model.OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kv []model.GGUFKV
	for _, e := range f.KV {
		if !strings.HasPrefix(e.Key, "warden.") && e.Key != "llama.attention.key_length" && e.Key != "llama.attention.value_length" {
			kv = append(kv, e)
		}
	}
	kv = append(kv, model.GGUFKV{Key: "general.quantization_version", Type: model.GGUFUint32, Value: uint32(2)})
	ts := []model.GGUFOutTensor{{Name: "rope_freqs.weight", Dims: []uint64{uint64(len(factors))}, Type: model.GGMLF32,
		Size: 4 * uint64(len(factors)), Fill: func(dst []byte) error {
			for i, v := range factors {
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
			}
			return nil
		}}}
	for _, x := range f.Tensors {
		if x.Name != "rope_freqs.weight" {
			ts = append(ts, model.GGUFOutTensor{Name: x.Name, Dims: x.Dims, Type: x.Type, Size: uint64(len(x.Data)),
				Fill: func(dst []byte) error { copy(dst, x.Data); return nil }})
		}
	}
	out := t.TempDir()
	if err := model.WriteGGUF(filepath.Join(out, "llama-3.1.gguf"), kv, ts); err != nil {
		t.Fatal(err)
	}
	return out
}
