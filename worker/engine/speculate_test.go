package engine_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
)

// quietAttention returns a weight edit that scales every layer's
// attention output projection by f. The random-weight model then depends
// on its context only a little (f = 0: not at all, a bigram model): its
// greedy output follows a walk through the vocabulary that soon repeats
// itself, so text it already produced predicts what comes next — the
// copying that prompt lookup exploits, with the full cost of a forward.
func quietAttention(f float32) func(*cpu.Weights) {
	return func(w *cpu.Weights) {
		for i := range w.Layers {
			wo := w.Layers[i].Wo
			data := make([]float32, wo.Rows()*wo.Cols())
			for r := range wo.Rows() {
				row := data[r*wo.Cols() : (r+1)*wo.Cols()]
				wo.Row(r, row)
				for j := range row {
					row[j] *= f
				}
			}
			w.Layers[i].Wo = kernels.NewF32(wo.Rows(), wo.Cols(), data)
		}
	}
}

// aggressive speculates as much as the engine allows short of its bounds:
// every single-token match proposes, so rejections are frequent too.
var aggressive = engine.Speculation{On: true, K: 6, NgramMax: 3, NgramMin: 1}

// specJob is one request of a speculation equivalence check.
type specJob struct {
	name   string
	prompt []int32
	s      engine.Sampling
	// exact reserves exactly the positions the sequence may write
	// (len(prompt)+MaxTokens-1), so a speculative chunk past them would
	// be refused.
	exact bool
}

// copying is the weight edit of the speculation tests' model: it mostly
// repeats itself, and still depends on its context.
var copying = quietAttention(0.2)

// copyHeavy is a prompt the model's output copies from: a random head of
// head tokens followed by the model's own greedy continuation of it, of
// follow tokens.
func copyHeavy(t *testing.T, r *rig, seed uint64, head, follow int) []int32 {
	t.Helper()
	p := prompt(seed, head, r.m.Config.VocabSize)
	out := r.run(t, owner(fmt.Sprint("copy-", seed)), p, greedy(follow))
	return append(p, out.tokens...)
}

// submitJob reserves and submits one job; release frees its pages.
func (r *rig) submitJob(t *testing.T, j specJob) *engine.Stream {
	t.Helper()
	o := owner(j.name)
	tokens := len(j.prompt) + j.s.MaxTokens
	if j.exact {
		tokens--
	}
	pages, err := r.pool.Reserve(o, tokens)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Activate(o); err != nil {
		t.Fatal(err)
	}
	st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: j.prompt, Sampling: j.s})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// runJobs runs jobs all at once (batched together) and returns their
// outcomes in order.
func (r *rig) runJobs(t *testing.T, jobs []specJob) []outcome {
	t.Helper()
	sts := make([]*engine.Stream, len(jobs))
	for i, j := range jobs {
		sts[i] = r.submitJob(t, j)
	}
	outs := make([]outcome, len(jobs))
	for i, st := range sts {
		outs[i] = collect(t, st)
		if _, err := r.pool.Release(owner(jobs[i].name)); err != nil {
			t.Fatal(err)
		}
	}
	return outs
}

// sameOutcome fails unless got (speculative) equals want (plain): tokens,
// logprobs, finish reason and usage.
func sameOutcome(t *testing.T, what string, got, want outcome) {
	t.Helper()
	if !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("%s: speculative tokens %v, plain %v", what, got.tokens, want.tokens)
	}
	if got.res.Finish != want.res.Finish || got.res.Err != nil || want.res.Err != nil ||
		got.res.CompletionTokens != want.res.CompletionTokens || got.res.PromptTokens != want.res.PromptTokens {
		t.Fatalf("%s: speculative result %+v, plain %+v", what, *got.res, *want.res)
	}
	if len(got.lps) != len(want.lps) {
		t.Fatalf("%s: %d logprobs, plain %d", what, len(got.lps), len(want.lps))
	}
	for i := range got.lps {
		g, w := got.lps[i], want.lps[i]
		if g.Token != w.Token || g.Logprob != w.Logprob || !slices.Equal(g.Top, w.Top) {
			t.Fatalf("%s: token %d logprobs %+v, plain %+v", what, i, *g, *w)
		}
	}
}

