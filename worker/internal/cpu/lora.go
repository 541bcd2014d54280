package cpu

import (
	"fmt"

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
// the row's own values (kernels.MatMulTStrided), whatever the blocks and
// column chunks the pool splits the work into, so a row's result depends
// only on its input and its adapter: batch invariance holds as for the
// base model, and the base rows of a mixed batch are untouched.

// Adapter is a LoRA adapter prepared for the cpu backend (PrepareAdapter):
// float32 A and B matrices per layer and projection.
type Adapter struct {
	hash   string
	bytes  int64
	rank   int
	scale  float32
	layers [][numModules]*loraPair
}

// loraPair is one projection's A (rank×in) and B (out×rank), row-major.
type loraPair struct {
	a, b    []float32
	out, in int
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
			p.layers[l][i] = &loraPair{a: pair.A, b: pair.B, out: out, in: in}
			p.bytes += int64(len(pair.A)+len(pair.B)) * 4
		}
	}
	return p, nil
}

// loraRowBlock is the most gathered rows one shrink or expand task takes
// (the gemm kernels' 4-row tiles, several of them); loraCols the most
// output columns of one expand task.
const (
	loraRowBlock = 16
	loraCols     = 256
)

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
	t  []float32 // shrink results: [module of the stage][gathered row][maxRank]
	u  []float32 // expand results: [module of the stage][gathered row][out]

	// The stage in progress, read by the pool's workers.
	job loraJob
}

// loraJob is the pool's loop body for one stage's shrink or expand.
type loraJob struct {
	b      *Backend
	layer  int
	expand bool
	in     []float32 // the stage's input, batch rows of inDim
	inDim  int
	mods   []int       // the stage's projections
	outs   [][]float32 // their outputs, batch rows of the module's out
	chunks []int       // column chunks of each module
	per    int         // expand tasks per block: the sum of chunks
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
	widest := max(s.Hidden, s.Heads*s.HeadDim, s.Intermediate)
	outs := max(s.Heads*s.HeadDim+2*s.KVDim(), 2*s.Intermediate, s.Hidden)
	grow(&st.xg, n*widest)
	grow(&st.t, 3*n*st.maxRank)
	grow(&st.u, n*outs)
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
// mods (outputs outs, batch rows) to in's rows (inDim wide). Projections
// an adapter does not target are left as they are for its rows.
func (b *Backend) applyLoRA(l int, in []float32, inDim int, mods []int, outs [][]float32) {
	st := &b.lora
	if len(st.blocks) == 0 {
		return
	}
	j := &st.job
	*j = loraJob{b: b, layer: l, in: in, inDim: inDim, mods: mods, outs: outs, chunks: j.chunks[:0]}
	for i := range mods {
		c := (b.outDim(mods[i]) + loraCols - 1) / loraCols
		j.chunks = append(j.chunks, c)
		j.per += c
	}
	b.pool.Do(len(st.blocks), 1, j)
	j.expand = true
	b.pool.Do(len(st.blocks)*j.per, 1, j)
	j.in, j.outs = nil, nil
}

// outDim is the output width of projection m.
func (b *Backend) outDim(m int) int {
	s := &b.spec
	switch m {
	case modQ:
		return s.Heads * s.HeadDim
	case modK, modV:
		return s.KVDim()
	case modGate, modUp:
		return s.Intermediate
	}
	return s.Hidden
}

func (j *loraJob) Range(lo, hi int) {
	for i := lo; i < hi; i++ {
		if j.expand {
			j.expandTask(i/j.per, i%j.per)
		} else {
			j.shrinkTask(i)
		}
	}
}

// shrinkTask gathers block bi's input rows and computes t = x·Aᵀ for each
// of the stage's projections its adapter targets; t's rows lie rank
// apart within the block's maxRank-wide rows, so each block's t is one
// contiguous matrix for the expand.
func (j *loraJob) shrinkTask(bi int) {
	st := &j.b.lora
	blk := st.blocks[bi]
	n, k := blk.hi-blk.lo, j.inDim
	xg := st.xg[blk.lo*k : blk.hi*k]
	for i, r := range st.rows[blk.lo:blk.hi] {
		copy(xg[i*k:(i+1)*k], j.in[int(r)*k:(int(r)+1)*k])
	}
	rows := len(st.rows)
	for mi, m := range j.mods {
		p := blk.ad.layers[j.layer][m]
		if p == nil {
			continue
		}
		t := st.t[(mi*rows+blk.lo)*st.maxRank:]
		kernels.MatMulTStrided(t, blk.ad.rank, xg, n, k, p.a, blk.ad.rank, k)
	}
}

// expandTask computes u = t·Bᵀ for column chunk ci of the stage's
// projections (chunks in module order) over block bi, and adds Scale·u
// to the block's output rows.
func (j *loraJob) expandTask(bi, ci int) {
	st := &j.b.lora
	blk := st.blocks[bi]
	mi := 0
	for ci >= j.chunks[mi] {
		ci -= j.chunks[mi]
		mi++
	}
	p := blk.ad.layers[j.layer][j.mods[mi]]
	if p == nil {
		return
	}
	r, n, rows := blk.ad.rank, blk.hi-blk.lo, len(st.rows)
	c0 := ci * loraCols
	w := min(loraCols, p.out-c0)
	t := st.t[(mi*rows+blk.lo)*st.maxRank:]
	// u rows of the whole block for these columns, out apart; the modules
	// of a stage take disjoint row ranges of u.
	uOff := 0
	for _, m := range j.mods[:mi] {
		uOff += rows * j.b.outDim(m)
	}
	u := st.u[uOff+blk.lo*p.out:]
	kernels.MatMulTStrided(u[c0:], p.out, t, n, r, p.b[c0*r:], w, r)
	out := j.outs[mi]
	for i, row := range st.rows[blk.lo:blk.hi] {
		y := out[int(row)*p.out+c0 : int(row)*p.out+c0+w]
		kernels.Axpy(blk.ad.scale, u[i*p.out+c0:i*p.out+c0+w], y)
	}
}
