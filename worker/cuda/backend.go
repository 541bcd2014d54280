//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// Options configure a Backend.
type Options struct {
	// Device is the GPU ordinal among those CUDA_VISIBLE_DEVICES exposes.
	Device int
	// MaxBatchTokens bounds the tokens of one step.
	MaxBatchTokens int
	// MaxLogitRows is how many chunks' logits one pass of the LM head
	// computes (0 means min(MaxBatchTokens, 64)); a step that wants more
	// runs several passes. The engine's MaxBatch is the natural value.
	MaxLogitRows int
	// PageTokens is the KV page size.
	PageTokens int
	// Quantize holds the projections and the LM head as q8, as the cpu
	// backend's Options.Quantize does (the same quantized weights; the
	// activations stay float32 here).
	Quantize bool
	Logger   *slog.Logger
}

// Backend implements engine.Backend on one GPU. Build it with FromModel,
// then give it its KV pool with NewPool before the first step.
type Backend struct {
	spec cpu.Spec
	opt  Options
	log  *slog.Logger
	dev  *device
	k    *kernels
	w    *deviceWeights
	geom geometry

	compute cu.Stream
	// Device scratch, sized for MaxBatchTokens rows (logits and next for
	// MaxLogitRows).
	x, h, qkv, att, mlp, logits, next cu.DevicePtr
	// LoRA scratch (lora.go), allocated by the first adapter that needs
	// it: the shrink results (loraRank floats per row) and the unfused
	// gate and up outputs.
	loraT, gateBuf, upBuf             cu.DevicePtr
	loraRank                          int
	ropeCos, ropeSin, geomBuf, errRec cu.DevicePtr
	allocs                            []cu.DevicePtr
	// outHost (pinned) receives the error record, then logits or tokens.
	outHost []byte
	// Per-step metadata: pinned host bytes and their device copy.
	metaHost []byte
	metaDev  cu.DevicePtr
	plan     stepPlan

	// mu serialises steps, pool setup and Close; pagesMu is held shared by
	// page copies and exclusively by NewPool and Close.
	mu      sync.Mutex
	pagesMu sync.RWMutex
	closed  bool
	kvPages
}

var _ engine.Backend = (*Backend)(nil)

// FromModel uploads m's weights to the GPU and allocates the step scratch.
// The result has no KV pool yet: measure the free device memory (so the
// pool is sized with the weights resident), then call NewPool.
func FromModel(m *model.Model, opt Options) (*Backend, error) {
	spec := cpu.SpecFor(&m.Config)
	if opt.MaxBatchTokens <= 0 || opt.PageTokens <= 0 {
		return nil, fmt.Errorf("cuda: MaxBatchTokens and PageTokens must be > 0")
	}
	if opt.MaxLogitRows <= 0 {
		opt.MaxLogitRows = 64
	}
	opt.MaxLogitRows = min(opt.MaxLogitRows, opt.MaxBatchTokens)
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if spec.HeadDim%2 != 0 || spec.HeadDim > maxHeadDim || spec.KVHeads <= 0 || spec.Heads%spec.KVHeads != 0 {
		return nil, fmt.Errorf("cuda: unsupported attention shape: head_dim %d (even, at most %d), %d heads, %d KV heads",
			spec.HeadDim, maxHeadDim, spec.Heads, spec.KVHeads)
	}
	dev, err := openDevice(opt.Device)
	if err != nil {
		return nil, err
	}
	b := &Backend{spec: spec, opt: opt, log: opt.Logger, dev: dev}
	b.geom = geometry{
		Hidden: int64(spec.Hidden), Inter: int64(spec.Intermediate), Layers: int64(spec.Layers),
		Heads: int64(spec.Heads), KVHeads: int64(spec.KVHeads), HeadDim: int64(spec.HeadDim),
		QKVDim: int64(spec.Heads*spec.HeadDim + 2*spec.KVDim()), Vocab: int64(spec.Vocab),
		MaxPos: int64(spec.MaxPositions), PageTokens: int64(opt.PageTokens),
		PageFloats: int64(spec.PageBytes(opt.PageTokens) / 4),
		Eps:        float64(spec.RMSNormEps), Scale: float64(float32(1 / math.Sqrt(float64(spec.HeadDim)))),
	}
	if err := dev.do(func() error { return b.setup(m) }); err != nil {
		b.Close()
		return nil, err
	}
	b.log.Info("cuda backend ready", "device", dev.name, "capability", fmt.Sprintf("%d.%d", dev.major, dev.minor),
		"embedding", b.w.embed.t.suffix(), "lm_head", b.w.lmHead.t.suffix(), "weight_bytes", b.w.bytes)
	return b, nil
}

