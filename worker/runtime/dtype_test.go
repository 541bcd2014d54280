package runtime

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// TestDTypeConversionMatchesConvertedCheckpoint: a bf16 checkpoint served
// with Options.DType f16 generates the same greedy tokens as a checkpoint
// holding the same weights as f16 (each rounded once), loaded as it is;
// served as f32, the same as an f32 checkpoint of its exactly widened
// weights; and quantized at load (q8), the same as that f32 checkpoint
// quantized. The runtime reports the dtype it computes with and counts
// the converted weights' bytes in its memory plan.
func TestDTypeConversionMatchesConvertedCheckpoint(t *testing.T) {
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	bf16 := filepath.Join(t.TempDir(), "bf16")
	if err := model.InitWithTokenizer(bf16, model.PresetTiny, tokDir, 5, model.BF16); err != nil {
		t.Fatal(err)
	}
	f16, f32 := convertedCopy(t, bf16, model.F16, nil), convertedCopy(t, bf16, model.F32, nil)
	prompts := [][]int32{{1, 2, 3, 4, 5}, make([]int32, 70)}
	for j := range prompts[1] {
		prompts[1][j] = int32((j*131 + 17) % 700)
	}
	opt := func(dir string, dt model.DType, q8 bool) Options {
		return Options{ModelDir: dir, Threads: 2, PageTokens: 16, ChunkTokens: 32, MaxBatch: 4, KVFraction: 0.01,
			DType: dt, Quantize: q8}
	}
	for _, c := range []struct {
		name      string
		converted Options
		reference Options
		dtype     string
		bytes     int64 // per weight
	}{
		{"f16", opt(bf16, model.F16, false), opt(f16, "", false), "f16", 2},
		{"f32", opt(bf16, model.F32, false), opt(f32, "", false), "f32", 4},
		{"q8", opt(bf16, "", true), opt(f32, "", true), "q8", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			conv, ref := start(t, c.converted), start(t, c.reference)
			if conv.WeightsDType != c.dtype || ref.WeightsDType != c.dtype {
				t.Fatalf("weights dtype %q (converted) and %q (reference), want %q", conv.WeightsDType, ref.WeightsDType, c.dtype)
			}
			if c.bytes > 0 {
				if want := conv.Model.Config.NumParameters() * c.bytes; conv.Memory.WeightsBytes != want {
					t.Fatalf("memory plan counts %d weight bytes, want %d", conv.Memory.WeightsBytes, want)
				}
			}
			for i, p := range prompts {
				want := greedy(t, ref, "p", p, 16)
				got := greedy(t, conv, "p", p, 16)
				if !slices.Equal(got, want) {
					t.Fatalf("prompt %d: bf16 served as %s generated %v, the %s checkpoint %v", i, c.name, got, c.name, want)
				}
			}
		})
	}
	if r := start(t, opt(bf16, "", false)); r.WeightsDType != "bf16" {
		t.Fatalf("unconverted weights dtype %q, want bf16", r.WeightsDType)
	}
}

// TestDTypeConversionOutOfRange: a bf16 weight beyond f16's range refuses
// to load as f16, naming the matrix and the value, and the cuda backend
// refuses any conversion.
func TestDTypeConversionOutOfRange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bf16")
	if err := model.Init(dir, model.PresetTiny, 5, model.BF16); err != nil {
		t.Fatal(err)
	}
	big := convertedCopy(t, dir, model.BF16, func(t *model.Tensor) {
		if t.Name == model.LayerPrefix(1)+"mlp.up_proj.weight" {
			binary.LittleEndian.PutUint16(t.Data[2*7:], uint16(math.Float32bits(1e6)>>16))
		}
	})
	_, err := Open(Options{ModelDir: big, Threads: 1, PageTokens: 16, ChunkTokens: 32, MaxBatch: 2, KVBytes: 1 << 20, DType: model.F16})
	if !errors.Is(err, kernels.ErrRange) || !strings.Contains(err.Error(), "layer 1 up_proj") || !strings.Contains(err.Error(), "999424") {
		t.Fatalf("Open of a 1e6 weight as f16: %v", err)
	}
	_, err = Open(Options{ModelDir: dir, Backend: "cuda", PageTokens: 16, ChunkTokens: 32, MaxBatch: 2, KVBytes: 1 << 20, DType: model.F16})
	if !errors.Is(err, ErrDType) {
		t.Fatalf("Open with the cuda backend and dtype f16: %v", err)
	}
}

