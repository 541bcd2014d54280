package model

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func initTiny(t *testing.T, seed uint64, dtype DType) string {
	t.Helper()
	dir := t.TempDir()
	if err := Init(dir, PresetTiny, seed, dtype); err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T, dir string) *Model {
	t.Helper()
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// expectedBytes regenerates a preset tensor's bytes independently of the
// writer.
func expectedBytes(cfg *Config, s *TensorSpec, seed uint64, dtype DType) []byte {
	b := make([]byte, s.NumElements()*int64(dtype.Size()))
	fillRandom(b, dtype, seed, s.Name, cfg.initDistribution(s))
	return b
}

func TestInitLoadRoundTrip(t *testing.T) {
	const seed = 7
	dir := initTiny(t, seed, F32)
	m := load(t, dir)

	want, err := PresetConfig(PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	want.BOSTokenID, want.EOSTokenIDs, want.TorchDType = m.Config.BOSTokenID, m.Config.EOSTokenIDs, "float32"
	if !reflect.DeepEqual(m.Config, want) {
		t.Fatalf("config %+v\nwant %+v", m.Config, want)
	}
	if m.Config.BOSTokenID == nil || len(m.Config.EOSTokenIDs) == 0 {
		t.Fatalf("token ids missing: %+v", m.Config)
	}
	if m.Generation == nil || *m.Generation.BOSTokenID != *m.Config.BOSTokenID ||
		!slices.Equal(m.EOSTokenIDs(), m.Config.EOSTokenIDs) {
		t.Fatalf("generation config %+v, config bos %d eos %v", m.Generation, *m.Config.BOSTokenID, m.Config.EOSTokenIDs)
	}
	for _, name := range []string{"tokenizer.json", ConfigFile, GenerationConfigFile, WeightsFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}

	specs := m.Config.TensorSpecs()
	if len(m.Tensors()) != len(specs) {
		t.Errorf("%d tensors in file, want %d", len(m.Tensors()), len(specs))
	}
	for i := range specs {
		s := &specs[i]
		tt, err := m.Tensor(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if tt.DType != F32 || !slices.Equal(tt.Shape, s.Shape) {
			t.Errorf("%s: %s %v, want F32 %v", s.Name, tt.DType, tt.Shape, s.Shape)
		}
		exp := expectedBytes(&m.Config, s, seed, F32)
		if string(tt.Data) != string(exp) {
			t.Errorf("%s: values differ from the generator's", s.Name)
		}
		v, err := m.Float32(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		if unsafe.Pointer(&v[0]) != unsafe.Pointer(&tt.Data[0]) {
			t.Errorf("%s: F32 weights were copied", s.Name)
		}
	}

	w := m.Weights()
	if len(w.Layers) != 2 || w.Embed.Name != EmbedTokensName || w.Norm.Name != FinalNormName || w.LMHead.Name != LMHeadName {
		t.Fatalf("weights %+v", w)
	}
	for i, l := range w.Layers {
		got := []*Tensor{l.InputNorm, l.Q, l.K, l.V, l.O, l.PostAttentionNorm, l.Gate, l.Up, l.Down}
		suffixes := []string{LayerInputNorm, LayerQProj, LayerKProj, LayerVProj, LayerOProj, LayerPostAttentionNorm, LayerGateProj, LayerUpProj, LayerDownProj}
		for j, tt := range got {
			if tt == nil || tt.Name != LayerPrefix(i)+suffixes[j] {
				t.Errorf("layer %d field %d holds %v, want %s", i, j, tt, LayerPrefix(i)+suffixes[j])
			}
		}
	}
	if got := w.Layers[1].K.Shape; !slices.Equal(got, []int{32, 64}) {
		t.Errorf("k_proj shape %v", got)
	}

	// The initialisation scheme's scales (documented on initDistribution).
	for _, tc := range []struct {
		name      string
		mean, std float64
	}{
		{EmbedTokensName, 0, 1},
		{LayerPrefix(0) + LayerQProj, 0, qkGain / 8},
		{LayerPrefix(1) + LayerVProj, 0, 1.0 / 8},
		{LayerPrefix(0) + LayerDownProj, 0, 1 / math.Sqrt(176)},
		{LayerPrefix(0) + LayerInputNorm, 1, normSpread},
		{LMHeadName, 0, lmHeadGain / 8},
	} {
		v, _ := m.Float32(tc.name)
		var s, ss float64
		for _, x := range v {
			s += float64(x)
			ss += float64(x) * float64(x)
		}
		n := float64(len(v))
		mean, std := s/n, math.Sqrt(ss/n-(s/n)*(s/n))
		// Four standard errors of each estimate, plus slack for the
		// distribution's lighter tails.
		if math.Abs(mean-tc.mean) > 4*tc.std/math.Sqrt(n) || math.Abs(std-tc.std) > (0.05+4/math.Sqrt(2*n))*tc.std {
			t.Errorf("%s: mean %.4f std %.4f, want %.4f and %.4f", tc.name, mean, std, tc.mean, tc.std)
		}
	}
}

func TestInitHalfPrecision(t *testing.T) {
	ref := load(t, initTiny(t, 3, F32))
	for _, tc := range []struct {
		dtype DType
		torch string
		rel   float64 // half an ulp, relative
	}{
		{BF16, "bfloat16", 0x1p-8},
		{F16, "float16", 0x1p-11},
	} {
		m := load(t, initTiny(t, 3, tc.dtype))
		if m.Config.TorchDType != tc.torch {
			t.Errorf("torch_dtype %q, want %q", m.Config.TorchDType, tc.torch)
		}
		for _, s := range m.Config.TensorSpecs() {
			tt, _ := m.Tensor(s.Name)
			if tt.DType != tc.dtype {
				t.Fatalf("%s stored as %s", s.Name, tt.DType)
			}
			got, err := m.Float32(s.Name)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ref.Float32(s.Name)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > tc.rel*math.Abs(float64(want[i]))+0x1p-25 {
					t.Fatalf("%s %s[%d] = %g, f32 model has %g", tc.dtype, s.Name, i, got[i], want[i])
				}
			}
		}
	}
}

func hashFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		out[e.Name()] = hex.EncodeToString(sum[:])
	}
	return out
}

// goldenTinyWeights pins the tiny preset's weights (seed 1, F32): they must
// not change across Go releases or platforms, since tests elsewhere compare
// generated text against recorded output.
const goldenTinyWeights = "009eb7d08d191972853b20b02a3ef3c26ca5c801d9147b301cd91ea5b019a25b"

func TestInitDeterministic(t *testing.T) {
	for _, dtype := range []DType{F32, BF16} {
		a := hashFiles(t, initTiny(t, 1, dtype))
		b := hashFiles(t, initTiny(t, 1, dtype))
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two inits differ:\n%v\n%v", dtype, a, b)
		}
		if len(a) < 4 {
			t.Errorf("only %d files written: %v", len(a), a)
		}
		c := hashFiles(t, initTiny(t, 2, dtype))
		if c[WeightsFile] == a[WeightsFile] {
			t.Errorf("%s: seeds 1 and 2 give the same weights", dtype)
		}
		if dtype == F32 && a[WeightsFile] != goldenTinyWeights {
			t.Errorf("tiny seed 1 weights hash %s, want %s", a[WeightsFile], goldenTinyWeights)
		}
	}
}

