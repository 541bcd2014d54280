package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// File names inside a model directory.
const (
	ConfigFile           = "config.json"
	GenerationConfigFile = "generation_config.json"
	WeightsFile          = "model.safetensors"
	WeightsIndexFile     = "model.safetensors.index.json"
)

var (
	// ErrInvalidConfig reports a config.json that is malformed or
	// inconsistent (bad sizes, token ids out of range, …).
	ErrInvalidConfig = errors.New("invalid model config")
	// ErrUnsupportedArchitecture reports a model the engine cannot run: an
	// architecture other than Llama, Mistral, Qwen2 (Qwen2.5) or Qwen3 (such
	// as Gemma or a mixture of experts), or an architectural feature such as
	// an output or MLP bias, partial rotary embeddings or a RoPE scaling
	// type other than llama3.
	ErrUnsupportedArchitecture = errors.New("unsupported model architecture")
)

// Supported architectures (config.json "architectures"); Family says
// what sets them apart.
const (
	ArchLlama   = "LlamaForCausalLM"
	ArchMistral = "MistralForCausalLM"
	ArchQwen2   = "Qwen2ForCausalLM" // Qwen2 and Qwen2.5: q/k/v bias
	ArchQwen3   = "Qwen3ForCausalLM" // per-head q/k RMSNorm
)

// RopeTypeLlama3 is the only RoPE scaling type implemented.
const RopeTypeLlama3 = "llama3"

// Default values Hugging Face's LlamaConfig uses when a key is absent.
const (
	defaultRopeTheta  = 10000
	defaultRMSNormEps = 1e-6
)

// Bounds that keep all size arithmetic (shape products, parameter counts)
// far from int64 overflow; real models are well below them.
const (
	maxConfigDim       = 1 << 21
	maxConfigLayers    = 1 << 12
	maxConfigPositions = 1 << 30
)

// Config is the config.json of a supported family (see Family) after
// defaults are applied: every size field is set and valid once ParseConfig
// or LoadConfig returns it.
// Marshalling a Config writes a config.json that Hugging Face transformers
// and ParseConfig both read back unchanged (except RopeFactors, which only
// a GGUF file sets).
type Config struct {
	Architectures     []string `json:"architectures"`
	ModelType         string   `json:"model_type,omitempty"`
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	NumHiddenLayers   int      `json:"num_hidden_layers"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"` // default NumAttentionHeads
	HeadDim           int      `json:"head_dim"`            // default HiddenSize / NumAttentionHeads
	HiddenAct         string   `json:"hidden_act,omitempty"`
	RMSNormEps        float64  `json:"rms_norm_eps"` // default 1e-6
	RopeTheta         float64  `json:"rope_theta"`   // default 10000
	// RopeScaling is nil for plain RoPE.
	RopeScaling *RopeScaling `json:"rope_scaling"`
	// RopeFactors, when set, are the HeadDim/2 divisors of the rotary
	// base frequencies given explicitly, as a GGUF file's
	// rope_freqs.weight gives them (see RopeFreqFactors); RopeScaling is
	// then nil. config.json cannot express them, so they are not
	// marshalled.
	RopeFactors           []float64 `json:"-"`
	VocabSize             int       `json:"vocab_size"`
	MaxPositionEmbeddings int       `json:"max_position_embeddings"`
	TieWordEmbeddings     bool      `json:"tie_word_embeddings"`
	// BOSTokenID is nil when config.json has none.
	BOSTokenID  *int32   `json:"bos_token_id"`
	EOSTokenIDs TokenIDs `json:"eos_token_id"`
	// TorchDType is informational ("float32", "bfloat16", …); each tensor
	// carries its own dtype.
	TorchDType string `json:"torch_dtype,omitempty"`
	// SlidingWindow is the attention window of Mistral and (when
	// UseSlidingWindow is set) Qwen layers; nil for full attention. A
	// window shorter than MaxPositionEmbeddings clamps the context the
	// engine serves to the window (see ContextLength).
	SlidingWindow *int `json:"sliding_window,omitempty"`
	// UseSlidingWindow, MaxWindowLayers and LayerTypes are Qwen2/Qwen3's
	// switches for which layers use SlidingWindow; they are ignored for
	// Llama and Mistral, as transformers ignores them.
	UseSlidingWindow bool     `json:"use_sliding_window,omitempty"`
	MaxWindowLayers  *int     `json:"max_window_layers,omitempty"`
	LayerTypes       []string `json:"layer_types,omitempty"`
}

