package cpu

import "github.com/warden-ai/warden/worker/internal/kernels"

// rowStage is one of a layer's per-token steps between its matrix
// products. Each row's result depends on that row alone, so the stages
// split the batch by rows over the pool and give the same bits for every
// thread count.
type rowStage uint8

const (
	// stageAttnIn adds the previous layer's MLP output to the residual
	// (not in the first layer) and normalises it: h = RMSNorm(x).
	stageAttnIn rowStage = iota
	// stageQKV adds the q/k/v biases, normalises q and k per head, rotates
	// them and writes k and v into the token's page slot.
	stageQKV
	// stageMLPIn adds the attention output to the residual and normalises
	// it for the MLP.
	stageMLPIn
	// stageSiLU computes gate = SiLU(gate)·up.
	stageSiLU
	// stageResidual adds the last layer's MLP output to the residual.
	stageResidual
)

// rowJob is the pool's loop body for a rowStage, kept in the Backend so
// that the interface conversion in Pool.Do does not allocate.
type rowJob struct {
	b     *Backend
	stage rowStage
	layer int
}

var _ kernels.Ranger = (*rowJob)(nil)

// stageRowGrain is the fewest rows a thread takes in a stage: a decode
// step's few rows cost less than waking the pool.
const stageRowGrain = 16

// runStage runs stage over the batch's first rows rows.
func (b *Backend) runStage(stage rowStage, layer, rows int) {
	b.rowJob = rowJob{b: b, stage: stage, layer: layer}
	b.pool.Do(rows, max(stageRowGrain, (rows+b.pool.Threads()-1)/b.pool.Threads()), &b.rowJob)
}

func (j *rowJob) Range(lo, hi int) {
	b := j.b
	s := &b.spec
	hid, inter := s.Hidden, s.Intermediate
	w := &b.w.Layers[j.layer]
	for r := lo; r < hi; r++ {
		x, h := b.x[r*hid:(r+1)*hid], b.h[r*hid:(r+1)*hid]
		switch j.stage {
		case stageAttnIn:
			if j.layer > 0 {
				kernels.Add(x, x, h)
			}
			kernels.RMSNorm(h, x, w.AttnNorm, s.RMSNormEps)
		case stageQKV:
			b.qkvRow(j.layer, r)
		case stageMLPIn:
			kernels.Add(x, x, h)
			kernels.RMSNorm(h, x, w.MLPNorm, s.RMSNormEps)
		case stageSiLU:
			kernels.SiLUMul(b.gate[r*inter:(r+1)*inter], b.up[r*inter:(r+1)*inter])
		case stageResidual:
			kernels.Add(x, x, h)
		}
	}
}

// qkvRow finishes row r's q, k and v projections of layer l: biases,
// per-head q/k norms, the rotation (Hugging Face rotate_half convention)
// at the row's position, and k and v into the position's page slot.
func (b *Backend) qkvRow(l, r int) {
	s := &b.spec
	w := &b.w.Layers[l]
	hd, half, qDim, kvDim, pt := s.HeadDim, s.HeadDim/2, s.Heads*s.HeadDim, s.KVDim(), b.opt.PageTokens
	q, k, v := b.q[r*qDim:(r+1)*qDim], b.k[r*kvDim:(r+1)*kvDim], b.v[r*kvDim:(r+1)*kvDim]
	if s.QKVBias {
		kernels.Add(q, q, w.Bq)
		kernels.Add(k, k, w.Bk)
		kernels.Add(v, v, w.Bv)
	}
	if s.QKNorm {
		normHeads(q, w.QNorm, s.RMSNormEps)
		normHeads(k, w.KNorm, s.RMSNormEps)
	}
	pos := int(b.rowPos[r])
	cos := b.ropeCos[pos*half : (pos+1)*half]
	sin := b.ropeSin[pos*half : (pos+1)*half]
	for o := 0; o < qDim; o += hd {
		rotate(q[o:o+hd], cos, sin)
	}
	for o := 0; o < kvDim; o += hd {
		rotate(k[o:o+hd], cos, sin)
	}
	page := asFloats(b.pages.Data(b.batch[b.rowChunk[r]].Pages[pos/pt]))
	slot := pos % pt
	kOff := ((l*2+0)*pt + slot) * kvDim
	vOff := ((l*2+1)*pt + slot) * kvDim
	copy(page[kOff:kOff+kvDim], k)
	copy(page[vOff:vOff+kvDim], v)
}

// normHeads RMS-normalises every head (len(w) elements) of x in place with
// weight w.
func normHeads(x, w []float32, eps float32) {
	for o := 0; o < len(x); o += len(w) {
		kernels.RMSNorm(x[o:o+len(w)], x[o:o+len(w)], w, eps)
	}
}

// rotate applies the rotary embedding to one head: x1' = x1·cos − x2·sin,
// x2' = x2·cos + x1·sin over its two halves.
func rotate(x, cos, sin []float32) {
	half := len(cos)
	for i := 0; i < half; i++ {
		x1, x2 := x[i], x[i+half]
		// The explicit conversions forbid fusing into an FMA, which some
		// GOARCH/GOAMD64 settings would do and change the bits.
		x[i] = float32(x1*cos[i]) - float32(x2*sin[i])
		x[i+half] = float32(x2*cos[i]) + float32(x1*sin[i])
	}
}
