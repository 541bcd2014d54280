package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

const pageTokens = 16

var (
	tinyOnce sync.Once
	tinyDir  string
	tinyErr  error
)

// tinyModel writes the tiny preset once per test binary.
func tinyModel(t testing.TB) *model.Model {
	t.Helper()
	tinyOnce.Do(func() {
		dir, err := tempDirForPackage()
		if err != nil {
			tinyErr = err
			return
		}
		tinyDir = dir
		tinyErr = model.Init(dir, model.PresetTiny, 1, model.F32)
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	m, err := model.Load(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

type rig struct {
	eng  *engine.Engine
	pool *kvpool.Pool
	m    *model.Model
	// be is the cpu backend (unwrapped) and w its weights.
	be *cpu.Backend
	w  cpu.Weights
	// adapters are the LoRA adapters prepared on be (rig.adapter), by
	// hash: a request whose owner names one runs under it.
	adapters map[string]engine.Adapter
}

type rigOptions struct {
	threads, chunk, maxBatch, pages int
	// decodingChunk is engine.Config.DecodingChunkTokens.
	decodingChunk int
	// q8 quantizes the weights (cpu.Options.Quantize).
	q8 bool
	// wrap, if set, wraps the cpu backend the engine drives.
	wrap func(engine.Backend) engine.Backend
	// model is the model to run (default the tiny preset).
	model *model.Model
	// spec configures speculative decoding.
	spec engine.Speculation
	// arrival gives the prefill budget in admission order.
	arrival bool
	// edit, if set, changes the weights before the backend is built.
	edit func(*cpu.Weights)
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	m := o.model
	if m == nil {
		m = tinyModel(t)
	}
	spec := cpu.SpecFor(&m.Config)
	if o.pages == 0 {
		o.pages = 256
	}
	pool, err := kvpool.New(kvpool.Config{Pages: o.pages, PageTokens: pageTokens,
		PageBytes: spec.PageBytes(pageTokens), PoisonOnReserve: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cpu.WeightsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	if o.q8 {
		w = cpu.QuantizeQ8(w)
	}
	if o.edit != nil {
		o.edit(&w)
	}
	be, err := cpu.New(spec, w, pool, cpu.Options{Threads: o.threads, MaxBatchTokens: o.chunk + o.maxBatch, PageTokens: pageTokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	var backend engine.Backend = be
	if o.wrap != nil {
		backend = o.wrap(be)
	}
	eng, err := engine.New(engine.Config{PageTokens: pageTokens, ChunkTokens: o.chunk, DecodingChunkTokens: o.decodingChunk, MaxBatch: o.maxBatch,
		EOS: m.EOSTokenIDs(), Speculation: o.spec, ArrivalOrder: o.arrival}, backend, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &rig{eng: eng, pool: pool, m: m, be: be, w: w, adapters: map[string]engine.Adapter{}}
}

type outcome struct {
	tokens []int32
	lps    []*engine.Logprobs // one per token, when the request asked for logprobs
	// prompt is the EventPromptLogprobs' list (Sampling.PromptLogprobs),
	// and promptAt the number of tokens received before it.
	prompt   []engine.Logprobs
	promptAt int
	res      *engine.Result
}

// collect drains a stream.
func collect(t testing.TB, s *engine.Stream) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var o outcome
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			if o.res == nil {
				t.Fatalf("stream ended without a result: %v", err)
			}
			return o
		}
		switch ev.Kind {
		case engine.EventToken:
			o.tokens = append(o.tokens, ev.Token)
			if ev.Logprobs != nil {
				o.lps = append(o.lps, ev.Logprobs)
			}
		case engine.EventPromptLogprobs:
			o.prompt, o.promptAt = ev.PromptLogprobs, len(o.tokens)
		case engine.EventDone:
			o.res = ev.Result
		}
	}
}

func owner(name string) kvpool.Owner {
	return kvpool.Owner{Tenant: "t-" + name, Request: "req-" + name, Epoch: 1}
}

// run reserves pages, runs one request to the end and releases its pages.
func (r *rig) run(t testing.TB, o kvpool.Owner, prompt []int32, s engine.Sampling) outcome {
	t.Helper()
	st := r.submit(t, o, prompt, s)
	out := collect(t, st)
	if _, err := r.pool.Release(o); err != nil {
		t.Fatal(err)
	}
	return out
}

func (r *rig) submit(t testing.TB, o kvpool.Owner, prompt []int32, s engine.Sampling) *engine.Stream {
	t.Helper()
	pages, err := r.pool.Reserve(o, len(prompt)+s.MaxTokens)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: prompt, Sampling: s, Adapter: r.adapters[o.Adapter]})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func prompt(seed uint64, n, vocab int) []int32 {
	r := rand.New(rand.NewPCG(seed, 99))
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(vocab))
	}
	return p
}

func greedy(n int) engine.Sampling { return engine.Sampling{MaxTokens: n, IgnoreEOS: true} }

func TestGreedyTokensIndependentOfBatchChunkAndThreads(t *testing.T) {
	checkGreedyInvariance(t, rigOptions{})
}

// TestQ8GreedyTokensIndependentOfBatchChunkAndThreads is the same
// contract with Q8 weights (and activations quantized per block).
func TestQ8GreedyTokensIndependentOfBatchChunkAndThreads(t *testing.T) {
	checkGreedyInvariance(t, rigOptions{q8: true})
}

// TestBF16DotGreedyTokensIndependentOfBatchChunkAndThreads is the same
// contract in the bf16 numerics mode (worker.numerics bf16): bf16
// weights multiplied with activations rounded to bf16. The tiny model's
// down projection (176 columns) keeps exact products, so both kinds run
// in one forward.
func TestBF16DotGreedyTokensIndependentOfBatchChunkAndThreads(t *testing.T) {
	checkGreedyInvariance(t, rigOptions{edit: func(w *cpu.Weights) {
		c, err := cpu.ConvertWeights(*w, model.BF16)
		if err != nil {
			t.Fatal(err)
		}
		*w = cpu.BF16Dot(c)
		if l := w.Layers[0]; l.Wq.Format() != kernels.BF16Dot || l.WDown.Format() != kernels.BF16 {
			t.Fatalf("q_proj %v, down_proj %v; want bf16-dot and bf16", l.Wq.Format(), l.WDown.Format())
		}
	}})
}

// checkGreedyInvariance checks that a sequence's greedy tokens are those
// of the single-sequence, single-thread run whatever its neighbours, the
// prefill chunk and the thread count, with base's weights (q8, edit).
func checkGreedyInvariance(t *testing.T, base rigOptions) {
	ref := newRig(t, rigOptions{threads: 1, chunk: 512, maxBatch: 1, q8: base.q8, edit: base.edit})
	vocab := ref.m.Config.VocabSize
	p := prompt(1, 45, vocab)
	want := ref.run(t, owner("ref"), p, greedy(24))
	if len(want.tokens) != 24 {
		t.Fatalf("reference produced %d tokens", len(want.tokens))
	}
	if distinct := len(slices.Compact(slices.Sorted(slices.Values(want.tokens)))); distinct < 3 {
		t.Fatalf("reference output is degenerate (%d distinct tokens): %v", distinct, want.tokens)
	}
	for _, o := range []rigOptions{
		{threads: 2, chunk: 7, maxBatch: 8},
		{threads: 3, chunk: 1, maxBatch: 8},
		{threads: 4, chunk: 64, maxBatch: 8},
		{threads: 2, chunk: 64, decodingChunk: 5, maxBatch: 8},
	} {
		o.q8, o.edit = base.q8, base.edit
		t.Run(fmt.Sprintf("threads%d-chunk%d-decoding%d", o.threads, o.chunk, o.decodingChunk), func(t *testing.T) {
			r := newRig(t, o)
			// Seven neighbours of different lengths join before and after.
			var streams []*engine.Stream
			for i := range 4 {
				streams = append(streams, r.submit(t, owner(fmt.Sprint("n", i)), prompt(uint64(10+i), 5+11*i, vocab), greedy(3+7*i)))
			}
			target := r.submit(t, owner("target"), p, greedy(24))
			for i := 4; i < 7; i++ {
				streams = append(streams, r.submit(t, owner(fmt.Sprint("n", i)), prompt(uint64(10+i), 5+11*i, vocab), greedy(3+7*i)))
			}
			got := collect(t, target)
			if !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("tokens differ from the single-sequence reference\n got %v\nwant %v", got.tokens, want.tokens)
			}
			for _, s := range streams {
				if o := collect(t, s); o.res.Err != nil {
					t.Fatal(o.res.Err)
				}
			}
		})
	}
}

func TestPrefillThenDecodeEqualsWholeRun(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 32, maxBatch: 4})
	p := prompt(3, 70, r.m.Config.VocabSize)
	for _, s := range []engine.Sampling{greedy(12), {Temperature: 0.9, TopP: 0.95, TopK: 40, Seed: 7, MaxTokens: 12, IgnoreEOS: true}, penalized(7, 12)} {
		whole := r.run(t, owner("whole"), p, s)

		// Prefill on one owner's pages, "transfer" the bytes into another
		// owner's pages, decode from there.
		pre := owner("pre")
		prePages, err := r.pool.Reserve(pre, len(p))
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.eng.Submit(context.Background(), engine.Request{Owner: pre, Pages: prePages, Prompt: p, Sampling: s, PrefillOnly: true, ReportProgress: true})
		if err != nil {
			t.Fatal(err)
		}
		pf := collect(t, st)
		if pf.res.Finish != engine.FinishPrefilled || pf.res.PromptTokens != len(p) || len(pf.tokens) != 1 {
			t.Fatalf("prefill result %+v tokens %v", pf.res, pf.tokens)
		}
		dec := owner("dec")
		decPages, err := r.pool.Reserve(dec, len(p)+s.MaxTokens)
		if err != nil {
			t.Fatal(err)
		}
		for i := range prePages {
			copy(r.pool.Data(decPages[i]), r.pool.Data(prePages[i]))
		}
		if err := r.pool.MarkTokensWritten(dec, decPages, len(p)); err != nil {
			t.Fatal(err)
		}
		if _, err := r.pool.Release(pre); err != nil {
			t.Fatal(err)
		}
		st, err = r.eng.Submit(context.Background(), engine.Request{Owner: dec, Pages: decPages, Prompt: p, Sampling: s,
			Prefilled: true, FirstToken: pf.res.FirstToken})
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, st)
		r.pool.Release(dec)
		if !slices.Equal(got.tokens, whole.tokens) {
			t.Fatalf("temperature %v: P/D tokens %v, whole run %v", s.Temperature, got.tokens, whole.tokens)
		}
		if got.res.PromptTokens != len(p) || got.res.CompletionTokens != whole.res.CompletionTokens {
			t.Fatalf("usage differs: %+v vs %+v", got.res, whole.res)
		}
	}
}

