package model

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// llama32Config is Llama-3.2-1B-Instruct's published config.json.
const llama32Config = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`

func TestParseConfigLlama32(t *testing.T) {
	c, err := ParseConfig([]byte(llama32Config))
	if err != nil {
		t.Fatal(err)
	}
	bos := int32(128000)
	want := Config{
		Architectures: []string{ArchLlama}, ModelType: "llama",
		HiddenSize: 2048, IntermediateSize: 8192, NumHiddenLayers: 16,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 64, HiddenAct: "silu",
		RMSNormEps: 1e-5, RopeTheta: 500000,
		RopeScaling: &RopeScaling{RopeType: RopeTypeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
		VocabSize:   128256, MaxPositionEmbeddings: 131072, TieWordEmbeddings: true,
		BOSTokenID: &bos, EOSTokenIDs: TokenIDs{128001, 128008, 128009}, TorchDType: "bfloat16",
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	if got := c.NumParameters(); got != 1_235_814_400 { // Llama 3.2 1B
		t.Errorf("NumParameters = %d, want 1235814400", got)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"model_type":"llama","hidden_size":256,"intermediate_size":688,
		"num_hidden_layers":2,"num_attention_heads":8,"vocab_size":1000,"max_position_embeddings":2048,
		"eos_token_id":2,"bos_token_id":null,"head_dim":null,"rope_scaling":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 8 || c.HeadDim != 32 || c.RopeTheta != 10000 || c.RMSNormEps != 1e-6 ||
		c.RopeScaling != nil || c.BOSTokenID != nil || !reflect.DeepEqual(c.EOSTokenIDs, TokenIDs{2}) || c.TieWordEmbeddings {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestParseConfigVariants(t *testing.T) {
	base := `"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":100,"max_position_embeddings":4096`
	llama3 := `"factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":1024`
	for _, tc := range []struct {
		name, json string
		theta      float64
		scaled     bool
	}{
		{"legacy type key", `{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"type":"llama3",` + llama3 + `}}`, 10000, true},
		{"transformers 5 rope_parameters", `{"architectures":["LlamaForCausalLM"],` + base + `,"dtype":"bfloat16","rope_parameters":{"rope_type":"llama3","rope_theta":500000,` + llama3 + `}}`, 500000, true},
		{"rope_parameters default", `{"architectures":["LlamaForCausalLM"],` + base + `,"rope_parameters":{"rope_type":"default","rope_theta":1000000}}`, 1000000, false},
		{"mistral without window", `{"architectures":["MistralForCausalLM"],` + base + `,"sliding_window":null}`, 10000, false},
		{"mistral window covering context", `{"architectures":["MistralForCausalLM"],` + base + `,"sliding_window":4096}`, 10000, false},
		{"model_type only", `{"model_type":"mistral",` + base + `}`, 10000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if c.RopeTheta != tc.theta || (c.RopeScaling != nil) != tc.scaled {
				t.Fatalf("theta %v scaling %+v", c.RopeTheta, c.RopeScaling)
			}
			if tc.scaled && *c.RopeScaling != (RopeScaling{RopeTypeLlama3, 8, 1, 4, 1024}) {
				t.Fatalf("scaling %+v", *c.RopeScaling)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := map[string]any{
		"architectures": []string{ArchLlama}, "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"vocab_size": 512, "max_position_embeddings": 4096,
	}
	with := func(kv ...any) []byte {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	llama3 := func(low, high float64) map[string]any {
		return map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": low, "high_freq_factor": high, "original_max_position_embeddings": 1024}
	}
	for _, tc := range []struct {
		name string
		data []byte
		is   error
		msg  string
	}{
		{"gemma", with("architectures", []string{"Gemma2ForCausalLM"}), ErrUnsupportedArchitecture,
			`unsupported model architecture: "Gemma2ForCausalLM" (Gemma's GeGLU MLP, scaled embeddings and 1+w norms are not implemented) (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)`},
		{"qwen3 moe", with("architectures", []string{"Qwen3MoeForCausalLM"}), ErrUnsupportedArchitecture,
			`"Qwen3MoeForCausalLM" (mixture-of-experts models are not supported)`},
		{"mixtral model type", with("architectures", nil, "model_type", "mixtral"), ErrUnsupportedArchitecture,
			`"mixtral" (mixture-of-experts models are not supported)`},
		{"mixed families", with("architectures", []string{ArchLlama, ArchQwen3}), ErrUnsupportedArchitecture,
			"architectures [LlamaForCausalLM Qwen3ForCausalLM] mix model families"},
		{"no architecture", with("architectures", nil), ErrUnsupportedArchitecture, "config names neither architectures nor model_type"},
		{"qwen3 attention bias", with("architectures", []string{ArchQwen3}, "attention_bias", true), ErrUnsupportedArchitecture,
			"attention_bias is true; attention biases are supported only as Qwen2's q/k/v biases"},
		{"bad layer type", with("architectures", []string{ArchQwen3}, "layer_types", []string{"full_attention", "chunked_attention"}), ErrUnsupportedArchitecture,
			`layer_types[1] is "chunked_attention"`},
		{"layer types length", with("architectures", []string{ArchQwen2}, "layer_types", []string{"full_attention"}), ErrInvalidConfig,
			"layer_types lists 1 layers, num_hidden_layers is 2"},
		{"zero window", with("architectures", []string{ArchMistral}, "sliding_window", 0), ErrInvalidConfig,
			"sliding_window is 0, want a positive window or null"},
		{"heads vs kv heads", with("num_attention_heads", 12, "num_key_value_heads", 5), ErrInvalidConfig,
			"num_attention_heads 12 is not a multiple of num_key_value_heads 5"},
		{"zero hidden", with("hidden_size", 0), ErrInvalidConfig, "hidden_size is 0, want 1..2097152"},
		{"negative vocab", with("vocab_size", -3), ErrInvalidConfig, "vocab_size is -3"},
		{"missing max positions", with("max_position_embeddings", nil), ErrInvalidConfig, "max_position_embeddings is 0"},
		{"odd head dim", with("head_dim", 15), ErrInvalidConfig, "head_dim 15 is odd"},
		{"yarn", with("rope_scaling", map[string]any{"rope_type": "yarn", "factor": 4}), ErrUnsupportedArchitecture,
			`rope scaling type "yarn" (supported: llama3)`},
		{"linear legacy", with("rope_scaling", map[string]any{"type": "linear", "factor": 2}), ErrUnsupportedArchitecture,
			`rope scaling type "linear"`},
		{"llama3 bad factors", with("rope_scaling", llama3(4, 1)), ErrInvalidConfig,
			"rope_scaling needs 0 < low_freq_factor < high_freq_factor, got 4 and 1"},
		{"attention bias", with("attention_bias", true), ErrUnsupportedArchitecture, "attention_bias is true"},
		{"partial rotary", with("partial_rotary_factor", 0.5), ErrUnsupportedArchitecture, "partial_rotary_factor 0.5"},
		{"gelu", with("hidden_act", "gelu"), ErrUnsupportedArchitecture, `hidden_act "gelu" (supported: silu)`},
		{"eos out of range", with("eos_token_id", []int{2, 600}), ErrInvalidConfig, "eos_token_id 600 is outside the vocabulary [0, 512)"},
		{"bos negative", with("bos_token_id", -1), ErrInvalidConfig, "bos_token_id -1 is outside the vocabulary"},
		{"eos not a number", with("eos_token_id", "x"), ErrInvalidConfig, "token id"},
		{"malformed json", []byte(`{"hidden_size": 64,`), ErrInvalidConfig, "invalid model config: unexpected end of JSON input"},
		{"huge sizes", with("hidden_size", 1<<40), ErrInvalidConfig, "hidden_size is 1099511627776"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.data)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v\nwant %v containing %q", err, tc.is, tc.msg)
			}
		})
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	for _, name := range PresetNames() {
		for _, fam := range FamilyNames() {
			checkRoundTrip(t, name, fam)
		}
	}
}

