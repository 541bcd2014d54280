package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
)

// TestPromptLogprobsMatchFloat64Reference checks a 75-token prompt's
// logprobs (Sampling.PromptLogprobs with 5 alternatives) against the
// log-softmax of the float64 reference forward: for every prompt token
// after the first, its logprob within 1e-4, its rank (tokens at least as
// likely, itself included) and its 5 most likely alternatives equal. They
// come before the first token, the generated tokens are those of the same
// request without prompt logprobs, and they are identical whatever the
// chunking (64 positions a step, 7, 1) and the batch (alone, or among
// seven other requests, some asking for prompt logprobs too).
func TestPromptLogprobsMatchFloat64Reference(t *testing.T) {
	base := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 8})
	vocab := base.m.Config.VocabSize
	p := prompt(5, 75, vocab)
	plain := engine.Sampling{Temperature: 0.8, Seed: 3, MaxTokens: 6, IgnoreEOS: true}
	sp := plain
	sp.PromptLogprobs, sp.PromptTopLogprobs = true, 5
	want := base.run(t, owner("plain"), p, plain)
	alone := base.run(t, owner("alone"), p, sp)
	if !slices.Equal(alone.tokens, want.tokens) {
		t.Fatalf("tokens with prompt logprobs %v, without %v", alone.tokens, want.tokens)
	}
	if want.prompt != nil {
		t.Fatalf("prompt logprobs without asking: %v", want.prompt)
	}
	if len(alone.prompt) != len(p)-1 || alone.promptAt != 0 {
		t.Fatalf("%d prompt logprobs after %d tokens, want %d before the first", len(alone.prompt), alone.promptAt, len(p)-1)
	}

	spec := cpu.SpecFor(&base.m.Config)
	w, err := cpu.WeightsOf(base.m)
	if err != nil {
		t.Fatal(err)
	}
	ref := cpu.Reference(spec, w, p)
	for i, lp := range alone.prompt {
		want := logSoftmax64(ref[i])
		tok := p[i+1]
		if lp.Token != tok {
			t.Fatalf("entry %d is token %d, the prompt's is %d", i, lp.Token, tok)
		}
		if d := math.Abs(lp.Logprob - want[tok]); d > 1e-4 {
			t.Errorf("token %d: logprob %v, reference %v", i+1, lp.Logprob, want[tok])
		}
		rank := 0
		for _, v := range want {
			if v >= want[tok] {
				rank++
			}
		}
		if lp.Rank != rank {
			t.Errorf("token %d: rank %d, reference %d", i+1, lp.Rank, rank)
		}
		order := make([]int32, vocab)
		for id := range order {
			order[id] = int32(id)
		}
		slices.SortStableFunc(order, func(a, b int32) int { return -cmpFloat(want[a], want[b]) })
		if len(lp.Top) != 5 {
			t.Fatalf("token %d: %d alternatives, want 5", i+1, len(lp.Top))
		}
		for j, alt := range lp.Top {
			if alt.Token != order[j] || math.Abs(alt.Logprob-want[alt.Token]) > 1e-4 {
				t.Errorf("token %d alternative %d: %d at %v, reference %d at %v", i+1, j, alt.Token, alt.Logprob, order[j], want[order[j]])
			}
		}
	}

	for _, o := range []rigOptions{{threads: 3, chunk: 7, maxBatch: 8}, {threads: 1, chunk: 1, maxBatch: 8}, {threads: 2, chunk: 64, maxBatch: 8}} {
		t.Run(fmt.Sprintf("chunk%d", o.chunk), func(t *testing.T) {
			rows := &rowCounter{}
			o.wrap = func(b engine.Backend) engine.Backend { rows.Backend = b; return rows }
			r := newRig(t, o)
			defer func() {
				// The prompt-logprob rows of a step stay bounded (32),
				// whatever the chunk budget.
				if rows.most > 32+o.maxBatch {
					t.Errorf("a step computed %d logits rows", rows.most)
				}
			}()
			var mates []*engine.Stream
			for i := range 7 {
				m := plain
				m.Seed = uint64(i)
				if i%3 == 0 {
					m.PromptLogprobs, m.PromptTopLogprobs = true, i
				}
				mates = append(mates, r.submit(t, owner(fmt.Sprint("mate", i)), prompt(uint64(20+i), 3+13*i, vocab), m))
			}
			got := collect(t, r.submit(t, owner("target"), p, sp))
			if !slices.Equal(got.tokens, want.tokens) || !reflect.DeepEqual(got.prompt, alone.prompt) {
				t.Fatalf("chunk %d in a batch: tokens %v, prompt logprobs equal: %v; want %v",
					o.chunk, got.tokens, reflect.DeepEqual(got.prompt, alone.prompt), want.tokens)
			}
			for _, m := range mates {
				if out := collect(t, m); out.res.Err != nil {
					t.Fatal(out.res.Err)
				}
			}
		})
	}
}

