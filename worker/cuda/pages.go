//go:build cuda

package cuda

import (
	"fmt"
	"syscall"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/kvpool"
)

// stagingBuffers is how many page copies (ReadPage, WritePage) may run at
// once; each has a pinned page-sized buffer and a stream of its own.
const stagingBuffers = 4

// kvPages is the backend's KV pool: the kvpool's metadata on the host, the
// pages and their owner tags on the device.
type kvPages struct {
	pool    *kvpool.Pool
	kv      cu.DevicePtr // pages × PageBytes
	tagsDev cu.DevicePtr // pages × devTag
	mirror  *tagMirror
	// fillOn: a page that changes owner is filled with fillWord on the
	// device before anyone uses it (the pool's ZeroOnRelease or
	// PoisonOnReserve, moved to the device).
	fillOn   bool
	fillWord uint32
	// slab is the pool's host storage: address space only (see NewPool).
	slab    []byte
	staging chan *staging
}

// staging is one page copy's pinned buffer and stream.
type staging struct {
	buf    []byte
	stream cu.Stream
}

// NewPool makes the backend's KV pool: cfg.Pages pages of device memory
// in the cpu backend's page layout, with the kvpool holding their metadata.
// cfg.PageTokens and cfg.PageBytes must match the backend's geometry, and
// cfg.Storage must be nil.
//
// The kvpool's own slab would be host memory nobody uses, so its Storage is
// a reservation of address space with no access rights (PROT_NONE, no
// swap reserved): it costs no memory, and any host access to page bytes —
// which would be a bug with a device pool — faults at once instead of
// silently working on the wrong copy. For the same reason the pool's
// ZeroOnRelease and PoisonOnReserve are applied on the device: a page is
// filled (zeros, or kvpool.PoisonWord when poisoning) the first time the
// backend sees it with a new owner, before any step or copy uses it.
//
// NewPool may be called once.
func (b *Backend) NewPool(cfg kvpool.Config) (*kvpool.Pool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pagesMu.Lock()
	defer b.pagesMu.Unlock()
	if b.closed || b.pool != nil {
		return nil, fmt.Errorf("cuda: NewPool on a closed backend or one that has a pool")
	}
	if cfg.Storage != nil {
		return nil, fmt.Errorf("cuda: KV pages live in device memory; caller storage (the shm transfer backend) cannot hold them — use the tcp transfer backend with cuda")
	}
	if want := b.spec.PageBytes(b.opt.PageTokens); cfg.PageTokens != b.opt.PageTokens || cfg.PageBytes != want {
		return nil, fmt.Errorf("cuda: pool pages of %d tokens, %d bytes; the backend uses %d tokens, %d bytes",
			cfg.PageTokens, cfg.PageBytes, b.opt.PageTokens, want)
	}
	if cfg.Pages <= 0 {
		return nil, fmt.Errorf("%w: %d pages", kvpool.ErrInvalid, cfg.Pages)
	}
	size := cfg.Pages * cfg.PageBytes
	slab, err := syscall.Mmap(-1, 0, size, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("cuda: reserve %d bytes of address space for the pool metadata: %w", size, err)
	}
	p := kvPages{slab: slab, fillOn: cfg.ZeroOnRelease || cfg.PoisonOnReserve}
	if cfg.PoisonOnReserve {
		p.fillWord = kvpool.PoisonWord
	}
	cfg.Storage, cfg.ZeroOnRelease, cfg.PoisonOnReserve = slab, false, false
	if p.pool, err = kvpool.New(cfg); err != nil {
		syscall.Munmap(slab)
		return nil, err
	}
	var initial []devTag
	p.mirror, initial = newTagMirror(cfg.Pages)
	b.kvPages = p
	err = b.dev.do(func() error {
		if b.kv, err = cu.MemAlloc(int64(size)); err != nil {
			return fmt.Errorf("cuda: allocate %d bytes of KV pages: %w", size, err)
		}
		tb := sliceBytes(initial)
		if b.tagsDev, err = cu.MemAlloc(int64(len(tb))); err != nil {
			return fmt.Errorf("cuda: allocate owner tags: %w", err)
		}
		if err := cu.MemcpyHtoD(b.tagsDev, unsafe.Pointer(&tb[0]), int64(len(tb))); err != nil {
			return fmt.Errorf("cuda: upload owner tags: %w", err)
		}
		b.staging = make(chan *staging, stagingBuffers)
		for range stagingBuffers {
			st := &staging{}
			if st.buf, err = allocPinned(cfg.PageBytes); err != nil {
				return err
			}
			if st.stream, err = cu.MakeStream(cu.DefaultStream); err != nil {
				freePinned(st.buf)
				return fmt.Errorf("cuda: create stream: %w", err)
			}
			b.staging <- st
		}
		b.geom.Pages = int64(cfg.Pages)
		if err := b.uploadGeometry(); err != nil {
			return err
		}
		return cu.Synchronize()
	})
	if err != nil {
		b.dev.do(func() error { b.closePages(); return nil })
		return nil, err
	}
	return b.pool, nil
}

