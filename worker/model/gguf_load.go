package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// GGUFExt is the file extension of GGUF model files.
const GGUFExt = ".gguf"

// ggufPreTokenizers maps the llama.cpp pre-tokenizer names warden runs
// (tokenizer.ggml.pre) to the tokenizer.json pre_tokenizer and BPE
// ignore_merges setting that behave the same.
var ggufPreTokenizers = map[string]struct {
	preTokenizer string
	ignoreMerges bool
}{
	"llama-bpe": {`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]}`, true},
	"gpt-2":     {`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`, false},
}

// ggufPreAliases are other tokenizer.ggml.pre names for the same splits.
var ggufPreAliases = map[string]string{"default": "gpt-2", "llama3": "llama-bpe"}

// ggufPath returns the GGUF file path names — a .gguf file, or a
// directory holding exactly one .gguf file and no config.json — or "".
func ggufPath(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	if !st.IsDir() {
		if strings.HasSuffix(path, GGUFExt) {
			return path, nil
		}
		return "", fmt.Errorf("model: %s is a file but not a %s file", path, GGUFExt)
	}
	if _, err := os.Stat(filepath.Join(path, ConfigFile)); err == nil {
		return "", nil
	}
	matches, err := filepath.Glob(filepath.Join(path, "*"+GGUFExt))
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	switch len(matches) {
	case 0:
		return "", nil
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("model: %s holds %d %s files; pass the path of one to --model-dir", path, len(matches), GGUFExt)
}

// LoadModelConfig returns the config of the model at path, a model
// directory or GGUF file as Load accepts, without mapping its weights:
// config.json's (LoadConfig), or the one a GGUF file's metadata describes.
func LoadModelConfig(path string) (Config, error) {
	gp, err := ggufPath(path)
	if err != nil {
		return Config{}, err
	}
	if gp == "" {
		return LoadConfig(path)
	}
	f, err := OpenGGUF(gp)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	c, err := ggufConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", gp, err)
	}
	return c, nil
}

// loadGGUF loads a llama-architecture GGUF file: the config from its
// llama.* metadata and the weights under their Hugging Face names, Q and K
// rows permuted back from llama.cpp's rotary order. F32/F16/BF16 tensors
// alias the mapping (Q and K are copied); Q8_0, Q4_K and Q6_K tensors are
// dequantized to F32 at load, each weight exactly (see decodeGGML), and a
// block with a non-finite scale is refused.
// Shapes are checked against the config by bindWeights.
func loadGGUF(path string) (*Model, error) {
	f, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	m := &Model{Dir: filepath.Dir(path), GGUFPath: path, gguf: f}
	if err := m.bindGGUF(); err != nil {
		return nil, errors.Join(fmt.Errorf("model: %s: %w", path, err), m.Close())
	}
	return m, nil
}

func (f *GGUFFile) str(key string) string {
	if kv := f.kv[key]; kv != nil {
		s, _ := kv.Value.(string)
		return s
	}
	return ""
}

// uint reads an unsigned or non-negative integer entry; ok is false when
// absent or of another type.
func (f *GGUFFile) uint(key string) (uint64, bool) {
	kv := f.kv[key]
	if kv == nil {
		return 0, false
	}
	switch v := kv.Value.(type) {
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int32:
		return uint64(v), v >= 0
	case int64:
		return uint64(v), v >= 0
	}
	return 0, false
}

func (f *GGUFFile) float(key string, def float64) float64 {
	if kv := f.kv[key]; kv != nil {
		switch v := kv.Value.(type) {
		case float32:
			return float64(v)
		case float64:
			return v
		}
	}
	return def
}

func (f *GGUFFile) need(key string) (int, error) {
	v, ok := f.uint(key)
	if !ok || v > maxConfigPositions {
		return 0, fmt.Errorf("%w: GGUF metadata %s missing or out of range", ErrInvalidConfig, key)
	}
	return int(v), nil
}

