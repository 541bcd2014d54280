package cpu

import (
	"errors"
	"fmt"

	"github.com/warden-ai/warden/worker/internal/kernels"
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

// FromModel builds a backend over a loaded model (see WeightsOf).
func FromModel(m *model.Model, pages Pages, opt Options) (*Backend, error) {
	w, err := WeightsOf(m, opt.Quantize)
	if err != nil {
		return nil, err
	}
	return New(SpecFor(&m.Config), w, pages, opt)
}

// WeightsOf returns a model's tensors in the backend's layout. Matrices
// keep the file's element type in memory: F32 tensors are used in place
// (memory-mapped), F16 and BF16 ones are copied as they are and widened
// inside the kernels. With q8 set, the projections and the LM head are
// quantized to Q8 (the embedding rows stay in the file's type; a tied LM
// head becomes a Q8 copy; a matrix whose rows are not whole 32-weight
// blocks keeps the file's type). Norms and biases become float32.
func WeightsOf(m *model.Model, q8 bool) (Weights, error) {
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
	mat := func(t *model.Tensor) *kernels.Matrix {
		if len(t.Shape) != 2 {
			errs = append(errs, fmt.Errorf("%w: tensor %s has shape %v", ErrShape, t.Name, t.Shape))
			return nil
		}
		rows, cols := t.Shape[0], t.Shape[1]
		switch t.DType {
		case model.F16:
			return kernels.New16(kernels.F16, rows, cols, t.Data)
		case model.BF16:
			return kernels.New16(kernels.BF16, rows, cols, t.Data)
		}
		return kernels.NewF32(rows, cols, f32(t))
	}
	lin := func(t *model.Tensor) *kernels.Matrix {
		w := mat(t)
		if !q8 || w == nil || w.Cols()%kernels.Q8Block != 0 {
			return w
		}
		q, err := w.QuantizeQ8()
		if err != nil { // unreachable: the shape was checked
			errs = append(errs, fmt.Errorf("cpu: tensor %s: %w", t.Name, err))
		}
		return q
	}
	w := Weights{Embed: mat(mw.Embed), Norm: f32(mw.Norm)}
	switch {
	case mw.LMHead != mw.Embed:
		w.LMHead = lin(mw.LMHead)
	case q8:
		w.LMHead = lin(mw.Embed)
	default:
		w.LMHead = w.Embed
	}
	for _, l := range mw.Layers {
		w.Layers = append(w.Layers, LayerWeights{
			AttnNorm: f32(l.InputNorm), Wq: lin(l.Q), Wk: lin(l.K), Wv: lin(l.V), Wo: lin(l.O),
			MLPNorm: f32(l.PostAttentionNorm), WGate: lin(l.Gate), WUp: lin(l.Up), WDown: lin(l.Down),
			Bq: f32(l.QBias), Bk: f32(l.KBias), Bv: f32(l.VBias), QNorm: f32(l.QNorm), KNorm: f32(l.KNorm),
		})
	}
	if err := errors.Join(errs...); err != nil {
		return Weights{}, err
	}
	return w, nil
}
