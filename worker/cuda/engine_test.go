//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/constrain/constraintest"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
	"github.com/warden-ai/warden/worker/model"
)

// logprobTol bounds |cuda − cpu| for a reported log probability: the
// logits agree within 1e-4 of their scale (TestGreedyMatchesCPU), a
// log-softmax moves by at most twice that.
const logprobTol = 1e-3

// maskedSchemas is how many of internal/constrain's test schemas the
// device runs (two full batches of the test engine's 4).
const maskedSchemas = 8

// TestMaskedRequestsOnDevice runs structured-output requests (token masks
// from internal/constrain, temperature 1, seeded, with logprobs) through
// the engine on the device: every output validates against its schema by
// an independent JSON Schema library and ends with EOS; each request gives
// the same tokens and logprobs alone and batched with the others; and the
// cpu engine gives the same tokens, with logprobs within logprobTol.
func TestMaskedRequestsOnDevice(t *testing.T) {
	m := openTiny(t, model.BF16)
	tok, err := tokenizer.Load(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	vocab := constrain.TokenizerVocab(tok, m.Config.VocabSize, m.EOSTokenIDs())
	schemas := constraintest.Schemas(t)[:maskedSchemas]
	sampling := make([]engine.Sampling, len(schemas))
	for i, s := range schemas {
		g, err := constrain.Compile(constrain.Spec{JSONSchema: s})
		if err != nil {
			t.Fatal(err)
		}
		sampling[i] = engine.Sampling{Temperature: 1, Seed: uint64(7 + i), MaxTokens: 160, Logprobs: true, TopLogprobs: 5,
			Constraint: func() engine.Constraint { return g.NewMatcher(vocab) }}
	}
	prompt := testPrompt(12, m.Config.VocabSize, 5)
	owner := func(name string, i int) kvpool.Owner {
		return kvpool.Owner{Tenant: "t", Request: fmt.Sprint(name, i), Epoch: 1}
	}

	gpu := newGPUEngine(t, m, 256)
	alone := make([]outcome, len(schemas))
	for i := range schemas {
		alone[i] = gpu.generate(t, owner("alone", i), nil, prompt, sampling[i])
	}
	// All at once: the engine batches the masked sequences together.
	streams := make([]*engine.Stream, len(schemas))
	for i := range schemas {
		pages, _ := gpu.reserve(t, owner("batched", i), nil, prompt, len(prompt)+sampling[i].MaxTokens)
		streams[i], err = gpu.eng.Submit(context.Background(), engine.Request{Owner: owner("batched", i), Pages: pages,
			Prompt: prompt, Sampling: sampling[i]})
		if err != nil {
			t.Fatal(err)
		}
	}
	cpuEng := newCPUEngine(t, m, 256)
	worst := 0.0
	for i, s := range schemas {
		batched := collect(t, owner("batched", i), streams[i])
		gpu.release(t, owner("batched", i), batched.res, nil)
		a := alone[i]
		if a.res.Err != nil || a.res.Finish != engine.FinishStop {
			t.Fatalf("schema %d: finish %s, error %v", i, a.res.Finish, a.res.Err)
		}
		text, err := tok.Decode(a.tokens)
		if err != nil {
			t.Fatal(err)
		}
		constraintest.Validate(t, string(s), string(text))
		if !slices.Equal(batched.tokens, a.tokens) || !sameLogprobs(batched.lps, a.lps, 0) {
			t.Fatalf("schema %d: batched %v, alone %v", i, batched.tokens, a.tokens)
		}
		ref := cpuEng.generate(t, owner("cpu", i), nil, prompt, sampling[i])
		if !slices.Equal(ref.tokens, a.tokens) {
			t.Fatalf("schema %d: cuda %q, cpu %q", i, text, mustDecode(t, tok, ref.tokens))
		}
		if !sameLogprobs(a.lps, ref.lps, logprobTol) {
			t.Fatalf("schema %d: logprobs on cuda %s, cpu %s", i, fmtLogprobs(a.lps), fmtLogprobs(ref.lps))
		}
		worst = max(worst, logprobDiff(a.lps, ref.lps))
	}
	if s := gpu.pool.Stats(); s.Violations != 0 {
		t.Fatalf("pool after the runs: %+v", s)
	}
	t.Logf("MASKS %d schemas valid, equal alone and batched and to the cpu engine; max_logprob_abs_diff=%.3g", len(schemas), worst)
}

// TestChoicesOnDevice runs n = 3 from one prefill on the device
// (engine.SubmitChoices), with and without the prefix cache: greedy
// choices equal a single greedy request; seeded ones (temperature 1, with
// logprobs) each equal a single request with the choice's seed, token for
// token and logprob for logprob, and the cpu engine's choices.
func TestChoicesOnDevice(t *testing.T) {
	m := openTiny(t, model.BF16)
	vocab := m.Config.VocabSize
	gpu, cpuEng := newGPUEngine(t, m, 256), newCPUEngine(t, m, 256)
	d := testDomain(t, "a")
	greedy := engine.Sampling{MaxTokens: 10, IgnoreEOS: true}
	seeded := engine.Sampling{Temperature: 1, Seed: 42, MaxTokens: 10, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}
	for _, plen := range []int{37, 2 * testPageTokens} {
		p := testPrompt(plen, vocab, plen)
		ref := gpu.generate(t, kvpool.Owner{Tenant: "a", Request: "ref", Epoch: 1}, nil, p, greedy)
		for _, dom := range []*cachekey.Domain{nil, &d} {
			o := kvpool.Owner{Tenant: "a", Request: fmt.Sprint("greedy-", plen, dom != nil), Epoch: 1}
			for k, c := range gpu.choices(t, o, dom, p, greedy, 3) {
				if !slices.Equal(c.tokens, ref.tokens) {
					t.Fatalf("prompt %d (cache %v) choice %d: %v, single greedy run %v", plen, dom != nil, k, c.tokens, ref.tokens)
				}
			}
			o.Request = fmt.Sprint("seeded-", plen, dom != nil)
			choices := gpu.choices(t, o, dom, p, seeded, 3)
			cpuChoices := cpuEng.choices(t, o, nil, p, seeded, 3)
			for k, c := range choices {
				single := seeded
				single.Seed = engine.ChoiceSeed(seeded.Seed, k)
				alone := gpu.generate(t, kvpool.Owner{Tenant: "a", Request: fmt.Sprint("alone-", k), Epoch: 1}, nil, p, single)
				if !slices.Equal(c.tokens, alone.tokens) || !sameLogprobs(c.lps, alone.lps, 0) {
					t.Fatalf("prompt %d (cache %v) choice %d: %v, alone with its seed %v", plen, dom != nil, k, c.tokens, alone.tokens)
				}
				if !slices.Equal(c.tokens, cpuChoices[k].tokens) || !sameLogprobs(c.lps, cpuChoices[k].lps, logprobTol) {
					t.Fatalf("prompt %d choice %d: cuda %v, cpu %v", plen, k, c.tokens, cpuChoices[k].tokens)
				}
			}
		}
	}
	if s := gpu.pool.Stats(); s.Violations != 0 || s.Hits == 0 {
		t.Fatalf("pool after the runs: %+v", s)
	}
	t.Logf("CHOICES n=3 on the device equal single requests and the cpu engine, with and without the prefix cache")
}

// choices runs n choices of one request (engine.ChoicePages, one
// reservation), through the prefix cache of d when non-nil, and releases
// the pages.
func (g *gpuEngine) choices(t *testing.T, o kvpool.Owner, d *cachekey.Domain, prompt []int32, sp engine.Sampling, n int) []outcome {
	t.Helper()
	total, tables := engine.ChoicePages(testPageTokens, len(prompt), sp.MaxTokens, n)
	pages, px := g.reserve(t, o, d, prompt, total*testPageTokens)
	sts, err := g.eng.SubmitChoices(context.Background(), engine.Request{Owner: o, Prompt: prompt, Sampling: sp, Prefix: px}, tables(pages))
	if err != nil {
		t.Fatal(err)
	}
	outs := make([]outcome, n)
	for k, st := range sts {
		outs[k] = collect(t, o, st)
		if outs[k].res.Err != nil {
			t.Fatalf("choice %d: %v", k, outs[k].res.Err)
		}
	}
	g.release(t, o, outs[0].res, nil)
	return outs
}

// sameLogprobs reports whether a and b report the same tokens (sampled and
// top alternatives) with log probabilities within tol. A top alternative
// only one side lists must be within tol of the other side's last one (a
// near tie at the cut).
func sameLogprobs(a, b []*engine.Logprobs, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Token != b[i].Token || !(math.Abs(a[i].Logprob-b[i].Logprob) <= tol) || len(a[i].Top) != len(b[i].Top) {
			return false
		}
		if !topsAgree(a[i].Top, b[i].Top, tol) || !topsAgree(b[i].Top, a[i].Top, tol) {
			return false
		}
	}
	return true
}

// topsAgree checks every entry of x against y (see sameLogprobs).
func topsAgree(x, y []engine.TopLogprob, tol float64) bool {
	for _, e := range x {
		j := slices.IndexFunc(y, func(f engine.TopLogprob) bool { return f.Token == e.Token })
		ref := y[len(y)-1].Logprob
		if j >= 0 {
			ref = y[j].Logprob
		}
		if !(math.Abs(e.Logprob-ref) <= tol) {
			return false
		}
	}
	return true
}

// logprobDiff is the largest difference of the sampled tokens' logprobs.
func logprobDiff(a, b []*engine.Logprobs) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i].Logprob-b[i].Logprob))
	}
	return d
}

func fmtLogprobs(lps []*engine.Logprobs) string {
	var sb strings.Builder
	for _, lp := range lps {
		fmt.Fprintf(&sb, "%d:%.5f ", lp.Token, lp.Logprob)
	}
	return sb.String()
}

func mustDecode(t *testing.T, tok *tokenizer.Tokenizer, toks []int32) string {
	t.Helper()
	b, err := tok.Decode(toks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