// closePages frees the pool's device memory and staging buffers. Inside
// do, holding b.mu and b.pagesMu (so no copy is in flight).
func (b *Backend) closePages() {
	for range len(b.staging) {
		st := <-b.staging
		st.stream.Destroy()
		freePinned(st.buf)
	}
	if b.kv != 0 {
		cu.MemFree(b.kv)
	}
	if b.tagsDev != 0 {
		cu.MemFree(b.tagsDev)
	}
	if b.slab != nil {
		syscall.Munmap(b.slab)
	}
	b.kvPages = kvPages{}
}

// ReadPage copies len(dst) bytes of page id's device data, starting at
// byte off, into dst (device to host, through a pinned staging buffer).
// The caller must hold the right to read the page (the transfer sender
// reads pages of the request it prefilled, after the step that wrote them
// returned). A page seen with a new owner is filled first, so a read
// never returns bytes of a previous owner when the pool zeroes or poisons.
func (b *Backend) ReadPage(id kvpool.PageID, off int, dst []byte) error {
	return b.copyPage(id, off, dst, false)
}

// WritePage copies src into page id's device data at byte off (host to
// device, through a pinned staging buffer) and returns once the data is on
// the device. The caller must hold the pool's write fence for the page for
// the whole call (the transfer receiver: the page is reserved for the
// frame's owner and epoch, and cannot be released or retagged meanwhile);
// afterwards it records the written slots in the pool (MarkWritten). A
// page seen with a new owner is filled first.
func (b *Backend) WritePage(id kvpool.PageID, off int, src []byte) error {
	return b.copyPage(id, off, src, true)
}

// copyPage is ReadPage (toDevice false) and WritePage.
func (b *Backend) copyPage(id kvpool.PageID, off int, buf []byte, toDevice bool) error {
	// Copies share the pool read-locked; NewPool and Close take it
	// exclusively, so the buffers below stay valid for the whole copy.
	b.pagesMu.RLock()
	defer b.pagesMu.RUnlock()
	if b.pool == nil {
		return fmt.Errorf("cuda: no KV pool (call NewPool first, and not after Close)")
	}
	if id < 0 || int64(id) >= b.geom.Pages {
		return fmt.Errorf("%w: page %d outside the pool of %d", kvpool.ErrInvalid, id, b.geom.Pages)
	}
	pageBytes := int(b.geom.PageFloats) * 4
	if off < 0 || len(buf) > pageBytes-off || off > pageBytes {
		return fmt.Errorf("%w: %d bytes at offset %d do not fit a page of %d bytes", kvpool.ErrInvalid, len(buf), off, pageBytes)
	}
	if len(buf) == 0 {
		return nil
	}
	st := <-b.staging
	defer func() { b.staging <- st }()
	page := b.kv + cu.DevicePtr(int64(id)*int64(pageBytes))
	return b.dev.do(func() error {
		// The metadata is read under the mirror's lock (as steps do), so
		// a stale read cannot undo a newer observation.
		b.mirror.mu.Lock()
		info, _ := b.pool.Page(id)
		fill := b.mirror.observe(id, info) && b.fillOn
		// The fill is done before the mirror is unlocked, so no other
		// copy of this page can overtake it.
		if fill {
			err := cu.MemsetD32Async(page, uint(b.fillWord), int64(pageBytes/4), st.stream)
			if err == nil {
				err = st.stream.Synchronize()
			}
			if err != nil {
				b.mirror.mu.Unlock()
				return fmt.Errorf("cuda: fill page %d: %w", id, err)
			}
		}
		b.mirror.mu.Unlock()
		n := int64(len(buf))
		if toDevice {
			copy(st.buf, buf)
			if err := cu.MemcpyHtoDAsync(page+cu.DevicePtr(off), unsafe.Pointer(&st.buf[0]), n, st.stream); err != nil {
				return fmt.Errorf("cuda: write page %d: %w", id, err)
			}
		} else if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&st.buf[0]), page+cu.DevicePtr(off), n, st.stream); err != nil {
			return fmt.Errorf("cuda: read page %d: %w", id, err)
		}
		if err := st.stream.Synchronize(); err != nil {
			return fmt.Errorf("cuda: copy page %d: %w", id, err)
		}
		if !toDevice {
			copy(buf, st.buf[:n])
		}
		return nil
	})
}
