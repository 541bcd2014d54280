package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// runChoices reserves one holding for n choices (engine.ChoicePages), runs
// them from one prefill and releases the pages; with d, through the prefix
// cache of d (its full prompt pages are sealed and shared).
func (r *rig) runChoices(t *testing.T, o kvpool.Owner, p []int32, s engine.Sampling, n int, px *engine.Prefix) []outcome {
	t.Helper()
	sts := r.submitChoices(t, o, p, s, n, px)
	outs := make([]outcome, n)
	for k, st := range sts {
		outs[k] = collect(t, st)
		if outs[k].res.Err != nil {
			t.Fatalf("choice %d: %v", k, outs[k].res.Err)
		}
	}
	if _, err := r.pool.Release(o); err != nil {
		t.Fatal(err)
	}
	return outs
}

// submitChoices reserves one holding for n choices and submits them; the
// caller collects the streams and releases o.
func (r *rig) submitChoices(t *testing.T, o kvpool.Owner, p []int32, s engine.Sampling, n int, px *engine.Prefix) []*engine.Stream {
	t.Helper()
	total, tables := engine.ChoicePages(pageTokens, len(p), s.MaxTokens, n)
	var tags []kvpool.Tag
	if px != nil {
		tags = kvpool.Tags(px.Domain, px.Version, "", p[:len(p)-1], pageTokens)
	}
	pages, hit, err := r.pool.ReservePrefix(o, total*pageTokens, tags)
	if err != nil {
		t.Fatal(err)
	}
	if px != nil {
		px.Hit = hit
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	sts, err := r.eng.SubmitChoices(context.Background(), engine.Request{Owner: o, Prompt: p, Sampling: s, Prefix: px}, tables(pages))
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// TestChoicesAreNotPreempted: the choices of an n > 1 request filling the
// batch are never preempted for a tenant running nothing (they were
// admitted together); the light request waits for a free slot, nothing
// deadlocks, and every output equals its reference.
func TestChoicesAreNotPreempted(t *testing.T) {
	const long, short = 40, 6
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2})
	vocab := r.m.Config.VocabSize
	pf, pl := prompt(41, 20, vocab), prompt(42, 9, vocab)
	wantF := r.run(t, owner("refF"), pf, greedy(long)).tokens
	wantL := r.run(t, owner("refL"), pl, greedy(short)).tokens

	o := kvpool.Owner{Tenant: "flooder", Request: "f", Epoch: 1}
	sts := r.submitChoices(t, o, pf, greedy(long), 2, nil)
	var first [2]int32
	for k, st := range sts {
		ev, err := st.Next(context.Background())
		if err != nil || ev.Kind != engine.EventToken {
			t.Fatalf("choice %d: %+v, %v", k, ev, err)
		}
		first[k] = ev.Token
	}
	light := collect(t, r.submit(t, kvpool.Owner{Tenant: "light", Request: "l", Epoch: 1}, pl, greedy(short)))
	if light.res.Err != nil || !slices.Equal(light.tokens, wantL) {
		t.Fatalf("light (%v) differs from the reference\n got %v\nwant %v", light.res.Err, light.tokens, wantL)
	}
	for k, st := range sts {
		got := collect(t, st)
		got.tokens = append([]int32{first[k]}, got.tokens...)
		if got.res.Err != nil || !slices.Equal(got.tokens, wantF) {
			t.Fatalf("choice %d (%v) differs from the reference\n got %v\nwant %v", k, got.res.Err, got.tokens, wantF)
		}
	}
	if _, err := r.pool.Release(o); err != nil {
		t.Fatal(err)
	}
	if st := idleStats(t, r.eng); st.Preemptions != 0 {
		t.Fatalf("stats at the end %+v", st)
	}
}

