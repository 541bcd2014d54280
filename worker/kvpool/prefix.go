package kvpool

import (
	"container/list"
	"fmt"

	"github.com/warden-ai/warden/internal/cachekey"
)

// Tag is what a sealed prefix page carries instead of an owner (I3): the
// cache domain whose requests may read it, the model/format version of its
// KV, and the chain hash of every token up to and including the page.
type Tag struct {
	Domain  cachekey.Domain
	Version uint64
	Hash    cachekey.Hash
}

// Tags returns the tags of the full pages of tokens in domain d under
// version and the LoRA adapter whose content hash is adapter ("" for the
// base model; Owner.Adapter of the sequence), page i first: what a
// sequence with these tokens presents for its shared pages, computed from
// its own tokens. The chain hashes cover the adapter (DESIGN I8a), so
// pages sealed under one adapter match no other adapter's or the base
// model's request even in the same domain.
func Tags(d cachekey.Domain, version uint64, adapter string, tokens []int32, pageTokens int) []Tag {
	hs := cachekey.Chain(d, version, adapter, tokens, pageTokens)
	out := make([]Tag, len(hs))
	for i, h := range hs {
		out[i] = Tag{Domain: d, Version: version, Hash: h}
	}
	return out
}

// sealed is the metadata of a sealed page.
type sealed struct {
	tag  Tag
	refs int
	// elem is the page's place in Pool.idle while refs == 0.
	elem *list.Element
	// retired: EvictDomains took the page out of the index while readers
	// referenced it; it is freed, not cached, when the last one lets go.
	retired bool
}

// Seal turns the leading pages of owner's table into sealed prefix pages:
// page i (from the first page owner does not already share, up to
// len(tags)) gets tags[i], becomes read-only and shareable by any holding
// that presents the same tag, and stays referenced by owner. Only pages
// whose every slot was written for owner are sealed (the data is complete
// and verified: the caller seals after a local prefill finished or a
// transfer verified, never while a page is being written); sealing stops
// at the first page that is not, at the first tag already sealed in
// another page (a concurrent writer of the same prefix won; the page stays
// owned), and at a tag of a domain EvictDomains evicted for good (nothing
// of it is cached again). It waits for in-flight WritePage copies first and returns how
// many leading pages owner now shares.
//
// Errors: ErrNotHeld, ErrStaleEpoch, ErrState (quarantined), ErrInvalid
// (more tags than pages).
func (p *Pool) Seal(owner Owner, tags []Tag) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, err := p.settled(owner)
	if err != nil {
		return 0, err
	}
	if h.state == Quarantined {
		return 0, fmt.Errorf("%w: seal pages of %v: pages are quarantined", ErrState, owner)
	}
	if len(tags) > len(h.pages) {
		return 0, fmt.Errorf("%w: %d tags for a %d-page table", ErrInvalid, len(tags), len(h.pages))
	}
	for i := h.shared; i < len(tags); i++ {
		id := h.pages[i]
		m := &p.pages[id]
		if int(m.written) != p.pageTokens {
			break
		}
		if _, dup := p.index[tags[i]]; dup || p.evicted.set[tags[i].Domain] {
			break
		}
		*m = page{s: &sealed{tag: tags[i], refs: 1}, written: int32(p.pageTokens)}
		p.index[tags[i]] = id
		p.events.note(tags[i].Hash, true)
		p.counts[h.state]--
		p.shared++
		p.seals++
		h.shared++
	}
	p.version.Add(1)
	return h.shared, nil
}

// Lookup returns how many leading tags of prefix are sealed in the pool
// now: the hit a ReservePrefix would get (for reports and routing; a
// reservation may see another figure).
func (p *Pool) Lookup(prefix []Tag) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	hits, _ := p.lookup(prefix)
	return len(hits)
}

// lookup returns the pages of the longest run of leading tags sealed in
// the pool, and how many of them nobody references. Called with mu held.
func (p *Pool) lookup(prefix []Tag) (hits []PageID, idle int) {
	for _, t := range prefix {
		id, ok := p.index[t]
		if !ok {
			break
		}
		hits = append(hits, id)
		if p.pages[id].s.refs == 0 {
			idle++
		}
	}
	return hits, idle
}

// acquire adds a reference to sealed page id. Called with mu held.
func (p *Pool) acquire(id PageID) {
	s := p.pages[id].s
	if s.refs == 0 {
		p.idle.Remove(s.elem)
		s.elem = nil
		p.shared++
	}
	s.refs++
}

// unshare drops h's references to the sealed pages heading its table and
// removes them from it. Called with mu held.
func (p *Pool) unshare(h *holding) {
	for _, id := range h.pages[:h.shared] {
		s := p.pages[id].s
		if s.refs--; s.refs == 0 {
			p.shared--
			if s.retired {
				p.freePage(id)
			} else {
				s.elem = p.idle.PushBack(id)
			}
		}
	}
	h.pages = h.pages[h.shared:]
	h.shared = 0
}

// evictOldest frees the least recently used unreferenced sealed page.
// Called with mu held and p.idle not empty.
func (p *Pool) evictOldest() {
	id := p.idle.Remove(p.idle.Front()).(PageID)
	delete(p.index, p.pages[id].s.tag)
	p.events.note(p.pages[id].s.tag.Hash, false)
	p.freePage(id)
	p.evictions++
}

// verifyShared checks the leading len(tags) pages of a reader's table: each
// must be sealed with exactly the tag the reader computed, and referenced
// at that place by the reader's own holding. Called with mu held.
func (p *Pool) verifyShared(owner Owner, pages []PageID, tags []Tag) *ViolationError {
	h := p.holders[owner.key()]
	for i, id := range pages[:len(tags)] {
		if !p.exists(id) {
			return &ViolationError{Page: id, Want: owner, Reason: ReasonNoSuchPage}
		}
		m := &p.pages[id]
		var r Reason
		switch {
		case m.s == nil:
			r = ReasonNotSealed
		case m.s.tag.Domain != tags[i].Domain:
			r = ReasonForeignDomain
		case m.s.tag != tags[i]:
			r = ReasonTagMismatch
		case h == nil || h.owner != owner || h.state == Quarantined || i >= h.shared || h.pages[i] != id:
			r = ReasonUnshared
		default:
			continue
		}
		return p.violation(owner, id, m, p.pageTokens, r)
	}
	return nil
}
