package cpu

import (
	"fmt"
	"math"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/kernels"
)

// A batch's LoRA updates are computed S-LoRA/Punica style: the rows of the
// chunks under each adapter are gathered into one block list per adapter
// (in the order the adapters first appear in the batch), and for every
// target projection y = x·Wᵀ of a layer each row under adapter X gets
//
//	t = x·Aᵀ (the shrink, Rank elements), u = t·Bᵀ (the expand),
//	y[j] = fma(Scale, u[j], y[j])
//
// after the base product. Every t and u element is one canonical Dot of
// the row's own values (kernels.MatMulTMatrix), whatever the blocks the
// pool splits the work into, so a row's result depends only on its input
// and its adapter: batch invariance holds as for the base model, and the
// base rows of a mixed batch are untouched.

// Adapter is a LoRA adapter prepared for the cpu backend (PrepareAdapter):
// A and B matrices per layer and projection, each in the most compact of
// bf16, f16 and f32 that holds its values exactly (an adapter saved in
// bf16, as PEFT saves one trained in bf16, takes half the memory and
// bandwidth of f32, with the same products).
type Adapter struct {
	hash   string
	bytes  int64
	rank   int
	scale  float32
	layers [][numModules]*loraPair
}

// loraPair is one projection's A (rank×in) and B (out×rank).
type loraPair struct {
	a, b *kernels.Matrix
	out  int
}

var _ engine.Adapter = (*Adapter)(nil)

// Hash implements engine.Adapter.
func (a *Adapter) Hash() string { return a.hash }

// Bytes implements engine.Adapter.
func (a *Adapter) Bytes() int64 { return a.bytes }

// The projections in the order of lora.Modules.
const (
	modQ = iota
	modK
	modV
	modO
	modGate
	modUp
	modDown
	numModules
)

// PrepareAdapter implements engine.AdapterBackend: it checks every pair's
// shape against the backend's Spec and keeps the float32 matrices.
func (b *Backend) PrepareAdapter(a *lora.Adapter) (engine.Adapter, error) {
	s := &b.spec
	if len(a.Layers) != s.Layers {
		return nil, fmt.Errorf("%w: adapter %.12s has %d layers, the model %d", ErrShape, a.Hash, len(a.Layers), s.Layers)
	}
	qDim, kv := s.Heads*s.HeadDim, s.KVDim()
	shapes := [numModules][2]int{
		{qDim, s.Hidden}, {kv, s.Hidden}, {kv, s.Hidden}, {s.Hidden, qDim},
		{s.Intermediate, s.Hidden}, {s.Intermediate, s.Hidden}, {s.Hidden, s.Intermediate},
	}
	r := a.Config.Rank
	p := &Adapter{hash: a.Hash, rank: r, scale: float32(a.Config.Scale), layers: make([][numModules]*loraPair, len(a.Layers))}
	for l, mods := range a.Layers {
		for i, m := range lora.Modules {
			pair := mods[m]
			if pair == nil {
				continue
			}
			out, in := shapes[i][0], shapes[i][1]
			if r < 1 || len(pair.A) != r*in || len(pair.B) != out*r {
				return nil, fmt.Errorf("%w: adapter %.12s layer %d %s: A has %d and B %d elements, want %d and %d (r %d)",
					ErrShape, a.Hash, l, m, len(pair.A), len(pair.B), r*in, out*r, r)
			}
			lp := &loraPair{a: exact(r, in, pair.A), b: exact(out, r, pair.B), out: out}
			p.layers[l][i] = lp
			p.bytes += lp.a.Bytes() + lp.b.Bytes()
		}
	}
	return p, nil
}

// exact returns v (rows×cols) as a matrix in bf16 or f16 when every value
// is one exactly, else in f32 (v used in place).
func exact(rows, cols int, v []float32) *kernels.Matrix {
	m := kernels.NewF32(rows, cols, v)
	u := make([]uint16, len(v))
	back := make([]float32, len(v))
	for _, f := range []kernels.Format{kernels.BF16, kernels.F16} {
		if f == kernels.BF16 {
			kernels.F32ToBF16(u, v)
			kernels.BF16ToF32(back, u)
		} else {
			kernels.F32ToF16(u, v)
			kernels.F16ToF32(back, u)
		}
		same := true
		for i, x := range v {
			if math.Float32bits(back[i]) != math.Float32bits(x) {
				same = false
				break
			}
		}
		if same {
			c, err := m.Convert(f)
			if err == nil {
				return c
			}
		}
	}
	return m
}

// loraRowBlock is the most gathered rows one task takes: the gemm
// kernels' 4-row tiles, several of them, few enough that a prefill under
// one adapter still spreads over the threads.
const loraRowBlock = 16

// loraBlock is a run of gathered rows [lo, hi) under one adapter.
type loraBlock struct {
	ad     *Adapter
	lo, hi int
}