func checkRoundTrip(t *testing.T, name, fam string) {
	t.Helper()
	c, err := FamilyPresetConfig(name, fam)
	if err != nil {
		t.Fatal(err)
	}
	bos := int32(1)
	c.BOSTokenID, c.EOSTokenIDs, c.TorchDType = &bos, TokenIDs{2, 3}, "float32"
	data, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("%s %s: round trip changed config:\n%+v\n%+v", name, fam, c, back)
	}
}

func TestTokenIDsJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ids  TokenIDs
		back string
	}{
		{`7`, TokenIDs{7}, `7`},
		{`[7]`, TokenIDs{7}, `7`},
		{`[1, 2]`, TokenIDs{1, 2}, `[1,2]`},
		{`null`, nil, `null`},
	} {
		var ids TokenIDs
		if err := json.Unmarshal([]byte(tc.in), &ids); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(ids)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ids, tc.ids) || string(out) != tc.back {
			t.Errorf("%s -> %#v -> %s, want %#v -> %s", tc.in, ids, out, tc.ids, tc.back)
		}
	}
	var ids TokenIDs
	if err := json.Unmarshal([]byte(`1e20`), &ids); err == nil {
		t.Error("out-of-range id accepted")
	}
}

func TestRopeInvFreq(t *testing.T) {
	plain := Config{HeadDim: 4, RopeTheta: 10000}
	// 10000^(-0/4) = 1, 10000^(-2/4) = 1/100.
	checkClose(t, plain.RopeInvFreq(), []float64{1, 0.01})

	tiny, err := PresetConfig(PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	// head_dim 16, theta 500000, llama3 factor 8, low 1, high 4, L 2048:
	// f_i = 500000^(-i/8); wavelengths 2π/f_i = 6.28, 32.4, 167.1 (< 512:
	// unchanged), 861.6 (between 512 and 2048: t = (2048/861.58-1)/3 =
	// 0.45901, f·((1-t)/8 + t)), then 4443, 22911, 118143, 609226
	// (> 2048: f/8, e.g. 500000^(-1/2)/8 = 1/(8·707.107)).
	want := []float64{
		1,
		0.19392274474868576,
		0.03760603093086393,
		0.0072926647372171085 * ((1-0.45901304575321483)/8 + 0.45901304575321483),
		0.001414213562373095 / 8,
		0.0002742481756762073 / 8,
		5.318295896944989e-05 / 8,
		1.031338537721246e-05 / 8,
	}
	checkClose(t, tiny.RopeInvFreq(), want)
	if got := tiny.RopeInvFreq()[3]; math.Abs(got-0.003840582813253345) > 1e-15 {
		t.Errorf("smoothed frequency %v, want 0.0038405828", got)
	}
}

// TestRopeFreqFactorsLlama31: the frequency divisors of Llama 3.1 8B's
// config (head_dim 128, rope_theta 500000, llama3 factor 8, low 1,
// high 4, original context 8192) equal llama.cpp's convert_hf_to_gguf.py
// formula for rope_freqs.weight, computed here independently in float64:
// 29 high-frequency pairs at 1 (wavelength under 2048), 29 low-frequency
// ones at 8 (over 8192) and 6 smoothed in between; and RopeInvFreq is
// each base frequency divided by its factor.
func TestRopeFreqFactorsLlama31(t *testing.T) {
	c, err := ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":14336,
		"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":128256,
		"max_position_embeddings":131072,"rope_theta":500000.0,"rope_scaling":{"factor":8.0,"low_freq_factor":1.0,
		"high_freq_factor":4.0,"original_max_position_embeddings":8192,"rope_type":"llama3"}}`))
	if err != nil {
		t.Fatal(err)
	}
	const dim, base, factor, low, high, oldCtx = 128, 500000.0, 8.0, 1.0, 4.0, 8192.0
	var want, inv []float64
	ones, eights := 0, 0
	for i := 0; i < dim; i += 2 {
		freq := 1 / math.Pow(base, float64(i)/dim)
		wavelen := 2 * math.Pi / freq
		var f float64
		switch {
		case wavelen < oldCtx/high:
			f = 1
			ones++
		case wavelen > oldCtx/low:
			f = factor
			eights++
		default:
			smooth := (oldCtx/wavelen - low) / (high - low)
			f = 1 / ((1-smooth)/factor + smooth)
		}
		want = append(want, f)
		inv = append(inv, freq/f)
	}
	if ones != 29 || eights != 29 {
		t.Fatalf("reference: %d ones and %d eights, want 29 and 29", ones, eights)
	}
	checkClose(t, c.RopeFreqFactors(), want)
	checkClose(t, c.RopeInvFreq(), inv)
	if f := c.RopeFreqFactors(); f[28] != 1 || !(f[29] > 1) || !(f[34] < 8) || f[35] != 8 { // the smoothed band's edges
		t.Errorf("factors 28..35: %v", f[28:36])
	}
}

// TestRopeFactorsValidate: explicit factors (a GGUF file's) must be
// head_dim/2 finite positive numbers, without rope_scaling beside them.
func TestRopeFactorsValidate(t *testing.T) {
	tiny, err := PresetConfig(PresetTiny)
	if err != nil {
		t.Fatal(err)
	}
	tiny.EOSTokenIDs = TokenIDs{1}
	want := tiny.RopeInvFreq()
	tiny.RopeFactors, tiny.RopeScaling = tiny.RopeFreqFactors(), nil
	if err := tiny.Validate(); err != nil {
		t.Fatal(err)
	}
	checkClose(t, tiny.RopeInvFreq(), want)
	for _, bad := range [][]float64{{1, 2}, {1, 1, 1, 1, 1, 1, 1, math.NaN()}, {1, 1, 1, 1, 0, 1, 1, 1}, {1, 1, 1, 1, -2, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, math.Inf(1)}} {
		c := tiny
		c.RopeFactors = bad
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("factors %v: %v", bad, err)
		}
	}
	c := tiny
	c.RopeScaling = &RopeScaling{RopeTypeLlama3, 8, 1, 4, 2048}
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("factors and rope_scaling: %v", err)
	}
}

func checkClose(t *testing.T, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("len %d, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12*math.Abs(want[i]) {
			t.Errorf("[%d] = %.17g, want %.17g", i, got[i], want[i])
		}
	}
}

// FuzzParseConfig checks that any accepted config.json re-encodes to
// itself and yields finite, non-negative rotary frequencies (extreme but
// valid values may underflow to 0).
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(llama32Config))
	for _, name := range []string{"qwen2.5-0.5b-instruct.json", "qwen3-0.6b.json", "mistral-7b-v0.1.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"model_type":"llama","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":4,"eos_token_id":[1,2]}`))
	f.Add([]byte(`{"architectures":["MistralForCausalLM"],"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":4,"rope_parameters":{"rope_type":"llama3","rope_theta":2,"factor":1e300,"low_freq_factor":1e-300,"high_freq_factor":1e300,"original_max_position_embeddings":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		for i, v := range c.RopeInvFreq() {
			if !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("inv freq[%d] = %v", i, v)
			}
		}
		enc, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseConfig(enc)
		if err != nil {
			t.Fatalf("re-encoded config rejected: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("round trip changed config:\n%+v\n%+v", c, back)
		}
	})
}
