package runtime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/model"
)

// TestGGUFRuntimeMatchesSafetensors: the tiny preset (a 700-token
// byte-level BPE tokenizer) written as GGUF by model.ExportGGUF loads
// through Open and generates the same greedy tokens as the safetensors
// model it came from, for F32, F16 and BF16 files (same element values,
// so the same kernels and bits). For Q8_0 the reference is a safetensors
// model holding the Q8_0 file's dequantized weights (int8 × f16 scale,
// exact in F32; ffn_down stays F16 because its 176-element rows are not
// whole blocks, as in llama.cpp's converter): both run unquantized and
// with the q8 engine (Options.Quantize), and must agree token for token.
func TestGGUFRuntimeMatchesSafetensors(t *testing.T) {
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{{1, 2, 3, 4, 5}, make([]int32, 70)}
	for j := range prompts[1] {
		prompts[1][j] = int32((j*131 + 17) % 700)
	}
	opt := func(dir string, q bool) Options {
		return Options{ModelDir: dir, Threads: 2, PageTokens: 16, ChunkTokens: 32, MaxBatch: 4, KVBytes: 16 << 20, Quantize: q}
	}
	same := func(t *testing.T, a, b Options) {
		t.Helper()
		ra, rb := start(t, a), start(t, b)
		for i, p := range prompts {
			name := fmt.Sprint("prompt-", i)
			want := greedy(t, ra, name, p, 16)
			got := greedy(t, rb, name, p, 16)
			if !slices.Equal(got, want) {
				t.Fatalf("prompt %d: %s generated %v, %s %v", i, b.ModelDir, got, a.ModelDir, want)
			}
		}
	}
	for _, c := range []struct {
		dtype model.DType
		typ   model.GGMLType
	}{{model.F32, model.GGMLF32}, {model.F16, model.GGMLF16}, {model.BF16, model.GGMLBF16}, {model.F32, model.GGMLQ8_0}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "st")
			if err := model.InitWithTokenizer(dir, model.PresetTiny, tokDir, 11, c.dtype); err != nil {
				t.Fatal(err)
			}
			gdir := t.TempDir() // a directory holding one .gguf file
			if err := model.ExportGGUF(dir, filepath.Join(gdir, "tiny.gguf"), c.typ); err != nil {
				t.Fatal(err)
			}
			if c.typ != model.GGMLQ8_0 {
				same(t, opt(dir, false), opt(gdir, false))
				return
			}
			ref := dequantizedCopy(t, gdir)
			same(t, opt(ref, false), opt(gdir, false))
			same(t, opt(ref, true), opt(gdir, true))
		})
	}
}

// TestGGUFKQuantsMatchDequantizedCopy: the tiny preset widened to whole
// 256-element super-blocks (hidden 256, intermediate 512), exported as
// Q4_K and as Q6_K by model.ExportGGUF, generates the same greedy tokens
// as a safetensors copy of its dequantized F32 weights, unquantized and
// with the q8 engine.
func TestGGUFKQuantsMatchDequantizedCopy(t *testing.T) {
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "st")
	if err := model.InitWithTokenizer(dir, model.PresetTiny, tokDir, 13, model.F32); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.HeadDim = 256, 512, 64
	if err := model.WriteRandom(dir, cfg, 13, model.F32); err != nil {
		t.Fatal(err)
	}
	prompt := make([]int32, 40)
	for j := range prompt {
		prompt[j] = int32((j*97 + 5) % 700)
	}
	for _, typ := range []model.GGMLType{model.GGMLQ4_K, model.GGMLQ6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			gdir := t.TempDir()
			if err := model.ExportGGUF(dir, filepath.Join(gdir, "wide.gguf"), typ); err != nil {
				t.Fatal(err)
			}
			ref := dequantizedCopy(t, gdir)
			for _, q := range []bool{false, true} {
				opt := func(d string) Options {
					return Options{ModelDir: d, Threads: 2, PageTokens: 16, ChunkTokens: 32, MaxBatch: 4, KVBytes: 16 << 20, Quantize: q}
				}
				want := greedy(t, start(t, opt(ref)), "p", prompt, 16)
				got := greedy(t, start(t, opt(gdir)), "p", prompt, 16)
				if !slices.Equal(got, want) {
					t.Fatalf("q8 %v: %s generated %v, its dequantized copy %v", q, typ, got, want)
				}
			}
		})
	}
}

// dequantizedCopy writes the GGUF model in gdir as a safetensors model
// directory (its config and its weights as loaded).
func dequantizedCopy(t *testing.T, gdir string) string {
	t.Helper()
	m, err := model.Load(gdir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	cfg, err := json.Marshal(&m.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, model.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := model.WriteWeights(dir, m.Tensors(), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}
