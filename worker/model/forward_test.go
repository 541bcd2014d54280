package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refModel is a naive float64 Llama forward pass over a loaded model,
// used only to check that the preset initialisation is not degenerate.
// It recomputes the whole sequence for every call (no KV cache).
type refModel struct {
	cfg  Config
	w    map[string][]float64
	freq []float64
}

func newRefModel(t *testing.T, m *Model) *refModel {
	t.Helper()
	r := &refModel{cfg: m.Config, w: map[string][]float64{}, freq: m.Config.RopeInvFreq()}
	for _, s := range m.Config.TensorSpecs() {
		v, err := m.Float32(s.Name)
		if err != nil {
			t.Fatal(err)
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		r.w[s.Name] = f
	}
	if m.Config.TieWordEmbeddings {
		r.w[LMHeadName] = r.w[EmbedTokensName]
	}
	return r
}

func rmsNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * s * w[i]
	}
	return out
}

// matVec computes W·x for W stored [out, in].
func matVec(w, x []float64) []float64 {
	out := make([]float64, len(w)/len(x))
	for o := range out {
		row := w[o*len(x) : (o+1)*len(x)]
		var s float64
		for i, v := range x {
			s += row[i] * v
		}
		out[o] = s
	}
	return out
}

// rope rotates each head in place (transformers' rotate_half layout:
// dimension i pairs with i + head_dim/2).
func (r *refModel) rope(v []float64, pos int) {
	d := r.cfg.HeadDim
	for h := 0; h < len(v)/d; h++ {
		x := v[h*d : (h+1)*d]
		for i, f := range r.freq {
			sin, cos := math.Sincos(float64(pos) * f)
			a, b := x[i], x[i+d/2]
			x[i], x[i+d/2] = a*cos-b*sin, b*cos+a*sin
		}
	}
}

// forward returns the last position's logits and the RMS of the residual
// stream after each layer (at the last position).
func (r *refModel) forward(tokens []int32) (logits, residualRMS []float64) {
	c := r.cfg
	h, d := c.HiddenSize, c.HeadDim
	xs := make([][]float64, len(tokens))
	for p, tok := range tokens {
		xs[p] = append([]float64(nil), r.w[EmbedTokensName][int(tok)*h:(int(tok)+1)*h]...)
	}
	for l := range c.NumHiddenLayers {
		p := LayerPrefix(l)
		ks, vs := make([][]float64, len(xs)), make([][]float64, len(xs))
		qs := make([][]float64, len(xs))
		for i, x := range xs {
			n := rmsNorm(x, r.w[p+LayerInputNorm], c.RMSNormEps)
			qs[i], ks[i], vs[i] = matVec(r.w[p+LayerQProj], n), matVec(r.w[p+LayerKProj], n), matVec(r.w[p+LayerVProj], n)
			r.rope(qs[i], i)
			r.rope(ks[i], i)
		}
		group := c.NumAttentionHeads / c.NumKeyValueHeads
		for i, x := range xs {
			att := make([]float64, c.QDim())
			for hd := range c.NumAttentionHeads {
				kvh := hd / group
				q := qs[i][hd*d : (hd+1)*d]
				scores := make([]float64, i+1)
				maxS := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var s float64
					for e, qv := range q {
						s += qv * ks[j][kvh*d+e]
					}
					scores[j] = s / math.Sqrt(float64(d))
					maxS = max(maxS, scores[j])
				}
				var z float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - maxS)
					z += scores[j]
				}
				for j := range scores {
					for e := range d {
						att[hd*d+e] += scores[j] / z * vs[j][kvh*d+e]
					}
				}
			}
			o := matVec(r.w[p+LayerOProj], att)
			for e := range x {
				x[e] += o[e]
			}
			n := rmsNorm(x, r.w[p+LayerPostAttentionNorm], c.RMSNormEps)
			g, u := matVec(r.w[p+LayerGateProj], n), matVec(r.w[p+LayerUpProj], n)
			for e := range g {
				g[e] = g[e] / (1 + math.Exp(-g[e])) * u[e]
			}
			dn := matVec(r.w[p+LayerDownProj], g)
			for e := range x {
				x[e] += dn[e]
			}
		}
		last := xs[len(xs)-1]
		var ss float64
		for _, v := range last {
			ss += v * v
		}
		residualRMS = append(residualRMS, math.Sqrt(ss/float64(h)))
	}
	n := rmsNorm(xs[len(xs)-1], r.w[FinalNormName], c.RMSNormEps)
	return matVec(r.w[LMHeadName], n), residualRMS
}

func argmax(v []float64) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

func stddev(v []float64) float64 {
	var s, ss float64
	for _, x := range v {
		s += x
		ss += x * x
	}
	n := float64(len(v))
	return math.Sqrt(ss/n - (s/n)*(s/n))
}

// TestInitNotDegenerate runs the tiny preset through a reference forward
// pass and checks the properties initDistribution promises: a unit-scale
// residual stream, logits with a spread of a few units, next tokens that
// depend on early context, and greedy output that does not collapse into
// repeating one token.
func TestInitNotDegenerate(t *testing.T) {
	m := load(t, initTiny(t, 1, F32))
	r := newRefModel(t, m)
	rng := rand.New(rand.NewPCG(1, 99))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(rng.IntN(m.Config.VocabSize))
		}
		return p
	}
	const trials = 20
	changedBy8, changedBy1 := 0, 0
	for range trials {
		a := prompt(24)
		b := slices.Clone(a)
		copy(b, prompt(8))
		c := slices.Clone(a)
		c[3] = (c[3] + 1) % int32(m.Config.VocabSize)
		la, rms := r.forward(a)
		for l, v := range rms {
			if v < 0.5 || v > 3 {
				t.Errorf("layer %d residual RMS %.2f, want about 1", l, v)
			}
		}
		if s := stddev(la); s < 2 || s > 8 {
			t.Errorf("logit spread %.2f, want a few units", s)
		}
		lb, _ := r.forward(b)
		lc, _ := r.forward(c)
		if argmax(lb) != argmax(la) {
			changedBy8++
		}
		if argmax(lc) != argmax(la) {
			changedBy1++
		}
	}
	// Seed 1 gives 14 and 9 of 20, and 23 distinct greedy tokens. The
	// margins allow a deliberate retuning of the scheme; nothing here is
	// random from run to run.
	if changedBy8 < 12 || changedBy1 < 5 {
		t.Errorf("next token changed in %d/%d trials when 8 early tokens changed, %d/%d for one token; want ≥ 12 and ≥ 5",
			changedBy8, trials, changedBy1, trials)
	}
	seq := prompt(8)
	distinct := map[int32]bool{}
	for range 24 {
		l, _ := r.forward(seq)
		next := argmax(l)
		distinct[next] = true
		seq = append(seq, next)
	}
	if len(distinct) < 12 {
		t.Errorf("greedy output %v has only %d distinct tokens", seq[8:], len(distinct))
	}
}
