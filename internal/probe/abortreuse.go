package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Abort-reuse check: each round the other key sends a long prompt and hangs
// up at a random point before its first token — while the endpoint is
// still computing the prompt and moving its KV — and key A at once sends
// a consistency prompt abortFollowers times. An endpoint that frees the
// aborted request's memory before its writers stopped, and hands it to
// the next request, changes A's deterministic answer (or puts the aborted
// prompt's markers into it).
//
// With two keys the consistency prompt is new each round, its answer
// learnt from key B alone just before the abort: nothing of it is in key
// A's prefix cache, so every page of A's prompt is computed into memory the
// endpoint allocates then — the memory an abort would have freed. A
// repeated prompt would come mostly from A's cache, and only its last,
// partial page (if any) from freed memory.
const (
	// DefaultAbortRounds is how many aborts before the first token the
	// check lands (it tries abortMaxRounds for them).
	DefaultAbortRounds = 10
	// abortFollowers is how many consistency prompts follow each abort,
	// one after the other: the first may be admitted before the endpoint
	// has processed the abort, the second comes after it.
	abortFollowers = 2
	// abortPromptFraction is the aborted prompt's length, as a fraction of
	// the context less the output: long, so its prompt takes the longest
	// to compute and transfer, and holds the most memory.
	abortPromptFraction = 0.85
)

// abortMaxRounds bounds the rounds tried to land rounds aborts before
// the first token: on a loaded machine many land late.
func abortMaxRounds(rounds int) int { return 3 * rounds }

// abortReuse runs the check against the baseline of consistencyAlone.
func (r *run) abortReuse(ctx context.Context, b consistencyBaseline) Check {
	c := Check{Name: nameConsAborts}
	victim, aborter := r.clients[0], r.clients[len(r.clients)-1]
	who := "the other key's"
	if len(r.clients) == 1 {
		who = "the same key's (one key: cross-tenant reuse not tested)"
	}
	if b.err != "" {
		c.inconclusive(b.err, b.needs)
		return c
	}
	tokens := int(abortPromptFraction * float64(r.ctxLen-defaultMaxTokens))
	// The time to first token of such a prompt, run to the end, bounds
	// where an abort lands before the first token.
	mp := r.gen.markedPrompt(r.wordsFor(tokens))
	first, _, err := r.send(ctx, aborter, c.Name, fmt.Sprintf("key %s, ~%d-token prompt run to the end", aborter.label, tokens),
		chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: defaultMaxTokens}, mp)
	if err != nil || first.Status != http.StatusOK || !first.Complete {
		c.inconclusive(fmt.Sprintf("a ~%d-token prompt did not complete (%v %d %s): nothing to abort", tokens, err, first.Status, first.ErrCode),
			"an endpoint that completes a prompt of 85% of its context")
		return c
	}
	ttft := first.TTFT
	stopped := false
	var landed, late, same, differ, failed, leaks, round int
	for ; round < abortMaxRounds(r.cfg.AbortRounds) && landed < r.cfg.AbortRounds && differ+leaks == 0; round++ {
		follow := b.consistencyPrompt
		if victim != aborter {
			var err error
			if follow, err = r.freshConsistency(ctx, c.Name, aborter, round); errors.Is(err, errBudget) || ctx.Err() != nil {
				stopped = true
				break
			} else if err != nil {
				failed++
				continue
			}
		}
		// A random point in the middle half of the time to first token.
		delay := ttft/4 + time.Duration(r.gen.intn(int(ttft/2)+1))
		mp := r.gen.markedPrompt(r.wordsFor(tokens))
		label := fmt.Sprintf("key %s, ~%d-token prompt aborted after %v (round %d), markers %s…%s",
			aborter.label, tokens, delay.Round(time.Millisecond), round+1, mp.Markers[0], mp.Markers[2])
		res, _, err := r.send(ctx, aborter, c.Name, label, chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: defaultMaxTokens,
			Abort: abortAfterDelay, AbortDelay: delay}, mp)
		if errors.Is(err, errBudget) || ctx.Err() != nil {
			stopped = true
			break
		}
		switch {
		case res.Aborted && res.Text == "":
			landed++
		default:
			// The abort came after the first token, or never: aim earlier.
			late++
			ttft /= 2
		}
		for i := range abortFollowers {
			flabel := fmt.Sprintf("key %s, consistency prompt %d after round %d's abort", victim.label, i+1, round+1)
			got, found, err := r.send(ctx, victim, c.Name, flabel, chatRequest{Model: r.model, Prompt: follow.mp.Text, MaxTokens: consistencyMaxTokens}, follow.mp)
			switch {
			case err != nil || got.Status != http.StatusOK || !got.Complete:
				failed++
				continue
			case follow.answers[got.Text] > 0:
				same++
			default:
				differ++
				c.evidence("%s: %q; alone (%s): %q (after [%s])", flabel, got.Text, follow.source, keys(follow.answers), label)
			}
			for _, l := range found {
				leaks++
				c.evidence("LEAK in response to [%s]: %s from [%s]", flabel, l.Evidence, l.Source)
			}
		}
	}
	c.Data = map[string]any{"rounds": round, "aborts_before_first_token": landed, "aborts_late": late, "distinct_alone": len(b.answers),
		"same": same, "differ": differ, "failed": failed, "leaks": leaks, "ttft_ms": first.TTFT.Milliseconds()}
	switch {
	case leaks > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d answers right after %s aborts hold text of an aborted prompt", leaks, who)
	case differ > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers right after %s aborts (whole prompt sent, hung up before the first token) differ from the deterministic answer alone", differ, same+differ, who)
	case landed == 0 || same == 0 || stopped:
		needs := fmt.Sprintf("aborts that land before the first token (%d rounds tried)", round)
		if stopped {
			needs = "a larger --budget or --duration"
		}
		c.inconclusive(fmt.Sprintf("%d aborts landed before the first token, %d answers after them (%d failed)", landed, same, failed), needs)
	default:
		c.Verdict = VerdictPass
		c.Summary = fmt.Sprintf("%d answers right after %d of %s aborts before the first token equal the answer alone", same, landed, who)
	}
	return c
}

// freshConsistency makes round's consistency prompt, as long as the
// baseline's, and learns its answer from key k alone.
func (r *run) freshConsistency(ctx context.Context, check string, k *client, round int) (consistencyPrompt, error) {
	mp := r.gen.markedPrompt(r.wordsFor(consistencyTokens(r.ctxLen)))
	res, _, err := r.send(ctx, k, check, fmt.Sprintf("key %s, round %d's consistency prompt alone", k.label, round+1),
		chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: consistencyMaxTokens}, mp)
	if err == nil && (res.Status != http.StatusOK || !res.Complete) {
		err = fmt.Errorf("%d %s", res.Status, res.ErrCode)
	}
	if err != nil {
		return consistencyPrompt{}, fmt.Errorf("round %d's consistency prompt alone: %w", round+1, err)
	}
	return consistencyPrompt{mp: mp, answers: map[string]int{res.Text: 1}, source: "key " + k.label}, nil
}