// expectViolation runs a request that must be refused by the ownership
// check: no token, an ErrOwnerViolation result, and one more violation
// counted by the pool.
func expectViolation(t *testing.T, r *rig, req engine.Request) {
	t.Helper()
	req.Adapter = r.adapters[req.Owner.Adapter]
	before := r.pool.Stats().Violations
	st, err := r.eng.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	out := collect(t, st)
	if len(out.tokens) != 0 {
		t.Fatalf("a refused sequence produced tokens %v", out.tokens)
	}
	if !errors.Is(out.res.Err, kvpool.ErrOwnerViolation) {
		t.Fatalf("result error %v, want an owner violation", out.res.Err)
	}
	if after := r.pool.Stats().Violations; after != before+1 {
		t.Fatalf("violations %d -> %d, want +1", before, after)
	}
}

func TestOwnershipViolationsProduceNoTokens(t *testing.T) {
	rec := &recordingBackend{}
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	p := prompt(5, 40, r.m.Config.VocabSize)

	// A victim whose prompt is in the cache.
	victim := owner("victim")
	vPages, err := r.pool.Reserve(victim, len(p))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := r.eng.Submit(context.Background(), engine.Request{Owner: victim, Pages: vPages, Prompt: p, Sampling: greedy(1), PrefillOnly: true})
	vRes := collect(t, st).res

	t.Run("another tenant's pages", func(t *testing.T) {
		expectViolation(t, r, engine.Request{Owner: owner("thief"), Pages: vPages, Prompt: p, Sampling: greedy(4),
			Prefilled: true, FirstToken: vRes.FirstToken})
	})
	t.Run("same tenant, other request", func(t *testing.T) {
		o := victim
		o.Request = "req-other"
		expectViolation(t, r, engine.Request{Owner: o, Pages: vPages, Prompt: p, Sampling: greedy(4), Prefilled: true, FirstToken: 1})
	})
	t.Run("one foreign page among own pages", func(t *testing.T) {
		mine := owner("mixed")
		pages, err := r.pool.Reserve(mine, len(p)+4)
		if err != nil {
			t.Fatal(err)
		}
		defer r.pool.Release(mine)
		for i := range pages {
			copy(r.pool.Data(pages[i]), r.pool.Data(vPages[min(i, len(vPages)-1)]))
		}
		if err := r.pool.MarkTokensWritten(mine, pages, len(p)); err != nil {
			t.Fatal(err)
		}
		mixed := slices.Clone(pages)
		mixed[1] = vPages[1]
		expectViolation(t, r, engine.Request{Owner: mine, Pages: mixed, Prompt: p, Sampling: greedy(4), Prefilled: true, FirstToken: 1})
	})
	t.Run("unwritten slots", func(t *testing.T) {
		o := owner("unwritten")
		pages, err := r.pool.Reserve(o, len(p)+4)
		if err != nil {
			t.Fatal(err)
		}
		defer r.pool.Release(o)
		// Only part of the prompt arrived.
		if err := r.pool.MarkTokensWritten(o, pages, len(p)-1); err != nil {
			t.Fatal(err)
		}
		expectViolation(t, r, engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: greedy(4), Prefilled: true, FirstToken: 1})
	})
	t.Run("old epoch", func(t *testing.T) {
		o := owner("fenced")
		pages, err := r.pool.Reserve(o, len(p)+4)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.pool.MarkTokensWritten(o, pages, len(p)); err != nil {
			t.Fatal(err)
		}
		next, err := r.pool.BumpEpoch(o)
		if err != nil {
			t.Fatal(err)
		}
		defer r.pool.Release(next)
		expectViolation(t, r, engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: greedy(4), Prefilled: true, FirstToken: 1})
	})
	t.Run("fenced mid-generation", func(t *testing.T) {
		o := owner("midway")
		pages, err := r.pool.Reserve(o, len(p)+200)
		if err != nil {
			t.Fatal(err)
		}
		// Hold the sequence's first decode step (its first token is out),
		// so that it cannot run to its end before the retagging.
		decoding := newHold(func(batch []engine.Chunk) bool {
			return slices.ContainsFunc(batch, func(c engine.Chunk) bool { return c.Owner == o && len(c.Tokens) == 1 })
		})
		rec.mu.Lock()
		rec.holds = append(rec.holds, decoding)
		rec.mu.Unlock()
		st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: greedy(200)})
		if err != nil {
			t.Fatal(err)
		}
		<-decoding.reached
		// Retag the pages underneath the running sequence: its next step
		// must refuse to read them.
		next, err := r.pool.BumpEpoch(o)
		close(decoding.release)
		if err != nil {
			t.Fatal(err)
		}
		defer r.pool.Release(next)
		out := collect(t, st)
		if !errors.Is(out.res.Err, kvpool.ErrOwnerViolation) && !errors.Is(out.res.Err, kvpool.ErrFenced) {
			t.Fatalf("result %v, want a refused read or write", out.res.Err)
		}
		if out.res.CompletionTokens >= 200 {
			t.Fatal("sequence ran to completion over retagged pages")
		}
	})
	r.pool.Release(victim)
	if s := r.pool.Stats(); s.Free != s.Total {
		t.Fatalf("pool not all free at the end: %+v", s)
	}
}

