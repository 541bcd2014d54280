package harness

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/warden-ai/warden/worker/model"
)

// Sizes of the endless model: about 3.4M parameters (14 MB of F32), some
// twenty times the tiny preset's work per token, with its tokenizer.
const (
	endlessHidden = 256
	endlessFF     = 768
	endlessLayers = 4
	endlessHeads  = 8
	endlessKV     = 4
	endlessSeed   = 7
)

// writeEndlessModel writes the endless model into dir: the tiny preset's
// tokenizer and token ids with larger random weights, and an LM head whose
// rows for the EOS tokens are zero. A zero row gives EOS a logit of
// exactly 0 while the other logits are random with both signs, so greedy
// decoding (the largest logit) never picks EOS and a request runs to
// max_tokens.
func writeEndlessModel(dir string) error {
	if err := model.Init(dir, model.PresetTiny, endlessSeed, model.F32); err != nil {
		return err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = endlessHidden, endlessFF, endlessLayers
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = endlessHeads, endlessKV, endlessHidden/endlessHeads
	data, err := json.MarshalIndent(&cfg, "", "  ")
	if err != nil {
		return err
	}
	if _, err := model.ParseConfig(data); err != nil {
		return fmt.Errorf("endless config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, model.ConfigFile), data, 0o644); err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(endlessSeed, 0))
	specs := cfg.TensorSpecs()
	tensors := make([]*model.Tensor, 0, len(specs))
	for i := range specs {
		s := &specs[i]
		vals := make([]float32, s.NumElements())
		mean, std := 0.0, 1/math.Sqrt(float64(s.Shape[len(s.Shape)-1]))
		switch {
		case strings.HasSuffix(s.Name, "norm.weight"):
			mean, std = 1, 0
		case s.Name == model.EmbedTokensName:
			std = 1
		case s.Name == model.LMHeadName:
			std *= 4 // logits a few units apart
		}
		for j := range vals {
			vals[j] = float32(mean + std*rng.NormFloat64())
		}
		if s.Name == model.LMHeadName {
			for _, id := range cfg.EOSTokenIDs {
				clear(vals[int(id)*cfg.HiddenSize : (int(id)+1)*cfg.HiddenSize])
			}
		}
		b := make([]byte, 4*len(vals))
		for j, v := range vals {
			binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
		}
		tensors = append(tensors, &model.Tensor{Name: s.Name, DType: model.F32, Shape: s.Shape, Data: b})
	}
	return model.WriteWeights(dir, tensors, 0)
}