// TestChoicesShareOnePrefill: n = 3 at temperature 0 gives three equal
// choices; seeded at temperature 1, each choice equals a single request
// run alone with the choice's derived seed (the independent check); the
// prompt is prefilled once (Stats.PrefillTokens, Stats.Prefills), the
// other choices recompute only the partial last page (Stats.ForkTokens).
func TestChoicesShareOnePrefill(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4})
	vocab := r.m.Config.VocabSize
	for _, plen := range []int{37, 48, 5} { // partial last page, page-aligned, one page
		p := prompt(uint64(plen), plen, vocab)
		partial := plen % pageTokens

		before := r.eng.Stats()
		outs := r.runChoices(t, owner("greedy"), p, greedy(12), 3, nil)
		after := r.eng.Stats()
		if got := after.PrefillTokens - before.PrefillTokens; got != uint64(plen) {
			t.Fatalf("prompt %d: %d prompt tokens prefilled for 3 choices, want %d (once)", plen, got, plen)
		}
		if got := after.Prefills - before.Prefills; got != 1 {
			t.Fatalf("prompt %d: %d prefills, want 1", plen, got)
		}
		if got := after.ForkTokens - before.ForkTokens; got != uint64(2*partial) {
			t.Fatalf("prompt %d: %d fork tokens, want %d", plen, got, 2*partial)
		}
		ref := r.run(t, owner("ref"), p, greedy(12))
		for k, o := range outs {
			if !slices.Equal(o.tokens, ref.tokens) || o.res.PromptTokens != plen || o.res.CompletionTokens != 12 {
				t.Fatalf("prompt %d choice %d: %v (%+v), single greedy run %v", plen, k, o.tokens, o.res, ref.tokens)
			}
		}

		s := engine.Sampling{Temperature: 1, Seed: 42, MaxTokens: 12, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}
		a := r.runChoices(t, owner("seeded"), p, s, 3, nil)
		b := r.runChoices(t, owner("seeded"), p, s, 3, nil)
		for k := range a {
			single := s
			single.Seed = engine.ChoiceSeed(s.Seed, k)
			alone := r.run(t, owner("alone"), p, single)
			if !slices.Equal(a[k].tokens, b[k].tokens) || !slices.Equal(a[k].tokens, alone.tokens) {
				t.Fatalf("prompt %d choice %d: %v, again %v, alone with its seed %v", plen, k, a[k].tokens, b[k].tokens, alone.tokens)
			}
			for i := range alone.lps {
				if a[k].lps[i].Token != alone.lps[i].Token || a[k].lps[i].Logprob != alone.lps[i].Logprob {
					t.Fatalf("prompt %d choice %d token %d: logprob %+v, alone %+v", plen, k, i, a[k].lps[i], alone.lps[i])
				}
			}
		}
		if slices.Equal(a[0].tokens, a[1].tokens) && slices.Equal(a[1].tokens, a[2].tokens) {
			t.Fatalf("prompt %d: three seeded choices are equal: %v", plen, a[0].tokens)
		}
	}
}

// TestChoicesThroughThePrefixCache: with a cache domain the first
// choice's full prompt pages are sealed and every choice reads them
// through the same check (VerifyPrefix); a second request of the domain
// reuses them.
func TestChoicesThroughThePrefixCache(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4})
	d := cacheDomain(t, "tenant-a")
	p := prompt(7, 40, r.m.Config.VocabSize)
	ref := r.run(t, owner("ref"), p, greedy(8))
	for round := range 2 {
		outs := r.runChoices(t, owner("cached"), p, greedy(8), 3, &engine.Prefix{Domain: d, Version: 1})
		for k, o := range outs {
			if !slices.Equal(o.tokens, ref.tokens) {
				t.Fatalf("round %d choice %d: %v, want %v", round, k, o.tokens, ref.tokens)
			}
			if round == 1 && o.res.CachedTokens != 2*pageTokens {
				t.Fatalf("round %d choice %d: %d cached tokens, want %d", round, k, o.res.CachedTokens, 2*pageTokens)
			}
		}
	}
}

func TestSubmitChoicesRejectsInconsistentTables(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2})
	p := prompt(3, 40, r.m.Config.VocabSize)
	o := owner("bad")
	total, tables := engine.ChoicePages(pageTokens, len(p), 4, 3)
	pages, err := r.pool.Reserve(o, total*pageTokens)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.SubmitChoices(context.Background(), engine.Request{Owner: o, Prompt: p, Sampling: greedy(4)}, tables(pages)); err == nil {
		t.Fatal("3 choices on a batch of 2 accepted")
	}
	ts := tables(pages)[:2]
	ts[1] = slices.Clone(ts[1])
	ts[1][0] = ts[1][2]
	if _, err := r.eng.SubmitChoices(context.Background(), engine.Request{Owner: o, Prompt: p, Sampling: greedy(4)}, ts); err == nil {
		t.Fatal("choices with different prompt pages accepted")
	}
}