// refusingBackend is a backend whose own page check (as the cuda
// backend's device kernels do) refuses the step numbered refuseAt, naming
// blame's chunk (the first chunk's owner when blame is zero).
type refusingBackend struct {
	engine.Backend
	steps, refuseAt int
	blame           kvpool.Owner
}

func (b *refusingBackend) Forward(ctx context.Context, batch []engine.Chunk) error {
	b.steps++
	if b.steps == b.refuseAt {
		want := b.blame
		if want == (kvpool.Owner{}) {
			want = batch[0].Owner
		}
		return &kvpool.ViolationError{Page: batch[0].Pages[0], Want: want, Reason: kvpool.ReasonForeignTenant}
	}
	return b.Backend.Forward(ctx, batch)
}

// TestBackendViolationIsCountedAndEndsTheSequence: a violation the backend
// finds itself ends the refused sequence with an owner-violation error and
// no token from that step, and counts in the pool's Violations (the
// warden_kv_owner_violations_total metric) like a refused Verify.
func TestBackendViolationIsCountedAndEndsTheSequence(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4, wrap: func(b engine.Backend) engine.Backend {
		return &refusingBackend{Backend: b, refuseAt: 3}
	}})
	p := prompt(9, 20, r.m.Config.VocabSize)
	before := r.pool.Stats().Violations
	out := r.run(t, owner("refused"), p, greedy(8))
	if !errors.Is(out.res.Err, kvpool.ErrOwnerViolation) {
		t.Fatalf("result %v, want an owner violation", out.res.Err)
	}
	// Step 1 prefills and samples the first token, step 2 the second; the
	// third is refused and delivers nothing.
	if len(out.tokens) != 2 {
		t.Errorf("%d tokens, want the 2 from the steps before the refused one", len(out.tokens))
	}
	if got := r.pool.Stats().Violations - before; got != 1 {
		t.Errorf("violations counted: %d, want 1", got)
	}
}

