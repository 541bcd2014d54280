//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/internal/cpu"
)

// maxRelTol bounds |got - want| / Σ|terms| for float32 accumulation of
// exactly representable inputs (every dtype's weights convert to float32
// exactly, and a q8 weight is its float32 q·scale, so the bound is the same
// for all).
const maxRelTol = 1e-5

func silu64(g float64) float64 { return g / (1 + math.Exp(-g)) }

func TestLinear(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(1, 2))
	// k = 544 and 1056 end in a partial 256-wide step of whole q8 blocks.
	shapes := []struct{ n, k int }{{7, 64}, {33, 520}, {300, 1000}, {5, 37}, {33, 544}, {300, 1056}}
	for wt := range numWTypes {
		worst := 0.0
		for _, sh := range shapes {
			if wt == wQ8 && sh.k%q8Block != 0 {
				continue
			}
			for _, mode := range []int{modeStore, modeAdd, modeSwiGLU} {
				for _, rows := range []int{1, 3, 8, 13} {
					name := fmt.Sprintf("%s/n%d_k%d/mode%d/rows%d", wt.suffix(), sh.n, sh.k, mode, rows)
					worst = max(worst, checkLinear(t, td, r, name, wt, sh.n, sh.k, mode, rows))
				}
			}
		}
		t.Logf("KERNEL linear_%s max_rel_err=%.3g", wt.suffix(), worst)
	}
}

// checkLinear runs one linear launch against a float64 reference, checks
// that each row computed alone gives bit-identical results (batch
// invariance), and returns the largest relative error.
func checkLinear(t *testing.T, td *testDev, r *rand.Rand, name string, wt wtype, n, k, mode, rows int) float64 {
	t.Helper()
	wb, w := encodeWeights(r, wt, n*k, 0.5)
	w2b, w2 := encodeWeights(r, wt, n*k, 0.5)
	x := randFloats(r, rows*k)
	y0 := randFloats(r, rows*n) // the residual for modeAdd
	dw, dw2, dx := td.upload(wb), td.upload(w2b), td.upload(sliceBytes(x))
	dy := td.alloc(rows * n * 4)
	if mode == modeAdd {
		td.write(dy, sliceBytes(y0))
	}
	if mode != modeSwiGLU {
		dw2 = 0
	}
	td.do(func() error { return td.k.linearOut(td.s, wt, dy, dx, dw, dw2, rows, n, k, mode) })
	got := td.readFloats(dy, rows*n)

	worst := 0.0
	for i := range rows {
		for j := range n {
			var g, gs, u, us float64
			for kk := range k {
				p := float64(w[j*k+kk]) * float64(x[i*k+kk])
				g, gs = g+p, gs+math.Abs(p)
				q := float64(w2[j*k+kk]) * float64(x[i*k+kk])
				u, us = u+q, us+math.Abs(q)
			}
			var want, scale float64
			switch mode {
			case modeStore:
				want, scale = g, gs
			case modeAdd:
				want, scale = float64(y0[i*n+j])+g, gs+math.Abs(float64(y0[i*n+j]))
			default:
				// silu' is at most 1.1 in magnitude.
				want, scale = silu64(g)*u, 1.1*gs*math.Abs(u)+math.Abs(silu64(g))*us
			}
			v := float64(got[i*n+j])
			rel := math.Abs(v-want) / (scale + 1e-30)
			if !(rel <= maxRelTol) {
				t.Fatalf("%s: y[%d][%d] = %g, want %g (relative error %.3g)", name, i, j, v, want, rel)
			}
			worst = max(worst, rel)
		}
	}
	// Batch invariance: row i alone must give the same bits.
	for i := range rows {
		dyi := td.alloc(n * 4)
		if mode == modeAdd {
			td.write(dyi, sliceBytes(y0[i*n:(i+1)*n]))
		}
		xi := dx + cu.DevicePtr(i*k*4)
		td.do(func() error { return td.k.linearOut(td.s, wt, dyi, xi, dw, dw2, 1, n, k, mode) })
		alone := td.readFloats(dyi, n)
		for j := range n {
			if math.Float32bits(alone[j]) != math.Float32bits(got[i*n+j]) {
				t.Fatalf("%s: row %d alone gives y[%d] = %g, in the batch %g: not batch-invariant", name, i, j, alone[j], got[i*n+j])
			}
		}
	}
	return worst
}

