package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/constrain/constraintest"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
)

// structured builds constrained sampling for the rig's model.
type structured struct {
	tok   *tokenizer.Tokenizer
	vocab *constrain.Vocab
}

func newStructured(t testing.TB, r *rig) *structured {
	t.Helper()
	vocab, tok, err := constraintest.Vocab(r.m.Dir, r.m.Config.VocabSize, r.m.EOSTokenIDs())
	if err != nil {
		t.Fatal(err)
	}
	return &structured{tok: tok, vocab: vocab}
}

// sampling is temperature-1 sampling under spec.
func (s *structured) sampling(t testing.TB, spec constrain.Spec, seed uint64, maxTokens int) engine.Sampling {
	t.Helper()
	g, err := constrain.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Sampling{Temperature: 1, Seed: seed, MaxTokens: maxTokens,
		Constraint: func() engine.Constraint { return g.NewMatcher(s.vocab) }}
}

func (s *structured) text(t *testing.T, toks []int32) string {
	t.Helper()
	b, err := s.tok.Decode(toks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStructuredOutputsValidateOnTheModel: for every test schema and
// several seeds, the random-weight model sampling at temperature 1 under
// the schema's mask ends with EOS ("stop") and its output validates
// against the schema by an independent JSON Schema library.
func TestStructuredOutputsValidateOnTheModel(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 16, pages: 1024})
	st := newStructured(t, r)
	schemas := constraintest.Schemas(t)
	if len(schemas) < 50 {
		t.Fatalf("only %d schemas", len(schemas))
	}
	const maxTokens = 160
	p := prompt(5, 12, r.m.Config.VocabSize)
	checked := 0
	for seed := uint64(1); seed <= 3; seed++ {
		// Sixteen at a time, so the masked sequences share batches.
		for lo := 0; lo < len(schemas); lo += 16 {
			hi := min(lo+16, len(schemas))
			streams := make([]*engine.Stream, 0, hi-lo)
			owners := make([]kvpool.Owner, 0, hi-lo)
			for i := lo; i < hi; i++ {
				o := kvpool.Owner{Tenant: "t", Request: string(rune('a'+i%26)) + strings.Repeat("x", i/26) + string(rune('0'+seed)), Epoch: 1}
				owners = append(owners, o)
				streams = append(streams, r.submit(t, o, p, st.sampling(t, constrain.Spec{JSONSchema: schemas[i]}, seed, maxTokens)))
			}
			for j, s := range streams {
				i := lo + j
				out := collect(t, s)
				if _, err := r.pool.Release(owners[j]); err != nil {
					t.Fatal(err)
				}
				text := st.text(t, out.tokens)
				if out.res.Finish != engine.FinishStop {
					t.Fatalf("schema %d seed %d: finish %s after %q", i, seed, out.res.Finish, text)
				}
				constraintest.Validate(t, string(schemas[i]), text)
				checked++
			}
		}
	}
	t.Logf("%d outputs of %d schemas validated", checked, len(schemas))
}

// toolCallSpec is the constraint of a named tool call in the Hermes
// format, as the gateway builds it for tool_choice naming get_weather.
var toolCallSpec = constrain.Spec{Prefix: "<tool_call>", Suffix: "</tool_call>", JSONSchema: json.RawMessage(
	`{"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object","properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"]}},"required":["name","arguments"]}`)}

// TestStructuredOutputsBatchInvariant: a masked request's tokens are the
// same alone and among batch mates (masked or not), and a prefill-only
// run followed by a decode from its first token (P/D) gives the same
// tokens as one whole run.
func TestStructuredOutputsBatchInvariant(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 32, maxBatch: 8, pages: 512})
	st := newStructured(t, r)
	spec := toolCallSpec
	p := prompt(9, 40, r.m.Config.VocabSize)
	alone := r.run(t, owner("alone"), p, st.sampling(t, spec, 42, 80))
	if alone.res.Finish != engine.FinishStop || !strings.HasPrefix(st.text(t, alone.tokens), `<tool_call>{"name":"get_weather","arguments":{"city":"`) {
		t.Fatalf("alone: %s %q", alone.res.Finish, st.text(t, alone.tokens))
	}
	var mates []*engine.Stream
	var mateOwners []kvpool.Owner
	for i := range 5 {
		o := owner("mate" + string(rune('0'+i)))
		s := engine.Sampling{Temperature: 1, Seed: uint64(i), MaxTokens: 60, IgnoreEOS: true}
		if i%2 == 0 {
			s = st.sampling(t, constrain.Spec{JSONObject: true}, uint64(i), 60)
		}
		mateOwners = append(mateOwners, o)
		mates = append(mates, r.submit(t, o, prompt(uint64(20+i), 10+7*i, r.m.Config.VocabSize), s))
	}
	batched := collect(t, r.submit(t, owner("batched"), p, st.sampling(t, spec, 42, 80)))
	r.pool.Release(owner("batched"))
	for i, m := range mates {
		collect(t, m)
		r.pool.Release(mateOwners[i])
	}
	if !slices.Equal(batched.tokens, alone.tokens) {
		t.Fatalf("batched %q, alone %q", st.text(t, batched.tokens), st.text(t, alone.tokens))
	}

	// P/D: the first token sampled under the mask by the prefill run,
	// the rest by a decode that starts from it.
	s := st.sampling(t, spec, 42, 80)
	pre := owner("pre")
	prePages, err := r.pool.Reserve(pre, len(p))
	if err != nil {
		t.Fatal(err)
	}
	pst, err := r.eng.Submit(context.Background(), engine.Request{Owner: pre, Pages: prePages, Prompt: p, Sampling: s, PrefillOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	pf := collect(t, pst)
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
	r.pool.Release(pre)
	dst, err := r.eng.Submit(context.Background(), engine.Request{Owner: dec, Pages: decPages, Prompt: p, Sampling: s,
		Prefilled: true, FirstToken: pf.res.FirstToken})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, dst)
	r.pool.Release(dec)
	if !slices.Equal(got.tokens, alone.tokens) || got.res.Finish != engine.FinishStop {
		t.Fatalf("P/D %q (%s), whole run %q", st.text(t, got.tokens), got.res.Finish, st.text(t, alone.tokens))
	}
}