// TestBackendViolationSparesTheOtherSequences: when the backend refuses
// one sequence of a batch, the others run that step again and end with
// exactly the tokens they produce alone.
func TestBackendViolationSparesTheOtherSequences(t *testing.T) {
	thief, a, b := owner("thief"), owner("bystander-a"), owner("bystander-b")
	vocab := tinyModel(t).Config.VocabSize
	prompts := map[kvpool.Owner][]int32{thief: prompt(11, 24, vocab), a: prompt(12, 40, vocab), b: prompt(13, 7, vocab)}
	alone := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4})
	want := map[kvpool.Owner][]int32{}
	for _, o := range []kvpool.Owner{a, b} {
		want[o] = alone.run(t, o, prompts[o], greedy(12)).tokens
	}

	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 4, wrap: func(be engine.Backend) engine.Backend {
		return &refusingBackend{Backend: be, refuseAt: 4, blame: thief}
	}})
	streams := map[kvpool.Owner]*engine.Stream{}
	for _, o := range []kvpool.Owner{thief, a, b} {
		streams[o] = r.submit(t, o, prompts[o], greedy(12))
	}
	if out := collect(t, streams[thief]); !errors.Is(out.res.Err, kvpool.ErrOwnerViolation) {
		t.Errorf("refused sequence: %v, want an owner violation", out.res.Err)
	}
	for _, o := range []kvpool.Owner{a, b} {
		out := collect(t, streams[o])
		if out.res.Err != nil || !slices.Equal(out.tokens, want[o]) {
			t.Errorf("%s: %v, tokens %v; want %v as alone", o.Request, out.res.Err, out.tokens, want[o])
		}
	}
	if v := r.pool.Stats().Violations; v != 1 {
		t.Errorf("violations counted: %d, want 1", v)
	}
}

