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

// FromModel builds a backend over a loaded model (see WeightsOf), with
// Q8 weights when opt.Quantize (see QuantizeQ8).
func FromModel(m *model.Model, pages Pages, opt Options) (*Backend, error) {
	w, err := WeightsOf(m)
	if err != nil {
		return nil, err
	}
	if opt.Quantize {
		w = QuantizeQ8(w)
	}
	return New(SpecFor(&m.Config), w, pages, opt)
}

// WeightsOf returns a model's tensors in the backend's layout. Matrices
// keep the file's element type in memory: F32 tensors are used in place
// (memory-mapped), F16 and BF16 ones are copied as they are and widened
// inside the kernels. Norms and biases become float32.
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
		v := f32(t)
		if v == nil { // f32 recorded why
			return nil
		}
		return kernels.CopyF32(rows, cols, v)
	}
	w := Weights{Embed: mat(mw.Embed), Norm: f32(mw.Norm)}
	if mw.LMHead == mw.Embed {
		w.LMHead = w.Embed
	} else {
		w.LMHead = mat(mw.LMHead)
	}
	for _, l := range mw.Layers {
		w.Layers = append(w.Layers, LayerWeights{
			AttnNorm: f32(l.InputNorm), Wq: mat(l.Q), Wk: mat(l.K), Wv: mat(l.V), Wo: mat(l.O),
			MLPNorm: f32(l.PostAttentionNorm), WGate: mat(l.Gate), WUp: mat(l.Up), WDown: mat(l.Down),
			Bq: f32(l.QBias), Bk: f32(l.KBias), Bv: f32(l.VBias), QNorm: f32(l.QNorm), KNorm: f32(l.KNorm),
		})
	}
	if err := errors.Join(errs...); err != nil {
		return Weights{}, err
	}
	return w, nil
}

// QuantizeQ8 returns w with the projections and the LM head quantized to
// Q8 (kernels.Matrix.QuantizeQ8). The embedding rows stay in their
// format, so a tied LM head becomes a Q8 copy; a matrix whose rows are
// not whole 32-weight blocks keeps its format.
func QuantizeQ8(w Weights) Weights {
	q := func(m *kernels.Matrix) *kernels.Matrix {
		if m.Cols()%kernels.Q8Block != 0 {
			return m
		}
		r, err := m.QuantizeQ8()
		if err != nil { // unreachable: the shape was checked
			panic(err)
		}
		return r
	}
	out := w
	out.LMHead = q(w.LMHead)
	out.Layers = make([]LayerWeights, len(w.Layers))
	for i, l := range w.Layers {
		l.Wq, l.Wk, l.Wv, l.Wo = q(l.Wq), q(l.Wk), q(l.Wv), q(l.Wo)
		l.WGate, l.WUp, l.WDown = q(l.WGate), q(l.WUp), q(l.WDown)
		out.Layers[i] = l
	}
	return out
}