// loraState is a Forward call's adapter layout and scratch, reused.
type loraState struct {
	adapters []*Adapter // the batch's adapters, in order of first appearance
	rows     []int32    // gathered row i is batch row rows[i]
	blocks   []loraBlock
	maxRank  int

	xg []float32 // gathered input rows
	t  []float32 // shrink results: [gathered row][maxRank]
	u  []float32 // expand results: [gathered row][widest]
	// widest is the widest input or output of a projection: a block's
	// rows of xg and u start at lo·widest, whatever the stage's widths,
	// so blocks working on different projections never share scratch.
	widest int

	// The stage in progress, read by the pool's workers.
	job loraJob
}

// loraJob is the pool's loop body for one stage: one task per block.
type loraJob struct {
	b     *Backend
	layer int
	in    []float32 // the stage's input, batch rows of inDim
	inDim int
	mods  []int       // the stage's projections
	outs  [][]float32 // their outputs, batch rows of the module's out
}

// The projections of each stage: those sharing one input.
var (
	stageModsQKV    = []int{modQ, modK, modV}
	stageModsO      = []int{modO}
	stageModsGateUp = []int{modGate, modUp}
	stageModsDown   = []int{modDown}
)

// planLoRA lays out the batch's adapter rows (none when no chunk has an
// adapter). It fails on an adapter another backend made.
func (b *Backend) planLoRA(batch []engine.Chunk) error {
	st := &b.lora
	st.adapters, st.rows, st.blocks, st.maxRank = st.adapters[:0], st.rows[:0], st.blocks[:0], 0
	for i, c := range batch {
		if c.Adapter == nil {
			continue
		}
		a, ok := c.Adapter.(*Adapter)
		if !ok || len(a.layers) != b.spec.Layers {
			return fmt.Errorf("cpu: chunk %d: adapter %.12s was not prepared by this backend", i, c.Adapter.Hash())
		}
		if !containsAdapter(st.adapters, a) {
			st.adapters = append(st.adapters, a)
			st.maxRank = max(st.maxRank, a.rank)
		}
	}
	if len(st.adapters) == 0 {
		return nil
	}
	for _, a := range st.adapters {
		first := len(st.rows)
		r := 0
		for _, c := range batch {
			if c.Adapter == engine.Adapter(a) {
				for k := range c.Tokens {
					st.rows = append(st.rows, int32(r+k))
				}
			}
			r += len(c.Tokens)
		}
		for lo := first; lo < len(st.rows); lo += loraRowBlock {
			st.blocks = append(st.blocks, loraBlock{ad: a, lo: lo, hi: min(lo+loraRowBlock, len(st.rows))})
		}
	}
	s := &b.spec
	n := len(st.rows)
	st.widest = max(s.Hidden, s.Heads*s.HeadDim, s.Intermediate)
	grow(&st.xg, n*st.widest)
	grow(&st.t, n*st.maxRank)
	grow(&st.u, n*st.widest)
	return nil
}

func containsAdapter(as []*Adapter, a *Adapter) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// grow makes *buf at least n long, keeping its array when it is.
func grow(buf *[]float32, n int) {
	if len(*buf) < n {
		*buf = make([]float32, n)
	}
}

// applyLoRA adds the batch's adapter updates of layer l's projections
// mods (outputs outs, batch rows) to their rows, from the stage's input
// in (batch rows of inDim). Projections an adapter does not target are
// left as they are for its rows. One pool loop per stage: a block's
// shrink and expand run in one task.
func (b *Backend) applyLoRA(l int, in []float32, inDim int, mods []int, outs [][]float32) {
	st := &b.lora
	if len(st.blocks) == 0 {
		return
	}
	st.job = loraJob{b: b, layer: l, in: in, inDim: inDim, mods: mods, outs: outs}
	b.pool.Do(len(st.blocks), 1, &st.job)
	st.job = loraJob{}
}

func (j *loraJob) Range(lo, hi int) {
	for bi := lo; bi < hi; bi++ {
		j.block(bi)
	}
}

// block gathers block bi's input rows, and for each of the stage's
// projections its adapter targets computes t = x·Aᵀ, u = t·Bᵀ and adds
// Scale·u to the rows' outputs. The block's t and u take its own rows of
// the scratch, so blocks run in parallel.
func (j *loraJob) block(bi int) {
	st := &j.b.lora
	blk := st.blocks[bi]
	n, k, r := blk.hi-blk.lo, j.inDim, blk.ad.rank
	xg := st.xg[blk.lo*st.widest : blk.lo*st.widest+n*k]
	for i, row := range st.rows[blk.lo:blk.hi] {
		copy(xg[i*k:(i+1)*k], j.in[int(row)*k:(int(row)+1)*k])
	}
	t := st.t[blk.lo*st.maxRank:]
	for mi, m := range j.mods {
		p := blk.ad.layers[j.layer][m]
		if p == nil {
			continue
		}
		kernels.MatMulTMatrix(t, r, xg, n, p.a)
		u := st.u[blk.lo*st.widest:]
		kernels.MatMulTMatrix(u, p.out, t, n, p.b)
		out := j.outs[mi]
		for i, row := range st.rows[blk.lo:blk.hi] {
			kernels.Axpy(blk.ad.scale, u[i*p.out:(i+1)*p.out], out[int(row)*p.out:(int(row)+1)*p.out])
		}
	}
}