func TestShardedRoundTrip(t *testing.T) {
	src := initTiny(t, 5, F32)
	m := load(t, src)
	dir := t.TempDir()
	for _, name := range []string{ConfigFile, GenerationConfigFile} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Leave a stale single file behind: WriteWeights must remove it, or
	// Load would prefer it over the shards.
	if err := os.WriteFile(filepath.Join(dir, WeightsFile), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteWeights(dir, m.Tensors(), 64<<10); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale %s kept: %v", WeightsFile, err)
	}
	shards, _ := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors"))
	if len(shards) < 3 {
		t.Fatalf("%d shards: %v", len(shards), shards)
	}
	s := load(t, dir)
	if len(s.files) != len(shards) {
		t.Errorf("loaded %d files, want %d", len(s.files), len(shards))
	}
	if !reflect.DeepEqual(s.Config, m.Config) {
		t.Error("config differs")
	}
	for _, tt := range m.Tensors() {
		got, err := s.Tensor(tt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType != tt.DType || !slices.Equal(got.Shape, tt.Shape) || string(got.Data) != string(tt.Data) {
			t.Errorf("%s differs after sharding", tt.Name)
		}
	}
	// Writing one file again removes the index.
	if err := WriteWeights(dir, m.Tensors(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, WeightsIndexFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("index kept: %v", err)
	}
	load(t, dir)
}

// rewriteWeights replaces dir's weights with edit(tensors), copying the
// data so the old mapping can be closed first.
func rewriteWeights(t *testing.T, dir string, edit func([]*Tensor) []*Tensor) {
	t.Helper()
	f, err := OpenSafetensors(filepath.Join(dir, WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts []*Tensor
	for _, tt := range f.Tensors() {
		c := *tt
		c.Data = slices.Clone(tt.Data)
		ts = append(ts, &c)
	}
	f.Close()
	if err := WriteWeights(dir, edit(ts), 0); err != nil {
		t.Fatal(err)
	}
}

func replaceTensor(ts []*Tensor, nt *Tensor) []*Tensor {
	for i, tt := range ts {
		if tt.Name == nt.Name {
			ts[i] = nt
		}
	}
	return ts
}

func editFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, edit(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	tiny := initTiny(t, 1, F32)
	copyDir := func(t *testing.T) string {
		dir := t.TempDir()
		entries, _ := os.ReadDir(tiny)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(tiny, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const upProj = "model.layers.1.mlp.up_proj.weight"
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		is     error
		msg    string // "DIR" stands for the model directory
	}{
		{"missing config", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ConfigFile)) },
			fs.ErrNotExist, "model: reading config: open DIR/config.json: no such file or directory"},
		{"missing weights", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, WeightsFile)) },
			fs.ErrNotExist, "model: DIR has neither model.safetensors nor model.safetensors.index.json"},
		{"missing tensor", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []*Tensor) []*Tensor {
				return slices.DeleteFunc(ts, func(tt *Tensor) bool { return tt.Name == upProj })
			})
		}, nil, "model: tensor model.layers.1.mlp.up_proj.weight not found in DIR"},
		{"missing lm_head", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []*Tensor) []*Tensor {
				return slices.DeleteFunc(ts, func(tt *Tensor) bool { return tt.Name == LMHeadName })
			})
		}, nil, "model: tensor lm_head.weight not found in DIR"},
		{"wrong shape", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []*Tensor) []*Tensor {
				return replaceTensor(ts, &Tensor{Name: "model.layers.1.self_attn.k_proj.weight", DType: F32, Shape: []int{64, 64}, Data: make([]byte, 64*64*4)})
			})
		}, nil, "model: model.layers.1.self_attn.k_proj.weight has shape [64 64], want [32 64]"},
		{"unsupported architecture", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, ConfigFile), func(b []byte) []byte {
				return []byte(strings.Replace(string(b), ArchLlama, "GPTNeoXForCausalLM", 1))
			})
		}, ErrUnsupportedArchitecture, `model: DIR/config.json: unsupported model architecture: "GPTNeoXForCausalLM" (not a Llama-style decoder) (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)`},
		{"unsupported dtype", func(t *testing.T, dir string) {
			rewriteWeights(t, dir, func(ts []*Tensor) []*Tensor {
				return replaceTensor(ts, &Tensor{Name: upProj, DType: "I8", Shape: []int{176, 64}, Data: make([]byte, 176*64)})
			})
		}, ErrUnsupportedDType, "model: tensor model.layers.1.mlp.up_proj.weight has dtype I8: unsupported dtype (supported: F32, F16, BF16)"},
		{"truncated file", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, WeightsFile), func(b []byte) []byte { return b[:len(b)-100] })
		}, ErrInvalidSafetensors, "model: DIR/model.safetensors: invalid safetensors file: tensor model.norm.weight: data_offsets [631808, 632064] fall outside the 631964-byte data section (truncated file?)"},
		{"truncated header", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, WeightsFile), func(b []byte) []byte { return b[:1000] })
		}, ErrInvalidSafetensors, "model: DIR/model.safetensors: invalid safetensors file: header length 2144 exceeds the 992 bytes that follow it (truncated)"},
		{"corrupt header", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, WeightsFile), func(b []byte) []byte {
				b[strings.Index(string(b), `"dtype"`)+7] = '#'
				return b
			})
		}, ErrInvalidSafetensors, `model: DIR/model.safetensors: invalid safetensors file: header entry for tensor "lm_head.weight": invalid character '#' after object key`},
		{"bad generation config", func(t *testing.T, dir string) {
			editFile(t, filepath.Join(dir, GenerationConfigFile), func([]byte) []byte { return []byte(`{"eos_token_id": 9999}`) })
		}, ErrInvalidConfig, "model: DIR/generation_config.json: invalid model config: token id 9999 is outside the vocabulary [0, 512)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t)
			tc.break_(t, dir)
			m, err := Load(dir)
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			msg := strings.ReplaceAll(tc.msg, "DIR", dir)
			if tc.is != nil && !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), msg) {
				t.Fatalf("err = %v\nwant %v starting %q", err, tc.is, msg)
			}
		})
	}
}

