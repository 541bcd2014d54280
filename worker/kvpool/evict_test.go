package kvpool_test

import (
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/kvpool"
)

// TestEvictDomains: evicting tenant a's domain frees its cached pages at
// once and takes the pages a running request of a reads out of the index:
// that request still verifies and reads them, no new request (of a or
// anyone) hits them, a new request of a seals its own copy, and they are
// freed, not cached, when the reader releases them. Tenant b's pages stay.
// The accounting identity holds at every step, and the evictions are
// reported to the routing index.
func TestEvictDomains(t *testing.T) {
	p := newPool(t, kvpool.Config{Pages: 16, PageTokens: 4, PageBytes: 16})
	da, db := domain(t, "a"), domain(t, "b")
	tagsP := kvpool.Tags(da, 1, "", []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)
	tagsQ := kvpool.Tags(da, 1, "", []int32{9, 8, 7, 6, 5, 4, 3, 2, 1}, 4)
	tagsB := kvpool.Tags(db, 1, "", []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4)
	seal := func(o kvpool.Owner, tags []kvpool.Tag, fill byte) []kvpool.PageID {
		t.Helper()
		pages, _ := prefixOwner(t, p, o, 12, tags, fill)
		if n, err := p.Seal(o, tags); err != nil || n != 2 {
			t.Fatalf("Seal(%v) = %d, %v", o, n, err)
		}
		return pages
	}
	release := func(o kvpool.Owner) {
		t.Helper()
		if _, err := p.Release(o); err != nil {
			t.Fatal(err)
		}
	}
	a1, a2, b1 := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}, kvpool.Owner{Tenant: "a", Request: "2", Epoch: 1}, kvpool.Owner{Tenant: "b", Request: "1", Epoch: 1}
	seal(a1, tagsP, 0xA1)
	release(a1) // P's 2 pages cached
	running := seal(a2, tagsQ, 0xA2)
	seal(b1, tagsB, 0xB1)
	release(b1)
	_, cursor := p.CacheSnapshot()
	before := checkAccounting(t, p)
	if before.Cached != 4 || before.Shared != 2 {
		t.Fatalf("before eviction: %+v", before)
	}

	ev := p.EvictDomains([]cachekey.Domain{da}, true)
	if ev.Freed != 2 || ev.Retired != 2 || len(ev.Hashes) != 4 {
		t.Fatalf("EvictDomains = %+v, want 2 freed, 2 retired, 4 hashes", ev)
	}
	s := checkAccounting(t, p)
	if s.Cached != 2 || s.Free != before.Free+2 || s.Shared != 2 || s.Evictions != before.Evictions {
		t.Fatalf("after eviction: %+v (before %+v)", s, before)
	}
	if p.Lookup(tagsP) != 0 || p.Lookup(tagsQ) != 0 || p.Lookup(tagsB) != 2 {
		t.Fatalf("lookups after eviction: P %d, Q %d, B %d; want 0, 0, 2", p.Lookup(tagsP), p.Lookup(tagsQ), p.Lookup(tagsB))
	}
	// The running reader still reads its (retired) pages.
	if err := p.VerifyPrefix(a2, running, 12, tagsQ[:2]); err != nil {
		t.Fatalf("the running request lost its pages: %v", err)
	}
	evs, _ := p.CacheEventsSince(cursor)
	var want []cachekey.Hash
	for _, tg := range append(tagsP[:2:2], tagsQ[:2]...) {
		want = append(want, tg.Hash)
	}
	if slices.SortFunc(evs.Evicted, cmpHash); !slices.Equal(evs.Evicted, slices.SortedFunc(slices.Values(want), cmpHash)) || len(evs.Sealed) != 0 || evs.Reset {
		t.Fatalf("events after eviction %+v, want the 4 evicted hashes", evs)
	}

	// A request of the evicted domain (running at the eviction, or
	// made later) hits nothing and cannot seal: nothing of the domain
	// is cached again.
	a3 := kvpool.Owner{Tenant: "a", Request: "3", Epoch: 1}
	pages, hit := prefixOwner(t, p, a3, 12, tagsQ, 0xA3)
	if hit != 0 || pages[0] == running[0] || pages[1] == running[1] {
		t.Fatalf("after eviction a new request hit %d pages (table %v, the retired pages %v)", hit, pages, running[:2])
	}
	if n, err := p.Seal(a3, tagsQ); err != nil || n != 0 {
		t.Fatalf("Seal in an evicted domain = %d, %v; want nothing sealed", n, err)
	}
	// The retired pages are freed, not cached, when their reader ends.
	free := checkAccounting(t, p).Free
	release(a2)
	if s := checkAccounting(t, p); s.Free != free+3 || s.Cached != 2 || s.Shared != 0 {
		t.Fatalf("after the reader of retired pages released (%d free before): %+v; want its own page and the 2 retired ones freed", free, s)
	}
	for _, id := range running[:2] {
		if info, _ := p.Page(id); info.State != kvpool.Free {
			t.Fatalf("retired page %d is %v after its reader released", id, info.State)
		}
	}
	release(a3)
	if s := checkAccounting(t, p); s.Cached != 2 || s.Free != s.Total-2 || p.Lookup(tagsQ) != 0 || p.Lookup(tagsB) != 2 {
		t.Fatalf("after every request of a ended: %+v; want only b's 2 pages cached", s)
	}
	// Evicting again, or a domain with no page, changes nothing.
	if ev := p.EvictDomains([]cachekey.Domain{da, domain(t, "nobody")}, true); ev.Freed != 0 || ev.Retired != 0 {
		t.Fatalf("second EvictDomains = %+v, want nothing", ev)
	}
	// Another domain (a re-created tenant: a new incarnation) caches as usual.
	dn, _ := cachekey.Derive(testSecret, cachekey.ModeTenant, cachekey.Scope{Tenant: "a", Incarnation: "i2"})
	tagsN := kvpool.Tags(dn, 1, "", []int32{9, 8, 7, 6, 5, 4, 3, 2, 1}, 4)
	n1 := kvpool.Owner{Tenant: "a", Request: "4", Epoch: 1}
	seal(n1, tagsN, 0xA4)
	release(n1)
	if s := checkAccounting(t, p); s.Cached != 4 || p.Lookup(tagsN) != 2 {
		t.Fatalf("the new incarnation's pages are not cached: %+v", s)
	}
}

