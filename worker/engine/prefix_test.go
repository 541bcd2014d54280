package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

func cacheDomain(t *testing.T, tenant string) cachekey.Domain {
	t.Helper()
	d, ok := cachekey.Derive(bytes.Repeat([]byte("k"), cachekey.MinSecretBytes), cachekey.ModeTenant, cachekey.Scope{Tenant: tenant, Incarnation: "i1"})
	if !ok {
		t.Fatal("no domain")
	}
	return d
}

// runCached runs one request through the prefix cache of domain d as a
// both worker does: reserve with the tags of prompt[:len-1] under o's
// adapter, run, release.
func (r *rig) runCached(t *testing.T, o kvpool.Owner, d cachekey.Domain, p []int32, s engine.Sampling) outcome {
	t.Helper()
	tags := kvpool.Tags(d, 1, o.Adapter, p[:len(p)-1], pageTokens)
	pages, hit, err := r.pool.ReservePrefix(o, len(p)+s.MaxTokens, tags)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: s,
		Prefix: &engine.Prefix{Domain: d, Version: 1, Hit: hit}, Adapter: r.adapters[o.Adapter]})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, st)
	if _, err := r.pool.Release(o); err != nil {
		t.Fatal(err)
	}
	if out.res.Err != nil {
		t.Fatal(out.res.Err)
	}
	if out.res.CachedTokens != hit*pageTokens {
		t.Fatalf("CachedTokens %d, %d pages hit", out.res.CachedTokens, hit)
	}
	return out
}

func cat(parts ...[]int32) []int32 { return slices.Concat(parts...) }

// TestPrefixHitsAreBitIdentical: every answer served from cached prefix
// pages equals, token for token, the same request computed from scratch:
// a shared system prompt, prefixes ending at page boundaries ±1, and a
// multi-turn conversation, greedy and seeded sampling.
func TestPrefixHitsAreBitIdentical(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 24, maxBatch: 4})
	vocab := r.m.Config.VocabSize
	d := cacheDomain(t, "a")
	sys := prompt(21, 2*pageTokens+5, vocab)
	base := prompt(22, 4*pageTokens, vocab)
	var prompts [][]int32
	for i := range 3 {
		prompts = append(prompts, cat(sys, prompt(uint64(30+i), 3+9*i, vocab)))
	}
	for _, k := range []int{pageTokens - 1, pageTokens, pageTokens + 1, 2*pageTokens - 1, 2 * pageTokens, 2*pageTokens + 1} {
		prompts = append(prompts, base[:k], cat(base[:k], prompt(uint64(40+k), 5, vocab)))
	}
	samplings := []engine.Sampling{greedy(6), {Temperature: 0.8, TopP: 0.9, Seed: 3, MaxTokens: 6, IgnoreEOS: true}}
	before := r.eng.Stats().PrefillTokens
	computed := 0
	for i, p := range prompts {
		for j, s := range samplings {
			want := r.run(t, owner(fmt.Sprint("ref", i, j)), p, s)
			got := r.runCached(t, owner(fmt.Sprint("hit", i, j)), d, p, s)
			if !slices.Equal(got.tokens, want.tokens) || got.res.PromptTokens != len(p) {
				t.Fatalf("prompt %d (%d tokens, %d cached), sampling %d: tokens %v, reference %v",
					i, len(p), got.res.CachedTokens, j, got.tokens, want.tokens)
			}
			computed += 2*len(p) - got.res.CachedTokens
		}
	}
	if got := r.eng.Stats().PrefillTokens - before; got != uint64(computed) {
		t.Fatalf("engine prefilled %d tokens, expected %d: cached positions were recomputed", got, computed)
	}

	// Multi-turn: every turn re-sends the conversation so far.
	conv := slices.Clone(sys)
	for turn := range 4 {
		conv = cat(conv, prompt(uint64(50+turn), 7+turn*5, vocab))
		want := r.run(t, owner(fmt.Sprint("ref-turn", turn)), conv, greedy(8))
		got := r.runCached(t, owner(fmt.Sprint("turn", turn)), d, conv, greedy(8))
		if !slices.Equal(got.tokens, want.tokens) {
			t.Fatalf("turn %d: tokens %v, reference %v", turn, got.tokens, want.tokens)
		}
		if turn > 0 && got.res.CachedTokens < len(conv)-len(want.tokens)-2*pageTokens {
			t.Fatalf("turn %d reused only %d of %d tokens", turn, got.res.CachedTokens, len(conv))
		}
		conv = cat(conv, got.tokens)
	}
	if s := r.pool.Stats(); s.Hits == 0 || s.Violations != 0 || s.Reserved+s.InUse != 0 {
		t.Fatalf("pool after the runs: %+v", s)
	}
}

