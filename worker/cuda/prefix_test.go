//go:build cuda

package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// gpuEngine is the engine over a cuda backend, as a worker runs it (b is
// nil for the cpu reference engine).
type gpuEngine struct {
	b    *Backend
	pool *kvpool.Pool
	eng  *engine.Engine
}

func newGPUEngine(t *testing.T, m *model.Model, pages int) *gpuEngine {
	t.Helper()
	b, pool := newGPU(t, m, pages, kvpool.Config{PoisonOnReserve: true}, false)
	g := startEngine(t, m, b, pool)
	g.b = b
	return g
}

// newCPUEngine is the cpu reference engine with the same configuration.
func newCPUEngine(t *testing.T, m *model.Model, pages int) *gpuEngine {
	t.Helper()
	cb, pool := newCPU(t, m, pages, false)
	return startEngine(t, m, cb, pool)
}

// startEngine runs an engine over be until the test ends.
func startEngine(t *testing.T, m *model.Model, be engine.Backend, pool *kvpool.Pool) *gpuEngine {
	t.Helper()
	return startEngineSpec(t, m, be, pool, engine.Speculation{})
}

// startEngineSpec is startEngine with speculative decoding configured.
func startEngineSpec(t *testing.T, m *model.Model, be engine.Backend, pool *kvpool.Pool, sp engine.Speculation) *gpuEngine {
	t.Helper()
	eng, err := engine.New(engine.Config{PageTokens: testPageTokens, ChunkTokens: 40, MaxBatch: 4,
		EOS: m.EOSTokenIDs(), Speculation: sp}, be, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &gpuEngine{pool: pool, eng: eng}
}

// testDomain is tenant's cache domain under a fixed test secret.
func testDomain(t *testing.T, tenant string) cachekey.Domain {
	t.Helper()
	d, ok := cachekey.Derive(bytes.Repeat([]byte("k"), cachekey.MinSecretBytes), cachekey.ModeTenant, cachekey.Scope{Tenant: tenant, Incarnation: "i1"})
	if !ok {
		t.Fatal("no cache domain")
	}
	return d
}

// run generates n greedy tokens for prompt as o, through the prefix cache
// of domain d when d is non-nil (as a both worker does: reserve with the
// tags of prompt[:len-1]), and releases the pages. It returns the tokens
// and the result.
func (g *gpuEngine) run(t *testing.T, o kvpool.Owner, d *cachekey.Domain, prompt []int32, n int) ([]int32, *engine.Result) {
	t.Helper()
	out := g.generate(t, o, d, prompt, engine.Sampling{MaxTokens: n, IgnoreEOS: true})
	return out.tokens, out.res
}

// outcome is what one sequence's stream delivered.
type outcome struct {
	tokens []int32
	lps    []*engine.Logprobs // one per token, when the request asked for them
	res    *engine.Result
}

// generate runs one request with sampling sp (see run).
func (g *gpuEngine) generate(t *testing.T, o kvpool.Owner, d *cachekey.Domain, prompt []int32, sp engine.Sampling) outcome {
	t.Helper()
	pages, px := g.reserve(t, o, d, prompt, len(prompt)+sp.MaxTokens)
	st, err := g.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: prompt,
		Sampling: sp, Prefix: px})
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, o, st)
	g.release(t, o, out.res, px)
	return out
}