func TestEmbed(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(3, 4))
	const vocab, hidden = 50, 72
	tokens := []int32{3, 49, 0, 3, 17}
	for wt := range numFloatTypes {
		eb, e := encodeWeights(r, wt, vocab*hidden, 1)
		de, dt := td.upload(eb), td.upload(sliceBytes(tokens))
		dx := td.alloc(len(tokens) * hidden * 4)
		td.do(func() error { return td.k.embedRows(td.s, wt, dx, de, dt, len(tokens), hidden) })
		got := td.readFloats(dx, len(tokens)*hidden)
		for i, tok := range tokens {
			for j := range hidden {
				if got[i*hidden+j] != e[int(tok)*hidden+j] {
					t.Fatalf("%s: x[%d][%d] = %g, want %g", wt.suffix(), i, j, got[i*hidden+j], e[int(tok)*hidden+j])
				}
			}
		}
	}
	t.Logf("KERNEL embed max_rel_err=0")
}

func TestRMSNorm(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(5, 6))
	const rows, n, eps = 6, 300, 1e-5
	x, w := randFloats(r, rows*n), randFloats(r, n)
	dx, dw := td.upload(sliceBytes(x)), td.upload(sliceBytes(w))
	worst := 0.0
	for _, src := range [][]int32{nil, {5, 0, 2}} {
		outRows := rows
		var dsrc cu.DevicePtr
		if src != nil {
			outRows, dsrc = len(src), td.upload(sliceBytes(src))
		}
		dout := td.alloc(outRows * n * 4)
		td.do(func() error { return td.k.rmsNorm(td.s, dout, dx, dw, dsrc, outRows, n, eps) })
		got := td.readFloats(dout, outRows*n)
		for i := range outRows {
			s := i
			if src != nil {
				s = int(src[i])
			}
			var ss float64
			for _, v := range x[s*n : (s+1)*n] {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/n+eps)
			for j := range n {
				want := float64(x[s*n+j]) * inv * float64(w[j])
				rel := math.Abs(float64(got[i*n+j])-want) / (math.Abs(want) + 1e-6)
				if !(rel <= 1e-5) {
					t.Fatalf("out[%d][%d] = %g, want %g", i, j, got[i*n+j], want)
				}
				worst = max(worst, rel)
			}
		}
	}
	t.Logf("KERNEL rmsnorm max_rel_err=%.3g", worst)
}

func TestArgmax(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1000
	nan := float32(math.NaN())
	rows := [][]float32{randFloats(r, n), randFloats(r, n), randFloats(r, n), randFloats(r, n), randFloats(r, n)}
	rows[1][10], rows[1][900] = 5, 5 // tie: lowest index wins
	rows[2][0], rows[2][1] = nan, 7  // NaN skipped
	for i := range rows[3] {
		rows[3][i] = nan // all NaN: 0
	}
	rows[4][999] = 3
	var flat []float32
	for _, row := range rows {
		flat = append(flat, row...)
	}
	dx, dout := td.upload(sliceBytes(flat)), td.alloc(4*len(rows))
	td.do(func() error { return td.k.argmaxRows(td.s, dout, dx, len(rows), n) })
	got := td.readInts(dout, len(rows))
	for i, row := range rows {
		want := int32(0)
		best := -1
		for j, v := range row {
			if v != v {
				continue
			}
			if best < 0 || v > row[best] {
				best = j
			}
		}
		if best >= 0 {
			want = int32(best)
		}
		if got[i] != want {
			t.Errorf("row %d: argmax %d, want %d", i, got[i], want)
		}
	}
	t.Logf("KERNEL argmax max_rel_err=0")
}

// attnCase is a paged-attention fixture: two chunks of two owners over
// pages of 4 tokens, the first chunk continuing a sequence whose first
// positions earlier steps wrote.
type attnCase struct {
	geom               geometry
	spec               cpu.Spec
	layer              int
	rows               int
	rowChunk, rowPos   []int32
	chunks             []int64
	tables             []int32
	tags               []devTag
	qkv                []float32
	kv                 []float32 // pages × PageFloats, prefilled slots set
	cos, sin           []float32
	chunkStart, chunkN []int
}