func TestStopTokensAndMaxTokens(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	p := prompt(8, 20, r.m.Config.VocabSize)
	base := r.run(t, owner("base"), p, greedy(10))
	if base.res.Finish != engine.FinishLength || base.res.CompletionTokens != 10 || len(base.tokens) != 10 {
		t.Fatalf("max tokens: %+v, %d tokens", base.res, len(base.tokens))
	}
	stop := base.tokens[3]
	first := slices.Index(base.tokens, stop)
	s := greedy(10)
	s.StopTokens = []int32{stop}
	got := r.run(t, owner("stop"), p, s)
	if got.res.Finish != engine.FinishStop || got.res.CompletionTokens != first+1 || !slices.Equal(got.tokens, base.tokens[:first]) {
		t.Fatalf("stop token %d: %+v tokens %v (base %v)", stop, got.res, got.tokens, base.tokens)
	}
	if got.res.PromptTokens != len(p) {
		t.Fatalf("prompt tokens %d, want %d", got.res.PromptTokens, len(p))
	}
}

func TestAbortEndsSequence(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	p := prompt(9, 30, r.m.Config.VocabSize)
	o := owner("abort")
	pages, err := r.pool.Reserve(o, len(p)+3000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := r.eng.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: greedy(3000)})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.Next(context.Background())
	if err != nil || ev.Kind != engine.EventToken {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	cancel()
	out := collect(t, st)
	if !errors.Is(out.res.Err, engine.ErrAborted) {
		t.Fatalf("result %+v, want aborted", out.res)
	}
	if _, err := r.pool.Release(o); err != nil {
		t.Fatal(err)
	}

	// A closed stream aborts too.
	st = r.submit(t, owner("closed"), p, greedy(3000))
	st.Close()
	if out := collect(t, st); !errors.Is(out.res.Err, engine.ErrAborted) {
		t.Fatalf("closed stream result %+v", out.res)
	}
	r.pool.Release(owner("closed"))
	if s := r.pool.Stats(); s.Free != s.Total {
		t.Fatalf("pool not all free: %+v", s)
	}
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4})
	p := prompt(4, 25, r.m.Config.VocabSize)
	s := engine.Sampling{Temperature: 1.2, Seed: 42, MaxTokens: 16, IgnoreEOS: true}
	a := r.run(t, owner("a"), p, s)
	b := r.run(t, owner("b"), p, s)
	if !slices.Equal(a.tokens, b.tokens) {
		t.Fatalf("same seed gave %v and %v", a.tokens, b.tokens)
	}
	s.Seed = 43
	c := r.run(t, owner("c"), p, s)
	if slices.Equal(a.tokens, c.tokens) {
		t.Fatalf("seeds 42 and 43 gave identical samples %v", a.tokens)
	}
}

