//go:build cuda

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/worker/engine"
)

// LoRA on the device. Every chunk under an adapter is a contiguous run of
// the step's rows, so a projection's update is two launches of the linear
// kernel per run of rows under one adapter — the shrink t = x·Aᵀ (Rank
// outputs per row) and the expand y += t·(Scale·B)ᵀ — and a row's result
// depends only on its own input and adapter: the linear kernel reduces
// every output in one canonical order whatever the rows of the launch
// (batch invariance). The fused q/k/v projection takes one stacked A
// ([rq+rk+rv][hidden]) and a block-diagonal B ([QKVDim][rq+rk+rv], zero
// outside a module's block: its products add exactly nothing). The fused
// gate/up kernel applies SiLU before an update could be added, so a step
// with a gate or up update computes the two projections unfused for every
// row, adds the updates, and applies swiglu, which rounds as the fused
// epilogue does: the base rows of such a step get the fused step's bits.

// Adapter is a LoRA adapter prepared for the cuda backend: its matrices
// in one device allocation, B pre-multiplied by the adapter's scale.
type Adapter struct {
	hash  string
	bytes int64
	// layers[l][m] is layer l's update of projection group m (loraQKV,
	// loraO, loraGate, loraUp, loraDown); rank 0 where there is none.
	layers [][numLoRAGroups]loraMats
	// maxRank is the largest rank of any group: the shrink scratch's
	// width.
	maxRank int
	gateUp  bool // some layer updates gate or up
	owner   *Backend
}

// The projection groups of a layer, as the cuda backend computes them.
const (
	loraQKV = iota
	loraO
	loraGate
	loraUp
	loraDown
	numLoRAGroups
)

// loraMats are one group's A (rank rows of in floats) and scaled B (out
// rows of rank floats) on the device.
type loraMats struct {
	a, b cu.DevicePtr
	rank int
}

var (
	_ engine.Adapter        = (*Adapter)(nil)
	_ engine.AdapterBackend = (*Backend)(nil)
)

// Hash implements engine.Adapter.
func (a *Adapter) Hash() string { return a.hash }

// Bytes implements engine.Adapter: the device memory the matrices take.
func (a *Adapter) Bytes() int64 { return a.bytes }