// TestConstrainedLogprobsAreRaw: under a structured-output mask (an
// integer schema; a named tool call) every token's logprob and top 20
// alternatives come from the raw distribution, not the masked one: they
// are the float64 log-softmax of the logits the forward produced (and
// match the float64 reference forward), equal the logprobs an
// unconstrained request gets for the same prefix, and are the same for a
// P/D prefill's first token and for the other choices of an n = 2
// request, while the sampled tokens still obey the mask.
func TestConstrainedLogprobsAreRaw(t *testing.T) {
	rec := &logitsRecorder{rows: map[kvpool.Owner][][]float32{}}
	r := newRig(t, rigOptions{threads: 2, chunk: 32, maxBatch: 8, pages: 512, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	st := newStructured(t, r)
	w, err := cpu.WeightsOf(r.m)
	if err != nil {
		t.Fatal(err)
	}
	cs := cpu.SpecFor(&r.m.Config)
	p := prompt(9, 40, r.m.Config.VocabSize)
	for _, tc := range []struct {
		name      string
		spec      constrain.Spec
		maxTokens int
		valid     func(text string) bool
	}{
		{"integer", constrain.Spec{JSONSchema: json.RawMessage(`{"type":"integer"}`)}, 8, func(text string) bool {
			_, err := strconv.ParseInt(text, 10, 64)
			return err == nil
		}},
		{"tool", toolCallSpec, 40, func(text string) bool {
			return strings.HasPrefix(text, `<tool_call>{"name":"get_weather","arguments":{`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := st.sampling(t, tc.spec, 42, tc.maxTokens)
			s.Logprobs, s.TopLogprobs = true, engine.MaxTopLogprobs
			o := owner(tc.name)
			out := r.run(t, o, p, s)
			if text := st.text(t, out.tokens); !tc.valid(text) || len(out.lps) != len(out.tokens) {
				t.Fatalf("output %q (%s) with %d logprobs: not what the mask allows", text, out.res.Finish, len(out.lps))
			}
			rows := rec.of(o)
			seq := append(slices.Clone(p), out.tokens...)
			ref := cpu.Reference(cs, w, seq[:len(seq)-1])
			for i, lp := range out.lps {
				if lp.Token != out.tokens[i] {
					t.Fatalf("token %d: logprobs are for %d, the token is %d", i, lp.Token, out.tokens[i])
				}
				checkRawLogprobs(t, fmt.Sprint("token ", i), lp, rows[i], ref[len(p)-1+i])
				// An unconstrained request for the same prefix.
				free := engine.Sampling{MaxTokens: 1, IgnoreEOS: true, Logprobs: true, TopLogprobs: engine.MaxTopLogprobs}
				u := r.run(t, owner(fmt.Sprint(tc.name, "-free-", i)), seq[:len(p)+i], free)
				if !reflect.DeepEqual(u.lps[0].Top, lp.Top) {
					t.Fatalf("token %d: alternatives %v, the unconstrained request's %v", i, lp.Top, u.lps[0].Top)
				}
			}

			// P/D: the prefill worker's first token.
			pre := owner(tc.name + "-pre")
			pages, err := r.pool.Reserve(pre, len(p))
			if err != nil {
				t.Fatal(err)
			}
			pst, err := r.eng.Submit(context.Background(), engine.Request{Owner: pre, Pages: pages, Prompt: p, Sampling: s, PrefillOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			pf := collect(t, pst)
			r.pool.Release(pre)
			if len(pf.lps) != 1 || !reflect.DeepEqual(pf.lps[0], out.lps[0]) {
				t.Fatalf("prefill's first token logprobs %+v, the whole run's %+v", pf.lps, out.lps[0])
			}

			// n = 2: the second choice's first token is sampled from the
			// first choice's logits row.
			choices := r.runChoices(t, owner(tc.name+"-n"), p, s, 2, nil)
			if !reflect.DeepEqual(choices[0].lps, out.lps) {
				t.Fatalf("choice 0's logprobs differ from the single run's")
			}
			c1 := choices[1].lps[0]
			if !reflect.DeepEqual(c1.Top, out.lps[0].Top) || c1.Logprob != logSoftmax64(widen(rows[0]))[c1.Token] {
				t.Fatalf("choice 1's first token: %+v, want the raw distribution's %+v", c1, out.lps[0].Top)
			}
		})
	}
}
