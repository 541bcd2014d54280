package kvpool

import (
	"fmt"
	"math"
	"slices"
)

// Reserve gives owner ceil(tokens/PageTokens) free pages, all or nothing,
// and returns them in order: the owner's page table. The pages become
// Reserved, tagged owner, with nothing written. Pages are taken in FIFO
// order (longest free first), so the choice is deterministic. When too few
// pages are free, unreferenced cached pages are evicted, least recently
// used first.
//
// Errors: ErrInvalid (empty tenant or request, tokens < 1), ErrNeverFits
// (more pages than the pool has), ErrOwnerExists (the tenant and request
// already hold pages, at any epoch), ErrNoSpace (not enough free and
// cached pages now).
func (p *Pool) Reserve(owner Owner, tokens int) ([]PageID, error) {
	pages, _, err := p.ReservePrefix(owner, tokens, nil)
	return pages, err
}

// ReservePrefix is Reserve for a sequence whose leading pages may already
// be sealed in the cache: prefix[i] is the tag page i of its table would
// carry (Tags of its prompt). The longest run of leading tags found sealed
// is shared, not copied: those pages head the returned table, referenced
// by owner (never evicted while referenced), and hit says how many there
// are; the rest of the table is reserved as by Reserve. A reader of the
// shared pages must present the same tags to VerifyPrefix.
//
// The caller decides what may hit: to leave the last prompt token for the
// forward step that samples from it, pass the tags of prompt[:len-1].
func (p *Pool) ReservePrefix(owner Owner, tokens int, prefix []Tag) (pages []PageID, hit int, err error) {
	if !owner.valid() {
		return nil, 0, fmt.Errorf("%w: owner %v needs a tenant and a request", ErrInvalid, owner)
	}
	if tokens < 1 {
		return nil, 0, fmt.Errorf("%w: reserve %d tokens for %v", ErrInvalid, tokens, owner)
	}
	n := p.pagesFor(tokens)
	if n > len(p.pages) {
		return nil, 0, fmt.Errorf("%w: %d tokens need %d pages of %d tokens, the pool has %d pages (%d tokens)",
			ErrNeverFits, tokens, n, p.pageTokens, len(p.pages), p.Capacity().Tokens)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.holders[owner.key()]; ok {
		return nil, 0, fmt.Errorf("%w: %v holds %d %s pages", ErrOwnerExists, h.owner, len(h.pages), h.state)
	}
	hits, idleHits := p.lookup(prefix[:min(len(prefix), n)])
	own := n - len(hits)
	if avail := p.free.len() + p.idle.Len() - idleHits; own > avail {
		return nil, 0, fmt.Errorf("%w: %d tokens need %d pages, %d of %d free or cached", ErrNoSpace, tokens, own, avail, len(p.pages))
	}
	h := &holding{owner: owner, state: Reserved, pages: make([]PageID, n), shared: len(hits)}
	for i, id := range hits {
		p.acquire(id)
		h.pages[i] = id
	}
	p.hits += uint64(len(hits))
	for p.free.len() < own {
		p.evictOldest()
	}
	for i := len(hits); i < n; i++ {
		id := p.free.pop()
		h.pages[i] = id
		p.pages[id] = page{h: h}
		if p.poisonOnReserve {
			p.fillPoison(p.Data(id))
		}
	}
	p.holders[owner.key()] = h
	p.counts[Reserved] += own
	p.version.Add(1)
	return slices.Clone(h.pages), len(hits), nil
}

// Activate moves owner's Reserved pages to InUse (its sequence starts). It
// is a no-op if they are InUse already, and ErrState if quarantined.
func (p *Pool) Activate(owner Owner) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.holder(owner)
	if err != nil {
		return err
	}
	switch h.state {
	case Reserved:
		p.setState(h, InUse)
	case Quarantined:
		return fmt.Errorf("%w: activate %v: pages are %s", ErrState, owner, h.state)
	}
	return nil
}

// Release frees all of owner's pages (which must be Reserved or InUse;
// quarantined pages leave only through ReleaseQuarantined) and returns how
// many. The epoch must match exactly, so a stale caller can never free the
// pages of a newer attempt. It waits for in-flight WritePage copies into
// the pages (bounded: one copy each), and zeroes the pages if the pool is
// configured to.
//
// Errors: ErrNotHeld, ErrStaleEpoch, ErrState.
func (p *Pool) Release(owner Owner) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.settled(owner)
	if err != nil {
		return 0, err
	}
	if h.state == Quarantined {
		return 0, fmt.Errorf("%w: release %v: pages are quarantined, use ReleaseQuarantined", ErrState, owner)
	}
	return p.freeHolding(h), nil
}

// BumpEpoch fences owner: its Reserved/InUse pages are retagged with
// Epoch+1 and their Written reset to 0 (their contents can no longer be
// trusted). From then on every read or write for the old epoch is refused.
// It waits for in-flight WritePage copies first. Returns the new owner.
//
// Errors: ErrNotHeld, ErrStaleEpoch, ErrState (quarantined), ErrInvalid
// (epoch would overflow).
func (p *Pool) BumpEpoch(owner Owner) (Owner, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.settled(owner)
	if err != nil {
		return Owner{}, err
	}
	if h.state == Quarantined {
		return Owner{}, fmt.Errorf("%w: bump epoch of %v: pages are quarantined", ErrState, owner)
	}
	if h.owner.Epoch == math.MaxUint64 {
		return Owner{}, fmt.Errorf("%w: epoch of %v cannot grow", ErrInvalid, owner)
	}
	h.owner.Epoch++
	for _, id := range h.pages[h.shared:] {
		p.pages[id].written = 0
	}
	p.version.Add(1)
	return h.owner, nil
}

