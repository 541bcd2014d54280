package model

import "fmt"

// Standard tensor names of a Llama-family checkpoint. Per-layer names are
// LayerPrefix(i) + one of the Layer* suffixes; the biases exist only in
// Qwen2 checkpoints, the q/k norms only in Qwen3 ones.
const (
	EmbedTokensName = "model.embed_tokens.weight"
	FinalNormName   = "model.norm.weight"
	LMHeadName      = "lm_head.weight"

	LayerInputNorm         = "input_layernorm.weight"
	LayerQProj             = "self_attn.q_proj.weight"
	LayerKProj             = "self_attn.k_proj.weight"
	LayerVProj             = "self_attn.v_proj.weight"
	LayerOProj             = "self_attn.o_proj.weight"
	LayerPostAttentionNorm = "post_attention_layernorm.weight"
	LayerGateProj          = "mlp.gate_proj.weight"
	LayerUpProj            = "mlp.up_proj.weight"
	LayerDownProj          = "mlp.down_proj.weight"
	LayerQBias             = "self_attn.q_proj.bias"
	LayerKBias             = "self_attn.k_proj.bias"
	LayerVBias             = "self_attn.v_proj.bias"
	LayerQNorm             = "self_attn.q_norm.weight"
	LayerKNorm             = "self_attn.k_norm.weight"
)

// LayerPrefix returns "model.layers.{i}.".
func LayerPrefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }

// role says what a tensor is for: Load files it into Weights, Init picks
// its initial distribution from it.
type role int

const (
	roleEmbed role = iota
	roleInputNorm
	roleQ
	roleK
	roleV
	roleO
	rolePostAttentionNorm
	roleGate
	roleUp
	roleDown
	roleFinalNorm
	roleLMHead
	roleQBias
	roleKBias
	roleVBias
	roleQNorm
	roleKNorm
)

// TensorSpec is a tensor the engine needs, with the shape the config
// implies. Matrices are [out, in], as PyTorch's Linear stores them.
type TensorSpec struct {
	Name  string
	Shape []int

	role  role
	layer int // for per-layer roles
}

// TensorSpecs lists every tensor the engine reads, in model order:
// embedding, each layer's tensors (with the family's biases or q/k
// norms), final norm, then lm_head unless tie_word_embeddings is set (the
// embedding then serves as the LM head).
func (c *Config) TensorSpecs() []TensorSpec {
	h, q, kv, ff := c.HiddenSize, c.QDim(), c.KVDim(), c.IntermediateSize
	fam := c.Family()
	specs := []TensorSpec{{Name: EmbedTokensName, Shape: []int{c.VocabSize, h}, role: roleEmbed}}
	for i := range c.NumHiddenLayers {
		p := LayerPrefix(i)
		specs = append(specs,
			TensorSpec{p + LayerInputNorm, []int{h}, roleInputNorm, i},
			TensorSpec{p + LayerQProj, []int{q, h}, roleQ, i},
			TensorSpec{p + LayerKProj, []int{kv, h}, roleK, i},
			TensorSpec{p + LayerVProj, []int{kv, h}, roleV, i},
			TensorSpec{p + LayerOProj, []int{h, q}, roleO, i},
			TensorSpec{p + LayerPostAttentionNorm, []int{h}, rolePostAttentionNorm, i},
			TensorSpec{p + LayerGateProj, []int{ff, h}, roleGate, i},
			TensorSpec{p + LayerUpProj, []int{ff, h}, roleUp, i},
			TensorSpec{p + LayerDownProj, []int{h, ff}, roleDown, i},
		)
		if fam.QKVBias {
			specs = append(specs,
				TensorSpec{p + LayerQBias, []int{q}, roleQBias, i},
				TensorSpec{p + LayerKBias, []int{kv}, roleKBias, i},
				TensorSpec{p + LayerVBias, []int{kv}, roleVBias, i},
			)
		}
		if fam.QKNorm {
			specs = append(specs,
				TensorSpec{p + LayerQNorm, []int{c.HeadDim}, roleQNorm, i},
				TensorSpec{p + LayerKNorm, []int{c.HeadDim}, roleKNorm, i},
			)
		}
	}
	specs = append(specs, TensorSpec{Name: FinalNormName, Shape: []int{h}, role: roleFinalNorm})
	if !c.TieWordEmbeddings {
		specs = append(specs, TensorSpec{Name: LMHeadName, Shape: []int{c.VocabSize, h}, role: roleLMHead})
	}
	return specs
}

// NumElements returns the product of the spec's shape.
func (s *TensorSpec) NumElements() int64 {
	n := int64(1)
	for _, d := range s.Shape {
		n *= int64(d)
	}
	return n
}

// NumParameters returns the number of weights the config implies (a tied
// LM head counted once). Validate bounds every size, so this cannot
// overflow for a valid config.
func (c *Config) NumParameters() int64 {
	var n int64
	for _, s := range c.TensorSpecs() {
		n += s.NumElements()
	}
	return n
}