// prefillChoices runs the prefill worker's half of an n > 1 request: the
// prompt once (SubmitChoices, PrefillOnly, every table the prefill's
// pages), every choice's first token with its logprobs. It returns the
// prefill's pages, still held by o, and the n first outcomes.
func (r *rig) prefillChoices(t *testing.T, o kvpool.Owner, p []int32, s engine.Sampling, n int) ([]kvpool.PageID, []outcome) {
	t.Helper()
	pages, err := r.pool.Reserve(o, len(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	tables := make([][]kvpool.PageID, n)
	for k := range tables {
		tables[k] = pages
	}
	sts, err := r.eng.SubmitChoices(context.Background(), engine.Request{Owner: o, Prompt: p, Sampling: s, PrefillOnly: true, ReportProgress: true}, tables)
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]outcome, n)
	for k, st := range sts {
		outs[k] = collect(t, st)
		if outs[k].res.Finish != engine.FinishPrefilled || len(outs[k].tokens) != 1 || outs[k].tokens[0] != outs[k].res.FirstToken {
			t.Fatalf("prefill choice %d: %+v, tokens %v", k, outs[k].res, outs[k].tokens)
		}
	}
	return pages, outs
}

// transferChoices reserves decode's pages for n choices (ChoicePages),
// copies the prefill's prompt pages into the first choice's prompt pages
// as a verified transfer would (written == false skips marking them
// written: a transfer that never arrived) and submits, on ctx, the choices
// Prefilled with their first tokens.
func (r *rig) transferChoices(t *testing.T, ctx context.Context, o kvpool.Owner, p []int32, s engine.Sampling, src []kvpool.PageID, first []int32, px *engine.Prefix, written bool) []*engine.Stream {
	t.Helper()
	total, tables := engine.ChoicePages(pageTokens, len(p), s.MaxTokens, len(first))
	pages, err := r.pool.Reserve(o, total*pageTokens)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		copy(r.pool.Data(pages[i]), r.pool.Data(src[i]))
	}
	if written {
		if err := r.pool.MarkTokensWritten(o, pages[:len(src)], len(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	sts, err := r.eng.SubmitChoices(ctx, engine.Request{Owner: o, Prompt: p, Sampling: s,
		Prefilled: true, FirstTokens: first, Prefix: px}, tables(pages))
	if err != nil {
		t.Fatal(err)
	}
	return sts
}

// TestPrefillDecodeChoicesEqualOneWorker: the P/D split of an n = 3
// request — the prefill computes the prompt once and samples the three
// first tokens (with the derived seeds and logprobs), decode receives the
// prompt once and forks the choices from it (the full pages shared, with
// or without the prefix cache's seals; the partial last page recomputed
// per choice) — gives exactly the choices of one worker's SubmitChoices,
// each equal to a single run with its seed, logprobs included. The
// prefill counts the prompt once; decode prefills nothing and recomputes
// only the partial page of the other choices.
func TestPrefillDecodeChoicesEqualOneWorker(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4})
	vocab := r.m.Config.VocabSize
	s := engine.Sampling{Temperature: 1, Seed: 5, MaxTokens: 10, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}
	for _, plen := range []int{37, 48, 5} {
		for _, cached := range []bool{false, true} {
			p := prompt(uint64(plen), plen, vocab)
			local := r.runChoices(t, owner("local"), p, s, 3, nil)

			before := r.eng.Stats()
			src, first := r.prefillChoices(t, owner("pre"), p, s, 3)
			mid := r.eng.Stats()
			if d := mid.Prefills - before.Prefills; d != 1 || mid.PrefillTokens-before.PrefillTokens != uint64(plen) {
				t.Fatalf("prompt %d: prefill of 3 choices counted %d prefills, %d tokens; want 1, %d", plen, d, mid.PrefillTokens-before.PrefillTokens, plen)
			}
			tokens := make([]int32, 3)
			for k, f := range first {
				tokens[k] = f.res.FirstToken
			}
			var px *engine.Prefix
			if cached {
				px = &engine.Prefix{Domain: cacheDomain(t, "pd-choices"), Version: uint64(plen)}
			}
			sts := r.transferChoices(t, context.Background(), owner("dec"), p, s, src, tokens, px, true)
			if _, err := r.pool.Release(owner("pre")); err != nil {
				t.Fatal(err)
			}
			for k, st := range sts {
				got := collect(t, st)
				// Decode delivers the prefill's first token without its
				// logprobs: those come from the prefill.
				got.lps = append(first[k].lps, got.lps...)
				if got.res.Err != nil || !slices.Equal(got.tokens, local[k].tokens) || got.res.PromptTokens != plen || got.res.CompletionTokens != s.MaxTokens {
					t.Fatalf("prompt %d cached %v choice %d: %v (%+v), one worker %v", plen, cached, k, got.tokens, got.res, local[k].tokens)
				}
				for i, lp := range got.lps {
					if lp.Token != local[k].lps[i].Token || lp.Logprob != local[k].lps[i].Logprob {
						t.Fatalf("prompt %d choice %d token %d: logprob %+v, one worker %+v", plen, k, i, lp, local[k].lps[i])
					}
				}
			}
			if _, err := r.pool.Release(owner("dec")); err != nil {
				t.Fatal(err)
			}
			after := r.eng.Stats()
			if after.Prefills != mid.Prefills || after.PrefillTokens != mid.PrefillTokens || after.ForkTokens-mid.ForkTokens != uint64(2*(plen%pageTokens)) {
				t.Fatalf("prompt %d: decode counted %d prefills, %d prefill tokens, %d fork tokens; want 0, 0, %d",
					plen, after.Prefills-mid.Prefills, after.PrefillTokens-mid.PrefillTokens, after.ForkTokens-mid.ForkTokens, 2*(plen%pageTokens))
			}
		}
	}
	if st := idleStats(t, r.eng); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("stats at the end %+v", st)
	}
}

