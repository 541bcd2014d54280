package kvpool

import (
	"cmp"
	"container/list"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// MaxPages is the largest pool: page IDs are int32.
const MaxPages = math.MaxInt32

// PoisonWord is the 32-bit pattern PoisonOnReserve fills pages with, stored
// little-endian: a quiet float32 NaN (payload 0xDEAD), so a kernel that reads
// memory nobody wrote produces NaNs instead of plausible numbers.
const PoisonWord uint32 = 0x7FC0DEAD

// Config describes a pool.
type Config struct {
	// Pages is the number of pages, 1..MaxPages.
	Pages int
	// PageTokens is the number of token slots per page, ≥ 1.
	PageTokens int
	// PageBytes is the size of one page's data, ≥ 1.
	PageBytes int
	// Storage, if set, is the slab the pages live in (page i is
	// Storage[i*PageBytes:(i+1)*PageBytes]); it is used in place, never
	// copied, and must hold at least Pages*PageBytes bytes. If nil the
	// pool allocates the slab.
	Storage []byte
	// ZeroOnRelease zeroes a page's data whenever it becomes free (I9
	// option). It costs a memory clear per released page, done under the
	// pool's mutex.
	ZeroOnRelease bool
	// PoisonOnReserve fills every reserved page with PoisonWord (test
	// mode), so reading unwritten memory is visible.
	PoisonOnReserve bool
}

// Capacity is the fixed size of a pool.
type Capacity struct {
	// Pages is the number of pages; PageTokens and PageBytes the size of one.
	Pages, PageTokens, PageBytes int
	// Tokens = Pages × PageTokens: the most tokens one request can ever
	// hold. Bytes = Pages × PageBytes.
	Tokens, Bytes int64
}

// String formats the capacity for the start-up log, for example
// "KV pool: 256 pages × 16 tokens = 4096 tokens (2.0 MiB)".
func (c Capacity) String() string {
	return fmt.Sprintf("KV pool: %d pages × %d tokens = %d tokens (%s)",
		c.Pages, c.PageTokens, c.Tokens, formatBytes(c.Bytes))
}

// formatBytes renders n with a binary unit and one decimal.
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 5 {
		v /= 1024
		unit++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[unit])
}

// PagesForBudget returns how many pages of pageBytes fit in budgetBytes,
// capped at MaxPages; 0 when either is not positive.
func PagesForBudget(budgetBytes int64, pageBytes int) int {
	if budgetBytes <= 0 || pageBytes <= 0 {
		return 0
	}
	return int(min(budgetBytes/int64(pageBytes), MaxPages))
}

// Stats is a consistent snapshot of the pool's accounting:
// Free+Reserved+InUse+Cached+Quarantined == Total.
type Stats struct {
	Total, Free, Reserved, InUse, Quarantined int
	// Cached counts sealed prefix pages no holding references: reusable
	// by a hit, and evicted (least recently used first) when a
	// reservation needs the space. Shared counts sealed pages some
	// holding references; they are included in InUse.
	Cached, Shared int
	// PageTokens is the number of token slots per page.
	PageTokens int
	// Violations counts reads refused by Verify (I3); FenceRejections
	// counts writes refused by the fence. Both only grow.
	Violations, FenceRejections uint64
	// Seals counts pages sealed, Evictions cached pages evicted, Hits
	// pages reused by a reservation. All only grow.
	Seals, Evictions, Hits uint64
}

// AvailableNow is the number of pages a reservation could get right now:
// the free pages plus the cached ones it would evict. Quarantined pages
// are not in it. Admission (I12) uses this figure, never Free alone.
func (s Stats) AvailableNow() int { return s.Free + s.Cached }

// Holding is one owner's pages, as listed by Holdings.
type Holding struct {
	Owner Owner
	State State
	// Pages in reservation order: the owner's page table.
	Pages []PageID
	// Shared is how many leading Pages are sealed prefix pages the owner
	// references rather than owns.
	Shared int
}