func TestLoadShardIndexErrors(t *testing.T) {
	src := load(t, initTiny(t, 1, F32))
	for _, tc := range []struct {
		name, index, msg string
	}{
		{"escaping shard", `{"weight_map":{"lm_head.weight":"../model.safetensors"}}`, `names shard "../model.safetensors" outside the model directory`},
		{"missing shard", `{"weight_map":{"lm_head.weight":"model-00009-of-00009.safetensors"}}`, "model-00009-of-00009.safetensors: no such file or directory"},
		{"empty map", `{"weight_map":{}}`, "has an empty weight_map"},
		{"wrong shard", `{"weight_map":{"lm_head.weight":"model-00002-of-00002.safetensors","model.norm.weight":"model-00002-of-00002.safetensors"}}`,
			"maps tensor lm_head.weight to model-00002-of-00002.safetensors, which does not contain it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{ConfigFile} {
				b, _ := os.ReadFile(filepath.Join(src.Dir, name))
				os.WriteFile(filepath.Join(dir, name), b, 0o644)
			}
			// Two shards: the first holds lm_head.weight (first by name), the
			// second everything else.
			ts := src.Tensors()
			if err := WriteSafetensors(filepath.Join(dir, "model-00001-of-00002.safetensors"), ts[:1], nil); err != nil {
				t.Fatal(err)
			}
			if err := WriteSafetensors(filepath.Join(dir, "model-00002-of-00002.safetensors"), ts[1:], nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, WeightsIndexFile), []byte(tc.index), 0o644)
			m, err := Load(dir)
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v\nwant %q", err, tc.msg)
			}
		})
	}
}