// TestPromptLogprobsOfChoices: n = 3 choices of one prompt share its one
// prefill: the first choice's stream carries the prompt's logprobs (the
// single request's), before its first token; the others carry none, and
// every choice's tokens are those without prompt logprobs.
func TestPromptLogprobsOfChoices(t *testing.T) {
	r := newRig(t, rigOptions{threads: 2, chunk: 16, maxBatch: 8})
	vocab := r.m.Config.VocabSize
	p := prompt(6, 40, vocab)
	plain := engine.Sampling{Temperature: 1, Seed: 8, MaxTokens: 4, IgnoreEOS: true}
	sp := plain
	sp.PromptLogprobs, sp.PromptTopLogprobs = true, 3
	alone := r.run(t, owner("single"), p, sp)
	var want, got []outcome
	for _, s := range r.submitChoices(t, owner("plain-n"), p, plain, 3, nil) {
		want = append(want, collect(t, s))
	}
	for _, s := range r.submitChoices(t, owner("scored-n"), p, sp, 3, nil) {
		got = append(got, collect(t, s))
	}
	for k := range got {
		if !slices.Equal(got[k].tokens, want[k].tokens) || got[k].res.Err != nil {
			t.Fatalf("choice %d: tokens %v (%v), without prompt logprobs %v", k, got[k].tokens, got[k].res.Err, want[k].tokens)
		}
		if k > 0 && got[k].prompt != nil {
			t.Fatalf("choice %d carries prompt logprobs", k)
		}
	}
	if !reflect.DeepEqual(got[0].prompt, alone.prompt) || got[0].promptAt != 0 {
		t.Fatalf("the first choice's prompt logprobs (after %d tokens) differ from the single request's", got[0].promptAt)
	}
}

// rowCounter records the most logits rows one step asked for.
type rowCounter struct {
	engine.Backend
	most int
}

func (r *rowCounter) Forward(ctx context.Context, batch []engine.Chunk) error {
	n := 0
	for _, c := range batch {
		n += len(c.Logits) / r.VocabSize()
	}
	r.most = max(r.most, n)
	return r.Backend.Forward(ctx, batch)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestPromptLogprobsRefusals: prompt logprobs need the whole prompt
// computed here, so a prefix-cache hit or a transferred prompt is a bad
// request, and so are alternatives out of range or without asking.
func TestPromptLogprobsRefusals(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 64, maxBatch: 2})
	vocab := r.m.Config.VocabSize
	p := prompt(9, 3*pageTokens, vocab)
	sp := engine.Sampling{MaxTokens: 2, PromptLogprobs: true}
	o := owner("refused")
	pages, err := r.pool.Reserve(o, len(p)+sp.MaxTokens)
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]engine.Request{
		"prefix hit":   {Owner: o, Pages: pages, Prompt: p, Sampling: sp, Prefix: &engine.Prefix{Hit: 1}},
		"prefilled":    {Owner: o, Pages: pages, Prompt: p, Sampling: sp, Prefilled: true, FirstToken: 1},
		"too many top": {Owner: o, Pages: pages, Prompt: p, Sampling: engine.Sampling{MaxTokens: 2, PromptLogprobs: true, PromptTopLogprobs: engine.MaxTopLogprobs + 1}},
		"top unasked":  {Owner: o, Pages: pages, Prompt: p, Sampling: engine.Sampling{MaxTokens: 2, PromptTopLogprobs: 1}},
	} {
		if _, err := r.eng.Submit(context.Background(), req); !errors.Is(err, engine.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
}