// PageInfo is one page's metadata, as returned by Page.
type PageInfo struct {
	Owner   Owner // zero when free or sealed
	State   State
	Written int
	// Tag and Refs describe a Sealed page: its prefix tag and how many
	// holdings reference it.
	Tag  Tag
	Refs int
}

// Pool is an owner-tagged paged KV pool. Create it with New.
type Pool struct {
	pageTokens, pageBytes int
	zeroOnRelease         bool
	poisonOnReserve       bool
	data                  []byte
	poison                [4]byte

	// version counts state and owner changes; written under mu, read
	// without it.
	version atomic.Uint64

	mu      sync.Mutex
	drained sync.Cond // signalled (with mu) when a holding's pins drop to 0
	pages   []page
	free    fifo
	holders map[ownerKey]*holding
	// counts holds the number of owned pages per non-free state.
	counts          [Quarantined + 1]int
	violations      uint64
	fenceRejections uint64

	// The prefix cache (prefix.go): sealed pages by tag, the unreferenced
	// ones in least-recently-used order (front first), and how many
	// sealed pages are referenced.
	index                  map[Tag]PageID
	idle                   *list.List
	shared                 int
	seals, evictions, hits uint64
	// events are the seals and evictions not yet reported (events.go).
	events cacheLog
	// evicted are the domains EvictDomains evicted for good last
	// (evict.go): Seal refuses their tags.
	evicted evictedDomains
}

// page is one page's metadata: owned by a holding (h), sealed (s), or
// free (both nil).
type page struct {
	h       *holding
	s       *sealed
	written int32
}

// holding is the set of pages one owner reserved.
type holding struct {
	owner Owner
	state State
	pages []PageID
	// shared is how many leading pages are sealed pages h references.
	shared int
	// pins counts WritePage copies in flight into these pages; waiters
	// counts Release/BumpEpoch/Quarantine calls waiting for pins to drop
	// to zero. While waiters > 0 no new copy may start, so the wait ends.
	pins, waiters int
}

// New returns an empty pool (every page free) for cfg.
func New(cfg Config) (*Pool, error) {
	switch {
	case cfg.Pages < 1 || cfg.Pages > MaxPages:
		return nil, fmt.Errorf("%w: Pages = %d, want 1..%d", ErrInvalid, cfg.Pages, MaxPages)
	case cfg.PageTokens < 1 || cfg.PageTokens > math.MaxInt32:
		return nil, fmt.Errorf("%w: PageTokens = %d, want 1..%d", ErrInvalid, cfg.PageTokens, math.MaxInt32)
	case cfg.PageBytes < 1 || cfg.PageBytes > math.MaxInt/cfg.Pages:
		return nil, fmt.Errorf("%w: PageBytes = %d, want 1..%d for %d pages", ErrInvalid, cfg.PageBytes, math.MaxInt/cfg.Pages, cfg.Pages)
	}
	size := cfg.Pages * cfg.PageBytes
	data := cfg.Storage
	if data == nil {
		data = make([]byte, size)
	} else if len(data) < size {
		return nil, fmt.Errorf("%w: Storage has %d bytes, %d pages × %d bytes need %d", ErrInvalid, len(data), cfg.Pages, cfg.PageBytes, size)
	}
	p := &Pool{
		pageTokens:      cfg.PageTokens,
		pageBytes:       cfg.PageBytes,
		zeroOnRelease:   cfg.ZeroOnRelease,
		poisonOnReserve: cfg.PoisonOnReserve,
		data:            data[:size:size],
		pages:           make([]page, cfg.Pages),
		free:            newFIFO(cfg.Pages),
		holders:         make(map[ownerKey]*holding),
		index:           make(map[Tag]PageID),
		idle:            list.New(),
	}
	binary.LittleEndian.PutUint32(p.poison[:], PoisonWord)
	p.drained.L = &p.mu
	return p, nil
}

// Capacity returns the pool's fixed size.
func (p *Pool) Capacity() Capacity {
	n := len(p.pages)
	return Capacity{
		Pages:      n,
		PageTokens: p.pageTokens,
		PageBytes:  p.pageBytes,
		Tokens:     int64(n) * int64(p.pageTokens),
		Bytes:      int64(n) * int64(p.pageBytes),
	}
}