// PrepareAdapter implements engine.AdapterBackend: it lays the adapter's
// matrices out per projection group, scales B, uploads them in one
// allocation (freed when the Adapter is no longer referenced) and grows
// the step's LoRA scratch to fit it.
func (b *Backend) PrepareAdapter(a *lora.Adapter) (engine.Adapter, error) {
	s := &b.spec
	if len(a.Layers) != s.Layers {
		return nil, fmt.Errorf("cuda: adapter %.12s has %d layers, the model %d", a.Hash, len(a.Layers), s.Layers)
	}
	qDim, kv, qkvDim := s.Heads*s.HeadDim, s.KVDim(), int(b.geom.QKVDim)
	r := a.Config.Rank
	scale := float32(a.Config.Scale)
	type hostGroup struct {
		a, b []float32
		rank int
	}
	host := make([][numLoRAGroups]hostGroup, len(a.Layers))
	ad := &Adapter{hash: a.Hash, layers: make([][numLoRAGroups]loraMats, len(a.Layers)), owner: b}
	var total int
	for l, mods := range a.Layers {
		// q, k and v stack into one group: A's blocks one after the other,
		// B block-diagonal over the fused output's q, k and v columns.
		var stacked []*lora.Pair
		var offs []int
		for _, m := range []struct {
			mod      lora.Module
			off, out int
		}{{lora.Q, 0, qDim}, {lora.K, qDim, kv}, {lora.V, qDim + kv, kv}} {
			if p := mods[m.mod]; p != nil {
				if len(p.A) != r*s.Hidden || len(p.B) != m.out*r {
					return nil, fmt.Errorf("cuda: adapter %.12s layer %d %s: A %d, B %d elements", a.Hash, l, m.mod, len(p.A), len(p.B))
				}
				stacked, offs = append(stacked, p), append(offs, m.off)
			}
		}
		if n := len(stacked); n > 0 {
			g := hostGroup{rank: n * r, b: make([]float32, qkvDim*n*r)}
			for i, p := range stacked {
				g.a = append(g.a, p.A...)
				out := len(p.B) / r
				for row := range out {
					for j := range r {
						g.b[(offs[i]+row)*n*r+i*r+j] = scale * p.B[row*r+j]
					}
				}
			}
			host[l][loraQKV] = g
		}
		for _, m := range []struct {
			mod     lora.Module
			group   int
			out, in int
		}{{lora.O, loraO, s.Hidden, qDim}, {lora.Gate, loraGate, s.Intermediate, s.Hidden},
			{lora.Up, loraUp, s.Intermediate, s.Hidden}, {lora.Down, loraDown, s.Hidden, s.Intermediate}} {
			p := mods[m.mod]
			if p == nil {
				continue
			}
			if len(p.A) != r*m.in || len(p.B) != m.out*r {
				return nil, fmt.Errorf("cuda: adapter %.12s layer %d %s: A %d, B %d elements", a.Hash, l, m.mod, len(p.A), len(p.B))
			}
			g := hostGroup{a: p.A, rank: r, b: make([]float32, len(p.B))}
			for i, x := range p.B {
				g.b[i] = scale * x
			}
			host[l][m.group] = g
			ad.gateUp = ad.gateUp || m.group == loraGate || m.group == loraUp
		}
		for _, g := range host[l] {
			total += len(g.a) + len(g.b)
			ad.maxRank = max(ad.maxRank, g.rank)
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("cuda: adapter %.12s updates no projection", a.Hash)
	}
	ad.bytes = int64(total) * 4
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("cuda: backend closed")
	}
	var buf cu.DevicePtr
	err := b.dev.do(func() error {
		var err error
		if buf, err = cu.MemAlloc(ad.bytes); err != nil {
			return fmt.Errorf("cuda: allocate %d bytes for adapter %.12s: %w", ad.bytes, a.Hash, err)
		}
		at := buf
		put := func(f []float32) (cu.DevicePtr, error) {
			p := at
			if len(f) == 0 {
				return p, nil
			}
			at += cu.DevicePtr(len(f) * 4)
			return p, cu.MemcpyHtoD(p, unsafe.Pointer(&f[0]), int64(len(f)*4))
		}
		for l := range host {
			for m, g := range host[l] {
				if g.rank == 0 {
					continue
				}
				mats := loraMats{rank: g.rank}
				if mats.a, err = put(g.a); err == nil {
					mats.b, err = put(g.b)
				}
				if err != nil {
					cu.MemFree(buf)
					return fmt.Errorf("cuda: upload adapter %.12s: %w", a.Hash, err)
				}
				ad.layers[l][m] = mats
			}
		}
		return b.growLoRAScratch(ad)
	})
	if err != nil {
		return nil, err
	}
	runtime.AddCleanup(ad, func(buf cu.DevicePtr) { b.freeDevice(buf) }, buf)
	return ad, nil
}

// growLoRAScratch makes the step's LoRA scratch big enough for ad: the
// shrink results (MaxBatchTokens rows of ad.maxRank) and, for gate/up
// updates, the unfused gate and up outputs. Inside do, with b.mu held.
func (b *Backend) growLoRAScratch(ad *Adapter) error {
	rows := b.opt.MaxBatchTokens
	if ad.maxRank > b.loraRank {
		p, err := cu.MemAlloc(int64(rows * ad.maxRank * 4))
		if err != nil {
			return fmt.Errorf("cuda: allocate LoRA scratch: %w", err)
		}
		if b.loraT != 0 {
			cu.MemFree(b.loraT)
		}
		b.loraT, b.loraRank = p, ad.maxRank
	}
	if ad.gateUp && b.gateBuf == 0 {
		n := int64(rows * b.spec.Intermediate * 4)
		g, err := cu.MemAlloc(n)
		if err != nil {
			return fmt.Errorf("cuda: allocate LoRA scratch: %w", err)
		}
		u, err := cu.MemAlloc(n)
		if err != nil {
			cu.MemFree(g)
			return fmt.Errorf("cuda: allocate LoRA scratch: %w", err)
		}
		b.gateBuf, b.upBuf = g, u
	}
	return nil
}