// ggufConfig builds the Config a llama GGUF file describes.
func ggufConfig(f *GGUFFile) (Config, error) {
	if arch := f.str("general.architecture"); arch != "llama" {
		return Config{}, fmt.Errorf("GGUF architecture %q: %w (GGUF files: llama)", arch, ErrUnsupportedArchitecture)
	}
	if t := f.str("llama.rope.scaling.type"); t != "" && t != "none" {
		return Config{}, fmt.Errorf("GGUF rope scaling %q: %w", t, ErrUnsupportedArchitecture)
	}
	c := Config{Architectures: []string{ArchLlama}, ModelType: "llama", HiddenAct: "silu"}
	var err error
	for _, p := range []struct {
		dst *int
		key string
	}{
		{&c.HiddenSize, "llama.embedding_length"},
		{&c.IntermediateSize, "llama.feed_forward_length"},
		{&c.NumHiddenLayers, "llama.block_count"},
		{&c.NumAttentionHeads, "llama.attention.head_count"},
		{&c.MaxPositionEmbeddings, "llama.context_length"},
	} {
		if *p.dst, err = f.need(p.key); err != nil {
			return c, err
		}
	}
	c.NumKeyValueHeads = c.NumAttentionHeads
	if _, ok := f.uint("llama.attention.head_count_kv"); ok {
		if c.NumKeyValueHeads, err = f.need("llama.attention.head_count_kv"); err != nil {
			return c, err
		}
	}
	if c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if _, ok := f.uint("llama.attention.key_length"); ok {
		if c.HeadDim, err = f.need("llama.attention.key_length"); err != nil {
			return c, err
		}
	}
	if v, ok := f.uint("llama.attention.value_length"); ok && int(v) != c.HeadDim {
		return c, fmt.Errorf("GGUF value_length %d differs from key_length %d: %w", v, c.HeadDim, ErrUnsupportedArchitecture)
	}
	if v, ok := f.uint("llama.rope.dimension_count"); ok && int(v) != c.HeadDim {
		return c, fmt.Errorf("GGUF rope.dimension_count %d is not the head size %d (partial rotary): %w", v, c.HeadDim, ErrUnsupportedArchitecture)
	}
	c.RopeTheta = f.float("llama.rope.freq_base", defaultRopeTheta)
	if err := ggufRope(f, &c); err != nil {
		return c, err
	}
	c.RMSNormEps = f.float("llama.attention.layer_norm_rms_epsilon", defaultRMSNormEps)
	embd := f.Tensor("token_embd.weight")
	if embd == nil || len(embd.Dims) != 2 || embd.Dims[1] > maxConfigPositions {
		return c, fmt.Errorf("%w: GGUF token_embd.weight missing or not 2-D", ErrInvalidConfig)
	}
	c.VocabSize = int(embd.Dims[1])
	c.TieWordEmbeddings = f.Tensor("output.weight") == nil
	if v, ok := f.uint("tokenizer.ggml.bos_token_id"); ok && v < uint64(c.VocabSize) {
		id := int32(v)
		c.BOSTokenID = &id
	}
	for _, key := range ggufEndTokenKeys {
		if v, ok := f.uint(key); ok && v < uint64(c.VocabSize) && !slices.Contains(c.EOSTokenIDs, int32(v)) {
			c.EOSTokenIDs = append(c.EOSTokenIDs, int32(v))
		}
	}
	c.TorchDType = "float32"
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// ggufRopeTolerance bounds the relative difference between a
// rope_freqs.weight factor and the one warden's Llama 3 keys give:
// llama.cpp computes the factors in float32 and stores them as float32,
// a few ulps (about 1e-7 each) from the float64 formula.
const ggufRopeTolerance = 1e-5

// ggufRope sets c's RoPE frequency scaling (c.HeadDim and c.RopeTheta
// set) from llama.cpp's rope_freqs.weight and warden's
// warden.rope.llama3.* keys. The tensor holds the divisor of each
// dimension pair's frequency, whatever scaling made it, and llama.cpp
// applies it as it is, so without warden's keys it becomes c.RopeFactors.
// With the keys (ExportGGUF writes both), c.RopeScaling comes from them,
// so the file runs bit for bit as the safetensors model it was exported
// from, and a rope_freqs.weight that disagrees with them beyond float32
// rounding is refused.
func ggufRope(f *GGUFFile, c *Config) error {
	factors, err := ggufRopeFactors(f, c.HeadDim)
	if err != nil {
		return err
	}
	orig, ok := f.uint(ggufLlama3OrigCtx)
	if !ok {
		c.RopeFactors = factors
		return nil
	}
	c.RopeScaling = &RopeScaling{RopeType: RopeTypeLlama3, Factor: f.float(ggufLlama3Factor, 0),
		LowFreqFactor: f.float(ggufLlama3LowFreq, 0), HighFreqFactor: f.float(ggufLlama3HighFreq, 0),
		OriginalMaxPositionEmbeddings: int(min(orig, maxConfigPositions+1))}
	if factors == nil {
		return nil
	}
	if err := c.RopeScaling.validate(); err != nil {
		return err
	}
	for i, want := range c.RopeFreqFactors() {
		if !(math.Abs(factors[i]-want) <= ggufRopeTolerance*want) {
			return ggufInvalidf("%s[%d] is %v, but the warden.rope.llama3.* keys give %v", ggufRopeFreqs, i, factors[i], want)
		}
	}
	return nil
}

// ggufRopeFactors reads rope_freqs.weight (nil when absent): F32, one
// factor per rotary dimension pair, as llama.cpp requires.
func ggufRopeFactors(f *GGUFFile, headDim int) ([]float64, error) {
	g := f.Tensor(ggufRopeFreqs)
	if g == nil {
		return nil, nil
	}
	if g.Type != GGMLF32 || len(g.Dims) != 1 || g.Dims[0] != uint64(headDim/2) {
		return nil, ggufInvalidf("%s is %s %v, want F32 [%d] (one factor per rotary dimension pair)", ggufRopeFreqs, g.Type, g.Dims, headDim/2)
	}
	vals := make([]float32, headDim/2)
	decodeFloats(vals, g.Data, F32)
	factors := make([]float64, len(vals))
	for i, v := range vals {
		factors[i] = float64(v)
	}
	return factors, nil
}

// ggufNames maps a Hugging Face tensor name to llama.cpp's.
func ggufName(hf string) string {
	r := strings.NewReplacer(
		"model.embed_tokens.weight", "token_embd.weight",
		"model.norm.weight", "output_norm.weight",
		"lm_head.weight", "output.weight",
		"model.layers.", "blk.",
		".self_attn.q_proj.", ".attn_q.",
		".self_attn.k_proj.", ".attn_k.",
		".self_attn.v_proj.", ".attn_v.",
		".self_attn.o_proj.", ".attn_output.",
		".mlp.gate_proj.", ".ffn_gate.",
		".mlp.up_proj.", ".ffn_up.",
		".mlp.down_proj.", ".ffn_down.",
		".input_layernorm.", ".attn_norm.",
		".post_attention_layernorm.", ".ffn_norm.",
	)
	return r.Replace(hf)
}

func (m *Model) bindGGUF() error {
	f := m.gguf
	cfg, err := ggufConfig(f)
	if err != nil {
		return err
	}
	m.Config = cfg
	m.tensors = map[string]*Tensor{}
	for _, s := range cfg.TensorSpecs() {
		if s.role == roleLMHead && cfg.TieWordEmbeddings {
			continue
		}
		name := ggufName(s.Name)
		g := f.Tensor(name)
		if g == nil {
			return fmt.Errorf("tensor %s not found", name)
		}
		shape := make([]int, len(g.Dims))
		for i, d := range g.Dims {
			shape[len(shape)-1-i] = int(d)
		}
		t := &Tensor{Name: s.Name, Shape: shape, DType: F32, Data: g.Data}
		heads := 0
		switch s.role {
		case roleQ:
			heads = cfg.NumAttentionHeads
		case roleK:
			heads = cfg.NumKeyValueHeads
		}
		switch g.Type {
		case GGMLF16:
			t.DType = F16
		case GGMLBF16:
			t.DType = BF16
		case GGMLQ8_0, GGMLQ4_K, GGMLQ6_K: // dequantized below; other types were refused when parsing
		}
		if heads > 0 {
			if len(shape) != 2 || shape[0] == 0 || shape[0]%(2*heads) != 0 {
				return fmt.Errorf("tensor %s has shape %v, not [heads×head_dim, hidden]", name, shape)
			}
			t.Data = permuteRotary(g.Data, heads, len(g.Data)/shape[0], true)
		}
		if g.Type.blockElems() > 1 {
			vals := make([]float32, t.NumElements())
			if err := decodeGGML(vals, t.Data, g.Type); err != nil {
				return fmt.Errorf("tensor %s: %w", name, err)
			}
			t.Data = make([]byte, 4*len(vals))
			encodeFloats(t.Data, vals, F32)
		}
		m.tensors[s.Name] = t
	}
	return m.bindWeights()
}

// TokenizerFiles returns the bytes of the model's tokenizer.json and
// tokenizer_config.json: for a GGUF model those GGUFTokenizerFiles
// derives; ok is false for a safetensors model (read them from Dir).
func (m *Model) TokenizerFiles() (tokenizerJSON, tokenizerConfigJSON []byte, ok bool, err error) {
	if m.gguf == nil {
		return nil, nil, false, nil
	}
	tj, cfg, err := GGUFTokenizerFiles(m.gguf)
	return tj, cfg, true, err
}

// LoadTokenizer returns the model's tokenizer: tokenizer.json and
// tokenizer_config.json in m.Dir, or, for a GGUF model, the tokenizer its
// metadata describes (see TokenizerFromGGUF).
func (m *Model) LoadTokenizer() (*tokenizer.Tokenizer, error) {
	if m.gguf != nil {
		return TokenizerFromGGUF(m.gguf)
	}
	return tokenizer.Load(m.Dir)
}

// LoadTokenizer loads the tokenizer of the model at path (a model
// directory or GGUF file, as Load accepts) without mapping its weights.
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	gp, err := ggufPath(path)
	if err != nil {
		return nil, err
	}
	if gp == "" {
		return tokenizer.Load(path)
	}
	f, err := OpenGGUF(gp)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return TokenizerFromGGUF(f)
}