// writtenGuard wraps a backend and checks, before every step, the KV
// bookkeeping speculation must keep exact: no slot at or after a chunk's
// Start is marked written (a rejected proposal's position counted as
// written would show up here when the next step restarts below it).
type writtenGuard struct {
	engine.Backend
	pool *kvpool.Pool
	mu   sync.Mutex
	errs []string
	// multi counts chunks that asked for more than one logits row.
	multi int
}

func (g *writtenGuard) Forward(ctx context.Context, batch []engine.Chunk) error {
	for _, c := range batch {
		if len(c.Logits) > g.VocabSize() {
			g.mu.Lock()
			g.multi++
			g.mu.Unlock()
		}
		for j := c.Start / pageTokens; j < len(c.Pages); j++ {
			if j < len(c.Shared) {
				continue
			}
			info, _ := g.pool.Page(c.Pages[j])
			if limit := max(0, c.Start-j*pageTokens); info.Written > limit {
				g.mu.Lock()
				g.errs = append(g.errs, fmt.Sprintf("%s: chunk at %d: page %d has %d slots written, at most %d may be",
					c.Owner.Request, c.Start, j, info.Written, limit))
				g.mu.Unlock()
			}
		}
	}
	return g.Backend.Forward(ctx, batch)
}

func (g *writtenGuard) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) > 0 {
		t.Fatalf("%d steps found positions marked written ahead of the sequence, first: %s", len(g.errs), g.errs[0])
	}
	if g.multi == 0 {
		t.Fatal("no step verified a proposal")
	}
}

// guardedRig is a speculating rig whose backend is a writtenGuard.
func guardedRig(t *testing.T, o rigOptions) (*rig, *writtenGuard) {
	var g *writtenGuard
	o.wrap = func(b engine.Backend) engine.Backend {
		g = &writtenGuard{Backend: b}
		return g
	}
	r := newRig(t, o)
	g.pool = r.pool
	return r, g
}

// specJobs are the equivalence checks' requests: copy-heavy and random
// prompts, the model's own output as a prompt (it repeats itself), greedy
// and seeded sampling with and without logprobs, max_tokens of 1, 2 and
// more, stop tokens, and exact page reservations.
func specJobs(t *testing.T, plain *rig) []specJob {
	vocab := plain.m.Config.VocabSize
	looped := copyHeavy(t, plain, 5, 20, 60)
	own := looped[20:]
	var jobs []specJob
	add := func(name string, p []int32, s engine.Sampling, exact bool) {
		jobs = append(jobs, specJob{name: fmt.Sprintf("%s-%d", name, len(jobs)), prompt: p, s: s, exact: exact})
	}
	for i := range 4 {
		cp := copyHeavy(t, plain, uint64(10+i), 7+i, 20+9*i)
		add("copy", cp, greedy(40+i), i%2 == 0)
		add("copy-seeded", cp, engine.Sampling{Temperature: 0.8, TopK: 8, Seed: uint64(i), MaxTokens: 30, IgnoreEOS: true}, i%2 == 1)
	}
	add("looped-lp", looped, engine.Sampling{MaxTokens: 33, IgnoreEOS: true, Logprobs: true, TopLogprobs: 5}, false)
	add("looped-seeded-lp", looped, engine.Sampling{Temperature: 1, TopP: 0.9, Seed: 9, MaxTokens: 33, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}, true)
	for i := range 3 {
		add("random", prompt(uint64(40+i), 15+10*i, vocab), greedy(25), i == 1)
	}
	for _, n := range []int{1, 2, 3, 7} {
		add("short", looped, greedy(n), true)
	}
	// Stop tokens: a token the plain run emits mid-output ends both runs
	// at its first occurrence.
	add("stop", looped, engine.Sampling{MaxTokens: 50, StopTokens: []int32{own[len(own)-5]}}, true)
	return jobs
}

