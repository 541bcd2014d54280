package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/warden-ai/warden/internal/tokenizer"
)

// Preset names for Init.
const (
	PresetTiny  = "tiny"
	PresetSmall = "small"
)

// PresetNames lists the presets Init accepts.
func PresetNames() []string { return []string{PresetTiny, PresetSmall} }

// PresetConfig returns a preset's Llama config without token ids (Init
// takes them from the tokenizer it writes); FamilyPresetConfig shapes it
// as another family.
//
//   - tiny (≈158k parameters, 0.6 MB as F32): 2 layers, hidden 64, 4 query
//     and 2 KV heads of 16 dimensions, vocabulary 512, 16384 positions,
//     llama3 RoPE scaling (so every branch of RopeInvFreq is used), untied
//     LM head. For tests.
//   - small (≈100M parameters): 12 layers, hidden 768, 12 query and 4 KV
//     heads, vocabulary 32000, 8192 positions, plain RoPE, tied
//     embeddings. For benchmarks.
func PresetConfig(name string) (Config, error) {
	c := Config{
		Architectures: []string{ArchLlama},
		ModelType:     "llama",
		HiddenAct:     "silu",
		RMSNormEps:    1e-5,
	}
	switch name {
	case PresetTiny:
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 64, 176, 2
		c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 2, 16
		c.VocabSize, c.MaxPositionEmbeddings = 512, 16384
		c.RopeTheta = 500000
		c.RopeScaling = &RopeScaling{
			RopeType:                      RopeTypeLlama3,
			Factor:                        8,
			LowFreqFactor:                 1,
			HighFreqFactor:                4,
			OriginalMaxPositionEmbeddings: 2048,
		}
	case PresetSmall:
		c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 768, 2048, 12
		c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 12, 4, 64
		c.VocabSize, c.MaxPositionEmbeddings = 32000, 8192
		c.RopeTheta = 10000
		c.TieWordEmbeddings = true
	default:
		return Config{}, fmt.Errorf("model: unknown preset %q (have %v)", name, PresetNames())
	}
	return c, nil
}

// FamilyPresetConfig returns preset name's config shaped like the
// published checkpoints of family (a model_type of FamilyNames):
//
//   - llama: PresetConfig unchanged.
//   - mistral (as Mistral-7B-v0.3): rope_theta 1e6, no RoPE scaling, rms
//     eps 1e-5, untied LM head, sliding_window null.
//   - qwen2 (as Qwen2.5-0.5B): q/k/v biases, rope_theta 1e6, rms eps 1e-6,
//     tied embeddings, sliding_window equal to the context with
//     use_sliding_window false.
//   - qwen3 (as Qwen3-0.6B): per-head q/k norms, head_dim twice
//     hidden/heads (as in Qwen3, where it is not hidden/heads), rope_theta
//     1e6, rms eps 1e-6, tied embeddings, no sliding window.
func FamilyPresetConfig(name, family string) (Config, error) {
	c, err := PresetConfig(name)
	if err != nil {
		return Config{}, err
	}
	fam, err := FamilyByName(family)
	if err != nil {
		return Config{}, err
	}
	if fam.Arch == ArchLlama {
		return c, nil
	}
	c.Architectures, c.ModelType = []string{fam.Arch}, fam.ModelType
	c.RopeScaling, c.RopeTheta = nil, 1e6
	switch fam.Arch {
	case ArchMistral:
		c.RMSNormEps, c.TieWordEmbeddings = 1e-5, false
	case ArchQwen2:
		c.RMSNormEps, c.TieWordEmbeddings = 1e-6, true
		window, layers := c.MaxPositionEmbeddings, c.NumHiddenLayers
		c.SlidingWindow, c.MaxWindowLayers = &window, &layers
	case ArchQwen3:
		c.RMSNormEps, c.TieWordEmbeddings = 1e-6, true
		c.HeadDim = 2 * c.HiddenSize / c.NumAttentionHeads
		layers := c.NumHiddenLayers
		c.MaxWindowLayers = &layers
	}
	return c, nil
}

// Gains of the random initialisation; see initDistribution.
const (
	normSpread = 0.05
	qkGain     = 2.0
	lmHeadGain = 4.0
	biasStd    = 0.5
)

// initDistribution is the random-weights scheme. It keeps the network out
// of the degenerate regimes a naive initialisation falls into (residual
// stream blowing up or vanishing, uniform attention, flat or
// context-blind logits), so that greedy output depends on the whole
// context — tests detect foreign or missing KV by output changes.
//
//   - Norm weights: 1 ± normSpread, so RMSNorm outputs have unit RMS.
//   - Projections reading a normalised input (q, k, v, gate, up):
//     std 1/√hidden, so outputs have unit scale; q and k get qkGain more,
//     making attention scores spread over a few units so attention picks
//     out particular positions instead of averaging everything.
//   - Output projections (o, down): std 1/√fan_in, so each residual
//     branch adds about unit scale, comparable to the embedding, and the
//     attended context visibly moves the hidden state.
//   - Untied: embedding std 1 (unit-scale residual stream from the start)
//     and an LM head of std lmHeadGain/√hidden, so logits have a spread of
//     a few units: sharp enough that sampling at moderate temperature is
//     not uniform, while the argmax still follows the context.
//   - Tied: one matrix serves both ends; std 1/√hidden keeps the token's
//     own embedding from dominating its logits (which would make the
//     model echo its input).
//   - q/k/v biases: std biasStd, a shift small beside the projections'
//     unit scale.
//   - q/k norms: qkGain ± normSpread·qkGain, so normalised queries and
//     keys have the scale qkGain gives them in the other families.
func (c *Config) initDistribution(s *TensorSpec) distribution {
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	switch s.role {
	case roleQBias, roleKBias, roleVBias:
		return distribution{std: biasStd}
	case roleQNorm, roleKNorm:
		return distribution{mean: qkGain, std: qkGain * normSpread}
	case roleInputNorm, rolePostAttentionNorm, roleFinalNorm:
		return distribution{mean: 1, std: normSpread}
	case roleQ, roleK:
		return distribution{std: qkGain * inv(c.HiddenSize)}
	case roleV, roleGate, roleUp:
		return distribution{std: inv(c.HiddenSize)}
	case roleO:
		return distribution{std: inv(c.QDim())}
	case roleDown:
		return distribution{std: inv(c.IntermediateSize)}
	case roleLMHead:
		return distribution{std: lmHeadGain * inv(c.HiddenSize)}
	}
	if c.TieWordEmbeddings {
		return distribution{std: inv(c.HiddenSize)}
	}
	return distribution{std: 1}
}