// RopeScaling is config.json's rope_scaling for rope_type "llama3".
type RopeScaling struct {
	RopeType                      string  `json:"rope_type"`
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// TokenIDs is a list of token ids that config files write either as one
// number or as a list ("eos_token_id": 2 or [128001, 128009]).
type TokenIDs []int32

// UnmarshalJSON accepts null, a number or a list of numbers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] != '[' {
		var id int32
		if err := json.Unmarshal(b, &id); err != nil {
			return fmt.Errorf("token id: %w", err)
		}
		*t = TokenIDs{id}
		return nil
	}
	var ids []int32
	if err := json.Unmarshal(b, &ids); err != nil {
		return fmt.Errorf("token ids: %w", err)
	}
	*t = ids
	return nil
}

// MarshalJSON writes one id as a number and several as a list, like
// transformers does.
func (t TokenIDs) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]int32(t))
}

// rawRope is rope_scaling or (transformers ≥ 5) rope_parameters as found
// on disk, before normalisation into RopeScaling.
type rawRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"` // older spelling of rope_type
	Factor                        float64  `json:"factor"`
	LowFreqFactor                 float64  `json:"low_freq_factor"`
	HighFreqFactor                float64  `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
	RopeTheta                     float64  `json:"rope_theta"`
	PartialRotaryFactor           *float64 `json:"partial_rotary_factor"`
}

// rawConfig holds the keys that are read but not kept in Config.
type rawConfig struct {
	Config
	RopeScaling         *rawRope `json:"rope_scaling"`
	RopeParameters      *rawRope `json:"rope_parameters"`
	DType               string   `json:"dtype"` // transformers ≥ 5 spelling of torch_dtype
	AttentionBias       bool     `json:"attention_bias"`
	MLPBias             bool     `json:"mlp_bias"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
}

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("model: reading config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("model: %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a config.json, applies Hugging Face's defaults and
// validates the result. Unknown keys are ignored; keys that change the
// computation in ways the engine does not implement are rejected with
// ErrUnsupportedArchitecture.
func ParseConfig(data []byte) (Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c := raw.Config
	if c.TorchDType == "" {
		c.TorchDType = raw.DType
	}
	if len(c.LayerTypes) == 0 {
		c.LayerTypes = nil
	}
	// Qwen2's q/k/v biases are part of the architecture (its config has no
	// attention_bias key); elsewhere attention_bias also adds an output
	// projection bias, which the engine does not implement.
	if raw.AttentionBias && !c.Family().QKVBias {
		return Config{}, fmt.Errorf("%w: attention_bias is true; attention biases are supported only as Qwen2's q/k/v biases", ErrUnsupportedArchitecture)
	}
	if raw.MLPBias {
		return Config{}, fmt.Errorf("%w: mlp_bias is true; only a bias-free MLP is supported", ErrUnsupportedArchitecture)
	}
	if err := checkPartialRotary(raw.PartialRotaryFactor); err != nil {
		return Config{}, err
	}
	for _, r := range []*rawRope{raw.RopeParameters, raw.RopeScaling} {
		if r == nil {
			continue
		}
		if err := checkPartialRotary(r.PartialRotaryFactor); err != nil {
			return Config{}, err
		}
		if c.RopeTheta == 0 {
			c.RopeTheta = r.RopeTheta
		}
	}
	// rope_scaling (transformers < 5) wins over rope_parameters (≥ 5).
	rope := raw.RopeScaling
	if rope == nil {
		rope = raw.RopeParameters
	}
	if rope != nil {
		s, err := rope.scaling()
		if err != nil {
			return Config{}, err
		}
		c.RopeScaling = s
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = defaultRopeTheta
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = defaultRMSNormEps
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func checkPartialRotary(f *float64) error {
	if f != nil && *f != 1 {
		return fmt.Errorf("%w: partial_rotary_factor %v; only full rotary embeddings are supported", ErrUnsupportedArchitecture, *f)
	}
	return nil
}

// scaling normalises a rope_scaling object: nil for plain RoPE.
func (r *rawRope) scaling() (*RopeScaling, error) {
	typ := r.RopeType
	if typ == "" {
		typ = r.Type
	}
	switch typ {
	case "", "default":
		if r.Factor != 0 && r.Factor != 1 {
			return nil, fmt.Errorf("%w: rope_scaling has factor %v but no rope_type", ErrInvalidConfig, r.Factor)
		}
		return nil, nil
	case RopeTypeLlama3:
		return &RopeScaling{
			RopeType:                      RopeTypeLlama3,
			Factor:                        r.Factor,
			LowFreqFactor:                 r.LowFreqFactor,
			HighFreqFactor:                r.HighFreqFactor,
			OriginalMaxPositionEmbeddings: r.OriginalMaxPositionEmbeddings,
		}, nil
	default:
		return nil, fmt.Errorf("%w: rope scaling type %q (supported: %s)", ErrUnsupportedArchitecture, typ, RopeTypeLlama3)
	}
}

// Validate checks that c describes a model the engine can run and that its
// sizes are consistent. ParseConfig calls it after applying defaults.
func (c *Config) Validate() error {
	if err := c.checkFamily(); err != nil {
		return err
	}
	sizes := []struct {
		name  string
		value int
		max   int
	}{
		{"hidden_size", c.HiddenSize, maxConfigDim},
		{"intermediate_size", c.IntermediateSize, maxConfigDim},
		{"num_hidden_layers", c.NumHiddenLayers, maxConfigLayers},
		{"num_attention_heads", c.NumAttentionHeads, maxConfigDim},
		{"num_key_value_heads", c.NumKeyValueHeads, maxConfigDim},
		{"head_dim", c.HeadDim, maxConfigDim},
		{"vocab_size", c.VocabSize, maxConfigDim},
		{"max_position_embeddings", c.MaxPositionEmbeddings, maxConfigPositions},
	}
	for _, s := range sizes {
		if s.value <= 0 || s.value > s.max {
			return fmt.Errorf("%w: %s is %d, want 1..%d", ErrInvalidConfig, s.name, s.value, s.max)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("%w: num_attention_heads %d is not a multiple of num_key_value_heads %d",
			ErrInvalidConfig, c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.QDim() > maxConfigDim {
		return fmt.Errorf("%w: num_attention_heads × head_dim is %d, want at most %d", ErrInvalidConfig, c.QDim(), maxConfigDim)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("%w: head_dim %d is odd; rotary embeddings rotate pairs of dimensions", ErrInvalidConfig, c.HeadDim)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return fmt.Errorf("%w: hidden_act %q (supported: silu)", ErrUnsupportedArchitecture, c.HiddenAct)
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		return fmt.Errorf("%w: rms_norm_eps is %v, want a small positive number", ErrInvalidConfig, c.RMSNormEps)
	}
	if !(c.RopeTheta > 1 && !math.IsInf(c.RopeTheta, 0)) {
		return fmt.Errorf("%w: rope_theta is %v, want a finite number above 1", ErrInvalidConfig, c.RopeTheta)
	}
	if err := c.RopeScaling.validate(); err != nil {
		return err
	}
	if err := c.validateRopeFactors(); err != nil {
		return err
	}
	if c.BOSTokenID != nil {
		if err := c.checkTokenID("bos_token_id", *c.BOSTokenID); err != nil {
			return err
		}
	}
	for _, id := range c.EOSTokenIDs {
		if err := c.checkTokenID("eos_token_id", id); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) checkTokenID(key string, id int32) error {
	if id < 0 || int(id) >= c.VocabSize {
		return fmt.Errorf("%w: %s %d is outside the vocabulary [0, %d)", ErrInvalidConfig, key, id, c.VocabSize)
	}
	return nil
}

func (s *RopeScaling) validate() error {
	if s == nil {
		return nil
	}
	if s.RopeType != RopeTypeLlama3 {
		return fmt.Errorf("%w: rope scaling type %q (supported: %s)", ErrUnsupportedArchitecture, s.RopeType, RopeTypeLlama3)
	}
	finitePos := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	switch {
	case !finitePos(s.Factor):
		return fmt.Errorf("%w: rope_scaling factor is %v, want > 0", ErrInvalidConfig, s.Factor)
	case !finitePos(s.LowFreqFactor) || !finitePos(s.HighFreqFactor) || s.HighFreqFactor <= s.LowFreqFactor:
		return fmt.Errorf("%w: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got %v and %v",
			ErrInvalidConfig, s.LowFreqFactor, s.HighFreqFactor)
	case s.OriginalMaxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings > maxConfigPositions:
		return fmt.Errorf("%w: rope_scaling original_max_position_embeddings is %d, want 1..%d",
			ErrInvalidConfig, s.OriginalMaxPositionEmbeddings, maxConfigPositions)
	}
	return nil
}

func (c *Config) validateRopeFactors() error {
	if c.RopeFactors == nil {
		return nil
	}
	if c.RopeScaling != nil {
		return fmt.Errorf("%w: both rope_scaling and explicit rope frequency factors", ErrInvalidConfig)
	}
	if len(c.RopeFactors) != c.HeadDim/2 {
		return fmt.Errorf("%w: %d rope frequency factors for head_dim %d, want %d", ErrInvalidConfig, len(c.RopeFactors), c.HeadDim, c.HeadDim/2)
	}
	for i, f := range c.RopeFactors {
		if !(f > 0) || math.IsInf(f, 0) {
			return fmt.Errorf("%w: rope frequency factor %d is %v, want a finite number above 0", ErrInvalidConfig, i, f)
		}
	}
	return nil
}

// RopeFreqFactors returns, for each dimension pair i = 0 … head_dim/2-1,
// the divisor of its base frequency rope_theta ^ (-2i / head_dim) (the
// form of llama.cpp's rope_freqs.weight): RopeFactors when set, all 1 for
// plain RoPE, and with llama3 scaling (factor s, low_freq_factor a,
// high_freq_factor b, original_max_position_embeddings L) by the
// frequency's wavelength λ = 2π / frequency:
//
//	λ < L/b           (high frequency)  1
//	λ > L/a           (low frequency)   s
//	otherwise         (in between)      1 / ((1-t)/s + t),  t = (L/λ - a) / (b - a)
//
// This is transformers' _compute_llama3_parameters (which blends the
// frequencies f/s and f with weights 1-t and t) written as divisors, as
// llama.cpp's convert_hf_to_gguf.py writes them.
func (c *Config) RopeFreqFactors() []float64 {
	if c.RopeFactors != nil {
		return slices.Clone(c.RopeFactors)
	}
	factors := make([]float64, c.HeadDim/2)
	s := c.RopeScaling
	for i := range factors {
		factors[i] = 1
		if s == nil {
			continue
		}
		old := float64(s.OriginalMaxPositionEmbeddings)
		wavelen := 2 * math.Pi / c.ropeBaseFreq(i)
		switch {
		case wavelen < old/s.HighFreqFactor:
		case wavelen > old/s.LowFreqFactor:
			factors[i] = s.Factor
		default:
			t := min(max((old/wavelen-s.LowFreqFactor)/(s.HighFreqFactor-s.LowFreqFactor), 0), 1)
			factors[i] = 1 / ((1-t)/s.Factor + t)
		}
	}
	return factors
}

// ropeBaseFreq is the unscaled frequency of dimension pair i.
func (c *Config) ropeBaseFreq(i int) float64 {
	return 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(c.HeadDim))
}

// RopeInvFreq returns the rotary inverse frequency of each dimension pair
// i = 0 … head_dim/2-1 (dimension pair i rotates by position × result[i]):
//
//	f[i] = rope_theta ^ (-2i / head_dim) / RopeFreqFactors()[i]
//
// With llama3 scaling this matches transformers' _compute_llama3_parameters.
// Values are float64; transformers computes them in float32, so an engine
// that wants its exact numbers rounds each value to float32.
func (c *Config) RopeInvFreq() []float64 {
	freq := c.RopeFreqFactors()
	for i, f := range freq {
		freq[i] = c.ropeBaseFreq(i) / f
	}
	return freq
}

// KVDim is the width of one token's keys (or values) in one layer:
// num_key_value_heads × head_dim.
func (c *Config) KVDim() int { return c.NumKeyValueHeads * c.HeadDim }

// QDim is the width of one token's queries: num_attention_heads × head_dim.
func (c *Config) QDim() int { return c.NumAttentionHeads * c.HeadDim }
