package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// plainBackend hides every optional interface of the backend it wraps
// (HiddenStates among them), as a backend that computes no hidden
// states (the cuda backend) has none.
type plainBackend struct{ engine.Backend }

// TestEmbedRequests: embedding requests are refused on a backend without
// hidden states (ErrNoEmbeddings) and when they ask for anything but
// their own prefill or name an adapter their KV owner does not
// (ErrBadRequest); a valid one runs beside a
// generation and leaves the pool as it found it once released.
func TestEmbedRequests(t *testing.T) {
	ctx := context.Background()
	plain := newRig(t, rigOptions{threads: 1, chunk: 16, maxBatch: 2,
		wrap: func(b engine.Backend) engine.Backend { return plainBackend{b} }})
	p := prompt(3, 20, plain.m.Config.VocabSize)
	o := kvpool.Owner{Tenant: "t", Request: "e", Epoch: 1}
	pages, err := plain.pool.Reserve(o, len(p))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: p, Embed: engine.PoolingLast}); !errors.Is(err, engine.ErrNoEmbeddings) {
		t.Fatalf("embedding on a backend without hidden states: %v, want ErrNoEmbeddings", err)
	}

	r := newRig(t, rigOptions{threads: 1, chunk: 16, maxBatch: 2})
	pages, err = r.pool.Reserve(o, len(p))
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]engine.Request{
		"prefill-only": {Owner: o, Pages: pages, Prompt: p, Embed: engine.PoolingMean, PrefillOnly: true},
		"prefix":       {Owner: o, Pages: pages, Prompt: p, Embed: engine.PoolingMean, Prefix: &engine.Prefix{}},
		"pages":        {Owner: o, Pages: pages[:1], Prompt: p, Embed: engine.PoolingMean},
		"pooling":      {Owner: o, Pages: pages, Prompt: p, Embed: engine.Pooling(9)},
		"adapter":      {Owner: o, Pages: pages, Prompt: p, Embed: engine.PoolingMean, Adapter: hashAdapter("a")},
	} {
		if _, err := r.eng.Submit(ctx, req); !errors.Is(err, engine.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	gen := prompt(4, 9, r.m.Config.VocabSize)
	g := kvpool.Owner{Tenant: "t", Request: "g", Epoch: 1}
	gpages, err := r.pool.Reserve(g, len(gen)+8)
	if err != nil {
		t.Fatal(err)
	}
	es, err := r.eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: p, Embed: engine.PoolingMean})
	if err != nil {
		t.Fatal(err)
	}
	gs, err := r.eng.Submit(ctx, engine.Request{Owner: g, Pages: gpages, Prompt: gen, Sampling: engine.Sampling{MaxTokens: 8, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	eo, gotGen := collect(t, es), collect(t, gs)
	if eo.res.Finish != engine.FinishEmbedded || len(eo.tokens) != 0 || len(eo.res.Embedding) != r.m.Config.HiddenSize {
		t.Fatalf("embedding: finish %s, %d tokens, %d dimensions; want embedded, 0, %d", eo.res.Finish, len(eo.tokens), len(eo.res.Embedding), r.m.Config.HiddenSize)
	}
	if gotGen.res.Finish != engine.FinishLength || len(gotGen.tokens) != 8 || gotGen.res.Embedding != nil {
		t.Fatalf("generation beside it: finish %s, %d tokens", gotGen.res.Finish, len(gotGen.tokens))
	}
	for _, ow := range []kvpool.Owner{o, g} {
		if _, err := r.pool.Release(ow); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.pool.Stats(); s.Free != s.Total {
		t.Fatalf("pool not all free at the end: %+v", s)
	}
}
