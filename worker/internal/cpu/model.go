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
// its matrices converted to opt.DType when set (see ConvertWeights), Q8
// weights when opt.Quantize (see QuantizeQ8) and bf16 products when
// opt.BF16Dot (see BF16Dot).
func FromModel(m *model.Model, pages Pages, opt Options) (*Backend, error) {
	w, err := WeightsOf(m)
	if err != nil {
		return nil, err
	}
	if opt.DType != "" {
		if w, err = ConvertWeights(w, opt.DType); err != nil {
			return nil, err
		}
	}
	if opt.Quantize {
		w = QuantizeQ8(w)
	}
	if opt.BF16Dot {
		w = BF16Dot(w)
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

// formats maps the float dtypes to the kernels' formats.
var formats = map[model.DType]kernels.Format{model.F32: kernels.F32, model.F16: kernels.F16, model.BF16: kernels.BF16}

// ConvertWeights returns w with the embedding, the LM head and the
// projections converted to dt, F32, F16 or BF16 (kernels.Matrix.Convert:
// one round to nearest even from the file's values); a tied LM head stays
// the embedding. A weight beyond dt's range fails, naming its matrix.
func ConvertWeights(w Weights, dt model.DType) (Weights, error) {
	f, ok := formats[dt]
	if !ok {
		return Weights{}, fmt.Errorf("cpu: converting the weights: %w: %q", model.ErrUnsupportedDType, dt)
	}
	var errs []error
	conv := func(name string, m *kernels.Matrix) *kernels.Matrix {
		c, err := m.Convert(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("cpu: converting %s to %v: %w", name, f, err))
		}
		return c
	}
	out := w
	out.Embed = conv("the embedding", w.Embed)
	if w.LMHead == w.Embed {
		out.LMHead = out.Embed
	} else {
		out.LMHead = conv("the LM head", w.LMHead)
	}
	out.Layers = make([]LayerWeights, len(w.Layers))
	for i, l := range w.Layers {
		name := func(m string) string { return fmt.Sprintf("layer %d %s", i, m) }
		l.Wq, l.Wk, l.Wv, l.Wo = conv(name("q_proj"), l.Wq), conv(name("k_proj"), l.Wk), conv(name("v_proj"), l.Wv), conv(name("o_proj"), l.Wo)
		l.WGate, l.WUp, l.WDown = conv(name("gate_proj"), l.WGate), conv(name("up_proj"), l.WUp), conv(name("down_proj"), l.WDown)
		out.Layers[i] = l
	}
	if err := errors.Join(errs...); err != nil {
		return Weights{}, err
	}
	return out, nil
}

// QuantizeQ8 returns w with the projections and the LM head quantized to
// Q8 (kernels.Matrix.QuantizeQ8). The embedding rows stay in their
// format, so a tied LM head becomes a Q8 copy; a matrix whose rows are
// not whole 32-weight blocks keeps its format.
func QuantizeQ8(w Weights) Weights {
	return mapProducts(w, func(m *kernels.Matrix) (*kernels.Matrix, error) {
		if m.Cols()%kernels.Q8Block != 0 {
			return m, nil
		}
		return m.QuantizeQ8()
	})
}

// BF16Dot returns w with its BF16 projections and LM head multiplied in
// bf16 products (kernels.Matrix.BF16Dot: activations rounded to bfloat16,
// VDPBF16PS), over the same memory; the embedding rows are read as they
// are. A matrix in another format, or whose rows are not whole 32-column
// runs, keeps exact products.
func BF16Dot(w Weights) Weights {
	return mapProducts(w, func(m *kernels.Matrix) (*kernels.Matrix, error) {
		if d, err := m.BF16Dot(); err == nil {
			return d, nil
		}
		return m, nil // not BF16, or not whole 32-column runs (ErrBF16DotShape)
	})
}

// mapProducts returns w with f applied to the projections and the LM
// head, the matrices the backend multiplies with (not the embedding,
// whose rows it only reads); f must not fail on the matrices it takes.
func mapProducts(w Weights, f func(*kernels.Matrix) (*kernels.Matrix, error)) Weights {
	q := func(m *kernels.Matrix) *kernels.Matrix {
		r, err := f(m)
		if err != nil { // unreachable: the callers check the shape
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