// Init is InitFamily for a Llama model.
func Init(dir, preset string, seed uint64, dtype DType) error {
	return InitFamily(dir, preset, "llama", seed, dtype)
}

// InitFamily writes a deterministic random model of the named preset,
// shaped as family (FamilyPresetConfig), into dir
// (created if needed): the tokenizer files (internal/tokenizer's preset
// for the config's vocabulary size), config.json and
// generation_config.json with the tokenizer's BOS/EOS ids, and
// model.safetensors with weights of the given dtype drawn from seed (see
// initDistribution). The same preset, seed and dtype always give
// byte-identical files. Weights are generated one tensor at a time on all
// CPUs and streamed to disk, so memory holds at most one tensor.
// Existing files of the same names are replaced.
func InitFamily(dir, preset, family string, seed uint64, dtype DType) error {
	cfg, err := FamilyPresetConfig(preset, family)
	if err != nil {
		return err
	}
	if !dtype.IsFloat() {
		return fmt.Errorf("model: weights dtype %q: %w", dtype, ErrUnsupportedDType)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	info, err := tokenizer.WritePreset(dir, cfg.VocabSize)
	if err != nil {
		return fmt.Errorf("model: writing preset tokenizer: %w", err)
	}
	cfg.BOSTokenID, cfg.EOSTokenIDs = &info.BOS, slices.Clone(info.EOS)
	return WriteRandom(dir, cfg, seed, dtype)
}

// InitWithTokenizer is Init with a real tokenizer instead of the preset's:
// it copies tokenizer.json, and tokenizer_config.json and
// chat_template.jinja where present, from tokenizerDir into dir, and sizes
// the preset's vocabulary to that tokenizer (embedding and LM head rows
// for every token ID) with its BOS and EOS tokens. The result is a model
// of the preset's shape that tokenizes and chats exactly like the model
// the tokenizer comes from, with random weights.
func InitWithTokenizer(dir, preset, tokenizerDir string, seed uint64, dtype DType) error {
	cfg, err := PresetConfig(preset)
	if err != nil {
		return err
	}
	if !dtype.IsFloat() {
		return fmt.Errorf("model: weights dtype %q: %w", dtype, ErrUnsupportedDType)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	for _, name := range []string{tokenizer.TokenizerFile, tokenizer.TokenizerConfigFile, tokenizer.ChatTemplateFile} {
		data, err := os.ReadFile(filepath.Join(tokenizerDir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist) && name != tokenizer.TokenizerFile:
			continue
		case err != nil:
			return fmt.Errorf("model: tokenizer: %w", err)
		}
		if err := writeFileAtomic(filepath.Join(dir, name), data); err != nil {
			return err
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	cfg.VocabSize = tok.VocabSize()
	cfg.BOSTokenID, cfg.EOSTokenIDs = nil, tok.EOS()
	if bos, ok := tok.BOS(); ok {
		cfg.BOSTokenID = &bos
	}
	return WriteRandom(dir, cfg, seed, dtype)
}

// WriteRandom writes config.json, generation_config.json and random
// weights (see initDistribution) for cfg, whose token ids are already set,
// into dir: Init without the tokenizer, for any valid config. Tests use it
// to build models of real checkpoints' config shapes.
func WriteRandom(dir string, cfg Config, seed uint64, dtype DType) error {
	if !dtype.IsFloat() {
		return fmt.Errorf("model: weights dtype %q: %w", dtype, ErrUnsupportedDType)
	}
	cfg.TorchDType = dtype.TorchName()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model: preset config: %w", err)
	}
	if err := writeJSON(filepath.Join(dir, ConfigFile), &cfg); err != nil {
		return err
	}
	gen := GenerationConfig{BOSTokenID: cfg.BOSTokenID, EOSTokenIDs: slices.Clone(cfg.EOSTokenIDs)}
	if err := writeJSON(filepath.Join(dir, GenerationConfigFile), &gen); err != nil {
		return err
	}
	specs := cfg.TensorSpecs()
	ts := make([]outTensor, len(specs))
	for i := range specs {
		s := &specs[i]
		d := cfg.initDistribution(s)
		ts[i] = outTensor{
			name:  s.Name,
			dtype: dtype,
			shape: s.Shape,
			size:  s.NumElements() * int64(dtype.Size()),
			fill:  func(dst []byte) { fillRandom(dst, dtype, seed, s.Name, d) },
		}
	}
	if err := sortUnique(ts); err != nil {
		return err
	}
	return writeWeights(dir, ts, 0)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("model: encoding %s: %w", filepath.Base(path), err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}
