package cpu

import (
	"errors"
	"fmt"

	"github.com/warden-ai/warden/worker/model"
)

// SpecFor derives the backend's geometry from a model config. Its
// MaxPositions is the config's ContextLength (max_position_embeddings,
// clamped to a sliding window).
func SpecFor(c *model.Config) Spec {
	f := c.Family()
	return Spec{
		Hidden:       c.HiddenSize,
		Intermediate: c.IntermediateSize,
		Layers:       c.NumHiddenLayers,
		Heads:        c.NumAttentionHeads,
		KVHeads:      c.NumKeyValueHeads,
		HeadDim:      c.HeadDim,
		Vocab:        c.VocabSize,
		MaxPositions: c.ContextLength(),
		RMSNormEps:   float32(c.RMSNormEps),
		InvFreq:      c.RopeInvFreq(),
		QKVBias:      f.QKVBias,
		QKNorm:       f.QKNorm,
	}
}

// FromModel builds a backend over a loaded model. F32 tensors are used in
// place (memory-mapped); F16 and BF16 tensors are converted to float32 once.
func FromModel(m *model.Model, pages Pages, opt Options) (*Backend, error) {
	w, err := WeightsOf(m)
	if err != nil {
		return nil, err
	}
	return New(SpecFor(&m.Config), w, pages, opt)
}

// WeightsOf returns a model's tensors as float32 in the backend's layout.
func WeightsOf(m *model.Model) (Weights, error) {
	mw := m.Weights()
	var errs []error
	f32 := func(t *model.Tensor) []float32 {
		if t == nil { // a tensor the family does not have
			return nil
		}
		v, err := t.Float32()
		if err != nil {
			errs = append(errs, fmt.Errorf("cpu: tensor %s: %w", t.Name, err))
		}
		return v
	}
	w := Weights{Embed: f32(mw.Embed), Norm: f32(mw.Norm)}
	if mw.LMHead == mw.Embed {
		w.LMHead = w.Embed
	} else {
		w.LMHead = f32(mw.LMHead)
	}
	for _, l := range mw.Layers {
		w.Layers = append(w.Layers, LayerWeights{
			AttnNorm: f32(l.InputNorm), Wq: f32(l.Q), Wk: f32(l.K), Wv: f32(l.V), Wo: f32(l.O),
			MLPNorm: f32(l.PostAttentionNorm), WGate: f32(l.Gate), WUp: f32(l.Up), WDown: f32(l.Down),
			Bq: f32(l.QBias), Bk: f32(l.KBias), Bv: f32(l.VBias), QNorm: f32(l.QNorm), KNorm: f32(l.KNorm),
		})
	}
	return w, errors.Join(errs...)
}
