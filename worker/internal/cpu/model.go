package cpu

import (
	"errors"
	"fmt"

	"github.com/warden-ai/warden/worker/model"
)

// SpecFor derives the backend's geometry from a model config.
func SpecFor(c *model.Config) Spec {
	return Spec{
		Hidden:       c.HiddenSize,
		Intermediate: c.IntermediateSize,
		Layers:       c.NumHiddenLayers,
		Heads:        c.NumAttentionHeads,
		KVHeads:      c.NumKeyValueHeads,
		HeadDim:      c.HeadDim,
		Vocab:        c.VocabSize,
		MaxPositions: c.MaxPositionEmbeddings,
		RMSNormEps:   float32(c.RMSNormEps),
		InvFreq:      c.RopeInvFreq(),
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
		})
	}
	return w, errors.Join(errs...)
}