// Data returns page id's bytes, a window into the slab. It does no
// ownership check: call Verify (to read) or go through the fence (to write)
// first. It panics if id is outside the pool.
func (p *Pool) Data(id PageID) []byte {
	lo := int(id) * p.pageBytes
	return p.data[lo : lo+p.pageBytes : lo+p.pageBytes]
}

// Stats returns a consistent snapshot of the accounting.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Total:           len(p.pages),
		Free:            p.free.len(),
		Reserved:        p.counts[Reserved],
		InUse:           p.counts[InUse] + p.shared,
		Quarantined:     p.counts[Quarantined],
		Cached:          p.idle.Len(),
		Shared:          p.shared,
		PageTokens:      p.pageTokens,
		Violations:      p.violations,
		FenceRejections: p.fenceRejections,
		Seals:           p.seals,
		Evictions:       p.evictions,
		Hits:            p.hits,
	}
}

// Version returns a number that changes whenever a page changes state or
// owner (not when slots are marked written). It is cheap enough to poll, so
// the worker can report free-page changes without a callback under the
// pool's lock.
func (p *Pool) Version() uint64 { return p.version.Load() }

// Holdings lists every owner that holds pages, sorted by tenant then
// request. The result is a copy.
func (p *Pool) Holdings() []Holding {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Holding, 0, len(p.holders))
	for _, h := range p.holders {
		out = append(out, Holding{Owner: h.owner, State: h.state, Pages: slices.Clone(h.pages), Shared: h.shared})
	}
	slices.SortFunc(out, func(a, b Holding) int {
		return cmp.Or(cmp.Compare(a.Owner.Tenant, b.Owner.Tenant), cmp.Compare(a.Owner.Request, b.Owner.Request))
	})
	return out
}

// Page returns page id's metadata; false if id is outside the pool.
func (p *Pool) Page(id PageID) (PageInfo, bool) {
	if !p.exists(id) {
		return PageInfo{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := &p.pages[id]
	if m.s != nil {
		return PageInfo{State: Sealed, Written: p.pageTokens, Tag: m.s.tag, Refs: m.s.refs}, true
	}
	if m.h == nil {
		return PageInfo{}, true
	}
	return PageInfo{Owner: m.h.owner, State: m.h.state, Written: int(m.written)}, true
}

func (p *Pool) exists(id PageID) bool { return id >= 0 && int(id) < len(p.pages) }

// pagesFor returns the number of pages that hold tokens ≥ 0 tokens.
func (p *Pool) pagesFor(tokens int) int {
	n := tokens / p.pageTokens
	if tokens%p.pageTokens != 0 {
		n++
	}
	return n
}

// fifo is a ring of free page IDs. Reserve takes from the front and release
// appends at the back, so the page that has been free longest is reused
// first: the choice is deterministic for a given sequence of operations,
// and a released page is reused as late as possible (defence in depth
// against late writes).
type fifo struct {
	ids     []PageID
	head, n int
}

func newFIFO(pages int) fifo {
	f := fifo{ids: make([]PageID, pages), n: pages}
	for i := range f.ids {
		f.ids[i] = PageID(i)
	}
	return f
}

func (f *fifo) len() int { return f.n }

func (f *fifo) pop() PageID {
	id := f.ids[f.head]
	f.head = (f.head + 1) % len(f.ids)
	f.n--
	return id
}

func (f *fifo) push(id PageID) {
	f.ids[(f.head+f.n)%len(f.ids)] = id
	f.n++
}

// pushFront puts id where the next pop takes it.
func (f *fifo) pushFront(id PageID) {
	f.head = (f.head - 1 + len(f.ids)) % len(f.ids)
	f.ids[f.head] = id
	f.n++
}

// popBack takes the page ID pushed last.
func (f *fifo) popBack() PageID {
	f.n--
	return f.ids[(f.head+f.n)%len(f.ids)]
}