// TestSpeculationOutputsEqualPlainDecoding: with speculation on, every
// request's tokens, logprobs, finish reason and usage equal those of
// decoding without it — greedy and seeded, run alone and batched together
// with chunked prefill — and no step finds a rejected position marked
// written.
func TestSpeculationOutputsEqualPlainDecoding(t *testing.T) {
	plain := newRig(t, rigOptions{threads: 1, chunk: 512, maxBatch: 1, edit: copying})
	jobs := specJobs(t, plain)
	want := make([]outcome, len(jobs))
	for i, j := range jobs {
		want[i] = plain.runJobs(t, []specJob{j})[0]
	}
	if s := plain.eng.Stats(); s.SpecProposed != 0 {
		t.Fatalf("speculation off proposed %d tokens", s.SpecProposed)
	}

	for _, o := range []rigOptions{
		{threads: 1, chunk: 512, maxBatch: 1, spec: aggressive},
		{threads: 2, chunk: 24, maxBatch: 8, pages: 512, spec: aggressive},
		{threads: 2, chunk: 64, maxBatch: 8, pages: 512, spec: engine.Speculation{On: true}},
	} {
		o.edit = copying
		r, g := guardedRig(t, o)
		var got []outcome
		if o.maxBatch == 1 {
			for _, j := range jobs {
				got = append(got, r.runJobs(t, []specJob{j})[0])
			}
		} else {
			got = r.runJobs(t, jobs)
		}
		for i := range jobs {
			sameOutcome(t, fmt.Sprintf("%+v %s", o.spec, jobs[i].name), got[i], want[i])
		}
		g.check(t)
		s := r.eng.Stats()
		if s.SpecAccepted == 0 || s.SpecAccepted >= s.SpecProposed {
			t.Fatalf("%+v: %d of %d proposed tokens accepted; the test needs both outcomes", o.spec, s.SpecAccepted, s.SpecProposed)
		}
		t.Logf("%+v: %d steps, %d proposed, %d accepted", o.spec, s.Steps, s.SpecProposed, s.SpecAccepted)
	}
}

// TestSpeculationPerRequest: a request's Speculate overrides the engine's
// default both ways.
func TestSpeculationPerRequest(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2, edit: copying})
	p := copyHeavy(t, r, 3, 5, 40)
	run := func(name string, on *bool) uint64 {
		before := r.eng.Stats().SpecProposed
		o := owner(name)
		pages, err := r.pool.Reserve(o, len(p)+20)
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: engine.Sampling{MaxTokens: 20, IgnoreEOS: true, Speculate: on}})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, st)
		r.pool.Release(o)
		return r.eng.Stats().SpecProposed - before
	}
	yes, no := true, false
	if n := run("default", nil); n != 0 {
		t.Fatalf("default (off) proposed %d tokens", n)
	}
	if n := run("on", &yes); n == 0 {
		t.Fatal("speculate: true proposed nothing on a copy-heavy prompt")
	}
	ron := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2, spec: engine.Speculation{On: true}, edit: copying})
	r = ron
	if n := run("off", &no); n != 0 {
		t.Fatalf("speculate: false proposed %d tokens", n)
	}
	if n := run("default-on", nil); n == 0 {
		t.Fatal("default (on) proposed nothing on a copy-heavy prompt")
	}
}

// TestSpeculationChoicesAndConstraints: n > 1 choices and constrained
// (structured-output) sequences speculate and still equal plain decoding:
// a proposal the mask forbids is simply not sampled.
func TestSpeculationChoicesAndConstraints(t *testing.T) {
	plain := newRig(t, rigOptions{threads: 2, chunk: 32, maxBatch: 8, pages: 512, edit: copying})
	spec, g := guardedRig(t, rigOptions{threads: 2, chunk: 32, maxBatch: 8, pages: 512, spec: aggressive, edit: copying})
	p := copyHeavy(t, plain, 21, 9, 40)
	for _, s := range []engine.Sampling{greedy(30), {Temperature: 0.7, TopK: 5, Seed: 3, MaxTokens: 30, IgnoreEOS: true}} {
		want := plain.runChoices(t, owner("plain"), p, s, 3, nil)
		got := spec.runChoices(t, owner("spec"), p, s, 3, nil)
		for k := range want {
			sameOutcome(t, fmt.Sprintf("temperature %v choice %d", s.Temperature, k), got[k], want[k])
		}
	}
	st := newStructured(t, plain)
	for i := range 4 {
		c := st.sampling(t, constrain.Spec{JSONObject: true}, uint64(i), 60)
		c.Temperature = 0.5
		want := plain.run(t, owner("plain"), p, c)
		got := spec.run(t, owner("spec"), p, c)
		sameOutcome(t, fmt.Sprint("constrained seed ", i), got, want)
	}
	g.check(t)
}

