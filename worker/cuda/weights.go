//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	cpukernels "github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/model"
)

// matrix is a weight matrix on the device and its element type.
type matrix struct {
	p cu.DevicePtr
	t wtype
}

// layerWeights are one decoder layer's device tensors. qkv is q_proj, k_proj
// and v_proj stacked into one [qDim+2·kvDim][hidden] matrix, so one launch
// computes all three.
type layerWeights struct {
	attnNorm, mlpNorm      cu.DevicePtr // float32 [hidden]
	qkv, o, gate, up, down matrix
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
	buf           cu.DevicePtr
	bytes         int64
	embed, lmHead matrix
	norm          cu.DevicePtr
	layers        []layerWeights
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

// uploadWeights copies the model's tensors to the device: the embedding
// in dtype, norm weights and biases in float32, the other matrices in
// dtype or, when quantize, as q8 — each matrix whose rows are whole q8
// blocks, quantized by the cpu backend's code, as cpu.QuantizeQ8 chooses
// (so a tied LM head gets a q8 copy). Call inside do.
func uploadWeights(m *model.Model, dtype wtype, quantize bool) (*deviceWeights, error) {
	mw := m.Weights()
	p := &weightPlan{}
	// host returns a tensor's bytes in the device type: the mapping itself
	// when the types match, else a float32 conversion (matrixType picks a
	// 16-bit type only when every matrix has it, and norms are float32) or
	// its q8 blocks.
	host := func(t *model.Tensor, want wtype) []byte {
		if tensorType(t) == want {
			return t.Data
		}
		f, err := t.Float32()
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("cuda: tensor %s: %w", t.Name, err)
		}
		if want != wQ8 || err != nil {
			return sliceBytes(f)
		}
		q, err := cpukernels.NewF32(t.Shape[0], t.Shape[1], f).QuantizeQ8()
		if err != nil {
			if p.err == nil {
				p.err = fmt.Errorf("cuda: tensor %s: %w", t.Name, err)
			}
			return nil
		}
		return q.Q8Data()
	}
	matType := func(t *model.Tensor) wtype {
		if quantize && len(t.Shape) == 2 && t.Shape[1]%q8Block == 0 {
			return wQ8
		}
		return dtype
	}
	// mat plans matrices stacked row-wise (equal column counts, so one
	// type) and counts their bytes in what a decode token reads.
	type matOff struct {
		off int64
		t   wtype
	}
	var decodeBytes int64
	mat := func(ts ...*model.Tensor) matOff {
		t := matType(ts[0])
		parts := make([][]byte, len(ts))
		for i, x := range ts {
			parts[i] = host(x, t)
			decodeBytes += int64(len(parts[i]))
		}
		return matOff{p.add(parts...), t}
	}
	embedBytes := host(mw.Embed, dtype)
	embed := matOff{p.add(embedBytes), dtype}
	lmHead := embed
	if mw.LMHead != mw.Embed || matType(mw.LMHead) != dtype {
		lmHead = mat(mw.LMHead)
	} else {
		decodeBytes += int64(len(embedBytes))
	}
	normOff := p.add(host(mw.Norm, wF32))
	type layerOffs struct {
		attnNorm, mlpNorm, bias, qNorm, kNorm int64
		qkv, o, gate, up, down                matOff
	}
	offs := make([]layerOffs, len(mw.Layers))
	for i, l := range mw.Layers {
		offs[i] = layerOffs{
			attnNorm: p.add(host(l.InputNorm, wF32)),
			mlpNorm:  p.add(host(l.PostAttentionNorm, wF32)),
			qkv:      mat(l.Q, l.K, l.V),
			o:        mat(l.O),
			gate:     mat(l.Gate),
			up:       mat(l.Up),
			down:     mat(l.Down),
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
	dev := func(o matOff) matrix { return matrix{buf + cu.DevicePtr(o.off), o.t} }
	dw := &deviceWeights{buf: buf, bytes: p.size, embed: dev(embed), lmHead: dev(lmHead),
		norm: buf + cu.DevicePtr(normOff), decodeBytes: decodeBytes}
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
			qkv: dev(o.qkv), o: dev(o.o), gate: dev(o.gate), up: dev(o.up), down: dev(o.down),
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