func newAttnCase(r *rand.Rand, headDim int) *attnCase {
	const heads, kvHeads, pt, pages, layers = 4, 2, 4, 8, 2
	c := &attnCase{layer: 1}
	c.spec = cpu.Spec{Hidden: 8, Intermediate: 8, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: headDim,
		Vocab: 8, MaxPositions: 64, RMSNormEps: 1e-5}
	c.spec.InvFreq = make([]float64, headDim/2)
	for i := range c.spec.InvFreq {
		c.spec.InvFreq[i] = 1 / math.Pow(10000, float64(2*i)/float64(headDim))
	}
	kvDim := kvHeads * headDim
	c.geom = geometry{Hidden: 8, Inter: 8, Layers: layers, Heads: heads, KVHeads: kvHeads, HeadDim: int64(headDim),
		QKVDim: int64(heads*headDim + 2*kvDim), Vocab: 8, MaxPos: 64, PageTokens: pt,
		PageFloats: int64(c.spec.PageBytes(pt) / 4), Pages: pages, Eps: 1e-5,
		Scale: float64(float32(1 / math.Sqrt(float64(headDim))))}
	c.cos, c.sin = ropeTables(&c.spec)
	// Chunk 0: owner A, positions 5..10, table [2 5 1]; positions 0..4 were
	// written earlier (page 2 full: a sealed prefix page chunk 0 shares,
	// presenting tag hash 333 and domain hash 444; page 5 slot 0). Chunk 1:
	// owner B, positions 0..2, table [4]. After the descriptors, chunk 0's
	// expected tags: page 2's, and 555/666 for page 5 should a case
	// declare it shared too.
	c.chunkStart, c.chunkN = []int{5, 0}, []int{6, 3}
	c.tables = []int32{2, 5, 1, 4}
	c.chunks = []int64{5, 0, 3, 111, 3, 1, 2 * chunkWords, 0, 3, 1, 222, 1, 0, 2 * chunkWords, 333, 444, 555, 666}
	c.tags = make([]devTag, pages)
	c.tags[2] = devTag{Hash: 333, Epoch: 444, Written: 4, State: tagSealed}
	c.tags[5] = devTag{Hash: 111, Epoch: 3, Written: 1, State: tagOwned}
	c.tags[1] = devTag{Hash: 111, Epoch: 3, State: tagOwned}
	c.tags[4] = devTag{Hash: 222, Epoch: 1, State: tagOwned}
	for ci := range 2 {
		for i := range c.chunkN[ci] {
			c.rowChunk = append(c.rowChunk, int32(ci))
			c.rowPos = append(c.rowPos, int32(c.chunkStart[ci]+i))
		}
	}
	c.rows = len(c.rowPos)
	c.qkv = randFloats(r, c.rows*int(c.geom.QKVDim))
	c.kv = make([]float32, pages*int(c.geom.PageFloats))
	for i := range c.kv {
		c.kv[i] = math.Float32frombits(0x7FC0DEAD)
	}
	for pos := range 5 {
		k, v := c.slot(pos, 0)
		copy(k, randFloats(r, kvDim))
		copy(v, randFloats(r, kvDim))
	}
	return c
}

// slot returns the K and V of chunk ci's position pos in c.kv.
func (c *attnCase) slot(pos, ci int) (k, v []float32) {
	pt, kvDim := int(c.geom.PageTokens), int(c.geom.KVHeads*c.geom.HeadDim)
	page := int(c.tables[c.chunks[ci*chunkWords+chTable]+int64(pos/pt)])
	base := page * int(c.geom.PageFloats)
	kOff := base + ((c.layer*2+0)*pt+pos%pt)*kvDim
	vOff := base + ((c.layer*2+1)*pt+pos%pt)*kvDim
	return c.kv[kOff : kOff+kvDim], c.kv[vOff : vOff+kvDim]
}

// rotate applies rotate-half RoPE at pos to x in float64.
func (c *attnCase) rotate(x []float32, pos int) []float64 {
	half := len(x) / 2
	out := make([]float64, len(x))
	for i := range half {
		cs, sn := float64(c.cos[pos*half+i]), float64(c.sin[pos*half+i])
		out[i] = float64(x[i])*cs - float64(x[i+half])*sn
		out[i+half] = float64(x[i+half])*cs + float64(x[i])*sn
	}
	return out
}

