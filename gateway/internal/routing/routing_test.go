package routing

import (
	"bytes"
	"slices"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/kvpool"
)

func dom(t testing.TB, tenant string) cachekey.Domain {
	d, ok := cachekey.Derive(bytes.Repeat([]byte("r"), cachekey.MinSecretBytes), cachekey.ModeTenant, cachekey.Scope{Tenant: tenant, Incarnation: "i1"})
	if !ok {
		t.Fatal("no domain")
	}
	return d
}

// workerHashes are the chain hashes a worker seals for prompt under
// adapter: every full page of the whole prompt, computed as the worker
// does (kvpool.Tags, which the engine calls with the request's
// Owner.Adapter), independently of Request.Hashes.
func workerHashes(d cachekey.Domain, version uint64, adapter string, prompt []int32, pt int) []cachekey.Hash {
	var out []cachekey.Hash
	for _, tag := range kvpool.Tags(d, version, adapter, prompt, pt) {
		out = append(out, tag.Hash)
	}
	return out
}

func seq(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	return p
}

const ver = 7

func TestPrefixScoreNeverCrossesDomains(t *testing.T) {
	ix := NewIndex(100)
	prompt := seq(4*16 + 1)
	a := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: prompt}
	b := &Request{Model: "m", Domain: dom(t, "b"), Cached: true, Prompt: prompt}
	ix.Apply("m", "w1", Events{Sealed: workerHashes(a.Domain, ver, "", prompt, 16)[:3]})
	s := PrefixScorer{Index: ix}
	w1 := registry.Candidate{ID: "w1", PageTokens: 16, CacheVersion: ver}
	if got := s.Score(a, w1); got != 0.75 {
		t.Fatalf("same domain score %v, want 3 of 4 pages", got)
	}
	if got := s.Score(b, w1); got != 0 {
		t.Fatalf("another domain scored %v on the same tokens", got)
	}
	if got := s.Score(a, registry.Candidate{ID: "w2", PageTokens: 16, CacheVersion: ver}); got != 0 {
		t.Fatalf("another worker scored %v", got)
	}
	if got := s.Score(&Request{Model: "other", Domain: a.Domain, Cached: true, Prompt: prompt}, w1); got != 0 {
		t.Fatalf("another model scored %v", got)
	}
	if got := s.Score(a, registry.Candidate{ID: "w1", PageTokens: 16, CacheVersion: ver + 1}); got != 0 {
		t.Fatalf("another cache version scored %v", got)
	}
	if got := s.Score(a, registry.Candidate{ID: "w1", PageTokens: 16}); got != 0 {
		t.Fatalf("a worker without a cache scored %v", got)
	}
	off := &Request{Model: "m", Domain: a.Domain, Prompt: prompt}
	if got := s.Score(off, w1); got != 0 {
		t.Fatalf("a request without the cache scored %v", got)
	}
	// Both tenants' pages on one worker: each matches only its own.
	ix.Apply("m", "w1", Events{Sealed: workerHashes(b.Domain, ver, "", prompt, 16)[:1]})
	if sa, sb := s.Score(a, w1), s.Score(b, w1); sa != 0.75 || sb != 0.25 {
		t.Fatalf("scores a %v b %v, want 0.75 and 0.25", sa, sb)
	}
	ix.Forget("w1")
	if ix.Len() != 0 || s.Score(a, w1) != 0 {
		t.Fatal("Forget left entries")
	}
}

func TestIndexFollowsEvictionsAndSnapshots(t *testing.T) {
	ix := NewIndex(100)
	prompt := seq(4*4 + 1)
	h := workerHashes(dom(t, "a"), ver, "", prompt, 4)
	ix.Apply("m", "w", Events{Sealed: h})
	ix.Apply("m", "v", Events{Sealed: h[:2]})
	if ix.Match("m", "w", h) != 4 || ix.Len() != 6 {
		t.Fatalf("match %d len %d", ix.Match("m", "w", h), ix.Len())
	}
	ix.Apply("m", "w", Events{Evicted: h[1:2]})
	if got := ix.Match("m", "w", h); got != 1 {
		t.Fatalf("after evicting page 1: match %d, want 1", got)
	}
	if ix.Match("m", "v", h) != 2 {
		t.Fatal("an eviction on one worker removed another worker's entry")
	}
	// An eviction of a page never reported is a no-op.
	ix.Apply("m", "w", Events{Evicted: workerHashes(dom(t, "b"), ver, "", prompt, 4)})
	if ix.Len() != 5 {
		t.Fatalf("len %d after a no-op eviction", ix.Len())
	}
	ix.Apply("m", "w", Events{Sealed: h[3:], Snapshot: true})
	if ix.Match("m", "w", h) != 0 || ix.Match("m", "w", h[3:]) != 1 || ix.Len() != 3 {
		t.Fatalf("snapshot: match %d/%d len %d", ix.Match("m", "w", h), ix.Match("m", "w", h[3:]), ix.Len())
	}
}

func TestIndexIsBounded(t *testing.T) {
	ix := NewIndex(3)
	h := workerHashes(dom(t, "a"), ver, "", make([]int32, 5*4), 4)
	ix.Apply("m", "w", Events{Sealed: h[:3]})
	ix.Apply("m", "w", Events{Sealed: h[3:5]}) // drops the two least recent: pages 0, 1
	if ix.Len() != 3 || ix.Match("m", "w", h) != 0 || ix.Match("m", "w", h[2:]) != 3 || ix.Dropped() != 2 {
		t.Fatalf("len %d, match %d/%d, dropped %d", ix.Len(), ix.Match("m", "w", h), ix.Match("m", "w", h[2:]), ix.Dropped())
	}
}