// setup loads the kernels, uploads the weights and allocates scratch.
// Inside do.
func (b *Backend) setup(m *model.Model) error {
	var err error
	if b.k, err = loadKernels(b.dev.ptxArch()); err != nil {
		return err
	}
	// Streams are blocking (they wait for the legacy default stream), so
	// the synchronous uploads below are ordered before every kernel.
	if b.compute, err = cu.MakeStream(cu.DefaultStream); err != nil {
		return fmt.Errorf("cuda: create stream: %w", err)
	}
	if b.w, err = uploadWeights(m, matrixType(m.Weights()), b.opt.Quantize); err != nil {
		return err
	}
	s, t, l := &b.spec, b.opt.MaxBatchTokens, b.opt.MaxLogitRows
	qDim := s.Heads * s.HeadDim
	sizes := []struct {
		p     *cu.DevicePtr
		bytes int
	}{
		{&b.x, t * s.Hidden * 4}, {&b.h, t * s.Hidden * 4}, {&b.qkv, t * int(b.geom.QKVDim) * 4},
		{&b.att, t * qDim * 4}, {&b.mlp, t * s.Intermediate * 4},
		{&b.logits, l * s.Vocab * 4}, {&b.next, l * 4},
		{&b.ropeCos, s.MaxPositions * s.HeadDim / 2 * 4}, {&b.ropeSin, s.MaxPositions * s.HeadDim / 2 * 4},
		{&b.geomBuf, int(unsafe.Sizeof(geometry{}))}, {&b.errRec, errWords * 4},
	}
	for _, a := range sizes {
		p, err := cu.MemAlloc(int64(a.bytes))
		if err != nil {
			return fmt.Errorf("cuda: allocate %d bytes of scratch: %w", a.bytes, err)
		}
		*a.p = p
		b.allocs = append(b.allocs, p)
	}
	if b.outHost, err = allocPinned(errWords*4 + l*s.Vocab*4); err != nil {
		return err
	}
	cos, sin := ropeTables(s)
	if err := cu.MemcpyHtoD(b.ropeCos, unsafe.Pointer(&cos[0]), int64(len(cos)*4)); err != nil {
		return fmt.Errorf("cuda: upload RoPE table: %w", err)
	}
	if err := cu.MemcpyHtoD(b.ropeSin, unsafe.Pointer(&sin[0]), int64(len(sin)*4)); err != nil {
		return fmt.Errorf("cuda: upload RoPE table: %w", err)
	}
	if err := b.uploadGeometry(); err != nil {
		return err
	}
	// A copy from pageable memory may return before its DMA is done: wait
	// for all of them before the free memory is measured or a step runs.
	return cu.Synchronize()
}

// uploadGeometry copies b.geom to the device. Inside do.
func (b *Backend) uploadGeometry() error {
	g := bytesOf(&b.geom)
	if err := cu.MemcpyHtoD(b.geomBuf, unsafe.Pointer(&g[0]), int64(len(g))); err != nil {
		return fmt.Errorf("cuda: upload geometry: %w", err)
	}
	return nil
}