// run uploads the fixture, runs rope_kv and attention, and returns the
// attention output, the pages and the error record.
func (c *attnCase) run(td *testDev) (out, kv []float32, errRec []int32) {
	hd := int(c.geom.HeadDim)
	dqkv := td.upload(sliceBytes(c.qkv))
	dkv := td.upload(sliceBytes(c.kv))
	a := stepArgs{
		rowChunk: td.upload(sliceBytes(c.rowChunk)), rowPos: td.upload(sliceBytes(c.rowPos)),
		chunks: td.upload(sliceBytes(c.chunks)), tables: td.upload(sliceBytes(c.tables)),
		tags: td.upload(sliceBytes(c.tags)), errRec: td.upload(make([]byte, errWords*4)),
		geom: td.upload(bytesOf(&c.geom)),
	}
	dcos, dsin := td.upload(sliceBytes(c.cos)), td.upload(sliceBytes(c.sin))
	dout := td.alloc(c.rows * int(c.geom.Heads) * hd * 4)
	td.do(func() error {
		if err := td.k.ropeKVRows(td.s, a, dqkv, dkv, dcos, dsin, c.rows, c.layer); err != nil {
			return err
		}
		return td.k.attend(td.s, a, dout, dqkv, dkv, c.rows, int(c.geom.Heads), c.layer)
	})
	return td.readFloats(dout, c.rows*int(c.geom.Heads)*hd), td.readFloats(dkv, len(c.kv)), td.readInts(a.errRec, errWords)
}

