package kvpool

import "github.com/warden-ai/warden/internal/cachekey"

// MaxEvictedDomains bounds the evicted domains a pool remembers
// (Pool.EvictDomains): 4096 domains of 32 bytes.
const MaxEvictedDomains = 4096

// evictedDomains remembers the most recently evicted domains, so that a
// request of such a domain that was already running at the eviction
// cannot seal its pages after it. Guarded by Pool.mu.
type evictedDomains struct {
	set  map[cachekey.Domain]bool
	ring []cachekey.Domain
	next int
}

// add remembers d, forgetting the oldest beyond MaxEvictedDomains.
func (e *evictedDomains) add(d cachekey.Domain) {
	if e.set == nil {
		e.set = make(map[cachekey.Domain]bool)
	}
	if e.set[d] {
		return
	}
	if len(e.ring) < MaxEvictedDomains {
		e.ring = append(e.ring, d)
	} else {
		delete(e.set, e.ring[e.next])
		e.ring[e.next] = d
		e.next = (e.next + 1) % MaxEvictedDomains
	}
	e.set[d] = true
}

// DomainEviction is what EvictDomains did.
type DomainEviction struct {
	// Freed counts the unreferenced (cached) pages freed at once;
	// Retired the pages running readers still reference, out of the
	// index and freed when the last of them lets go.
	Freed, Retired int
	// Hashes are the chain hashes of every page evicted, for the routing
	// index (also in the event log, CacheEventsSince).
	Hashes []cachekey.Hash
}

// EvictDomains drops the sealed pages of the cache domains ds: their
// tenant was deleted or disabled, their key revoked, or the tenant's cache
// setting changed (DESIGN I8). Every such page leaves the index at once,
// so no reservation, of that domain or any other, can hit it again, and
// its eviction is logged for the routing reports. An unreferenced page is
// freed at once. A page a running reader references stays with it, sealed,
// intact and verifiable, so that request finishes correctly; it is
// retired: freed (never cached again) when the last reader releases it. A
// later request of the same domain seals its own copy, unless final: the
// domains never come back (their tenant incarnation was deleted, their
// key revoked), and the pool remembers the last MaxEvictedDomains of those
// and Seal refuses their tags from then on, so a request of the domain
// that was running at the eviction cannot cache its pages after it (its
// own pages stay owned and are freed with it). A domain that may come
// back (its tenant disabled, or its cache setting changed) is not
// remembered: it caches again once it is used again. The accounting
// identity holds throughout: a retired page counts in InUse (Shared) until
// it is freed. Stats.Evictions does not count these pages (it counts
// evictions for room).
func (p *Pool) EvictDomains(ds []cachekey.Domain, final bool) DomainEviction {
	evict := make(map[cachekey.Domain]bool, len(ds))
	for _, d := range ds {
		evict[d] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range ds {
		if final {
			p.evicted.add(d)
		}
	}
	var out DomainEviction
	for tag, id := range p.index {
		if !evict[tag.Domain] {
			continue
		}
		delete(p.index, tag)
		p.events.note(tag.Hash, false)
		out.Hashes = append(out.Hashes, tag.Hash)
		s := p.pages[id].s
		if s.refs > 0 {
			s.retired = true
			out.Retired++
			continue
		}
		p.idle.Remove(s.elem)
		p.freePage(id)
		out.Freed++
	}
	if len(out.Hashes) > 0 {
		p.version.Add(1)
	}
	return out
}