// TestEvictedDomainsAreBounded: the pool remembers the last
// MaxEvictedDomains domains evicted for good; an older one may seal
// again, and so may one evicted not for good (a disabled tenant
// re-enabled, a cache setting changed back).
func TestEvictedDomainsAreBounded(t *testing.T) {
	p := small(t)
	first := domain(t, "first")
	p.EvictDomains([]cachekey.Domain{first}, true)
	tags := kvpool.Tags(first, 1, "", []int32{1, 2, 3, 4}, 4)
	o := kvpool.Owner{Tenant: "first", Request: "1", Epoch: 1}
	prefixOwner(t, p, o, 4, tags, 1)
	if n, _ := p.Seal(o, tags); n != 0 {
		t.Fatalf("sealed %d pages of a domain just evicted", n)
	}
	again := domain(t, "again")
	tagsAgain := kvpool.Tags(again, 1, "", []int32{1, 2, 3, 4}, 4)
	a := kvpool.Owner{Tenant: "again", Request: "1", Epoch: 1}
	prefixOwner(t, p, a, 4, tagsAgain, 2)
	p.EvictDomains([]cachekey.Domain{again}, false)
	if n, err := p.Seal(a, tagsAgain); err != nil || n != 1 {
		t.Fatalf("Seal after an eviction not for good = %d, %v; want the page sealed", n, err)
	}
	ds := make([]cachekey.Domain, kvpool.MaxEvictedDomains)
	for i := range ds {
		ds[i][0], ds[i][1], ds[i][2] = 0xEE, byte(i), byte(i>>8)
	}
	p.EvictDomains(ds, true)
	if n, err := p.Seal(o, tags); err != nil || n != 1 {
		t.Fatalf("Seal after %d later evictions = %d, %v; want the page sealed", len(ds), n, err)
	}
	checkAccounting(t, p)
}

func cmpHash(a, b cachekey.Hash) int { return slices.Compare(a[:], b[:]) }