func TestSubmitRejectsInconsistentRequests(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 16, maxBatch: 2})
	o := owner("bad")
	pages, err := r.pool.Reserve(o, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer r.pool.Release(o)
	vocab := int32(r.m.Config.VocabSize)
	cases := map[string]engine.Request{
		"empty prompt":       {Owner: o, Pages: pages, Sampling: greedy(1)},
		"token out of vocab": {Owner: o, Pages: pages, Prompt: []int32{vocab}, Sampling: greedy(1)},
		"negative token":     {Owner: o, Pages: pages, Prompt: []int32{-1}, Sampling: greedy(1)},
		"pages too few":      {Owner: o, Pages: pages, Prompt: make([]int32, 30), Sampling: greedy(4)},
		"zero max tokens":    {Owner: o, Pages: pages, Prompt: []int32{1}, Sampling: greedy(0)},
		"negative temperature": {Owner: o, Pages: pages, Prompt: []int32{1},
			Sampling: engine.Sampling{Temperature: -1, MaxTokens: 1}},
		"prefilled without first token": {Owner: o, Pages: pages, Prompt: []int32{1}, Sampling: greedy(1), Prefilled: true, FirstToken: -1},
		// The adapter computed with must be the one the KV owner names.
		"adapter not the owner's": {Owner: o, Pages: pages, Prompt: []int32{1}, Sampling: greedy(1), Adapter: hashAdapter("a1")},
		"owner's adapter missing": {Owner: kvpool.Owner{Tenant: o.Tenant, Request: o.Request, Epoch: o.Epoch, Adapter: "a1"},
			Pages: pages, Prompt: []int32{1}, Sampling: greedy(1)},
	}
	for name, req := range cases {
		if _, err := r.eng.Submit(context.Background(), req); !errors.Is(err, engine.ErrBadRequest) {
			t.Errorf("%s: Submit error %v, want ErrBadRequest", name, err)
		}
	}
}

// TestPreemptionForTenantRunningNothing: with the batch full of one
// tenant's sequences, a sequence of a tenant running nothing preempts the
// latest of them at once (it does not wait for one to finish); the paused
// sequence resumes where it stopped, and every output equals its
// single-sequence reference token for token. The engine is held between
// steps while the test submits, so the flooders are where the test says
// whatever the machine's load (they would otherwise run on and could
// finish before the light sequence arrives).
func TestPreemptionForTenantRunningNothing(t *testing.T) {
	const long, short = 120, 6
	ref := newRig(t, rigOptions{threads: 1, chunk: 512, maxBatch: 1})
	vocab := ref.m.Config.VocabSize
	prompts := [][]int32{prompt(31, 20, vocab), prompt(32, 27, vocab), prompt(33, 9, vocab)}
	lengths := []int{long, long, short}
	var want [][]int32
	for i, p := range prompts {
		want = append(want, ref.run(t, owner(fmt.Sprint("ref", i)), p, greedy(lengths[i])).tokens)
	}

	// The first step waits until both flooders are queued; the first step
	// that decodes both waits until the light sequence is.
	start := newHold(func([]engine.Chunk) bool { return true })
	bothDecode := newHold(func(batch []engine.Chunk) bool {
		return len(batch) == 2 && len(batch[0].Tokens) == 1 && len(batch[1].Tokens) == 1
	})
	rec := &recordingBackend{holds: []*hold{start, bothDecode}}
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	flood := func(i int) kvpool.Owner {
		return kvpool.Owner{Tenant: "flooder", Request: fmt.Sprint("f", i), Epoch: 1}
	}
	var streams []*engine.Stream
	for i := range 2 {
		streams = append(streams, r.submit(t, flood(i), prompts[i], greedy(long)))
	}
	close(start.release)
	// Both flooder sequences run: each has sampled a token.
	<-bothDecode.reached
	var first [2]int32
	for i, s := range streams {
		ev, err := s.Next(context.Background())
		if err != nil || ev.Kind != engine.EventToken {
			t.Fatalf("flooder %d: %+v, %v", i, ev, err)
		}
		first[i] = ev.Token
	}
	lightStream := r.submit(t, kvpool.Owner{Tenant: "light", Request: "l", Epoch: 1}, prompts[2], greedy(short))
	close(bothDecode.release)
	light := collect(t, lightStream)
	st := r.eng.Stats()
	if st.Preemptions != 1 {
		t.Fatalf("preemptions %d, want 1", st.Preemptions)
	}
	// The light sequence ran its steps back to back, each beside exactly
	// one flooder (the other paused), right after the step it was
	// submitted during, not after a flooder finished.
	steps := rec.tenants()
	from := slices.IndexFunc(steps, func(s []string) bool { return slices.Contains(s, "light") })
	if from < 0 || len(steps) < from+short {
		t.Fatalf("the light sequence ran from step %d of %d", from, len(steps))
	}
	for i, s := range steps[from : from+short] {
		if !slices.Equal(s, []string{"flooder", "light"}) {
			t.Fatalf("step %d of the light sequence ran %v, want it beside one flooder", i, s)
		}
	}
	if held := bothDecode.step; from != held+1 {
		t.Fatalf("the light sequence started at step %d, want %d: right after the step it was submitted during", from, held+1)
	}
	if !slices.Equal(light.tokens, want[2]) {
		t.Fatalf("light tokens differ from the reference\n got %v\nwant %v", light.tokens, want[2])
	}
	for i, s := range streams {
		got := collect(t, s)
		got.tokens = append([]int32{first[i]}, got.tokens...)
		if got.res.Err != nil || !slices.Equal(got.tokens, want[i]) {
			t.Fatalf("flooder %d (%v) differs from the reference\n got %v\nwant %v", i, got.res.Err, got.tokens, want[i])
		}
	}
	if st := idleStats(t, r.eng); st.Preemptions != 1 {
		t.Fatalf("stats at the end %+v", st)
	}
}