// convertedCopy writes the model in dir as a new model directory (config
// and tokenizer files copied) whose matrices hold the same values as dt:
// exactly widened for F32, rounded to nearest even for F16
// (kernels.F32ToF16). Vectors (norms) keep their type. edit, when set,
// changes each tensor before it is written.
func convertedCopy(t *testing.T, dir string, dt model.DType, edit func(*model.Tensor)) string {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := t.TempDir()
	var ts []*model.Tensor
	for _, src := range m.Tensors() {
		c := &model.Tensor{Name: src.Name, DType: src.DType, Shape: src.Shape, Data: slices.Clone(src.Data)}
		if len(src.Shape) == 2 && dt != src.DType {
			v, err := src.Float32()
			if err != nil {
				t.Fatal(err)
			}
			c.DType, c.Data = dt, make([]byte, len(v)*dt.Size())
			switch dt {
			case model.F32:
				for i, x := range v {
					binary.LittleEndian.PutUint32(c.Data[4*i:], math.Float32bits(x))
				}
			case model.F16:
				h := make([]uint16, len(v))
				kernels.F32ToF16(h, v)
				for i, x := range h {
					binary.LittleEndian.PutUint16(c.Data[2*i:], x)
				}
			}
		}
		if edit != nil {
			edit(c)
		}
		ts = append(ts, c)
	}
	if err := model.WriteWeights(out, ts, 0); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), "model.safetensors") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == model.ConfigFile && dt != model.BF16 {
			data = withTorchDType(t, data, dt)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// withTorchDType sets config.json's torch_dtype to dt's name.
func withTorchDType(t *testing.T, data []byte, dt model.DType) []byte {
	t.Helper()
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["torch_dtype"] = dt.TorchName()
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBF16NumericsWeightsDType: Options.BF16Dot reports the weights as
// bf16-dot where they are bf16 (the checkpoint's own, or converted at
// load), changes nothing for other weights, and the cuda backend refuses
// it.
func TestBF16NumericsWeightsDType(t *testing.T) {
	bf16, f32 := filepath.Join(t.TempDir(), "bf16"), filepath.Join(t.TempDir(), "f32")
	if err := model.Init(bf16, model.PresetTiny, 5, model.BF16); err != nil {
		t.Fatal(err)
	}
	if err := model.Init(f32, model.PresetTiny, 5, model.F32); err != nil {
		t.Fatal(err)
	}
	opt := func(dir string, dt model.DType) Options {
		return Options{ModelDir: dir, Threads: 1, PageTokens: 16, ChunkTokens: 32, MaxBatch: 2, KVBytes: 1 << 20, DType: dt, BF16Dot: true}
	}
	for _, c := range []struct {
		name string
		opt  Options
		want string
	}{
		{"bf16 checkpoint", opt(bf16, ""), "bf16-dot"},
		{"f32 checkpoint converted to bf16", opt(f32, model.BF16), "bf16-dot"},
		{"f32 checkpoint", opt(f32, ""), "f32"},
	} {
		if r := start(t, c.opt); r.WeightsDType != c.want {
			t.Errorf("%s: weights dtype %q, want %q", c.name, r.WeightsDType, c.want)
		}
	}
	o := opt(bf16, "")
	o.Backend = "cuda"
	if _, err := Open(o); !errors.Is(err, ErrDType) {
		t.Fatalf("Open with the cuda backend and bf16 products: %v", err)
	}
}
