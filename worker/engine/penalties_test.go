package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// refGreedy is an independent float64 reference of greedy decoding with
// logit_bias and the penalties: bias, then repetition over prompt and
// output, then frequency and presence over the output, then argmax.
func refGreedy(logits []float32, s engine.Sampling, prompt, out []int32) int32 {
	l := make([]float64, len(logits))
	for i, v := range logits {
		l[i] = float64(v)
	}
	for _, b := range s.LogitBias {
		l[b.Token] += float64(b.Bias)
	}
	seen := map[int32]bool{}
	for _, t := range append(slices.Clone(prompt), out...) {
		if !seen[t] && s.RepetitionPenalty != 0 {
			seen[t] = true
			if l[t] > 0 {
				l[t] /= float64(s.RepetitionPenalty)
			} else {
				l[t] *= float64(s.RepetitionPenalty)
			}
		}
	}
	n := map[int32]float64{}
	for _, t := range out {
		n[t]++
	}
	for t, c := range n {
		l[t] -= float64(s.FrequencyPenalty)*c + float64(s.PresencePenalty)
	}
	best := 0
	for i := range l {
		if l[i] > l[best] {
			best = i
		}
	}
	return int32(best)
}

func TestPenalizedGreedyMatchesReferenceReplay(t *testing.T) {
	rec := &logitsRecorder{rows: map[kvpool.Owner][][]float32{}}
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 4,
		wrap: func(b engine.Backend) engine.Backend { rec.Backend = b; return rec }})
	vocab := r.m.Config.VocabSize
	p := prompt(5, 30, vocab)
	plain := r.run(t, owner("plain"), p, greedy(20))
	s := greedy(20)
	s.FrequencyPenalty, s.PresencePenalty, s.RepetitionPenalty = 1.5, 0.5, 1.3
	s.LogitBias = []engine.Bias{{Token: plain.tokens[0], Bias: -100}, {Token: int32(vocab - 1), Bias: 3}}
	got := r.run(t, owner("target"), p, s)
	if slices.Equal(got.tokens, plain.tokens) {
		t.Fatalf("penalties and bias changed nothing: %v", got.tokens)
	}
	rows := rec.of(owner("target"))
	if len(rows) != len(got.tokens) {
		t.Fatalf("recorded %d logits rows for %d tokens", len(rows), len(got.tokens))
	}
	for i, row := range rows {
		if want := refGreedy(row, s, p, got.tokens[:i]); got.tokens[i] != want {
			t.Fatalf("token %d: engine %d, reference %d (output %v)", i, got.tokens[i], want, got.tokens)
		}
	}
}

// penalized is a seeded sampling using every history-dependent control.
func penalized(seed uint64, n int) engine.Sampling {
	return engine.Sampling{Temperature: 0.9, TopP: 0.95, TopK: 40, MinP: 0.02, Seed: seed, MaxTokens: n, IgnoreEOS: true,
		FrequencyPenalty: 0.7, PresencePenalty: 0.4, RepetitionPenalty: 1.2, LogitBias: []engine.Bias{{Token: 3, Bias: 2}}}
}

func TestPenalizedSamplingIndependentOfBatchAndChunks(t *testing.T) {
	ref := newRig(t, rigOptions{threads: 1, chunk: 512, maxBatch: 1})
	vocab := ref.m.Config.VocabSize
	p := prompt(6, 40, vocab)
	want := ref.run(t, owner("ref"), p, penalized(11, 16))
	for _, o := range []rigOptions{{threads: 2, chunk: 7, maxBatch: 6}, {threads: 3, chunk: 1, maxBatch: 6}} {
		t.Run(fmt.Sprintf("threads%d-chunk%d", o.threads, o.chunk), func(t *testing.T) {
			r := newRig(t, o)
			var others []*engine.Stream
			for i := range 3 {
				others = append(others, r.submit(t, owner(fmt.Sprint("n", i)), prompt(uint64(20+i), 9+13*i, vocab), penalized(uint64(i), 4+5*i)))
			}
			got := collect(t, r.submit(t, owner("target"), p, penalized(11, 16)))
			if !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("tokens differ from the single-sequence run\n got %v\nwant %v", got.tokens, want.tokens)
			}
			for _, s := range others {
				if o := collect(t, s); o.res.Err != nil {
					t.Fatal(o.res.Err)
				}
			}
		})
	}
}

func TestSubmitRejectsLogitBiasOutsideVocabulary(t *testing.T) {
	r := newRig(t, rigOptions{threads: 1, chunk: 16, maxBatch: 2})
	o := owner("bias")
	pages, err := r.pool.Reserve(o, 8)
	if err != nil {
		t.Fatal(err)
	}
	s := greedy(2)
	s.LogitBias = []engine.Bias{{Token: int32(r.m.Config.VocabSize), Bias: 1}}
	if _, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: []int32{1, 2}, Sampling: s}); err == nil {
		t.Fatal("a logit_bias token outside the vocabulary was accepted")
	}
}
