package runtime

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// PrefixBenchOptions shapes the prefix-cache benchmark: a multi-turn chat
// where every turn re-sends the whole conversation.
type PrefixBenchOptions struct {
	// Turns is the number of turns; TurnTokens the new user tokens per
	// turn; AnswerTokens the tokens generated per turn.
	Turns, TurnTokens, AnswerTokens int
}

// PrefixBenchReport is the time to first token of the last turn served
// as a both worker serves it, with the cache (every earlier turn sealed
// its prompt pages) and without (a fresh cache domain).
type PrefixBenchReport struct {
	Turns, PromptTokens, CachedTokens int
	Warm, Cold                        time.Duration
}

// Speedup is Cold/Warm.
func (r PrefixBenchReport) Speedup() float64 { return r.Cold.Seconds() / r.Warm.Seconds() }

// WriteTable prints the report as a Markdown table.
func (r PrefixBenchReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| turns | %d |\n| last turn's prompt | %d tokens (%d from the cache) |\n", r.Turns, r.PromptTokens, r.CachedTokens)
	fmt.Fprintf(w, "| TTFT of the last turn, no cache | %.1f ms |\n", float64(r.Cold.Microseconds())/1e3)
	fmt.Fprintf(w, "| TTFT of the last turn, cache hit | %.1f ms |\n", float64(r.Warm.Microseconds())/1e3)
	fmt.Fprintf(w, "| speed-up | **%.1f×** (target ≥ 5×) |\n", r.Speedup())
}

// BenchPrefix runs the multi-turn conversation in one cache domain, then
// the last turn again in a fresh domain, and checks that both answers of
// the last turn are identical (greedy decoding) before reporting.
func (r *Runtime) BenchPrefix(ctx context.Context, opt PrefixBenchOptions) (PrefixBenchReport, error) {
	if opt.Turns < 1 || opt.TurnTokens < 1 || opt.AnswerTokens < 1 {
		return PrefixBenchReport{}, fmt.Errorf("runtime: bench prefix needs turns, turn and answer tokens ≥ 1")
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	warm, _ := cachekey.Derive(secret, cachekey.ModeTenant, cachekey.Scope{Tenant: "bench-warm", Incarnation: "i1"})
	cold, _ := cachekey.Derive(secret, cachekey.ModeTenant, cachekey.Scope{Tenant: "bench-cold", Incarnation: "i1"})
	src := mrand.New(mrand.NewPCG(1, 2))
	vocab := r.Model.Config.VocabSize
	var conv []int32
	var rep PrefixBenchReport
	var answer []int32
	for turn := range opt.Turns {
		for range opt.TurnTokens {
			conv = append(conv, int32(src.IntN(vocab)))
		}
		t, out, cached, err := r.prefixTurn(ctx, fmt.Sprint("warm-", turn), warm, conv, opt.AnswerTokens)
		if err != nil {
			return rep, err
		}
		rep.Warm, rep.CachedTokens, answer = t, cached, out
		if turn < opt.Turns-1 {
			conv = append(conv, out...)
		}
	}
	t, out, _, err := r.prefixTurn(ctx, "cold", cold, conv, opt.AnswerTokens)
	if err != nil {
		return rep, err
	}
	if !slices.Equal(out, answer) {
		return rep, fmt.Errorf("runtime: the last turn's answer differs with and without the cache")
	}
	rep.Cold, rep.Turns, rep.PromptTokens = t, opt.Turns, len(conv)
	return rep, nil
}

// prefixTurn serves one turn as a both worker does (ReservePrefix, then
// the engine with the prefix) and returns its time to first token, its
// answer and the prompt tokens reused.
func (r *Runtime) prefixTurn(ctx context.Context, name string, d cachekey.Domain, prompt []int32, tokens int) (time.Duration, []int32, int, error) {
	o := kvpool.Owner{Tenant: "bench", Request: name, Epoch: 1}
	submitted := time.Now()
	pt := r.Capacity.PageTokens
	pages, hit, err := r.Pool.ReservePrefix(o, len(prompt)+tokens, kvpool.Tags(d, 1, "", prompt[:len(prompt)-1], pt))
	if err != nil {
		return 0, nil, 0, err
	}
	defer r.Pool.Release(o)
	st, err := r.Engine.Submit(ctx, engine.Request{Owner: o, Pages: pages, Prompt: prompt,
		Sampling: engine.Sampling{MaxTokens: tokens, IgnoreEOS: true},
		Prefix:   &engine.Prefix{Domain: d, Version: 1, Hit: hit}})
	if err != nil {
		return 0, nil, 0, err
	}
	var ttft time.Duration
	var out []int32
	for {
		ev, err := st.Next(ctx)
		if err != nil {
			return 0, nil, 0, fmt.Errorf("runtime: bench stream: %w", err)
		}
		switch ev.Kind {
		case engine.EventToken:
			if out = append(out, ev.Token); len(out) == 1 {
				ttft = time.Since(submitted)
			}
		case engine.EventDone:
			if ev.Result.Err != nil {
				return 0, nil, 0, ev.Result.Err
			}
			return ttft, out, ev.Result.CachedTokens, nil
		}
	}
}