// idleStats waits until the engine runs and holds nothing — its loop
// removes a finished sequence just after the stream's last event — and
// returns its stats.
func idleStats(t *testing.T, e *engine.Engine) engine.Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := e.Stats()
		if st.Running == 0 && st.Waiting == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine never went idle: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
}

// recordingBackend records every step's chunks as (tenant, start, end).
// It stops before the steps its holds name, in order: the first step that
// matches holds[0] waits there until the test releases it.
type recordingBackend struct {
	engine.Backend
	mu    sync.Mutex
	steps [][]span
	holds []*hold
}

// span is one chunk of a step: its owner's tenant and the positions
// [start, end) it computes.
type span struct {
	tenant     string
	start, end int
}

// hold stops the engine before a step, between two steps of its loop.
type hold struct {
	at      func(batch []engine.Chunk) bool
	step    int           // the index of the step it stopped (in recordingBackend.tenants)
	reached chan struct{} // closed when the step waits
	release chan struct{} // closed by the test to let the step run
}

func newHold(at func(batch []engine.Chunk) bool) *hold {
	return &hold{at: at, reached: make(chan struct{}), release: make(chan struct{})}
}

func (b *recordingBackend) Forward(ctx context.Context, batch []engine.Chunk) error {
	var ss []span
	for _, c := range batch {
		ss = append(ss, span{c.Owner.Tenant, c.Start, c.Start + len(c.Tokens)})
	}
	b.mu.Lock()
	var h *hold
	if len(b.holds) > 0 && b.holds[0].at(batch) {
		h, b.holds = b.holds[0], b.holds[1:]
		h.step = len(b.steps)
	}
	b.steps = append(b.steps, ss)
	b.mu.Unlock()
	if h != nil {
		close(h.reached)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Backend.Forward(ctx, batch)
}

// spans returns every step's chunks so far.
func (b *recordingBackend) spans() [][]span {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.steps)
}

// tenants returns every step's tenants, sorted.
func (b *recordingBackend) tenants() [][]string {
	var out [][]string
	for _, step := range b.spans() {
		var ts []string
		for _, c := range step {
			ts = append(ts, c.tenant)
		}
		slices.Sort(ts)
		out = append(out, ts)
	}
	return out
}

// TestNoPreemptionBelowWeightedShare: a tenant of weight 1 does not
// preempt a tenant of weight 3 running two sequences (2/3 per weight
// against the 1 it would run): it waits for a free slot.
func TestNoPreemptionBelowWeightedShare(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2})
	vocab := r.m.Config.VocabSize
	submit := func(o kvpool.Owner, weight int, p []int32, n int) *engine.Stream {
		pages, err := r.pool.Reserve(o, len(p)+n)
		if err != nil {
			t.Fatal(err)
		}
		r.pool.Activate(o)
		st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Weight: weight, Pages: pages, Prompt: p, Sampling: greedy(n)})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	var streams []*engine.Stream
	for i := range 2 {
		st := submit(kvpool.Owner{Tenant: "heavy", Request: fmt.Sprint("h", i), Epoch: 1}, 3, prompt(uint64(40+i), 12, vocab), 40)
		if ev, err := st.Next(context.Background()); err != nil || ev.Kind != engine.EventToken {
			t.Fatalf("heavy %d: %+v, %v", i, ev, err)
		}
		streams = append(streams, st)
	}
	streams = append(streams, submit(kvpool.Owner{Tenant: "light", Request: "l", Epoch: 1}, 1, prompt(42, 9, vocab), 4))
	for i, st := range streams {
		if o := collect(t, st); o.res.Err != nil {
			t.Fatalf("stream %d: %v", i, o.res.Err)
		}
	}
	if p := r.eng.Stats().Preemptions; p != 0 {
		t.Fatalf("preemptions %d, want 0", p)
	}
}

// hashAdapter is an engine.Adapter that only has a hash.
type hashAdapter string

func (h hashAdapter) Hash() string { return string(h) }
func (hashAdapter) Bytes() int64   { return 0 }