func TestTiedEmbeddings(t *testing.T) {
	cfg, err := PresetConfig(PresetSmall)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers, cfg.VocabSize = 64, 128, 1, 300
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 4, 2, 16
	dir := t.TempDir()
	if err := WriteRandom(dir, cfg, 1, BF16); err != nil {
		t.Fatal(err)
	}
	m := load(t, dir)
	w := m.Weights()
	if w.LMHead != w.Embed {
		t.Error("tied model's LM head is not its embedding")
	}
	if _, err := m.Tensor(LMHeadName); err == nil {
		t.Error("tied model wrote lm_head.weight")
	}
	if m.Generation == nil || m.Generation.BOSTokenID != nil || len(m.EOSTokenIDs()) != 0 {
		t.Errorf("generation config %+v", m.Generation)
	}
	// A tied checkpoint that also stores lm_head.weight loads; the extra
	// tensor is ignored.
	rewriteWeights(t, dir, func(ts []*Tensor) []*Tensor {
		return append(ts, &Tensor{Name: LMHeadName, DType: F32, Shape: []int{1}, Data: make([]byte, 4)})
	})
	m2 := load(t, dir)
	if m2.Weights().LMHead.Name != EmbedTokensName {
		t.Error("stored lm_head used despite tie_word_embeddings")
	}
}

func TestPresets(t *testing.T) {
	tiny, err := PresetConfig(PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	if n := tiny.NumParameters(); n != 158_016 || n*4 > 10<<20 {
		t.Errorf("tiny has %d parameters", n)
	}
	if tiny.MaxPositionEmbeddings < 8192 || tiny.TieWordEmbeddings || tiny.RopeScaling == nil {
		t.Errorf("tiny %+v", tiny)
	}
	small, err := PresetConfig(PresetSmall)
	if err != nil {
		t.Fatal(err)
	}
	if n := small.NumParameters(); n != 100_092_672 {
		t.Errorf("small has %d parameters, want 100092672", n)
	}
	if !small.TieWordEmbeddings {
		t.Error("small is not tied")
	}
	for _, c := range []Config{tiny, small} {
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
	if _, err := PresetConfig("huge"); err == nil || !strings.Contains(err.Error(), `unknown preset "huge" (have [tiny small])`) {
		t.Errorf("unknown preset: %v", err)
	}
	if err := Init(t.TempDir(), PresetTiny, 1, "I8"); !errors.Is(err, ErrUnsupportedDType) {
		t.Errorf("I8 init: %v", err)
	}
}

func TestCloseTwice(t *testing.T) {
	m, err := Load(initTiny(t, 1, F32))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}
