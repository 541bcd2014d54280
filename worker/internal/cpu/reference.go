package cpu

import (
	"math"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
)

// Reference computes every position's logits in float64 with a plain,
// unpaged implementation of the Llama forward pass, with Qwen2's q/k/v
// biases (added to the projections) and Qwen3's q/k norms (an RMSNorm of
// every head before RoPE) when the spec has them. It is the independent
// reference the backends and the engine are tested against.
func Reference(s Spec, w Weights, tokens []int32) [][]float64 {
	return ReferenceAdapter(s, w, nil, tokens)
}

// ReferenceAdapter is Reference under a LoRA adapter (nil: the base
// model), merged into the weights in float64: every projection the
// adapter targets is computed with W + Scale·B·A.
func ReferenceAdapter(s Spec, w Weights, a *lora.Adapter, tokens []int32) [][]float64 {
	lm := merged(w.LMHead, nil, 0, "")
	h := referenceHidden(s, w, a, tokens)
	y := make([][]float64, len(h))
	for i, x := range h {
		y[i] = make([]float64, s.Vocab)
		for o := range s.Vocab {
			var acc float64
			for j, v := range x {
				acc += v * lm[o*s.Hidden+j]
			}
			y[i][o] = acc
		}
	}
	return y
}

// ReferenceEmbedding is the float64 reference of an embedding request
// under adapter a (nil: the base model, see ReferenceAdapter): the final
// hidden states (ReferenceHidden) pooled as p says (the last position's,
// or the mean of all) and divided by their L2 norm.
func ReferenceEmbedding(s Spec, w Weights, a *lora.Adapter, tokens []int32, p engine.Pooling) []float64 {
	h := referenceHidden(s, w, a, tokens)
	v := make([]float64, s.Hidden)
	switch p {
	case engine.PoolingLast:
		copy(v, h[len(h)-1])
	case engine.PoolingMean:
		for _, row := range h {
			for j, x := range row {
				v[j] += x / float64(len(h))
			}
		}
	}
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	for j := range v {
		v[j] /= math.Sqrt(ss)
	}
	return v
}

// ReferenceHidden computes every position's final hidden state in
// float64, after the model's final norm (the LM head's input), with the
// forward pass Reference describes.
func ReferenceHidden(s Spec, w Weights, tokens []int32) [][]float64 {
	return referenceHidden(s, w, nil, tokens)
}