// TestStatsCountArrivalsDuringAStepAsRunning: a sequence submitted while
// a step runs is admitted at the next one; until then it counts as
// running while the batch has a slot for it, and as waiting only beyond
// MaxBatch. The gateway learns a worker's batch size from a heartbeat
// with waiting sequences, so an arrival during a long step must not look
// like a full batch.
func TestStatsCountArrivalsDuringAStepAsRunning(t *testing.T) {
	for _, tc := range []struct {
		maxBatch, later  int
		running, waiting int
	}{
		{maxBatch: 4, later: 2, running: 3, waiting: 0},
		{maxBatch: 2, later: 2, running: 2, waiting: 1},
	} {
		t.Run(fmt.Sprintf("batch=%d", tc.maxBatch), func(t *testing.T) {
			first := newHold(func([]engine.Chunk) bool { return true })
			rec := &recordingBackend{holds: []*hold{first}}
			r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: tc.maxBatch, wrap: func(b engine.Backend) engine.Backend {
				rec.Backend = b
				return rec
			}})
			vocab := r.m.Config.VocabSize
			streams := []*engine.Stream{r.submit(t, owner("a0"), prompt(41, 12, vocab), greedy(3))}
			<-first.reached
			for i := range tc.later {
				streams = append(streams, r.submit(t, owner(fmt.Sprint("b", i)), prompt(uint64(42+i), 12, vocab), greedy(3)))
			}
			st := r.eng.Stats()
			close(first.release)
			if st.Running != tc.running || st.Waiting != tc.waiting {
				t.Errorf("during the first step: running %d, waiting %d; want %d, %d", st.Running, st.Waiting, tc.running, tc.waiting)
			}
			for i, s := range streams {
				if got := collect(t, s); got.res.Err != nil || len(got.tokens) != 3 {
					t.Errorf("stream %d: %v, %d tokens", i, got.res.Err, len(got.tokens))
				}
			}
			idleStats(t, r.eng)
		})
	}
}

// TestDecodingStepsTakeTheSmallerChunk: a prompt arriving while another
// sequence decodes is prefilled beside that sequence's tokens,
// DecodingChunkTokens at a time or, when that is more, a quarter of what
// is left times the waiting sequences' share of the batch (here one of
// two); a prompt with nothing decoding beside it gets ChunkTokens. The
// tokens are the unchunked run's.
func TestDecodingStepsTakeTheSmallerChunk(t *testing.T) {
	const chunk, decoding, promptA, promptB = 64, 8, 40, 100
	ref := newRig(t, rigOptions{threads: 1, chunk: 512, maxBatch: 1})
	vocab := ref.m.Config.VocabSize
	pa, pb := prompt(51, promptA, vocab), prompt(52, promptB, vocab)
	wantB := ref.run(t, owner("ref"), pb, greedy(4)).tokens

	// a's first decode step waits until b is submitted: b arrives while a
	// decodes, with a's 39 tokens to go.
	aDecodes := newHold(func(batch []engine.Chunk) bool { return batch[0].Start >= promptA })
	rec := &recordingBackend{holds: []*hold{aDecodes}}
	r := newRig(t, rigOptions{threads: 1, chunk: chunk, decodingChunk: decoding, maxBatch: 4, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	a := r.submit(t, kvpool.Owner{Tenant: "a", Request: "a", Epoch: 1}, pa, greedy(40))
	<-aDecodes.reached
	bStream := r.submit(t, kvpool.Owner{Tenant: "b", Request: "b", Epoch: 1}, pb, greedy(4))
	close(aDecodes.release)
	b := collect(t, bStream)
	if b.res.Err != nil || !slices.Equal(b.tokens, wantB) {
		t.Fatalf("b: %v, tokens %v, want %v", b.res.Err, b.tokens, wantB)
	}
	collect(t, a)
	steps := rec.spans()
	if first := steps[0]; len(first) != 1 || first[0] != (span{"a", 0, promptA}) {
		t.Fatalf("first step %v, want a's whole %d-token prompt (nothing decodes beside it)", first, promptA)
	}
	var mixed, prefilled int
	left := promptB
	for i, step := range steps {
		var decodes, prompt int
		for _, c := range step {
			switch {
			case c.tenant == "a" && c.start >= promptA:
				decodes++
			case c.tenant == "b" && c.start < promptB:
				prompt += c.end - c.start
			}
		}
		// One sequence waits (b) and one decodes (a): a backlogSteps-th of
		// the backlog, halved.
		if want := min(left, max(decoding, left/(4*2))); decodes > 0 && prompt > 0 && prompt != want {
			t.Errorf("step %d decodes and prefills %d prompt tokens of the %d left, want %d: %v", i, prompt, left, want, step)
		}
		if decodes > 0 && prompt > 0 {
			mixed++
		}
		prefilled += prompt
		left -= prompt
	}
	if prefilled != promptB || mixed < 5 {
		t.Fatalf("b's prompt: %d tokens prefilled, %d steps beside a's decode; want %d in at least 5", prefilled, mixed, promptB)
	}
}