// ropeTables tabulates cos and sin of every position and frequency as the
// cpu backend does: in float64, rounded once.
func ropeTables(s *cpu.Spec) (cos, sin []float32) {
	half := s.HeadDim / 2
	cos = make([]float32, s.MaxPositions*half)
	sin = make([]float32, s.MaxPositions*half)
	for p := range s.MaxPositions {
		for i := range half {
			a := float64(p) * s.InvFreq[i]
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

// VocabSize implements engine.Backend.
func (b *Backend) VocabSize() int { return b.spec.Vocab }

// MaxBatchTokens implements engine.Backend.
func (b *Backend) MaxBatchTokens() int { return b.opt.MaxBatchTokens }

// DeviceName is the GPU's name, for logs and reports.
func (b *Backend) DeviceName() string { return b.dev.name }

// DecodeWeightBytes is how many weight bytes one decode token reads (every
// layer matrix and the LM head, in their device types): the numerator of the
// decode roofline.
func (b *Backend) DecodeWeightBytes() int64 { return b.w.decodeBytes }

// Forward implements engine.Backend.
func (b *Backend) Forward(ctx context.Context, batch []engine.Chunk) error {
	return b.step(ctx, batch, nil)
}

// Greedy runs a step like Forward, but instead of filling the Logits of a
// chunk that has them (non-nil marks a chunk whose output is wanted; it
// may be empty, since Greedy does not write it) it stores the chunk's
// greedy token — the argmax of its last position's logits (one row,
// whatever the length of Logits), NaNs skipped and the lowest index
// winning ties, the engine's rule — in next[i] for batch[i], computed on
// the device, so only one int32 per chunk crosses to the host. Logits buffers are left untouched;
// next[i] of a chunk without Logits is not written.
func (b *Backend) Greedy(ctx context.Context, batch []engine.Chunk, next []int32) error {
	if len(next) < len(batch) {
		return fmt.Errorf("cuda: %d next-token slots for %d chunks", len(next), len(batch))
	}
	return b.step(ctx, batch, next)
}

// check validates a batch on the host, as the cpu backend does.
func (b *Backend) check(batch []engine.Chunk, greedy bool) error {
	s := &b.spec
	rows := 0
	for i, c := range batch {
		if len(c.Tokens) == 0 || c.Start < 0 {
			return fmt.Errorf("cuda: chunk %d is empty or starts before 0", i)
		}
		end := c.Start + len(c.Tokens)
		if end > s.MaxPositions {
			return fmt.Errorf("cuda: chunk %d reaches position %d, beyond the model's %d", i, end, s.MaxPositions)
		}
		if need := ceilDiv(end, b.opt.PageTokens); len(c.Pages) < need {
			return fmt.Errorf("cuda: chunk %d has %d pages, needs %d", i, len(c.Pages), need)
		}
		for _, t := range c.Tokens {
			if t < 0 || int(t) >= s.Vocab {
				return fmt.Errorf("cuda: token %d outside the vocabulary", t)
			}
		}
		if n := len(c.Hidden) / s.Hidden; c.Hidden != nil && (len(c.Hidden)%s.Hidden != 0 || n < 1 || n > len(c.Tokens)) {
			return fmt.Errorf("cuda: hidden buffer has %d entries, want 1 to %d rows of %d", len(c.Hidden), len(c.Tokens), s.Hidden)
		}
		if n := len(c.Logits) / s.Vocab; !greedy && c.Logits != nil && (len(c.Logits)%s.Vocab != 0 || n < 1 || n > len(c.Tokens)) {
			return fmt.Errorf("cuda: logits buffer has %d entries, want 1 to %d rows of %d", len(c.Logits), len(c.Tokens), s.Vocab)
		}
		rows += len(c.Tokens)
	}
	if rows > b.opt.MaxBatchTokens {
		return fmt.Errorf("cuda: batch of %d tokens exceeds %d", rows, b.opt.MaxBatchTokens)
	}
	return nil
}

// step is Forward (next == nil) or Greedy.
func (b *Backend) step(ctx context.Context, batch []engine.Chunk, next []int32) error {
	if err := b.check(batch, next != nil); err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("cuda: backend closed")
	}
	if b.pool == nil {
		return fmt.Errorf("cuda: no KV pool (call NewPool first)")
	}
	if err := b.planLoRA(batch); err != nil {
		return err
	}
	b.buildPlan(batch, next != nil)
	return b.dev.do(func() error { return b.run(ctx, batch, next) })
}

// run enqueues the step on the compute stream, waits for it and delivers
// its output. Inside do. When it returns, no work of the step is left on
// the device, so the caller may release or retag the pages.
func (b *Backend) run(ctx context.Context, batch []engine.Chunk, next []int32) error {
	s := b.compute
	p := &b.plan
	off, err := b.upload()
	if err != nil {
		return err
	}
	meta := func(o int) cu.DevicePtr { return b.metaDev + cu.DevicePtr(o) }
	if err := cu.MemsetD32Async(b.errRec, 0, errWords, s); err != nil {
		return fmt.Errorf("cuda: clear error record: %w", err)
	}
	if len(p.fills) > 0 {
		if err := b.k.fill(s, b.kv, meta(off.fills), len(p.fills), int(b.geom.PageFloats), b.fillWord); err != nil {
			return b.abandon(err)
		}
	}
	if len(p.upd) > 0 {
		if err := b.k.setTags(s, b.tagsDev, meta(off.updIDs), meta(off.upd), len(p.upd)); err != nil {
			return b.abandon(err)
		}
	}
	rows := len(p.tokens)
	if err := b.k.embedRows(s, b.w.embed.t, b.x, b.w.embed.p, meta(off.tokens), rows, b.spec.Hidden); err != nil {
		return b.abandon(err)
	}
	a := stepArgs{rowChunk: meta(off.rowChunk), rowPos: meta(off.rowPos), chunks: meta(off.chunks),
		tables: meta(off.tables), tags: b.tagsDev, errRec: b.errRec, geom: b.geomBuf}
	for l := range b.w.layers {
		if err := ctx.Err(); err != nil {
			return b.abandon(err)
		}
		if err := b.layer(s, a, l, rows); err != nil {
			return b.abandon(err)
		}
	}
	// The owner checks are complete once the layers are: fetch the error
	// record with the first logits pass and deliver nothing if it is set.
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&b.outHost[0]), b.errRec, errWords*4, s); err != nil {
		return b.abandon(fmt.Errorf("cuda: read error record: %w", err))
	}
	nl := len(p.logitRows)
	n := min(nl, b.opt.MaxLogitRows)
	if err := b.logitsPass(s, meta(off.logitRows), n, next != nil); err != nil {
		return b.abandon(err)
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("cuda: forward step: %w", err)
	}
	if err := b.violation(batch); err != nil {
		return err
	}
	b.deliver(batch, next, 0, n)
	for done := n; done < nl; done += n {
		n = min(nl-done, b.opt.MaxLogitRows)
		if err := b.logitsPass(s, meta(off.logitRows+4*done), n, next != nil); err != nil {
			return b.abandon(err)
		}
		if err := s.Synchronize(); err != nil {
			return fmt.Errorf("cuda: forward step: %w", err)
		}
		b.deliver(batch, next, done, n)
	}
	return b.hiddenPass(batch, meta(off.hiddenRows))
}