// freeDevice frees an adapter's allocation once nothing references it,
// unless the backend (and its context) is gone.
func (b *Backend) freeDevice(p cu.DevicePtr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.dev.do(func() error { return cu.MemFree(p) })
	}
}

// loraSpan is a run of the step's rows under one adapter.
type loraSpan struct {
	ad        *Adapter
	row, rows int
}

// planLoRA records the step's runs of rows under an adapter. It fails for
// an adapter another backend prepared. Hold b.mu.
func (b *Backend) planLoRA(batch []engine.Chunk) error {
	p := &b.plan
	p.lora, p.loraGateUp = p.lora[:0], false
	row := 0
	for i, c := range batch {
		if c.Adapter != nil {
			ad, ok := c.Adapter.(*Adapter)
			if !ok || ad.owner != b {
				return fmt.Errorf("cuda: chunk %d carries an adapter this backend did not prepare", i)
			}
			if n := len(p.lora); n > 0 && p.lora[n-1].ad == ad && p.lora[n-1].row+p.lora[n-1].rows == row {
				p.lora[n-1].rows += len(c.Tokens)
			} else {
				p.lora = append(p.lora, loraSpan{ad: ad, row: row, rows: len(c.Tokens)})
			}
			p.loraGateUp = p.loraGateUp || ad.gateUp
		}
		row += len(c.Tokens)
	}
	return nil
}

// loraAdd adds group g's update of layer l to y (n floats per row) for
// the step's rows under an adapter, from x (in floats per row).
func (b *Backend) loraAdd(s cu.Stream, l, g int, y, x cu.DevicePtr, n, in int) error {
	for _, sp := range b.plan.lora {
		m := sp.ad.layers[l][g]
		if m.rank == 0 {
			continue
		}
		xs := x + cu.DevicePtr(sp.row*in*4)
		ys := y + cu.DevicePtr(sp.row*n*4)
		if err := b.k.linearOut(s, wF32, b.loraT, xs, m.a, 0, sp.rows, m.rank, in, modeStore); err != nil {
			return err
		}
		if err := b.k.linearOut(s, wF32, ys, b.loraT, m.b, 0, sp.rows, n, m.rank, modeAdd); err != nil {
			return err
		}
	}
	return nil
}

// mlpIn computes the MLP's input activations silu(h·Gateᵀ) ⊙ (h·Upᵀ) of
// layer l into b.mlp: fused, or, when a row of the step has a gate or up
// update, unfused with the updates added before swiglu.
func (b *Backend) mlpIn(s cu.Stream, l, rows int) error {
	k, w, hid, inter := b.k, &b.w.layers[l], b.spec.Hidden, b.spec.Intermediate
	if !b.plan.loraGateUp {
		return k.linearOut(s, w.gate.t, b.mlp, b.h, w.gate.p, w.up.p, rows, inter, hid, modeSwiGLU)
	}
	if err := k.linearOut(s, w.gate.t, b.gateBuf, b.h, w.gate.p, 0, rows, inter, hid, modeStore); err != nil {
		return err
	}
	if err := k.linearOut(s, w.up.t, b.upBuf, b.h, w.up.p, 0, rows, inter, hid, modeStore); err != nil {
		return err
	}
	if err := b.loraAdd(s, l, loraGate, b.gateBuf, b.h, inter, hid); err != nil {
		return err
	}
	if err := b.loraAdd(s, l, loraUp, b.upBuf, b.h, inter, hid); err != nil {
		return err
	}
	return k.swiglu(s, b.mlp, b.gateBuf, b.upBuf, rows*inter)
}