// Quarantine makes owner's pages Quarantined: they keep their owner tag (for
// debugging and metrics) but can be neither read nor written, and are not
// reused until ReleaseQuarantined or a restart (I5: a one-sided writer may
// still write them). Sealed pages the owner shares are let go at once (no
// writer can write a sealed page). It waits for in-flight WritePage copies
// first, is a no-op on pages already quarantined, and returns how many
// pages the owner holds.
//
// Errors: ErrNotHeld, ErrStaleEpoch.
func (p *Pool) Quarantine(owner Owner) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.settled(owner)
	if err != nil {
		return 0, err
	}
	if h.state != Quarantined {
		p.unshare(h)
		p.setState(h, Quarantined)
	}
	return len(h.pages), nil
}

// ReleaseQuarantined frees owner's quarantined pages (every writer drained,
// or it was proven unable to write any more) and returns how many. They
// are zeroed whatever the configuration: a killed writer's late bytes
// never reach the next holder, not even as unreadable slots.
//
// Errors: ErrNotHeld, ErrStaleEpoch, ErrState (the pages are not
// quarantined).
func (p *Pool) ReleaseQuarantined(owner Owner) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.holder(owner)
	if err != nil {
		return 0, err
	}
	if h.state != Quarantined {
		return 0, fmt.Errorf("%w: release quarantined %v: pages are %s", ErrState, owner, h.state)
	}
	// Quarantine waited for every copy and the fence refuses new ones, so
	// nothing is pinned here.
	if !p.zeroOnRelease {
		for _, id := range h.pages {
			clear(p.Data(id))
		}
	}
	return p.freeHolding(h), nil
}

// holder returns owner's holding, matching tenant, request, adapter and
// epoch. Called with mu held.
func (p *Pool) holder(owner Owner) (*holding, error) {
	h, ok := p.holders[owner.key()]
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrNotHeld, owner)
	}
	if h.owner.Adapter != owner.Adapter {
		// The pages were computed under other weights: not this owner's.
		return nil, fmt.Errorf("%w: %v, the request's pages are held under adapter %q", ErrNotHeld, owner, h.owner.Adapter)
	}
	if h.owner.Epoch != owner.Epoch {
		return nil, fmt.Errorf("%w: %v, pages are at epoch %d", ErrStaleEpoch, owner, h.owner.Epoch)
	}
	return h, nil
}

// settled returns owner's holding once no WritePage copy is in flight into
// it. While it waits (mu released) new copies are refused, and the holding
// may change, so it is looked up again after every wake-up. Called with mu
// held.
func (p *Pool) settled(owner Owner) (*holding, error) {
	for {
		h, err := p.holder(owner)
		if err != nil || h.pins == 0 {
			return h, err
		}
		h.waiters++
		p.drained.Wait()
		h.waiters--
	}
}

// setState moves all of h's owned pages to state to. Called with mu held.
func (p *Pool) setState(h *holding, to State) {
	own := len(h.pages) - h.shared
	p.counts[h.state] -= own
	p.counts[to] += own
	h.state = to
	p.version.Add(1)
}

// freeHolding returns h's owned pages to the free list, lets go of the
// sealed pages it shares and forgets h. It returns how many pages h held.
// Called with mu held and h unpinned.
func (p *Pool) freeHolding(h *holding) int {
	n := len(h.pages)
	p.unshare(h)
	for _, id := range h.pages {
		p.freePage(id)
	}
	p.counts[h.state] -= len(h.pages)
	delete(p.holders, h.owner.key())
	p.version.Add(1)
	return n
}

// freePage returns page id to the free list, zeroed if the pool is
// configured to. Called with mu held.
func (p *Pool) freePage(id PageID) {
	p.pages[id] = page{}
	if p.zeroOnRelease {
		clear(p.Data(id))
	}
	p.free.push(id)
}

// fillPoison fills b with the little-endian PoisonWord pattern.
func (p *Pool) fillPoison(b []byte) {
	n := copy(b, p.poison[:])
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
}

// ReleaseReuseFirst is the deliberately broken release of the test-only
// mode brokenmode.ReleaseWithoutDrain, and nothing else calls it: it frees
// owner's pages in any state — quarantined ones too, whose one-sided
// writer may still write (I5) — and puts them at the front of the free
// list, in table order, so the very next reservation takes them. It
// returns the pages it freed (the owner's own, not the sealed ones it
// shared).
//
// Errors: ErrNotHeld, ErrStaleEpoch.
func (p *Pool) ReleaseReuseFirst(owner Owner) ([]PageID, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.settled(owner)
	if err != nil {
		return nil, err
	}
	own := slices.Clone(h.pages[h.shared:])
	p.freeHolding(h) // appends own at the back of the free list, in order
	for range own {
		p.free.pushFront(p.free.popBack())
	}
	return own, nil
}