// HiddenSize implements engine.HiddenStates.
func (b *Backend) HiddenSize() int { return b.spec.Hidden }

var _ engine.HiddenStates = (*Backend)(nil)

// hiddenPass computes the final hidden states (the final norm of the
// rows listed at rowList, as the logits pass computes it before the LM
// head) of the chunks that want them and copies them into their Hidden,
// through pinned memory in passes of at most MaxLogitRows rows. Inside
// do, after the logits passes (it reuses b.h).
func (b *Backend) hiddenPass(batch []engine.Chunk, rowList cu.DevicePtr) error {
	p, s, hid := &b.plan, b.compute, b.spec.Hidden
	rowsPerPass := max(1, len(b.outHost)/(hid*4))
	for done := 0; done < len(p.hiddenRows); {
		n := min(len(p.hiddenRows)-done, rowsPerPass)
		if err := b.k.rmsNorm(s, b.h, b.x, b.w.norm, rowList+cu.DevicePtr(4*done), n, hid, b.geom.Eps); err != nil {
			return b.abandon(err)
		}
		if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&b.outHost[0]), b.h, int64(n*hid*4), s); err != nil {
			return b.abandon(fmt.Errorf("cuda: read hidden states: %w", err))
		}
		if err := s.Synchronize(); err != nil {
			return fmt.Errorf("cuda: forward step: %w", err)
		}
		rows := unsafe.Slice((*float32)(unsafe.Pointer(&b.outHost[0])), n*hid)
		for i := range n {
			c, at := &batch[p.hiddenChunks[done+i]], p.hiddenAt[done+i]
			copy(c.Hidden[at:at+hid], rows[i*hid:(i+1)*hid])
		}
		done += n
	}
	return nil
}

