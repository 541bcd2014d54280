package engine_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/internal/cpu"
	"github.com/warden-ai/warden/worker/kvpool"
)

// logitsRecorder keeps a copy of every logits row the engine receives,
// per owner, in order.
type logitsRecorder struct {
	engine.Backend
	mu   sync.Mutex
	rows map[kvpool.Owner][][]float32
}

func (r *logitsRecorder) Forward(ctx context.Context, batch []engine.Chunk) error {
	if err := r.Backend.Forward(ctx, batch); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range batch {
		if c.Logits != nil {
			r.rows[c.Owner] = append(r.rows[c.Owner], append([]float32(nil), c.Logits...))
		}
	}
	return nil
}

func (r *logitsRecorder) of(o kvpool.Owner) [][]float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rows[o]
}

// logSoftmax64 is the test's own float64 log-softmax.
func logSoftmax64(row []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, v)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(v - m)
	}
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = v - m - math.Log(sum)
	}
	return out
}

func widen(row []float32) []float64 {
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v)
	}
	return out
}

// TestLogprobsMatchFloat64Reference checks each sampled token's logprob
// and its top 20 alternatives: exactly the float64 log-softmax of the
// logits the engine's sampler received, within 1e-3 of the log-softmax
// of the independent float64 reference forward (cpu.Reference), the
// alternatives sorted and the chosen token's own logprob among them when
// it ranks in the top 20; and identical whether the sequence runs alone
// or in a batch of 8.
func TestLogprobsMatchFloat64Reference(t *testing.T) {
	rec := &logitsRecorder{rows: map[kvpool.Owner][][]float32{}}
	r := newRig(t, rigOptions{threads: 2, chunk: 64, maxBatch: 8, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	vocab := r.m.Config.VocabSize
	p := prompt(3, 29, vocab)
	sp := engine.Sampling{Temperature: 1, Seed: 77, MaxTokens: 12, IgnoreEOS: true, Logprobs: true, TopLogprobs: engine.MaxTopLogprobs}
	alone := r.run(t, owner("alone"), p, sp)
	if len(alone.lps) != len(alone.tokens) || len(alone.tokens) != sp.MaxTokens {
		t.Fatalf("%d tokens with %d logprobs, want %d of each", len(alone.tokens), len(alone.lps), sp.MaxTokens)
	}

	rows := rec.of(owner("alone"))
	spec := cpu.SpecFor(&r.m.Config)
	w, err := cpu.WeightsOf(r.m)
	if err != nil {
		t.Fatal(err)
	}
	seq := append(append([]int32(nil), p...), alone.tokens...)
	ref := cpu.Reference(spec, w, seq[:len(seq)-1])
	for i, lp := range alone.lps {
		if lp.Token != alone.tokens[i] {
			t.Fatalf("token %d: logprobs are for %d, the token is %d", i, lp.Token, alone.tokens[i])
		}
		checkRawLogprobs(t, fmt.Sprint("token ", i), lp, rows[i], ref[len(p)-1+i])
	}

	// The same request among seven others, with and without logprobs.
	var others []*engine.Stream
	for i := range 7 {
		o := sp
		o.Logprobs, o.TopLogprobs, o.Seed = i%2 == 0, 0, uint64(i)
		others = append(others, r.submit(t, owner(fmt.Sprint("mate", i)), prompt(uint64(40+i), 5+9*i, vocab), o))
	}
	batched := collect(t, r.submit(t, owner("batched"), p, sp))
	for _, s := range others {
		if o := collect(t, s); o.res.Err != nil {
			t.Fatal(o.res.Err)
		}
	}
	if !reflect.DeepEqual(batched.tokens, alone.tokens) || !reflect.DeepEqual(batched.lps, alone.lps) {
		t.Fatalf("in a batch of 8 the logprobs differ from alone:\n got %v\nwant %v", batched.tokens, alone.tokens)
	}
}

// checkRawLogprobs checks one token's logprobs (what names it) against
// the raw logits row the engine's forward produced for its position and
// the float64 reference forward's row for it: the token's logprob and its
// 20 alternatives are exactly the float64 log-softmax of row (the
// alternatives its top 20, ties by id, sorted), and within 1e-3 of the
// log-softmax of ref.
func checkRawLogprobs(t *testing.T, what string, lp *engine.Logprobs, row []float32, ref []float64) {
	t.Helper()
	exact := logSoftmax64(widen(row))
	want := logSoftmax64(ref)
	if lp.Logprob != exact[lp.Token] {
		t.Errorf("%s: logprob %v, float64 log-softmax of the engine's logits %v", what, lp.Logprob, exact[lp.Token])
	}
	if d := math.Abs(lp.Logprob - want[lp.Token]); d > 1e-3 {
		t.Errorf("%s: logprob %v, reference forward %v", what, lp.Logprob, want[lp.Token])
	}
	if len(lp.Top) != engine.MaxTopLogprobs {
		t.Fatalf("%s: %d alternatives, want %d", what, len(lp.Top), engine.MaxTopLogprobs)
	}
	// The top 20 of the float64 log-softmax, ties by id.
	var best []int32
	for range lp.Top {
		pick := int32(-1)
		for id, v := range exact {
			if !slices.Contains(best, int32(id)) && (pick < 0 || v > exact[pick]) {
				pick = int32(id)
			}
		}
		best = append(best, pick)
	}
	for j, alt := range lp.Top {
		if alt.Token != best[j] || alt.Logprob != exact[best[j]] {
			t.Fatalf("%s alternative %d: %d at %v, want %d at %v", what, j, alt.Token, alt.Logprob, best[j], exact[best[j]])
		}
		if d := math.Abs(alt.Logprob - want[alt.Token]); d > 1e-3 {
			t.Fatalf("%s alternative %d: %d at %v, reference forward %v", what, j, alt.Token, alt.Logprob, want[alt.Token])
		}
		if j > 0 && alt.Logprob > lp.Top[j-1].Logprob {
			t.Fatalf("%s: alternatives not sorted: %v", what, lp.Top)
		}
	}
}
