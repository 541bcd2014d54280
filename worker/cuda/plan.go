//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/engine"
)

// stepPlan is one step's metadata, built on the host and uploaded in one
// copy. Its slices are reused from step to step.
type stepPlan struct {
	// Per row (token) of the batch, in batch order.
	tokens, rowChunk, rowPos []int32
	// chunkWords words per chunk (see layout.go), then the expected tags
	// of the chunks' shared pages (two words per page).
	chunks []int64
	// sharedTags collects those expected tags while the descriptors are
	// built.
	sharedTags []int64
	// The page tables, concatenated, each cut to the pages the chunk
	// touches.
	tables []int32
	// logitRows are the rows whose logits are wanted (each chunk's last
	// len(Logits)/Vocab rows, for chunks with Logits; only the last one
	// for Greedy), logitChunks their chunks and logitAt where each row
	// goes in its chunk's Logits.
	logitRows   []int32
	logitChunks []int
	logitAt     []int
	// hiddenRows are the rows whose final hidden state is wanted (each
	// chunk's last len(Hidden)/Hidden rows), hiddenChunks their chunks
	// and hiddenAt where each goes in its chunk's Hidden.
	hiddenRows   []int32
	hiddenChunks []int
	hiddenAt     []int
	// lora are the runs of rows under an adapter (planLoRA); loraGateUp
	// says whether one of them updates gate or up.
	lora       []loraSpan
	loraGateUp bool
	// Owner-tag updates and pages to fill before the step.
	updIDs []int32
	upd    []devTag
	fills  []int32
}

// metaOffsets are the byte offsets of the plan's sections in the uploaded
// metadata.
type metaOffsets struct {
	chunks, upd, tokens, rowChunk, rowPos, tables, logitRows, hiddenRows, updIDs, fills int
}

// buildPlan fills b.plan for batch (a Greedy step when greedy) and
// refreshes the owner tags of every page the batch touches from the pool.
// Hold b.mu.
func (b *Backend) buildPlan(batch []engine.Chunk, greedy bool) {
	p := &b.plan
	p.tokens, p.rowChunk, p.rowPos = p.tokens[:0], p.rowChunk[:0], p.rowPos[:0]
	p.chunks, p.tables, p.sharedTags = p.chunks[:0], p.tables[:0], p.sharedTags[:0]
	p.logitRows, p.logitChunks, p.logitAt = p.logitRows[:0], p.logitChunks[:0], p.logitAt[:0]
	p.hiddenRows, p.hiddenChunks, p.hiddenAt = p.hiddenRows[:0], p.hiddenChunks[:0], p.hiddenAt[:0]
	p.updIDs, p.upd, p.fills = p.updIDs[:0], p.upd[:0], p.fills[:0]
	pt := b.opt.PageTokens
	m := b.mirror
	m.mu.Lock()
	for ci, c := range batch {
		end := c.Start + len(c.Tokens)
		need := ceilDiv(end, pt)
		tableOff := len(p.tables)
		for _, id := range c.Pages[:need] {
			p.tables = append(p.tables, int32(id))
			// A page outside the pool is left to the device check, which
			// refuses it without touching memory.
			if info, ok := b.pool.Page(id); ok && m.observe(id, info) && b.fillOn {
				p.fills = append(p.fills, int32(id))
			}
		}
		// The device checks every page against the chunk's own owner, and
		// every shared page against the prefix tag the engine computed for
		// it from the sequence's own tokens and domain, so a page retagged
		// after the engine's host check is still refused.
		hash, epoch := m.hash(c.Owner), c.Owner.Epoch
		shared := min(len(c.Shared), need)
		tagsOff := len(batch)*chunkWords + len(p.sharedTags)
		for _, t := range c.Shared[:shared] {
			th, dh := m.sealedHashes(t)
			p.sharedTags = append(p.sharedTags, int64(th), int64(dh))
		}
		p.chunks = append(p.chunks, int64(c.Start), int64(tableOff), int64(need), int64(hash), int64(epoch),
			int64(shared), int64(tagsOff))
		for i, t := range c.Tokens {
			p.tokens = append(p.tokens, t)
			p.rowChunk = append(p.rowChunk, int32(ci))
			p.rowPos = append(p.rowPos, int32(c.Start+i))
		}
		if c.Hidden != nil {
			n := len(c.Hidden) / b.spec.Hidden
			for i := range n {
				p.hiddenRows = append(p.hiddenRows, int32(len(p.tokens)-n+i))
				p.hiddenChunks = append(p.hiddenChunks, ci)
				p.hiddenAt = append(p.hiddenAt, i*b.spec.Hidden)
			}
		}
		if c.Logits != nil {
			n := 1
			if !greedy {
				n = len(c.Logits) / b.spec.Vocab
			}
			for i := range n {
				p.logitRows = append(p.logitRows, int32(len(p.tokens)-n+i))
				p.logitChunks = append(p.logitChunks, ci)
				p.logitAt = append(p.logitAt, i*b.spec.Vocab)
			}
		}
	}
	p.chunks = append(p.chunks, p.sharedTags...)
	// Updates drained here are applied by this step's first kernels (a
	// failure before that leaves the device unusable anyway).
	p.updIDs, p.upd = m.drain(p.updIDs, p.upd)
	m.mu.Unlock()
}

