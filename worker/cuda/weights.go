//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/model"
)

// layerWeights are one decoder layer's device tensors. qkv is q_proj, k_proj
// and v_proj stacked into one [qDim+2·kvDim][hidden] matrix, so one launch
// computes all three.
type layerWeights struct {
	attnNorm, mlpNorm      cu.DevicePtr // float32 [hidden]
	qkv, o, gate, up, down cu.DevicePtr // wtype
	// qkvBias is the q, k and v biases stacked like qkv (float32
	// [qDim+2·kvDim]), 0 for a family without them (Qwen2 has them).
	qkvBias cu.DevicePtr
	// qNorm and kNorm are the per-head norm weights (float32 [head_dim]),
	// 0 for a family without them (Qwen3 has them).
	qNorm, kNorm cu.DevicePtr
}

// prep reports whether the layer needs the qkv_prep kernel.
func (w *layerWeights) prep() bool { return w.qkvBias != 0 || w.qNorm != 0 }

// deviceWeights are the model's tensors in one device allocation.
type deviceWeights struct {
	buf                 cu.DevicePtr
	bytes               int64
	dtype               wtype
	embed, lmHead, norm cu.DevicePtr
	layers              []layerWeights
	// decodeBytes is what one decode token reads: every layer matrix and
	// the LM head.
	decodeBytes int64
}

// piece is one upload: host bytes to a device offset.
type piece struct {
	off  int64
	data []byte
}

// weightPlan lays the tensors out in one buffer (each 256-byte aligned).
type weightPlan struct {
	size   int64
	pieces []piece
	err    error
}

// add reserves room for the concatenation of parts and returns its offset.
func (p *weightPlan) add(parts ...[]byte) int64 {
	p.size = (p.size + 255) &^ 255
	off := p.size
	for _, b := range parts {
		p.pieces = append(p.pieces, piece{off: p.size, data: b})
		p.size += int64(len(b))
	}
	return off
}

// matrixType picks the device type of the weight matrices: their common
// dtype, or float32 when the checkpoint mixes dtypes.
func matrixType(w *model.Weights) wtype {
	mats := []*model.Tensor{w.Embed, w.LMHead}
	for _, l := range w.Layers {
		mats = append(mats, l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down)
	}
	d := mats[0].DType
	for _, t := range mats[1:] {
		if t.DType != d {
			return wF32
		}
	}
	switch d {
	case model.BF16:
		return wBF16
	case model.F16:
		return wF16
	default:
		return wF32
	}
}

// uploadWeights copies the model's tensors to the device: matrices in
// dtype, norm weights in float32. Call inside do.
func uploadWeights(m *model.Model, dtype wtype) (*deviceWeights, error) {
	mw := m.Weights()
	p := &weightPlan{}
	// host returns a tensor's bytes in the device type: the mapping itself
	// when the types match, else a float32 conversion (matrixType picks a
	// 16-bit type only when every matrix has it, and norms are float32).
	host := func(t *model.Tensor, want wtype) []byte {
		if tensorType(t) == want {
			return t.Data
		}
		f, err := t.Float32()
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("cuda: tensor %s: %w", t.Name, err)
		}
		return sliceBytes(f)
	}
	embedOff := p.add(host(mw.Embed, dtype))
	lmOff := embedOff
	if mw.LMHead != mw.Embed {
		lmOff = p.add(host(mw.LMHead, dtype))
	}
	normOff := p.add(host(mw.Norm, wF32))
	type layerOffs struct{ attnNorm, mlpNorm, qkv, o, gate, up, down, bias, qNorm, kNorm int64 }
	offs := make([]layerOffs, len(mw.Layers))
	for i, l := range mw.Layers {
		offs[i] = layerOffs{
			attnNorm: p.add(host(l.InputNorm, wF32)),
			mlpNorm:  p.add(host(l.PostAttentionNorm, wF32)),
			qkv:      p.add(host(l.Q, dtype), host(l.K, dtype), host(l.V, dtype)),
			o:        p.add(host(l.O, dtype)),
			gate:     p.add(host(l.Gate, dtype)),
			up:       p.add(host(l.Up, dtype)),
			down:     p.add(host(l.Down, dtype)),
			bias:     -1, qNorm: -1, kNorm: -1,
		}
		// model.Load binds all three biases or none, both norms or none.
		if l.QBias != nil {
			offs[i].bias = p.add(host(l.QBias, wF32), host(l.KBias, wF32), host(l.VBias, wF32))
		}
		if l.QNorm != nil {
			offs[i].qNorm, offs[i].kNorm = p.add(host(l.QNorm, wF32)), p.add(host(l.KNorm, wF32))
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	buf, err := cu.MemAlloc(p.size)
	if err != nil {
		return nil, fmt.Errorf("cuda: allocate %d bytes of weights: %w", p.size, err)
	}
	for _, pc := range p.pieces {
		if len(pc.data) == 0 {
			continue
		}
		if err := cu.MemcpyHtoD(buf+cu.DevicePtr(pc.off), unsafe.Pointer(unsafe.SliceData(pc.data)), int64(len(pc.data))); err != nil {
			cu.MemFree(buf)
			return nil, fmt.Errorf("cuda: upload weights: %w", err)
		}
	}
	dw := &deviceWeights{buf: buf, bytes: p.size, dtype: dtype,
		embed: buf + cu.DevicePtr(embedOff), lmHead: buf + cu.DevicePtr(lmOff), norm: buf + cu.DevicePtr(normOff)}
	c := &m.Config
	per := int64(c.QDim()*c.HiddenSize+2*c.KVDim()*c.HiddenSize+c.HiddenSize*c.QDim()+3*c.IntermediateSize*c.HiddenSize) * int64(dtype.size())
	dw.decodeBytes = int64(c.NumHiddenLayers)*per + int64(c.VocabSize)*int64(c.HiddenSize)*int64(dtype.size())
	// opt is the address of an optional tensor, 0 when absent.
	opt := func(off int64) cu.DevicePtr {
		if off < 0 {
			return 0
		}
		return buf + cu.DevicePtr(off)
	}
	for _, o := range offs {
		dw.layers = append(dw.layers, layerWeights{
			attnNorm: buf + cu.DevicePtr(o.attnNorm), mlpNorm: buf + cu.DevicePtr(o.mlpNorm),
			qkv: buf + cu.DevicePtr(o.qkv), o: buf + cu.DevicePtr(o.o), gate: buf + cu.DevicePtr(o.gate),
			up: buf + cu.DevicePtr(o.up), down: buf + cu.DevicePtr(o.down),
			qkvBias: opt(o.bias), qNorm: opt(o.qNorm), kNorm: opt(o.kNorm),
		})
	}
	return dw, nil
}

// tensorType is the device type a tensor's bytes already are, or -1.
func tensorType(t *model.Tensor) wtype {
	switch t.DType {
	case model.F32:
		return wF32
	case model.F16:
		return wF16
	case model.BF16:
		return wBF16
	}
	return -1
}