// referenceHidden is ReferenceHidden under adapter a (nil: the base
// model), merged into the weights as ReferenceAdapter says.
func referenceHidden(s Spec, w Weights, a *lora.Adapter, tokens []int32) [][]float64 {
	n, hid, hd := len(tokens), s.Hidden, s.HeadDim
	qDim, kvDim := s.Heads*hd, s.KVDim()
	layer := 0
	matmul := func(x [][]float64, wm *kernels.Matrix, mod lora.Module, out, in int) [][]float64 {
		wt := merged(wm, a, layer, mod)
		y := make([][]float64, len(x))
		for i := range x {
			y[i] = make([]float64, out)
			for o := 0; o < out; o++ {
				var acc float64
				for j := 0; j < in; j++ {
					acc += x[i][j] * wt[o*in+j]
				}
				y[i][o] = acc
			}
		}
		return y
	}
	rms := func(x [][]float64, wt []float32) [][]float64 {
		y := make([][]float64, len(x))
		for i, row := range x {
			var ss float64
			for _, v := range row {
				ss += v * v
			}
			inv := 1 / math.Sqrt(ss/float64(len(row))+float64(s.RMSNormEps))
			y[i] = make([]float64, len(row))
			for j, v := range row {
				y[i][j] = v * inv * float64(wt[j])
			}
		}
		return y
	}
	rope := func(x []float64, pos int) {
		half := hd / 2
		for i := 0; i < half; i++ {
			a := float64(pos) * s.InvFreq[i]
			c, sn := math.Cos(a), math.Sin(a)
			x1, x2 := x[i], x[i+half]
			x[i] = x1*c - x2*sn
			x[i+half] = x2*c + x1*sn
		}
	}
	embed := dense(w.Embed)
	x := make([][]float64, n)
	for i, t := range tokens {
		x[i] = make([]float64, hid)
		for j := range x[i] {
			x[i][j] = float64(embed[int(t)*hid+j])
		}
	}
	for l, lw := range w.Layers {
		layer = l
		h := rms(x, lw.AttnNorm)
		q, k, v := matmul(h, lw.Wq, lora.Q, qDim, hid), matmul(h, lw.Wk, lora.K, kvDim, hid), matmul(h, lw.Wv, lora.V, kvDim, hid)
		if s.QKVBias {
			for i := 0; i < n; i++ {
				for j := range q[i] {
					q[i][j] += float64(lw.Bq[j])
				}
				for j := range k[i] {
					k[i][j] += float64(lw.Bk[j])
					v[i][j] += float64(lw.Bv[j])
				}
			}
		}
		if s.QKNorm {
			for i := 0; i < n; i++ {
				for hh := 0; hh < s.Heads; hh++ {
					copy(q[i][hh*hd:], rms([][]float64{q[i][hh*hd : (hh+1)*hd]}, lw.QNorm)[0])
				}
				for g := 0; g < s.KVHeads; g++ {
					copy(k[i][g*hd:], rms([][]float64{k[i][g*hd : (g+1)*hd]}, lw.KNorm)[0])
				}
			}
		}
		for i := 0; i < n; i++ {
			for hh := 0; hh < s.Heads; hh++ {
				rope(q[i][hh*hd:(hh+1)*hd], i)
			}
			for g := 0; g < s.KVHeads; g++ {
				rope(k[i][g*hd:(g+1)*hd], i)
			}
		}
		att := make([][]float64, n)
		for i := 0; i < n; i++ {
			att[i] = make([]float64, qDim)
			for hh := 0; hh < s.Heads; hh++ {
				g := hh / (s.Heads / s.KVHeads)
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for t := 0; t <= i; t++ {
					var d float64
					for j := 0; j < hd; j++ {
						d += q[i][hh*hd+j] * k[t][g*hd+j]
					}
					sc[t] = d / math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[t])
				}
				var sum float64
				for t := range sc {
					sc[t] = math.Exp(sc[t] - mx)
					sum += sc[t]
				}
				for t := range sc {
					for j := 0; j < hd; j++ {
						att[i][hh*hd+j] += sc[t] / sum * v[t][g*hd+j]
					}
				}
			}
		}
		o := matmul(att, lw.Wo, lora.O, hid, qDim)
		for i := range x {
			for j := range x[i] {
				x[i][j] += o[i][j]
			}
		}
		h = rms(x, lw.MLPNorm)
		gt, up := matmul(h, lw.WGate, lora.Gate, s.Intermediate, hid), matmul(h, lw.WUp, lora.Up, s.Intermediate, hid)
		for i := range gt {
			for j := range gt[i] {
				gt[i][j] = gt[i][j] / (1 + math.Exp(-gt[i][j])) * up[i][j]
			}
		}
		d := matmul(gt, lw.WDown, lora.Down, hid, s.Intermediate)
		for i := range x {
			for j := range x[i] {
				x[i][j] += d[i][j]
			}
		}
	}
	return rms(x, w.Norm)
}

// merged returns m, layer l's projection mod, in float64 with adapter
// a's update Scale·B·A added, or m alone when a (nil: the base model)
// does not target it.
func merged(m *kernels.Matrix, a *lora.Adapter, l int, mod lora.Module) []float64 {
	d := dense(m)
	w := make([]float64, len(d))
	for i, v := range d {
		w[i] = float64(v)
	}
	if a == nil || mod == "" || a.Layers[l][mod] == nil {
		return w
	}
	p, r, in := a.Layers[l][mod], a.Config.Rank, m.Cols()
	for o := range m.Rows() {
		for j := range in {
			var acc float64
			for k := range r {
				acc += float64(p.B[o*r+k]) * float64(p.A[k*in+j])
			}
			w[o*in+j] += a.Config.Scale * acc
		}
	}
	return w
}

// dense returns m's rows as float32 (exact but for Q8).
func dense(m *kernels.Matrix) []float32 {
	d := make([]float32, m.Rows()*m.Cols())
	for i := range m.Rows() {
		m.Row(i, d[i*m.Cols():(i+1)*m.Cols()])
	}
	return d
}