// TestPrefillDecodeChoicesVerifyAndAbortTogether: decode's choices read
// the transferred prompt only through the ownership check — pages never
// marked written end every choice with an owner violation and no token
// — and the request's end (its context) before the transfer is verified
// ends them all without a token. Every page is free afterwards.
func TestPrefillDecodeChoicesVerifyAndAbortTogether(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4})
	p := prompt(9, 37, r.m.Config.VocabSize)
	s := greedy(6)
	src, first := r.prefillChoices(t, owner("pre"), p, s, 3)
	tokens := []int32{first[0].res.FirstToken, first[1].res.FirstToken, first[2].res.FirstToken}

	before := r.pool.Stats().Violations
	for k, st := range r.transferChoices(t, context.Background(), owner("unwritten"), p, s, src, tokens, nil, false) {
		got := collect(t, st)
		if len(got.tokens) != 0 || !errors.Is(got.res.Err, kvpool.ErrOwnerViolation) {
			t.Fatalf("choice %d over unwritten pages: tokens %v, %v; want none and an owner violation", k, got.tokens, got.res.Err)
		}
	}
	if after := r.pool.Stats().Violations; after != before+1 {
		t.Fatalf("violations %d -> %d, want one for the request", before, after)
	}
	if _, err := r.pool.Release(owner("unwritten")); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for k, st := range r.transferChoices(t, ctx, owner("aborted"), p, s, src, tokens, nil, true) {
		if got := collect(t, st); len(got.tokens) != 0 || !errors.Is(got.res.Err, engine.ErrAborted) {
			t.Fatalf("choice %d of an aborted request: tokens %v, %v; want none, aborted", k, got.tokens, got.res.Err)
		}
	}
	for _, o := range []string{"aborted", "pre"} {
		if _, err := r.pool.Release(owner(o)); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.pool.Stats(); st.Free != st.Total {
		t.Fatalf("pool after the aborts: %+v, want every page free", st)
	}
}
