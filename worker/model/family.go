package model

import (
	"fmt"
	"slices"
	"strings"
)

// Family is what sets a supported architecture apart from Llama's forward
// pass. Every family shares Llama's decoder layer (RMSNorm, rotary
// attention with grouped KV heads, SwiGLU MLP); the flags add the parts
// the others lack.
type Family struct {
	// Arch is config.json's architectures entry, ModelType its model_type.
	Arch, ModelType string
	// QKVBias: q_proj, k_proj and v_proj have a bias (Qwen2, Qwen2.5); the
	// output projection and the MLP have none.
	QKVBias bool
	// QKNorm: each head of the queries and keys goes through an RMSNorm
	// over head_dim (weights self_attn.q_norm / k_norm, eps rms_norm_eps)
	// after the projection and before RoPE (Qwen3).
	QKNorm bool
	// windowSwitch: the sliding window applies only when use_sliding_window
	// is set, and then only to the layers max_window_layers or layer_types
	// select (Qwen); otherwise a sliding_window applies to every layer
	// (Mistral).
	windowSwitch bool
}

// families lists the supported architectures.
var families = [...]Family{
	{Arch: ArchLlama, ModelType: "llama"},
	{Arch: ArchMistral, ModelType: "mistral"},
	{Arch: ArchQwen2, ModelType: "qwen2", QKVBias: true, windowSwitch: true},
	{Arch: ArchQwen3, ModelType: "qwen3", QKNorm: true, windowSwitch: true},
}

// FamilyNames lists the model_type of every supported family, for flags
// and messages.
func FamilyNames() []string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = f.ModelType
	}
	return names
}

// FamilyByName returns the family whose model_type or architecture is
// name.
func FamilyByName(name string) (Family, error) {
	for _, f := range families {
		if name == f.ModelType || name == f.Arch {
			return f, nil
		}
	}
	return Family{}, fmt.Errorf("%w: %s (supported: %s)", ErrUnsupportedArchitecture, describeUnsupported(name), supportedArchs())
}

// Family returns the config's family. It is the zero Family for a config
// that Validate rejects.
func (c *Config) Family() Family {
	f, _ := c.family()
	return f
}

// family resolves the architectures list (or, when it is empty, the
// model_type) to one supported family.
func (c *Config) family() (Family, error) {
	archs := c.Architectures
	if len(archs) == 0 {
		if c.ModelType == "" {
			return Family{}, fmt.Errorf("%w: config names neither architectures nor model_type", ErrUnsupportedArchitecture)
		}
		return FamilyByName(c.ModelType)
	}
	var fam Family
	for i, a := range archs {
		f, err := FamilyByName(a)
		if err != nil || f.Arch != a {
			return Family{}, fmt.Errorf("%w: %s (supported: %s)", ErrUnsupportedArchitecture, describeUnsupported(a), supportedArchs())
		}
		if i > 0 && f != fam {
			return Family{}, fmt.Errorf("%w: architectures %v mix model families", ErrUnsupportedArchitecture, archs)
		}
		fam = f
	}
	return fam, nil
}

func supportedArchs() string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = f.Arch
	}
	return strings.Join(names, ", ")
}

// describeUnsupported quotes an unsupported architecture and, for the
// well-known ones, says what the engine lacks for it.
func describeUnsupported(arch string) string {
	lower := strings.ToLower(arch)
	why := ""
	switch {
	case strings.Contains(lower, "moe") || strings.Contains(lower, "mixtral") || strings.Contains(lower, "deepseek"):
		why = " (mixture-of-experts models are not supported)"
	case strings.Contains(lower, "gemma"):
		why = " (Gemma's GeGLU MLP, scaled embeddings and 1+w norms are not implemented)"
	case strings.Contains(lower, "phi"), strings.Contains(lower, "gpt"), strings.Contains(lower, "falcon"):
		why = " (not a Llama-style decoder)"
	}
	return fmt.Sprintf("%q%s", arch, why)
}

// defaultMaxWindowLayers is transformers' Qwen2Config/Qwen3Config default.
const defaultMaxWindowLayers = 28

// Layer types of config.json's layer_types.
const (
	layerFullAttention    = "full_attention"
	layerSlidingAttention = "sliding_attention"
)

// slidingWindow returns the attention window some layer of the model
// uses, 0 when every layer attends to the whole context.
func (c *Config) slidingWindow() int {
	if !c.windowApplies() {
		return 0
	}
	return *c.SlidingWindow
}

// windowApplies reports whether sliding_window applies to some layer, as
// transformers decides: always for Mistral; for Qwen only when
// use_sliding_window is set and a layer is selected for it (layer_types,
// else the layers from max_window_layers on).
func (c *Config) windowApplies() bool {
	if c.SlidingWindow == nil {
		return false
	}
	if !c.Family().windowSwitch {
		return true
	}
	if !c.UseSlidingWindow {
		return false
	}
	if len(c.LayerTypes) > 0 {
		return slices.Contains(c.LayerTypes, layerSlidingAttention)
	}
	first := defaultMaxWindowLayers
	if c.MaxWindowLayers != nil {
		first = *c.MaxWindowLayers
	}
	return first < c.NumHiddenLayers
}

// ContextLength is the number of positions the engine serves:
// max_position_embeddings, clamped to the sliding window when a layer
// uses one shorter than that. Sliding-window attention is not
// implemented; up to the window's length it equals full attention, so
// the clamp keeps the computation exact. WindowClamped says whether it
// applied.
func (c *Config) ContextLength() int {
	if w := c.slidingWindow(); w > 0 && w < c.MaxPositionEmbeddings {
		return w
	}
	return c.MaxPositionEmbeddings
}

// WindowClamped reports whether ContextLength is below
// max_position_embeddings because of a sliding window, for logs.
func (c *Config) WindowClamped() bool { return c.ContextLength() < c.MaxPositionEmbeddings }

// checkFamily validates the family-specific keys.
func (c *Config) checkFamily() error {
	if _, err := c.family(); err != nil {
		return err
	}
	if c.SlidingWindow != nil && *c.SlidingWindow <= 0 && c.windowApplies() {
		return fmt.Errorf("%w: sliding_window is %d, want a positive window or null", ErrInvalidConfig, *c.SlidingWindow)
	}
	if c.MaxWindowLayers != nil && *c.MaxWindowLayers < 0 {
		return fmt.Errorf("%w: max_window_layers is %d, want ≥ 0", ErrInvalidConfig, *c.MaxWindowLayers)
	}
	if len(c.LayerTypes) > 0 {
		if len(c.LayerTypes) != c.NumHiddenLayers {
			return fmt.Errorf("%w: layer_types lists %d layers, num_hidden_layers is %d", ErrInvalidConfig, len(c.LayerTypes), c.NumHiddenLayers)
		}
		for i, t := range c.LayerTypes {
			if t != layerFullAttention && t != layerSlidingAttention {
				return fmt.Errorf("%w: layer_types[%d] is %q (supported: %s, %s)", ErrUnsupportedArchitecture, i, t, layerFullAttention, layerSlidingAttention)
			}
		}
	}
	return nil
}