// upload copies the plan to the device (asynchronously, on the compute
// stream), growing the buffers if needed, and returns the sections'
// offsets. Inside do.
func (b *Backend) upload() (metaOffsets, error) {
	p := &b.plan
	var o metaOffsets
	size := 0
	section := func(bytes int) int {
		at := size
		size = (size + bytes + 15) &^ 15
		return at
	}
	o.chunks = section(len(p.chunks) * 8)
	o.upd = section(len(p.upd) * int(unsafe.Sizeof(devTag{})))
	o.tokens = section(len(p.tokens) * 4)
	o.rowChunk = section(len(p.rowChunk) * 4)
	o.rowPos = section(len(p.rowPos) * 4)
	o.tables = section(len(p.tables) * 4)
	o.logitRows = section(len(p.logitRows) * 4)
	o.hiddenRows = section(len(p.hiddenRows) * 4)
	o.updIDs = section(len(p.updIDs) * 4)
	o.fills = section(len(p.fills) * 4)
	if size > len(b.metaHost) {
		if err := b.growMeta(size); err != nil {
			return o, err
		}
	}
	h := b.metaHost
	copy(h[o.chunks:], sliceBytes(p.chunks))
	copy(h[o.upd:], sliceBytes(p.upd))
	copy(h[o.tokens:], sliceBytes(p.tokens))
	copy(h[o.rowChunk:], sliceBytes(p.rowChunk))
	copy(h[o.rowPos:], sliceBytes(p.rowPos))
	copy(h[o.tables:], sliceBytes(p.tables))
	copy(h[o.logitRows:], sliceBytes(p.logitRows))
	copy(h[o.hiddenRows:], sliceBytes(p.hiddenRows))
	copy(h[o.updIDs:], sliceBytes(p.updIDs))
	copy(h[o.fills:], sliceBytes(p.fills))
	if err := cu.MemcpyHtoDAsync(b.metaDev, unsafe.Pointer(&h[0]), int64(size), b.compute); err != nil {
		return o, fmt.Errorf("cuda: upload step metadata: %w", err)
	}
	return o, nil
}

// growMeta replaces the metadata buffers by ones of at least size bytes.
// The previous step has finished, so nothing reads the old ones. Inside do.
func (b *Backend) growMeta(size int) error {
	size = max(size*2, 64<<10)
	if b.metaDev != 0 {
		cu.MemFree(b.metaDev)
		b.metaDev = 0
	}
	freePinned(b.metaHost)
	b.metaHost = nil
	var err error
	if b.metaHost, err = allocPinned(size); err != nil {
		return err
	}
	if b.metaDev, err = cu.MemAlloc(int64(size)); err != nil {
		return fmt.Errorf("cuda: allocate %d bytes of step metadata: %w", size, err)
	}
	return nil
}