// TestSpeculativeSamplingDistribution is a two-sample chi-square test of
// seeded sampling with speculation against plain sampling, on disjoint
// seed sets (so it is a statistical check, not the per-seed identity the
// other tests show): the joint distribution of the second and third
// tokens — the ones speculation verifies — after a copy-heavy prompt.
// Seeds are fixed, so the test is deterministic; the threshold is the
// chi-square quantile of a 1e-6 false-failure probability.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	const draws = 600
	plain := newRig(t, rigOptions{threads: 2, chunk: 128, maxBatch: 8, pages: 512, edit: copying})
	spec := newRig(t, rigOptions{threads: 2, chunk: 128, maxBatch: 8, pages: 512, spec: aggressive, edit: copying})
	p := copyHeavy(t, plain, 31, 10, 40)
	sample := func(r *rig, seed0 uint64) map[[2]int32]int {
		counts := map[[2]int32]int{}
		for b := 0; b < draws; b += 8 {
			jobs := make([]specJob, 8)
			for i := range jobs {
				jobs[i] = specJob{name: fmt.Sprint("d", b+i), prompt: p,
					s: engine.Sampling{Temperature: 1.5, TopK: 3, Seed: seed0 + uint64(b+i), MaxTokens: 3, IgnoreEOS: true}}
			}
			for _, o := range r.runJobs(t, jobs) {
				counts[[2]int32{o.tokens[1], o.tokens[2]}]++
			}
		}
		return counts
	}
	a, b := sample(plain, 1), sample(spec, 1_000_000)
	if s := spec.eng.Stats(); s.SpecAccepted == 0 || s.SpecAccepted == s.SpecProposed {
		t.Fatalf("%d of %d proposals accepted: the test needs acceptances and rejections", s.SpecAccepted, s.SpecProposed)
	}
	// Bins with fewer than 10 draws in both samples together are pooled.
	var keys [][2]int32
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	var chi2 float64
	bins, restA, restB := 0, 0, 0
	addBin := func(x, y int) {
		chi2 += float64((x-y)*(x-y)) / float64(x+y)
		bins++
	}
	for _, k := range keys {
		if a[k]+b[k] < 10 {
			restA, restB = restA+a[k], restB+b[k]
			continue
		}
		addBin(a[k], b[k])
	}
	if restA+restB > 0 {
		addBin(restA, restB)
	}
	if bins < 4 {
		t.Fatalf("only %d bins: the distribution is too concentrated to test", bins)
	}
	// Equal sample sizes: chi2 = Σ (a-b)²/(a+b) has bins-1 degrees of
	// freedom.
	if limit := chi2Quantile1e6(bins - 1); chi2 > limit {
		t.Fatalf("chi-square %.1f over %d bins exceeds %.1f: speculative sampling's distribution differs\nplain %v\nspec  %v", chi2, bins, limit, a, b)
	}
	t.Logf("chi-square %.2f, %d bins (limit %.1f)", chi2, bins, chi2Quantile1e6(bins-1))
}

// chi2Quantile1e6 bounds from above the chi-square quantile of upper tail
// 1e-6 with df degrees of freedom (Wilson–Hilferty with z = 4.75, plus a
// margin for small df).
func chi2Quantile1e6(df int) float64 {
	k := float64(df)
	c := 1 - 2/(9*k) + 4.753*math.Sqrt(2/(9*k))
	return k*c*c*c + 5
}
