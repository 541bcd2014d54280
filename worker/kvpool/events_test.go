package kvpool_test

import (
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/kvpool"
)

func hashesOf(tags []kvpool.Tag) []cachekey.Hash {
	out := make([]cachekey.Hash, len(tags))
	for i, t := range tags {
		out[i] = t.Hash
	}
	return out
}

func sameSet(a, b []cachekey.Hash) bool {
	cmp := func(x, y cachekey.Hash) int { return slices.Compare(x[:], y[:]) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// TestCacheEventsReportSealsAndEvictions: each reader's cursor sees every
// seal and eviction once, whatever the other readers read (a worker
// reports to each of its gateways); a snapshot lists the sealed pages.
func TestCacheEventsReportSealsAndEvictions(t *testing.T) {
	p := small(t) // 8 pages × 4 tokens
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	tags := kvpool.Tags(domain(t, "a"), 1, "", prompt, 4)
	a1 := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}
	prefixOwner(t, p, a1, 12, tags, 0xA1)
	snap, c1 := p.CacheSnapshot()
	if len(snap.Sealed)+len(snap.Evicted) != 0 || !snap.Reset {
		t.Fatalf("snapshot before any seal: %+v", snap)
	}
	c2 := c1
	if ev, next := p.CacheEventsSince(c1); len(ev.Sealed)+len(ev.Evicted) != 0 || ev.Reset || next != c1 {
		t.Fatalf("events before any seal: %+v, cursor %d→%d", ev, c1, next)
	}
	changed := p.CacheChanged(c1)
	if _, err := p.Seal(a1, tags); err != nil {
		t.Fatal(err)
	}
	<-changed // closed by the seals
	if _, err := p.Release(a1); err != nil {
		t.Fatal(err)
	}
	ev, c1 := p.CacheEventsSince(c1)
	if !sameSet(ev.Sealed, hashesOf(tags)) || len(ev.Evicted) != 0 || ev.Reset {
		t.Fatalf("after sealing 2 pages: %+v", ev)
	}
	if ev, _ := p.CacheEventsSince(c1); len(ev.Sealed)+len(ev.Evicted) != 0 {
		t.Fatalf("the cursor did not move past the events: %+v", ev)
	}
	if snap, _ := p.CacheSnapshot(); !snap.Reset || !sameSet(snap.Sealed, hashesOf(tags)) {
		t.Fatalf("snapshot %+v", snap)
	}
	// A reservation of the whole pool evicts both cached pages.
	reserve(t, p, kvpool.Owner{Tenant: "b", Request: "2", Epoch: 1}, 32)
	ev, _ = p.CacheEventsSince(c1)
	if !sameSet(ev.Evicted, hashesOf(tags)) || len(ev.Sealed) != 0 {
		t.Fatalf("after evicting 2 pages: %+v", ev)
	}
	// The second reader, which read nothing since its snapshot, gets the
	// latest event of each page: evicted.
	if ev, _ := p.CacheEventsSince(c2); !sameSet(ev.Evicted, hashesOf(tags)) || len(ev.Sealed) != 0 || ev.Reset {
		t.Fatalf("second reader: %+v", ev)
	}
}

// TestCacheEventsOverflowBecomesASnapshot: a reader more than
// MaxCacheEvents events behind gets a snapshot, and reads on from it.
func TestCacheEventsOverflowBecomesASnapshot(t *testing.T) {
	n := kvpool.MaxCacheEvents + 2
	p := newPool(t, kvpool.Config{Pages: n, PageTokens: 1, PageBytes: 1})
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i)
	}
	tags := kvpool.Tags(domain(t, "a"), 1, "", prompt, 1)
	o := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}
	prefixOwner(t, p, o, n, tags, 1)
	_, c := p.CacheSnapshot()
	if _, err := p.Seal(o, tags); err != nil {
		t.Fatal(err)
	}
	ev, c := p.CacheEventsSince(c)
	if !ev.Reset || len(ev.Sealed) != kvpool.MaxCacheEvents || len(ev.Evicted) != 0 {
		t.Fatalf("overflowed read: reset %v, %d sealed, %d evicted", ev.Reset, len(ev.Sealed), len(ev.Evicted))
	}
	all := hashesOf(tags)
	for _, h := range ev.Sealed {
		if !slices.Contains(all, h) {
			t.Fatal("the snapshot lists a hash the pool never sealed")
		}
	}
	if ev, _ := p.CacheEventsSince(c); ev.Reset || len(ev.Sealed) != 0 {
		t.Fatalf("the snapshot's cursor is not past the overflow: %+v", ev)
	}
}