// layer enqueues one decoder layer for rows rows of b.x.
func (b *Backend) layer(s cu.Stream, a stepArgs, l, rows int) error {
	k, w, sp := b.k, &b.w.layers[l], &b.spec
	hid, qDim, inter, eps := sp.Hidden, sp.Heads*sp.HeadDim, sp.Intermediate, b.geom.Eps
	if err := k.rmsNorm(s, b.h, b.x, w.attnNorm, 0, rows, hid, eps); err != nil {
		return err
	}
	if err := k.linearOut(s, w.qkv.t, b.qkv, b.h, w.qkv.p, 0, rows, int(b.geom.QKVDim), hid, modeStore); err != nil {
		return err
	}
	if err := b.loraAdd(s, l, loraQKV, b.qkv, b.h, int(b.geom.QKVDim), hid); err != nil {
		return err
	}
	if w.prep() {
		if err := k.qkvPrepRows(s, b.qkv, w.qkvBias, w.qNorm, w.kNorm, a.geom, rows, sp.Heads+2*sp.KVHeads); err != nil {
			return err
		}
	}
	if err := k.ropeKVRows(s, a, b.qkv, b.kv, b.ropeCos, b.ropeSin, rows, l); err != nil {
		return err
	}
	if err := k.attend(s, a, b.att, b.qkv, b.kv, rows, sp.Heads, l); err != nil {
		return err
	}
	if err := k.linearOut(s, w.o.t, b.x, b.att, w.o.p, 0, rows, hid, qDim, modeAdd); err != nil {
		return err
	}
	if err := b.loraAdd(s, l, loraO, b.x, b.att, hid, qDim); err != nil {
		return err
	}
	if err := k.rmsNorm(s, b.h, b.x, w.mlpNorm, 0, rows, hid, eps); err != nil {
		return err
	}
	if err := b.mlpIn(s, l, rows); err != nil {
		return err
	}
	if err := k.linearOut(s, w.down.t, b.x, b.mlp, w.down.p, 0, rows, hid, inter, modeAdd); err != nil {
		return err
	}
	return b.loraAdd(s, l, loraDown, b.x, b.mlp, hid, inter)
}

