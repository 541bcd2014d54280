package cpu

import "github.com/warden-ai/warden/worker/internal/kernels"

// attnTileQueries is the number of query vectors an attention tile aims
// for: enough that the scores' product packs each key page once for all
// of them (the AVX-512 gemm packs W from 24 rows of A) and the value
// kernels reuse every value they load, few enough that the tile's scores
// stay in L2. Against 12, one layer's 512-token prefill attention took
// 6% less time on 1 thread and 12% less on 2 (BenchmarkPrefillAttention,
// AMD EPYC, 2026-12-06).
const attnTileQueries = 24

// attnTile is one attention job: the query heads of one KV head group
// for rows consecutive tokens of one chunk, the first at batch row row
// and position pos. Its queries share every key and value they read.
type attnTile struct {
	chunk, row, pos, rows, group int32
}

// attnScratch is one attention worker's buffers.
type attnScratch struct {
	q, out []float32   // [queries][HeadDim]: the tile's queries, its outputs
	scores []float32   // [queries][keys]
	probs  [][]float32 // [queries]: each query's scores, up to its position
}

// tileRows is the number of token rows of a full tile.
func tileRows(s Spec) int { return max(1, attnTileQueries/(s.Heads/s.KVHeads)) }

func newAttnScratch(s Spec) attnScratch {
	n := tileRows(s) * (s.Heads / s.KVHeads)
	return attnScratch{
		q:      make([]float32, n*s.HeadDim),
		out:    make([]float32, n*s.HeadDim),
		scores: make([]float32, n*s.MaxPositions),
		probs:  make([][]float32, n),
	}
}

// buildTiles lists the attention tiles of the batch, each chunk's last
// rows first: the longest jobs start first, which balances the threads.
func (b *Backend) buildTiles() {
	b.tiles = b.tiles[:0]
	per := tileRows(b.spec)
	r := 0
	for ci, c := range b.batch {
		for hi := len(c.Tokens); hi > 0; hi -= per {
			lo := max(0, hi-per)
			for g := 0; g < b.spec.KVHeads; g++ {
				b.tiles = append(b.tiles, attnTile{chunk: int32(ci), row: int32(r + lo), pos: int32(c.Start + lo),
					rows: int32(hi - lo), group: int32(g)})
			}
		}
		r += len(c.Tokens)
	}
}

// attend runs every attention tile. Each thread takes tiles from a shared
// counter; a tile's results do not depend on which thread runs it.
func (b *Backend) attend() {
	b.nextTile.Store(0)
	b.pool.For(len(b.scratch), b.attnFunc)
}

func (b *Backend) attendRange(lo, hi int) {
	for w := lo; w < hi; w++ {
		for {
			t := int(b.nextTile.Add(1)) - 1
			if t >= len(b.tiles) {
				break
			}
			b.attendTile(b.tiles[t], &b.scratch[w])
		}
	}
}

// attendTile computes softmax(q·Kᵀ·scale)·V for every query of the tile,
// each over its positions [0, pos], reading K and V from the sequence's
// pages in position order. Every output element goes through the very
// operations of one query computed alone: each score is a canonical Dot,
// scaled, then Softmax over the query's positions, then one fma per
// position in position order (see kernels.AxpyTile) — so a query's
// result does not depend on the tile around it.
func (b *Backend) attendTile(t attnTile, sc *attnScratch) {
	s := &b.spec
	hd, kvDim, pt := s.HeadDim, s.KVDim(), b.opt.PageTokens
	grp := s.Heads / s.KVHeads
	nq := int(t.rows) * grp
	for i := 0; i < nq; i++ {
		src := ((int(t.row)+i/grp)*s.Heads + int(t.group)*grp + i%grp) * hd
		copy(sc.q[i*hd:(i+1)*hd], b.q[src:src+hd])
	}
	// keys is the last query's count; query i sees keysOf(i) of them.
	keys := int(t.pos) + int(t.rows)
	keysOf := func(i int) int { return int(t.pos) + i/grp + 1 }
	pages := b.batch[t.chunk].Pages
	kBase := (b.layer*2+0)*pt*kvDim + int(t.group)*hd
	vBase := (b.layer*2+1)*pt*kvDim + int(t.group)*hd
	scores := sc.scores[:nq*keys]
	for p := 0; p*pt < keys; p++ {
		cnt := min(pt, keys-p*pt)
		kernels.MatMulTStrided(scores[p*pt:], keys, sc.q[:nq*hd], nq, hd,
			asFloats(b.pages.Data(pages[p]))[kBase:], cnt, kvDim)
	}
	for i := 0; i < nq; i++ {
		sc.probs[i] = scores[i*keys : i*keys+keysOf(i)]
		kernels.Scale(sc.probs[i], b.scale)
	}
	kernels.SoftmaxRows(sc.probs[:nq])
	out := sc.out[:nq*hd]
	clear(out)
	for p := 0; p*pt < keys; p++ {
		first, cnt := p*pt, min(pt, keys-p*pt)
		v := asFloats(b.pages.Data(pages[p]))[vBase:]
		// Queries [full, nq) see the page's every slot; the ones before
		// see a prefix of it, or nothing.
		full := 0
		for full < nq && keysOf(full) < first+cnt {
			full++
		}
		kernels.AxpyTile(out[full*hd:], nq-full, hd, hd, scores[full*keys+first:], cnt, keys, v, kvDim)
		for i := 0; i < full; i++ {
			if n := keysOf(i) - first; n > 0 {
				kernels.AxpyStrided(out[i*hd:(i+1)*hd], scores[i*keys+first:i*keys+first+n], v, kvDim)
			}
		}
	}
	for i := 0; i < nq; i++ {
		dst := ((int(t.row)+i/grp)*s.Heads + int(t.group)*grp + i%grp) * hd
		copy(b.att[dst:dst+hd], out[i*hd:(i+1)*hd])
	}
}