// reserve reserves and activates tokens tokens' pages for o, through the
// prefix cache of d when d is non-nil (the tags of prompt[:len-1]).
func (g *gpuEngine) reserve(t *testing.T, o kvpool.Owner, d *cachekey.Domain, prompt []int32, tokens int) ([]kvpool.PageID, *engine.Prefix) {
	t.Helper()
	var (
		pages []kvpool.PageID
		px    *engine.Prefix
		err   error
	)
	if d != nil {
		tags := kvpool.Tags(*d, 1, "", prompt[:len(prompt)-1], testPageTokens)
		var hit int
		pages, hit, err = g.pool.ReservePrefix(o, tokens, tags)
		px = &engine.Prefix{Domain: *d, Version: 1, Hit: hit}
	} else {
		pages, err = g.pool.Reserve(o, tokens)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := g.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	return pages, px
}

// release releases o's pages after a run ending in res and checks the
// cached tokens it reports against the pages the reservation hit.
func (g *gpuEngine) release(t *testing.T, o kvpool.Owner, res *engine.Result, px *engine.Prefix) {
	t.Helper()
	// A sequence refused by the owner check may have left its pages
	// quarantined: only a clean run must release them.
	if _, err := g.pool.Release(o); err != nil && res.Err == nil {
		t.Fatal(err)
	}
	if px != nil && px.Hit > 0 && res.Err == nil && res.CachedTokens != px.Hit*testPageTokens {
		t.Fatalf("%v: CachedTokens %d, %d pages hit", o, res.CachedTokens, px.Hit)
	}
}

// collect reads o's stream st to its result.
func collect(t *testing.T, o kvpool.Owner, st *engine.Stream) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out outcome
	for out.res == nil {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("stream of %v ended without a result: %v", o, err)
		}
		switch ev.Kind {
		case engine.EventToken:
			out.tokens = append(out.tokens, ev.Token)
			if ev.Logprobs != nil {
				out.lps = append(out.lps, ev.Logprobs)
			}
		case engine.EventDone:
			out.res = ev.Result
		}
	}
	return out
}