func TestScorers(t *testing.T) {
	r := &Request{Model: "m"}
	for _, c := range []struct {
		s    Scorer
		c    registry.Candidate
		want float64
	}{
		{LoadScorer{}, registry.Candidate{Load: 0}, 1},
		{LoadScorer{}, registry.Candidate{Load: 3}, 0.25},
		{LoadScorer{}, registry.Candidate{Load: -2}, 1},
		{FreePagesScorer{}, registry.Candidate{FreePages: 25, TotalPages: 100}, 0.25},
		{FreePagesScorer{}, registry.Candidate{FreePages: 200, TotalPages: 100}, 1},
		{FreePagesScorer{}, registry.Candidate{FreePages: -5, TotalPages: 100}, 0},
		{FreePagesScorer{}, registry.Candidate{}, 0},
		{PrefixScorer{}, registry.Candidate{CacheVersion: ver, PageTokens: 4}, 0},
	} {
		if got := c.s.Score(r, c.c); got != c.want {
			t.Errorf("%T.Score(%+v) = %v, want %v", c.s, c.c, got, c.want)
		}
	}
}

func TestRouterWeighsScorers(t *testing.T) {
	ix := NewIndex(10)
	prompt := seq(33)
	r := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: prompt}
	ix.Apply("m", "hot", Events{Sealed: workerHashes(r.Domain, ver, "", prompt, 16)})
	rt := Default(ix)
	hot := registry.Candidate{ID: "hot", PageTokens: 16, FreePages: 10, TotalPages: 100, Load: 3, CacheVersion: ver}
	cold := registry.Candidate{ID: "cold", PageTokens: 16, FreePages: 100, TotalPages: 100, Load: 0, CacheVersion: ver}
	if rt.Score(r, hot) <= rt.Score(r, cold) {
		t.Fatalf("a full hit (%v) should outrank an idle worker (%v)", rt.Score(r, hot), rt.Score(r, cold))
	}
	// Without a hit, load and free pages decide.
	other := &Request{Model: "m", Domain: dom(t, "b"), Cached: true, Prompt: prompt}
	if rt.Score(other, hot) >= rt.Score(other, cold) {
		t.Fatalf("without a hit the busy worker (%v) should lose to the idle one (%v)", rt.Score(other, hot), rt.Score(other, cold))
	}
	// Both have room: each is raised by the sum of the weights, plus 1.
	want := DefaultPrefixWeight*1 + DefaultLoadWeight*0.25 + DefaultFreePagesWeight*0.1 +
		(DefaultPrefixWeight + DefaultLoadWeight + DefaultFreePagesWeight + DefaultAdapterWeight + 1)
	if got := rt.Score(r, hot); got != want {
		t.Fatalf("weighted score %v, want %v", got, want)
	}
}

func TestRoundRobinTakesEachRoleInTurn(t *testing.T) {
	rr := RoundRobinRouter()
	decode := []registry.Candidate{{ID: "d1", Role: controlpb.Role_ROLE_DECODE}, {ID: "d2", Role: controlpb.Role_ROLE_DECODE}}
	prefill := []registry.Candidate{{ID: "p1", Role: controlpb.Role_ROLE_PREFILL}, {ID: "p2", Role: controlpb.Role_ROLE_PREFILL}}
	best := func(req *Request, cs []registry.Candidate) string {
		b := cs[0]
		for _, c := range cs[1:] {
			if rr.Score(req, c) > rr.Score(req, b) {
				b = c
			}
		}
		return b.ID
	}
	counts := map[string]int{}
	for range 8 {
		req := &Request{Model: "m"}
		counts[best(req, decode)]++
		counts[best(req, prefill)]++
	}
	for _, id := range []string{"d1", "d2", "p1", "p2"} {
		if counts[id] != 4 {
			t.Fatalf("round robin over 8 requests: %v, want 4 each", counts)
		}
	}
}

// TestPrefixScoreSeparatesAdapters (DESIGN I8a): the gateway's hashes of
// a request under a LoRA adapter are the ones the worker seals for it
// (kvpool.Tags with the request's adapter), and pages sealed under
// adapter A score nothing for a request under adapter B or the base
// model with the same tokens, even in the same domain.
func TestPrefixScoreSeparatesAdapters(t *testing.T) {
	const adapterA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	const adapterB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	prompt := seq(4*16 + 1)
	d := dom(t, "a")
	a := &Request{Model: "m", Domain: d, Adapter: adapterA, Cached: true, Prompt: prompt}
	sealedA := workerHashes(d, ver, adapterA, prompt, 16)
	if got := a.Hashes(16, ver); !slices.Equal(got, sealedA[:4]) {
		t.Fatalf("gateway hashes %x, worker's %x", got, sealedA[:4])
	}
	if slices.Equal(a.Hashes(16, ver), workerHashes(d, ver, "", prompt, 16)[:4]) {
		t.Fatal("the adapter request hashes like the base model")
	}
	ix := NewIndex(100)
	ix.Apply("m", "w1", Events{Sealed: sealedA})
	s := PrefixScorer{Index: ix}
	w1 := registry.Candidate{ID: "w1", PageTokens: 16, CacheVersion: ver}
	if got := s.Score(a, w1); got != 1 {
		t.Fatalf("adapter A's request scored %v on adapter A's pages, want 1", got)
	}
	for _, other := range []string{adapterB, ""} {
		if got := s.Score(&Request{Model: "m", Domain: d, Adapter: other, Cached: true, Prompt: prompt}, w1); got != 0 {
			t.Fatalf("a request under adapter %q scored %v on adapter A's pages", other, got)
		}
	}
}