// TestPrefixNeverCrossesDomains: two tenants sending the same prompt each
// compute and seal their own copy.
func TestPrefixNeverCrossesDomains(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	p := prompt(60, 3*pageTokens+2, r.m.Config.VocabSize)
	da, db := cacheDomain(t, "a"), cacheDomain(t, "b")
	a := r.runCached(t, owner("a1"), da, p, greedy(4))
	b := r.runCached(t, owner("b1"), db, p, greedy(4))
	if a.res.CachedTokens != 0 || b.res.CachedTokens != 0 {
		t.Fatalf("cached tokens across domains: a %d, b %d", a.res.CachedTokens, b.res.CachedTokens)
	}
	if !slices.Equal(a.tokens, b.tokens) {
		t.Fatal("same prompt, different answers")
	}
	if s := r.pool.Stats(); s.Seals != 6 || s.Cached != 6 {
		t.Fatalf("want two sealed copies of 3 pages: %+v", s)
	}
	if again := r.runCached(t, owner("a2"), da, p, greedy(4)); again.res.CachedTokens != 3*pageTokens {
		t.Fatalf("same tenant reused %d tokens", again.res.CachedTokens)
	}
}

// TestPrefixReaderPresentsItsOwnTags: the engine computes the tags from
// the prompt it runs and the domain it is given; pages looked up for
// another domain or another prompt are refused before any step, with no
// output.
func TestPrefixReaderPresentsItsOwnTags(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	vocab := r.m.Config.VocabSize
	p := prompt(70, 2*pageTokens+3, vocab)
	da := cacheDomain(t, "a")
	r.runCached(t, owner("seed"), da, p, greedy(2))
	reserveHit := func(o kvpool.Owner) []kvpool.PageID {
		pages, hit, err := r.pool.ReservePrefix(o, len(p)+4, kvpool.Tags(da, 1, "", p[:len(p)-1], pageTokens))
		if err != nil || hit != 2 {
			t.Fatalf("hit %d, %v", hit, err)
		}
		r.pool.Activate(o)
		t.Cleanup(func() { r.pool.Release(o) })
		return pages
	}
	// Another domain presented for domain a's pages.
	o := owner("wrong-domain")
	expectViolation(t, r, engine.Request{Owner: o, Pages: reserveHit(o), Prompt: p, Sampling: greedy(4),
		Prefix: &engine.Prefix{Domain: cacheDomain(t, "b"), Version: 1, Hit: 2}})
	// A prompt that differs in the second page from the one looked up.
	o = owner("wrong-prompt")
	q := slices.Clone(p)
	q[pageTokens+3] = (q[pageTokens+3] + 1) % int32(vocab)
	expectViolation(t, r, engine.Request{Owner: o, Pages: reserveHit(o), Prompt: q, Sampling: greedy(4),
		Prefix: &engine.Prefix{Domain: da, Version: 1, Hit: 2}})
	// Shared pages read without a prefix: they are sealed, not owned.
	o = owner("no-prefix")
	expectViolation(t, r, engine.Request{Owner: o, Pages: reserveHit(o), Prompt: p, Sampling: greedy(4)})
	// A hit that would leave nothing to compute is a bad request.
	if _, err := r.eng.Submit(context.Background(), engine.Request{Owner: owner("x"), Pages: make([]kvpool.PageID, 3),
		Prompt: p[:2*pageTokens], Sampling: greedy(1), Prefix: &engine.Prefix{Domain: da, Hit: 2}}); err == nil {
		t.Fatal("a prefix covering the whole prompt was accepted")
	}
}

// TestConcurrentSamePrefixIsCorrect: requests of one domain with the same
// new prefix running at once each compute it (none can reuse a page that
// is still being written), all answer like the reference, and the pool
// keeps one sealed copy; the next request reuses it.
func TestConcurrentSamePrefixIsCorrect(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 16, maxBatch: 4})
	p := prompt(80, 3*pageTokens+1, r.m.Config.VocabSize)
	want := r.run(t, owner("ref"), p, greedy(5))
	d := cacheDomain(t, "a")
	// All three reserve before any is submitted: none can find another's
	// pages sealed yet (the engine seals as soon as a prompt is written).
	var owners []kvpool.Owner
	var reserved [][]kvpool.PageID
	for i := range 3 {
		o := owner(fmt.Sprint("c", i))
		pages, hit, err := r.pool.ReservePrefix(o, len(p)+5, kvpool.Tags(d, 1, "", p[:len(p)-1], pageTokens))
		if err != nil || hit != 0 {
			t.Fatalf("hit %d, %v", hit, err)
		}
		r.pool.Activate(o)
		owners, reserved = append(owners, o), append(reserved, pages)
	}
	var streams []*engine.Stream
	for i, o := range owners {
		st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: reserved[i], Prompt: p, Sampling: greedy(5),
			Prefix: &engine.Prefix{Domain: d, Version: 1}})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	for i, st := range streams {
		got := collect(t, st)
		if got.res.Err != nil || !slices.Equal(got.tokens, want.tokens) {
			t.Fatalf("request %d: %v %v, reference %v", i, got.res.Err, got.tokens, want.tokens)
		}
		if _, err := r.pool.Release(owners[i]); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.pool.Stats(); s.Seals != 3 || s.Cached != 3 || s.Violations != 0 {
		t.Fatalf("want one sealed copy of the 3 prompt pages: %+v", s)
	}
	if got := r.runCached(t, owner("after"), d, p, greedy(5)); got.res.CachedTokens != 3*pageTokens || !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("after: %d cached, tokens %v", got.res.CachedTokens, got.tokens)
	}
}