// TestPrefixCacheHitsEqualMisses runs the engine on the device with the
// prefix cache: every answer served from sealed pages (a shared system
// prompt, prefixes ending at page boundaries ±1, a multi-turn
// conversation) equals, token for token, the same request computed from
// scratch on the device, and the cpu engine's; the device check reads the
// shared pages through their prefix tags and refuses nothing.
func TestPrefixCacheHitsEqualMisses(t *testing.T) {
	m := openTiny(t, model.BF16)
	vocab := m.Config.VocabSize
	g := newGPUEngine(t, m, 128)
	d := testDomain(t, "a")
	sys := testPrompt(2*testPageTokens+5, vocab, 21)
	base := testPrompt(4*testPageTokens, vocab, 22)
	var prompts [][]int32
	for i := range 3 {
		prompts = append(prompts, slices.Concat(sys, testPrompt(3+9*i, vocab, 30+i)))
	}
	for _, k := range []int{testPageTokens - 1, testPageTokens, testPageTokens + 1, 2*testPageTokens - 1, 2 * testPageTokens, 2*testPageTokens + 1} {
		prompts = append(prompts, base[:k], slices.Concat(base[:k], testPrompt(5, vocab, 40+k)))
	}
	owner := func(name string, i int) kvpool.Owner {
		return kvpool.Owner{Tenant: "a", Request: fmt.Sprint(name, i), Epoch: 1}
	}
	cached := 0
	for i, p := range prompts {
		want, res := g.run(t, owner("miss", i), nil, p, 6)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		got, res := g.run(t, owner("hit", i), &d, p, 6)
		if res.Err != nil {
			t.Fatalf("prompt %d: %v", i, res.Err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prompt %d (%d tokens, %d cached): tokens %v, uncached %v", i, len(p), res.CachedTokens, got, want)
		}
		cached += res.CachedTokens
	}
	conv := slices.Clone(sys)
	for turn := range 4 {
		conv = slices.Concat(conv, testPrompt(7+turn*5, vocab, 50+turn))
		want, _ := g.run(t, owner("turn-miss", turn), nil, conv, 8)
		got, res := g.run(t, owner("turn-hit", turn), &d, conv, 8)
		if res.Err != nil || !slices.Equal(got, want) {
			t.Fatalf("turn %d: tokens %v (err %v), uncached %v", turn, got, res.Err, want)
		}
		cached += res.CachedTokens
		conv = slices.Concat(conv, got)
	}
	// The cpu engine's answer for the last conversation turn.
	cg := newCPUEngine(t, m, 128)
	last := conv[:len(conv)-8]
	want, _ := cg.run(t, owner("cpu", 0), nil, last, 8)
	if got := conv[len(conv)-8:]; !slices.Equal(got, want) {
		t.Fatalf("last turn from the device cache: %v, cpu engine %v", got, want)
	}
	s := g.pool.Stats()
	if s.Hits == 0 || cached == 0 || s.Violations != 0 {
		t.Fatalf("pool after the runs: %+v (%d cached tokens)", s, cached)
	}
	t.Logf("PREFIX device hits equal misses: %d prompts + 4 turns, %d cached tokens, %d hits", len(prompts), cached, s.Hits)
}

// sealedPages returns the pool's sealed pages.
func sealedPages(pool *kvpool.Pool) []kvpool.PageID {
	var ids []kvpool.PageID
	for id := kvpool.PageID(0); ; id++ {
		info, ok := pool.Page(id)
		if !ok {
			return ids
		}
		if info.State == kvpool.Sealed {
			ids = append(ids, id)
		}
	}
}

// flipDeviceTag changes page id's device tag behind the mirror's back: the
// mirror must hold no pending update for it (else the next step would
// restore it).
func flipDeviceTag(t *testing.T, b *Backend, id kvpool.PageID, flip func(*devTag)) {
	t.Helper()
	b.mirror.mu.Lock()
	tag, dirty := b.mirror.tags[id], b.mirror.isDirty[id]
	b.mirror.mu.Unlock()
	if dirty || tag.State != tagSealed {
		t.Fatalf("page %d: device tag %+v (pending update %v), want an applied sealed tag", id, tag, dirty)
	}
	flip(&tag)
	err := b.dev.do(func() error {
		return cu.MemcpyHtoD(b.tagsDev+cu.DevicePtr(int(id)*int(unsafe.Sizeof(devTag{}))), unsafe.Pointer(&tag), int64(unsafe.Sizeof(tag)))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSealedPageChecksOnDevice checks that the device refuses sealed pages
// the host check would refuse, with the violation path of owned pages
// (kvpool.ErrOwnerViolation, counted, no output):
//   - a domain bit flipped in a sealed page's device tag (the host sees a
//     matching tag, the device a foreign domain);
//   - a chain-hash bit flipped likewise;
//   - a chunk of another domain presenting its own tags for the page;
//   - a chunk writing into a sealed page, or reading it as an owned page.
func TestSealedPageChecksOnDevice(t *testing.T) {
	m := openTiny(t, model.F32)
	vocab := m.Config.VocabSize
	p := testPrompt(3*testPageTokens+2, vocab, 60)
	da, db := testDomain(t, "a"), testDomain(t, "b")

	flips := []struct {
		name   string
		flip   func(*devTag)
		reason kvpool.Reason
	}{
		{"domain bit flipped in the device tag", func(d *devTag) { d.Epoch ^= 1 << 17 }, kvpool.ReasonForeignDomain},
		{"chain hash bit flipped in the device tag", func(d *devTag) { d.Hash ^= 1 }, kvpool.ReasonTagMismatch},
	}
	for _, tc := range flips {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPUEngine(t, m, 32)
			o := kvpool.Owner{Tenant: "a", Request: "writer", Epoch: 1}
			if _, res := g.run(t, o, &da, p, 4); res.Err != nil {
				t.Fatal(res.Err)
			}
			ids := sealedPages(g.pool)
			if len(ids) != 3 {
				t.Fatalf("%d sealed pages after the writer, want 3", len(ids))
			}
			for _, id := range ids {
				flipDeviceTag(t, g.b, id, tc.flip)
			}
			before := g.pool.Stats().Violations
			toks, res := g.run(t, kvpool.Owner{Tenant: "a", Request: "reader", Epoch: 1}, &da, p, 4)
			var ve *kvpool.ViolationError
			if !errors.Is(res.Err, kvpool.ErrOwnerViolation) || !errors.As(res.Err, &ve) || len(toks) != 0 {
				t.Fatalf("reader: %d tokens, error %v; want an owner violation and no output", len(toks), res.Err)
			}
			if ve.Reason != tc.reason || !slices.Contains(ids, ve.Page) {
				t.Fatalf("violation %v, want %v on a sealed page", ve, tc.reason)
			}
			if g.pool.Stats().Violations <= before {
				t.Fatal("the device refusal was not counted as a violation")
			}
			t.Logf("VIOLATION %s caught: %v", tc.name, res.Err)
		})
	}

	// Chunks the engine would never build (its host check refuses them
	// first), given to the backend directly.
	direct := []struct {
		name   string
		reason kvpool.Reason
		chunk  func(reader kvpool.Owner, pages, sealed []kvpool.PageID) engine.Chunk
	}{
		{"chunk of another domain presents its own tags", kvpool.ReasonForeignDomain, func(r kvpool.Owner, pages, sealed []kvpool.PageID) engine.Chunk {
			return engine.Chunk{Owner: r, Tokens: p[2*testPageTokens : 2*testPageTokens+1], Start: 2 * testPageTokens,
				Pages: append(slices.Clone(sealed[:2]), pages[2:]...), Shared: kvpool.Tags(db, 1, "", p, testPageTokens)[:2],
				Logits: make([]float32, vocab)}
		}},
		{"sealed page written", kvpool.ReasonSealed, func(r kvpool.Owner, pages, sealed []kvpool.PageID) engine.Chunk {
			return engine.Chunk{Owner: r, Tokens: p[:testPageTokens], Pages: append(slices.Clone(sealed[:1]), pages[1:]...),
				Logits: make([]float32, vocab)}
		}},
		{"sealed page read as owned", kvpool.ReasonSealed, func(r kvpool.Owner, pages, sealed []kvpool.PageID) engine.Chunk {
			return engine.Chunk{Owner: r, Tokens: p[testPageTokens : testPageTokens+1], Start: testPageTokens,
				Pages: append(slices.Clone(sealed[:1]), pages[1:]...), Logits: make([]float32, vocab)}
		}},
	}
	for _, tc := range direct {
		t.Run(tc.name, func(t *testing.T) {
			g := newGPUEngine(t, m, 32)
			if _, res := g.run(t, kvpool.Owner{Tenant: "a", Request: "writer", Epoch: 1}, &da, p, 4); res.Err != nil {
				t.Fatal(res.Err)
			}
			sealed := sealedPages(g.pool)
			if len(sealed) != 3 {
				t.Fatalf("%d sealed pages after the writer, want 3", len(sealed))
			}
			ordered := make([]kvpool.PageID, 0, 3)
			for _, tag := range kvpool.Tags(da, 1, "", p, testPageTokens) {
				for _, id := range sealed {
					if info, _ := g.pool.Page(id); info.Tag == tag {
						ordered = append(ordered, id)
					}
				}
			}
			reader := kvpool.Owner{Tenant: "b", Request: "reader", Epoch: 1}
			pages, err := g.pool.Reserve(reader, len(p)+4)
			if err != nil {
				t.Fatal(err)
			}
			c := tc.chunk(reader, pages, ordered)
			const sentinel = float32(12345)
			for i := range c.Logits {
				c.Logits[i] = sentinel
			}
			err = g.b.Forward(context.Background(), []engine.Chunk{c})
			var ve *kvpool.ViolationError
			if !errors.As(err, &ve) || !errors.Is(err, kvpool.ErrOwnerViolation) {
				t.Fatalf("step error %v, want an owner violation", err)
			}
			if ve.Reason != tc.reason || !slices.Contains(ordered, ve.Page) || ve.Want != reader {
				t.Fatalf("violation %v, want %v on a sealed page for %v", ve, tc.reason, reader)
			}
			for i, v := range c.Logits {
				if v != sentinel {
					t.Fatalf("logit %d written (%g) by a refused step", i, v)
				}
			}
			t.Logf("VIOLATION %s caught: %v", tc.name, err)
		})
	}
}