// TokenizerFromGGUF builds the tokenizer of a GGUF file's metadata (see
// GGUFTokenizerFiles) with the same BPE engine as tokenizer.json.
func TokenizerFromGGUF(f *GGUFFile) (*tokenizer.Tokenizer, error) {
	tj, cfg, err := GGUFTokenizerFiles(f)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Parse(tj, cfg)
	if err != nil {
		return nil, fmt.Errorf("model: GGUF tokenizer: %w", err)
	}
	return tok, nil
}

// GGUFTokenizerFiles returns the tokenizer.json and tokenizer_config.json
// equivalent to a GGUF file's tokenizer.ggml.* metadata: model "gpt2"
// (byte-level BPE) with a known pre-tokenizer ("llama-bpe", "gpt-2" or
// "default"); control tokens (type 3) become special added tokens and
// user-defined ones (type 4) plain added tokens; bos/eos ids name the
// BOS and EOS tokens; tokenizer.chat_template is the chat template. Other
// tokenizer models and pre-tokenizers are refused.
func GGUFTokenizerFiles(f *GGUFFile) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	if mdl := f.str("tokenizer.ggml.model"); mdl != "gpt2" {
		return nil, nil, fmt.Errorf("model: GGUF tokenizer model %q is not supported (only gpt2, byte-level BPE)", mdl)
	}
	preName := f.str("tokenizer.ggml.pre")
	if a, ok := ggufPreAliases[preName]; ok {
		preName = a
	}
	pre, ok := ggufPreTokenizers[preName]
	if !ok {
		return nil, nil, fmt.Errorf("model: GGUF pre-tokenizer %q is not supported (llama-bpe, gpt-2, default)", f.str("tokenizer.ggml.pre"))
	}
	tokens, _ := ggufArray[[]string](f, "tokenizer.ggml.tokens")
	if len(tokens) == 0 {
		return nil, nil, fmt.Errorf("model: GGUF has no tokenizer.ggml.tokens")
	}
	types, _ := ggufArray[[]int32](f, "tokenizer.ggml.token_type")
	if types != nil && len(types) != len(tokens) {
		return nil, nil, fmt.Errorf("model: GGUF has %d token types for %d tokens", len(types), len(tokens))
	}
	merges, _ := ggufArray[[]string](f, "tokenizer.ggml.merges")
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	vocab := make(map[string]int, len(tokens))
	var adds []added
	for id, s := range tokens {
		typ := int32(ggufTokenNormal)
		if types != nil {
			typ = types[id]
		}
		if typ == ggufTokenControl || typ == ggufTokenUserDefined {
			adds = append(adds, added{ID: id, Content: s, Special: typ == ggufTokenControl})
			continue
		}
		vocab[s] = id
	}
	tj := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   adds,
		"normalizer":     nil,
		"pre_tokenizer":  json.RawMessage(pre.preTokenizer),
		"post_processor": nil,
		"decoder":        json.RawMessage(`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}`),
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
			"ignore_merges": pre.ignoreMerges, "vocab": vocab, "merges": merges,
		},
	}
	tokJSON, err := json.Marshal(tj)
	if err != nil {
		return nil, nil, fmt.Errorf("model: GGUF tokenizer: %w", err)
	}
	cfg := map[string]any{}
	if v, ok := f.uint("tokenizer.ggml.bos_token_id"); ok && v < uint64(len(tokens)) {
		cfg["bos_token"] = tokens[v]
	}
	if v, ok := f.uint("tokenizer.ggml.eos_token_id"); ok && v < uint64(len(tokens)) {
		cfg["eos_token"] = tokens[v]
	}
	if t := f.str("tokenizer.chat_template"); t != "" {
		cfg["chat_template"] = t
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("model: GGUF tokenizer: %w", err)
	}
	return tokJSON, cfgJSON, nil
}

// ggufArray returns the typed values of an array entry.
func ggufArray[T any](f *GGUFFile, key string) (T, bool) {
	var zero T
	kv := f.kv[key]
	if kv == nil {
		return zero, false
	}
	a, ok := kv.Value.(GGUFArrayValue)
	if !ok {
		return zero, false
	}
	v, ok := a.Values.(T)
	return v, ok
}