// logitsPass enqueues the final norm and LM head for n rows listed at
// rowList (device int32 row indices), then the copy of their logits — or,
// when greedy, of their argmax — into b.outHost after the error record.
func (b *Backend) logitsPass(s cu.Stream, rowList cu.DevicePtr, n int, greedy bool) error {
	if n == 0 {
		return nil
	}
	sp := &b.spec
	if err := b.k.rmsNorm(s, b.h, b.x, b.w.norm, rowList, n, sp.Hidden, b.geom.Eps); err != nil {
		return err
	}
	if err := b.k.linearOut(s, b.w.lmHead.t, b.logits, b.h, b.w.lmHead.p, 0, n, sp.Vocab, sp.Hidden, modeStore); err != nil {
		return err
	}
	dst := unsafe.Pointer(&b.outHost[errWords*4])
	if greedy {
		if err := b.k.argmaxRows(s, b.next, b.logits, n, sp.Vocab); err != nil {
			return err
		}
		return cu.MemcpyDtoHAsync(dst, b.next, int64(n*4), s)
	}
	return cu.MemcpyDtoHAsync(dst, b.logits, int64(n*sp.Vocab*4), s)
}

// deliver copies the output of logit rows [from, from+n) to their chunks.
func (b *Backend) deliver(batch []engine.Chunk, next []int32, from, n int) {
	out := b.outHost[errWords*4:]
	for i := range n {
		ci := b.plan.logitChunks[from+i]
		if next != nil {
			next[ci] = int32(uint32(out[4*i]) | uint32(out[4*i+1])<<8 | uint32(out[4*i+2])<<16 | uint32(out[4*i+3])<<24)
			continue
		}
		v, at := b.spec.Vocab, b.plan.logitAt[from+i]
		copy(batch[ci].Logits[at:at+v], unsafe.Slice((*float32)(unsafe.Pointer(&out[i*v*4])), v))
	}
}

// abandon waits for the work already enqueued (so none of it outlives the
// step) and returns err.
func (b *Backend) abandon(err error) error {
	b.compute.Synchronize()
	return err
}

// violation turns a set device error record into an error wrapping
// kvpool.ErrOwnerViolation, nil when the record is clear.
func (b *Backend) violation(batch []engine.Chunk) error {
	rec := unsafe.Slice((*int32)(unsafe.Pointer(&b.outHost[0])), errWords)
	count, code, page, chunk := rec[0], rec[1], rec[2], rec[3]
	if count == 0 {
		return nil
	}
	v := &kvpool.ViolationError{Page: kvpool.PageID(page)}
	if chunk >= 0 && int(chunk) < len(batch) {
		// Naming the refused chunk's owner lets the engine end only its
		// sequences and run the others' chunks again.
		c := batch[chunk]
		v.Want = c.Owner
		for i, id := range c.Pages {
			if id == v.Page {
				v.Needed = min(b.opt.PageTokens, max(0, c.Start-i*b.opt.PageTokens))
				break
			}
		}
	}
	info, _ := b.pool.Page(v.Page)
	v.Got, v.State, v.Written = info.Owner, info.State, info.Written
	v.Reason = poolReason(code, info, v.Want)
	b.log.Error("device KV owner check refused page accesses; the step delivers no output",
		"refused", count, "page", page, "reason", v.Reason.String())
	return fmt.Errorf("cuda: device owner check refused %d page access(es): %w", count, v)
}

// Close frees the device memory and releases the GPU. It is safe to call
// more than once; the backend must not be used afterwards.
func (b *Backend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	b.pagesMu.Lock()
	defer b.pagesMu.Unlock()
	b.dev.do(func() error {
		if b.compute != (cu.Stream{}) {
			b.compute.Synchronize()
			b.compute.Destroy()
		}
		b.closePages()
		for _, p := range b.allocs {
			cu.MemFree(p)
		}
		for _, p := range []cu.DevicePtr{b.loraT, b.gateBuf, b.upBuf} {
			if p != 0 {
				cu.MemFree(p)
			}
		}
		if b.w != nil {
			cu.MemFree(b.w.buf)
		}
		if b.metaDev != 0 {
			cu.MemFree(b.metaDev)
		}
		freePinned(b.metaHost)
		freePinned(b.outHost)
		if b.k != nil {
			b.k.unload()
		}
		return nil
	})
	b.dev.release()
}
