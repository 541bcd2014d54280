package routing

import (
	"bytes"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
)

func dom(t *testing.T, tenant string) cachekey.Domain {
	d, ok := cachekey.Derive(bytes.Repeat([]byte("r"), cachekey.MinSecretBytes), cachekey.ModeTenant, tenant, "")
	if !ok {
		t.Fatal("no domain")
	}
	return d
}

func TestPrefixScoreNeverCrossesDomains(t *testing.T) {
	ix := NewIndex(100)
	prompt := make([]int32, 4*16+1)
	for i := range prompt {
		prompt[i] = int32(i)
	}
	a := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: prompt}
	b := &Request{Model: "m", Domain: dom(t, "b"), Cached: true, Prompt: prompt}
	ix.Record("m", "w1", a.Hashes(16)[:3])
	s := PrefixScorer{Index: ix}
	w1 := registry.Candidate{ID: "w1", PageTokens: 16}
	if got := s.Score(a, w1); got != 0.75 {
		t.Fatalf("same domain score %v, want 3 of 4 pages", got)
	}
	if got := s.Score(b, w1); got != 0 {
		t.Fatalf("another domain scored %v on the same tokens", got)
	}
	if got := s.Score(a, registry.Candidate{ID: "w2", PageTokens: 16}); got != 0 {
		t.Fatalf("another worker scored %v", got)
	}
	if got := s.Score(&Request{Model: "other", Domain: a.Domain, Cached: true, Prompt: prompt}, w1); got != 0 {
		t.Fatalf("another model scored %v", got)
	}
	off := &Request{Model: "m", Domain: a.Domain, Prompt: prompt}
	if got := s.Score(off, w1); got != 0 {
		t.Fatalf("a request without the cache scored %v", got)
	}
	ix.Forget("w1")
	if ix.Len() != 0 || s.Score(a, w1) != 0 {
		t.Fatal("Forget left entries")
	}
}

func TestIndexIsBounded(t *testing.T) {
	ix := NewIndex(3)
	r := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: make([]int32, 5*4+1)}
	h := r.Hashes(4)
	ix.Record("m", "w", h[:3])
	ix.Record("m", "w", h[3:5]) // evicts the two least recent: pages 0, 1
	if ix.Len() != 3 || ix.Match("m", "w", h) != 0 || ix.Match("m", "w", h[2:]) != 3 {
		t.Fatalf("len %d, match %d/%d", ix.Len(), ix.Match("m", "w", h), ix.Match("m", "w", h[2:]))
	}
}

func TestRouterWeighsScorers(t *testing.T) {
	ix := NewIndex(10)
	r := &Request{Model: "m", Domain: dom(t, "a"), Cached: true, Prompt: make([]int32, 33)}
	ix.Record("m", "hot", r.Hashes(16))
	rt := &Router{Scorers: []Weighted{{PrefixScorer{ix}, 2}, {FreePagesScorer{}, 1}, {LoadScorer{}, 1}}}
	hot := registry.Candidate{ID: "hot", PageTokens: 16, FreePages: 10, TotalPages: 100, Load: 3}
	cold := registry.Candidate{ID: "cold", PageTokens: 16, FreePages: 100, TotalPages: 100, Load: 0}
	if rt.Score(r, hot) <= rt.Score(r, cold) {
		t.Fatalf("a full hit (%v) should outrank an idle worker (%v)", rt.Score(r, hot), rt.Score(r, cold))
	}
	if d := Default(ix); d.Score(r, hot) != 1 || d.Score(r, cold) != 0 {
		t.Fatal("the default router is the prefix score alone")
	}
}
