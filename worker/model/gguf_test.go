package model

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/internal/kernels"
)

// ggufFixture writes a tiny preset model (700-token tokenizer) in dtype
// and exports it to GGUF as typ; it returns the model dir and GGUF path.
func ggufFixture(t testing.TB, dtype DType, typ GGMLType) (string, string) {
	t.Helper()
	tokDir := t.TempDir()
	if _, err := tokenizer.WritePreset(tokDir, 700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := InitWithTokenizer(dir, PresetTiny, tokDir, 7, dtype); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := ExportGGUF(dir, out, typ); err != nil {
		t.Fatal(err)
	}
	return dir, out
}

// TestGGUFRoundTrip: the writer's file parses back with every metadata
// type, llama.cpp's names and dims, and the weights equal the source
// tensors (exactly for F32/F16/BF16; within one Q8_0 step for Q8_0).
func TestGGUFRoundTrip(t *testing.T) {
	for _, c := range []struct {
		dtype DType
		typ   GGMLType
	}{{F32, GGMLF32}, {F16, GGMLF16}, {BF16, GGMLBF16}, {F32, GGMLQ8_0}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			dir, path := ggufFixture(t, c.dtype, c.typ)
			f, err := OpenGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.str("general.architecture") != "llama" || f.Tensor("blk.1.attn_q.weight") == nil || f.Tensor("token_embd.weight").Type != c.typ {
				t.Fatalf("unexpected layout: arch %q", f.str("general.architecture"))
			}
			if n := f.Tensor("blk.0.attn_norm.weight"); n.Type != GGMLF32 {
				t.Errorf("norm type %s, want F32", n.Type)
			}
			src, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			g, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if g.GGUFPath != path || g.Config.HiddenSize != src.Config.HiddenSize || g.Config.VocabSize != 700 ||
				*g.Config.BOSTokenID != *src.Config.BOSTokenID || !slices.Equal(g.EOSTokenIDs(), src.EOSTokenIDs()) ||
				g.Config.RopeTheta != src.Config.RopeTheta || g.Config.TieWordEmbeddings != src.Config.TieWordEmbeddings {
				t.Fatalf("config %+v, want %+v", g.Config, src.Config)
			}
			for _, s := range src.Config.TensorSpecs() {
				want, _ := src.Float32(s.Name)
				got, err := g.Float32(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					tol := float32(0)
					if c.typ == GGMLQ8_0 && s.role != roleDown && s.role != roleInputNorm && s.role != rolePostAttentionNorm && s.role != roleFinalNorm {
						// (down stays F16: its 176-element rows are not whole blocks)
						// Half a step of the block's amax/127, plus the f16 scale's rounding.
						var amax float32
						for _, v := range want[i/32*32 : i/32*32+32] {
							amax = max(amax, v, -v)
						}
						tol = amax/127*0.5 + amax*(1.0/1024)
					}
					if c.typ == GGMLQ8_0 && s.role == roleDown {
						tol = max(want[i], -want[i])/1024 + 6e-8 // f16 rounding
					}
					if d := got[i] - want[i]; d > tol || d < -tol {
						t.Fatalf("%s[%d] = %v, want %v", s.Name, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestGGUFTokenizerMatchesTokenizerJSON: the tokenizer built from the
// GGUF metadata encodes the tokenizer corpus, special tokens included, as
// the tokenizer.json one does, with the same BOS, EOS and chat template.
func TestGGUFTokenizerMatchesTokenizerJSON(t *testing.T) {
	dir, path := ggufFixture(t, BF16, GGMLBF16)
	want, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	corpus, err := os.ReadFile("../../internal/tokenizer/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(corpus), "\n")
	lines = append(lines, "<|begin_of_text|>hi<|eot_id|>  x\n\n", "12345 ünïcödé 🤖 don't", string(corpus))
	for _, s := range lines {
		for _, enc := range []func(*tokenizer.Tokenizer, string) ([]int32, error){(*tokenizer.Tokenizer).Encode, (*tokenizer.Tokenizer).EncodeSpecial} {
			w, err1 := enc(want, s)
			g, err2 := enc(got, s)
			if err1 != nil || err2 != nil || !slices.Equal(w, g) {
				t.Fatalf("encode %q: gguf %v (%v), tokenizer.json %v (%v)", s, g, err2, w, err1)
			}
			ds, _ := got.Decode(g)
			dw, _ := want.Decode(w)
			if !bytes.Equal(ds, dw) {
				t.Fatalf("decode: gguf %q, tokenizer.json %q", ds, dw)
			}
		}
	}
	wb, _ := want.BOS()
	gb, _ := got.BOS()
	if wb != gb || !slices.Equal(want.EOS(), got.EOS()) || want.ChatTemplate() != got.ChatTemplate() || want.VocabSize() != got.VocabSize() {
		t.Errorf("bos %d/%d eos %v/%v vocab %d/%d template equal %v", gb, wb, got.EOS(), want.EOS(), got.VocabSize(), want.VocabSize(), want.ChatTemplate() == got.ChatTemplate())
	}
}

// TestGGUFRefuses: other architectures, unknown pre-tokenizers and
// corrupt files are refused with clear errors.
func TestGGUFRefuses(t *testing.T) {
	_, path := ggufFixture(t, F32, GGMLF32)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseGGUF(data)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(key string, v any) string {
		return rewriteGGUF(t, f, func(e *GGUFKV) bool {
			if e.Key == key {
				e.Value = v
			}
			return true
		}, nil)
	}
	if _, err := Load(rewrite("general.architecture", "qwen2")); !errors.Is(err, ErrUnsupportedArchitecture) {
		t.Errorf("qwen2 GGUF: %v", err)
	}
	if _, err := LoadTokenizer(rewrite("tokenizer.ggml.pre", "deepseek-llm")); err == nil || !strings.Contains(err.Error(), "deepseek-llm") {
		t.Errorf("unknown pre-tokenizer: %v", err)
	}
	same := rewrite("general.name", f.str("general.name"))
	if b, _ := os.ReadFile(same); !bytes.Equal(b, data) {
		t.Error("rewriting the parsed file does not reproduce it byte for byte")
	}
	for _, n := range []int{0, 3, 23, 100, len(data) - 1} {
		if _, err := ParseGGUF(data[:n]); !errors.Is(err, ErrInvalidGGUF) {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
}

// rewriteGGUF writes f again to a new file and returns its path: the
// metadata entries keepKV keeps (after any change it makes), and the
// tensors, each through editTensor when it is not nil.
func rewriteGGUF(t testing.TB, f *GGUFFile, keepKV func(*GGUFKV) bool, editTensor func(*GGUFOutTensor)) string {
	t.Helper()
	var kv []GGUFKV
	for _, e := range f.KV {
		if keepKV(&e) {
			kv = append(kv, e)
		}
	}
	var ts []GGUFOutTensor
	for _, x := range f.Tensors {
		o := GGUFOutTensor{Name: x.Name, Dims: x.Dims, Type: x.Type, Size: uint64(len(x.Data)),
			Fill: func(dst []byte) error { copy(dst, x.Data); return nil }}
		if editTensor != nil {
			editTensor(&o)
		}
		ts = append(ts, o)
	}
	out := filepath.Join(t.TempDir(), "x.gguf")
	if err := WriteGGUF(out, kv, ts); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutWardenKeys drops warden's own warden.* metadata, leaving the
// layout llama.cpp's convert_hf_to_gguf.py writes for a Llama 3.1 model:
// the llama3 RoPE scaling only in rope_freqs.weight.
func withoutWardenKeys(e *GGUFKV) bool { return !strings.HasPrefix(e.Key, "warden.") }

// f32Tensor makes o an F32 tensor of vals.
func f32Tensor(o *GGUFOutTensor, vals ...float32) {
	o.Type, o.Dims, o.Size = GGMLF32, []uint64{uint64(len(vals))}, 4*uint64(len(vals))
	o.Fill = func(dst []byte) error { encodeFloats(dst, vals, F32); return nil }
}

// TestGGUFLlamaCppRopeFreqs: a Llama 3 file as llama.cpp writes it —
// rope_freqs.weight and no warden.* keys — loads (it was refused): its
// factors, exactly as stored, divide the base frequencies, within float32
// rounding of the safetensors model's llama3 frequencies. A file with both
// uses warden's keys (the exact Config), but is refused when the tensor
// disagrees with them; malformed factors are refused naming the tensor.
func TestGGUFLlamaCppRopeFreqs(t *testing.T) {
	dir, path := ggufFixture(t, F32, GGMLF32)
	src, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stored := make([]float32, src.HeadDim/2)
	decodeFloats(stored, f.Tensor(ggufRopeFreqs).Data, F32)

	g, err := Load(rewriteGGUF(t, f, withoutWardenKeys, nil))
	if err != nil {
		t.Fatalf("llama.cpp layout refused: %v", err)
	}
	defer g.Close()
	if g.Config.RopeScaling != nil || len(g.Config.RopeFactors) != len(stored) {
		t.Fatalf("rope scaling %+v, factors %v", g.Config.RopeScaling, g.Config.RopeFactors)
	}
	want := src.RopeInvFreq()
	for i, v := range g.Config.RopeInvFreq() {
		if g.Config.RopeFactors[i] != float64(stored[i]) || math.Abs(v-want[i]) > 1e-7*want[i] {
			t.Errorf("pair %d: factor %v (file %v), inv freq %v, safetensors %v", i, g.Config.RopeFactors[i], stored[i], v, want[i])
		}
	}
	if stored[0] != 1 || stored[len(stored)-1] != 8 || slices.IndexFunc(stored, func(v float32) bool { return v > 1 && v < 8 }) < 0 {
		t.Errorf("fixture's factors %v do not use all three llama3 branches", stored)
	}

	both, err := LoadModelConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if both.RopeFactors != nil || *both.RopeScaling != *src.RopeScaling || !slices.Equal(both.RopeInvFreq(), want) {
		t.Errorf("with warden's keys: scaling %+v factors %v", both.RopeScaling, both.RopeFactors)
	}
	for name, edit := range map[string]func(*GGUFOutTensor){
		"a factor 1% off": func(o *GGUFOutTensor) {
			v := slices.Clone(stored)
			v[3] *= 1.01
			f32Tensor(o, v...)
		},
		"a NaN factor": func(o *GGUFOutTensor) { f32Tensor(o, 1, 1, 1, float32(math.NaN()), 8, 8, 8, 8) },
	} {
		_, err := Load(rewriteGGUF(t, f, func(*GGUFKV) bool { return true }, ropeFreqsEdit(edit)))
		if !errors.Is(err, ErrInvalidGGUF) || !strings.Contains(err.Error(), "warden.rope.llama3") {
			t.Errorf("keys and %s: %v", name, err)
		}
	}
	for name, c := range map[string]struct {
		edit    func(*GGUFOutTensor)
		wantErr error
	}{
		"7 factors":     {func(o *GGUFOutTensor) { f32Tensor(o, 1, 1, 1, 2, 8, 8, 8) }, ErrInvalidGGUF},
		"F16 factors":   {func(o *GGUFOutTensor) { o.Type, o.Size = GGMLF16, 16 }, ErrInvalidGGUF},
		"a 2-D tensor":  {func(o *GGUFOutTensor) { o.Dims = []uint64{4, 2} }, ErrInvalidGGUF},
		"a zero factor": {func(o *GGUFOutTensor) { f32Tensor(o, 1, 1, 1, 0, 8, 8, 8, 8) }, ErrInvalidConfig},
		"an infinite factor": {func(o *GGUFOutTensor) {
			f32Tensor(o, 1, 1, 1, float32(math.Inf(1)), 8, 8, 8, 8)
		}, ErrInvalidConfig},
		"a negative factor": {func(o *GGUFOutTensor) { f32Tensor(o, 1, 1, 1, -2, 8, 8, 8, 8) }, ErrInvalidConfig},
	} {
		_, err := Load(rewriteGGUF(t, f, withoutWardenKeys, ropeFreqsEdit(c.edit)))
		if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), "rope") {
			t.Errorf("%s: %v, want %v", name, err, c.wantErr)
		}
	}
}

// ropeFreqsEdit applies edit to rope_freqs.weight only.
func ropeFreqsEdit(edit func(*GGUFOutTensor)) func(*GGUFOutTensor) {
	return func(o *GGUFOutTensor) {
		if o.Name == ggufRopeFreqs {
			edit(o)
		}
	}
}

// FuzzGGUF: ParseGGUF never panics or over-allocates, whatever it
// accepts has every tensor inside the input, and decoding any accepted
// tensor (F32 to Q6_K blocks) fails only with ErrInvalidGGUF.
func FuzzGGUF(f *testing.F) {
	_, path := ggufFixture(f, F32, GGMLQ8_0)
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data[:min(len(data), 4096)])
	f.Add(data)
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Add(writeKQuantTensors(f))
	g, err := ParseGGUF(data)
	if err != nil {
		f.Fatal(err)
	}
	llamaCpp, err := os.ReadFile(rewriteGGUF(f, g, withoutWardenKeys, nil)) // rope_freqs.weight alone
	if err != nil {
		f.Fatal(err)
	}
	f.Add(llamaCpp)
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := ParseGGUF(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidGGUF) && !errors.Is(err, ErrUnsupportedDType) {
				t.Fatalf("error not typed: %v", err)
			}
			return
		}
		for _, x := range g.Tensors {
			if len(x.Data) > len(b) {
				t.Fatalf("tensor %s has %d bytes of a %d-byte input", x.Name, len(x.Data), len(b))
			}
			n := uint64(1)
			for _, d := range x.Dims {
				n *= d // bind bounded the product
			}
			if n <= 1<<16 {
				if err := decodeGGML(make([]float32, n), x.Data, x.Type); err != nil && !errors.Is(err, ErrInvalidGGUF) {
					t.Fatalf("tensor %s: error not typed: %v", x.Name, err)
				}
			}
		}
		if g.Get("tokenizer.ggml.model") != nil {
			_, _ = TokenizerFromGGUF(g) // must not panic
		}
		_, _ = ggufConfig(g)
	})
}

// TestGGUFQ8_0MapsToQ8Exactly: the engine's q8 quantization of a Q8_0
// file's dequantized weights (int8 × f16 scale, in F32) gives back the
// file's blocks exactly: the same int8 values and the f16 scale widened
// to f32, so its rows dequantize to the very same numbers.
func TestGGUFQ8_0MapsToQ8Exactly(t *testing.T) {
	_, path := ggufFixture(t, F32, GGMLQ8_0)
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checked := 0
	for _, s := range m.Config.TensorSpecs() {
		g := m.gguf.Tensor(ggufName(s.Name))
		if g == nil || g.Type != GGMLQ8_0 {
			continue
		}
		vals, err := m.Float32(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := s.Shape[0], s.Shape[1]
		q, err := kernels.NewF32(rows, cols, vals).QuantizeQ8()
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, cols)
		for i := range rows {
			q.Row(i, row)
			for j, v := range row {
				if v != vals[i*cols+j] {
					t.Fatalf("%s[%d][%d]: q8 %v, file %v", s.Name, i, j, v, vals[i*cols+j])
				}
			}
		}
		checked++
	}
	if checked < 8 {
		t.Fatalf("only %d Q8_0 tensors checked", checked)
	}
}
