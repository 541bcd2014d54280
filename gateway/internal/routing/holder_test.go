package routing

import (
	"testing"

	"github.com/warden-ai/warden/gateway/internal/registry"
)

// TestHolderQueueBoundsTheWaitForTheHolder: a saturated worker holding the
// prompt is admitted while the requests beyond its budget stay within
// Share × its batch × the share of the prompt it holds; past that bound,
// and when it holds nothing, it is refused. A worker with room is always
// admitted.
func TestHolderQueueBoundsTheWaitForTheHolder(t *testing.T) {
	ix := NewIndex(100)
	prompt := seq(4*16 + 1) // 4 pages a hit can cover
	r := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: prompt}
	h := workerHashes(r.Domain, ver, "", prompt, 16)
	ix.Apply("m", "full", Events{Sealed: h})
	ix.Apply("m", "half", Events{Sealed: h[:2]})
	f := HolderQueue{Index: ix, Share: DefaultHolderQueueShare}
	// A batch of 8: budget 10 on a decode worker.
	at := func(id string, inFlight int64) registry.Candidate {
		return registry.Candidate{ID: id, PageTokens: 16, CacheVersion: ver, Slots: 8, Budget: 10, InFlight: inFlight}
	}
	for _, c := range []struct {
		id       string
		inFlight int64
		want     bool
	}{
		{"cold", 9, true},   // room
		{"cold", 10, false}, // saturated, holds nothing
		{"full", 10, true},  // 1 beyond the budget; bound 0.5 × 8 × 1 = 4
		{"full", 13, true},  // 4 beyond
		{"full", 14, false}, // 5 beyond
		{"half", 11, true},  // 2 beyond; bound 0.5 × 8 × 0.5 = 2
		{"half", 12, false}, // 3 beyond
	} {
		if got := f.Admits(r, at(c.id, c.inFlight)); got != c.want {
			t.Errorf("%s with %d in flight (budget 10): admitted %v, want %v", c.id, c.inFlight, got, c.want)
		}
	}
	// Another tenant's request holds nothing anywhere.
	other := &Request{Model: "m", Domain: dom(t, "b"), Cached: true, Prompt: prompt}
	if f.Admits(other, at("full", 10)) {
		t.Error("a saturated worker admitted another domain's request")
	}
	// No budget learned: room.
	if !f.Admits(r, registry.Candidate{ID: "cold", InFlight: 100}) {
		t.Error("a worker without a learned budget was refused")
	}
	// Without an index only room counts (round robin).
	if (HolderQueue{}).Admits(r, at("full", 10)) {
		t.Error("HolderQueue without an index admitted a saturated worker")
	}
}

// TestRouterPrefersAShortQueueAtTheHolder: the default router keeps a
// conversation on its saturated holder over an idle worker while the
// holder's queue is short, and sends it to the idle worker once the
// queue passes the bound; a filter's refusal outranks any score.
func TestRouterPrefersAShortQueueAtTheHolder(t *testing.T) {
	ix := NewIndex(100)
	prompt := seq(4*16 + 1)
	r := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: prompt}
	ix.Apply("m", "hot", Events{Sealed: workerHashes(r.Domain, ver, "", prompt, 16)})
	rt := Default(ix)
	idle := registry.Candidate{ID: "idle", PageTokens: 16, FreePages: 100, TotalPages: 100, CacheVersion: ver, Slots: 8, Budget: 10}
	hot := func(inFlight int64) registry.Candidate {
		return registry.Candidate{ID: "hot", PageTokens: 16, FreePages: 10, TotalPages: 100, Load: inFlight, CacheVersion: ver,
			Slots: 8, Budget: 10, InFlight: inFlight}
	}
	if short := hot(11); rt.Score(r, short) <= rt.Score(r, idle) || !rt.Admits(r, short) {
		t.Fatalf("a holder 2 beyond its budget (%v) lost to an idle worker (%v)", rt.Score(r, short), rt.Score(r, idle))
	}
	if long := hot(14); rt.Score(r, long) >= rt.Score(r, idle) || rt.Admits(r, long) {
		t.Fatalf("a holder 5 beyond its budget (%v) beat an idle worker (%v)", rt.Score(r, long), rt.Score(r, idle))
	}
	// Round robin: a saturated worker ranks below one with room, whatever
	// the turn.
	rr := RoundRobinRouter()
	full := registry.Candidate{ID: "a", Budget: 4, InFlight: 4}
	free := registry.Candidate{ID: "b", Budget: 4, InFlight: 1}
	for range 4 {
		req := &Request{Model: "m"}
		if rr.Score(req, full) >= rr.Score(req, free) {
			t.Fatal("round robin ranked a saturated worker above one with room")
		}
	}
}