func TestRopeKVAttention(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(9, 10))
	worst := 0.0
	// 16: vector loads; 18: scalar path; 160: two output dimensions per
	// thread.
	for _, hd := range []int{16, 18, 160} {
		c := newAttnCase(r, hd)
		out, kv, errRec := c.run(td)
		if errRec[0] != 0 {
			t.Fatalf("head_dim %d: device owner check refused %d accesses (reason %d, page %d)", hd, errRec[0], errRec[1], errRec[2])
		}
		heads, kvHeads := int(c.geom.Heads), int(c.geom.KVHeads)
		qkvDim, kvDim := int(c.geom.QKVDim), kvHeads*hd
		// Reference K/V per chunk and position, and the expected pages.
		want := append([]float32(nil), c.kv...)
		c.kv = want
		keys := map[[2]int][]float64{}
		vals := map[[2]int][]float64{}
		for ci := range 2 {
			for pos := range c.chunkStart[ci] {
				k, v := c.slot(pos, ci)
				keys[[2]int{ci, pos}] = f64(k)
				vals[[2]int{ci, pos}] = f64(v)
			}
		}
		for row := range c.rows {
			ci, pos := int(c.rowChunk[row]), int(c.rowPos[row])
			kr := make([]float64, kvDim)
			for g := range kvHeads {
				off := heads*hd + g*hd
				copy(kr[g*hd:], c.rotate(c.qkv[row*qkvDim+off:row*qkvDim+off+hd], pos))
			}
			v := c.qkv[row*qkvDim+heads*hd+kvDim : row*qkvDim+heads*hd+2*kvDim]
			keys[[2]int{ci, pos}] = kr
			vals[[2]int{ci, pos}] = f64(v)
			pk, pv := c.slot(pos, ci)
			for i := range kvDim {
				pk[i] = float32(kr[i])
				pv[i] = v[i]
			}
		}
		for i := range kv {
			w, g := want[i], kv[i]
			if isPoison(w) != isPoison(g) || (!isPoison(w) && math.Abs(float64(w-g)) > 1e-5*(1+math.Abs(float64(w)))) {
				t.Fatalf("head_dim %d: page word %d = %g, want %g", hd, i, g, w)
			}
		}
		scale := c.geom.Scale
		for row := range c.rows {
			ci, pos := int(c.rowChunk[row]), int(c.rowPos[row])
			for h := range heads {
				g := h / (heads / kvHeads)
				q := c.rotate(c.qkv[row*qkvDim+h*hd:row*qkvDim+(h+1)*hd], pos)
				s := make([]float64, pos+1)
				mx := math.Inf(-1)
				for j := range s {
					k := keys[[2]int{ci, j}][g*hd : (g+1)*hd]
					for d := range hd {
						s[j] += q[d] * k[d]
					}
					s[j] *= scale
					mx = math.Max(mx, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				for d := range hd {
					var o, mag float64
					for j := range s {
						v := vals[[2]int{ci, j}][g*hd+d]
						o += s[j] / sum * v
						mag += s[j] / sum * math.Abs(v)
					}
					got := float64(out[(row*heads+h)*hd+d])
					rel := math.Abs(got-o) / (mag + 1e-6)
					if !(rel <= 1e-4) {
						t.Fatalf("head_dim %d: row %d head %d dim %d = %g, want %g", hd, row, h, d, got, o)
					}
					worst = max(worst, rel)
				}
			}
		}
	}
	t.Logf("KERNEL rope_kv+attention max_rel_err=%.3g", worst)
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestDeviceOwnerCheck corrupts the fixture's tags: the kernels must flag
// the first refusal and leave the refused pages unwritten — owned pages
// (foreign, stale, free, unwritten, outside the pool) and sealed prefix
// pages (another domain, another chain hash, not sealed, sealed but read
// or written as owned).
func TestDeviceOwnerCheck(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		name   string
		mutate func(c *attnCase)
		reason int32
		page   int32
	}{
		{"foreign page", func(c *attnCase) { c.tags[5].Hash = 999 }, reasonForeign, 5},
		{"stale epoch", func(c *attnCase) { c.tags[1].Epoch = 2 }, reasonEpoch, 1},
		{"free page", func(c *attnCase) { c.tags[4].State = tagUnreadable }, reasonUnreadable, 4},
		{"unwritten slot", func(c *attnCase) { c.tags[5].Written = 0 }, reasonUnwritten, 5},
		{"page outside the pool", func(c *attnCase) { c.tables[3] = 8 }, reasonNoPage, 8},
		// Sealed prefix pages: page 2 is chunk 0's shared page.
		{"sealed page of another domain", func(c *attnCase) { c.tags[2].Epoch ^= 1 }, reasonDomain, 2},
		{"sealed page with another chain hash", func(c *attnCase) { c.tags[2].Hash ^= 1 }, reasonTag, 2},
		{"shared place holds an owned page", func(c *attnCase) {
			c.tags[2] = devTag{Hash: 111, Epoch: 3, Written: 4, State: tagOwned}
		}, reasonNotSealed, 2},
		{"sealed page read as owned", func(c *attnCase) {
			c.tags[5] = devTag{Hash: 555, Epoch: 666, Written: 4, State: tagSealed}
		}, reasonSealed, 5},
		{"write into a shared page", func(c *attnCase) {
			c.chunks[chShared] = 2
			c.tags[5] = devTag{Hash: 555, Epoch: 666, Written: 4, State: tagSealed}
		}, reasonSealed, 5},
	}
	for _, tc := range cases {
		c := newAttnCase(r, 16)
		tc.mutate(c)
		before := append([]float32(nil), c.kv...)
		_, kv, errRec := c.run(td)
		if errRec[0] == 0 || errRec[1] != tc.reason || errRec[2] != tc.page {
			t.Errorf("%s: error record %v, want reason %d on page %d", tc.name, errRec, tc.reason, tc.page)
		}
		if tc.reason == reasonUnwritten {
			continue // the page is the sequence's: writing its next slots is allowed
		}
		// A page refused to the writer keeps its bytes.
		if tc.page < int32(c.geom.Pages) {
			pf := int(c.geom.PageFloats)
			for i := int(tc.page) * pf; i < int(tc.page+1)*pf; i++ {
				if math.Float32bits(kv[i]) != math.Float32bits(before[i]) {
					t.Fatalf("%s: refused page %d was written (word %d)", tc.name, tc.page, i)
				}
			}
		}
	}
}

func TestTagsAndFill(t *testing.T) {
	td := newTestDev(t)
	tags := make([]devTag, 6)
	dtags := td.upload(sliceBytes(tags))
	upd := []devTag{{Hash: 1, Epoch: 2, Written: 3, State: 1}, {Hash: 7, Epoch: 8, Written: 9}}
	ids := []int32{4, 1}
	td.do(func() error {
		return td.k.setTags(td.s, dtags, td.upload(sliceBytes(ids)), td.upload(sliceBytes(upd)), len(ids))
	})
	got := td.read(dtags, len(tags)*24)
	tags[4], tags[1] = upd[0], upd[1]
	if string(got) != string(sliceBytes(tags)) {
		t.Fatalf("tags after update differ from the expected %v", tags)
	}
	const pageFloats = 1000
	dkv := td.alloc(5 * pageFloats * 4)
	fill := []int32{3, 0}
	td.do(func() error { return td.k.fill(td.s, dkv, td.upload(sliceBytes(fill)), len(fill), pageFloats, 0) })
	kv := td.readFloats(dkv, 5*pageFloats)
	for p := range 5 {
		for i := range pageFloats {
			v := kv[p*pageFloats+i]
			if filled := p == 3 || p == 0; filled != (v == 0) || !filled && !isPoison(v) {
				t.Fatalf("page %d word %d = %g after filling pages %v", p, i, v, fill)
			}
		}
	}
}
