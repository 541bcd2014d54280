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
// the consistency prompt abortFollowers times. An endpoint that frees the
// aborted request's memory before its writers stopped, and hands it to
// the next request, changes A's deterministic answer (or puts the aborted
// prompt's markers into it).
const (
	// DefaultAbortRounds is how many aborts the check lands.
	DefaultAbortRounds = 4
	// abortFollowers is how many consistency prompts follow each abort,
	// one after the other: the first may be admitted before the endpoint
	// has processed the abort, the second comes after it.
	abortFollowers = 2
	// abortPromptFraction is the aborted prompt's length, as a fraction of
	// the context less the output: long, so its prompt takes the longest
	// to compute and transfer, and holds the most memory.
	abortPromptFraction = 0.85
)

// abortReuse runs the check against the baseline of consistencyAlone.
func (r *run) abortReuse(ctx context.Context, b consistencyBaseline) Check {
	c := Check{Name: "consistency after aborts"}
	victim, aborter := r.clients[0], r.clients[len(r.clients)-1]
	who := "the other key's"
	if len(r.clients) == 1 {
		who = "the same key's (one key: cross-tenant reuse not tested)"
	}
	if b.err != "" {
		c.Verdict, c.Summary = VerdictInconclusive, b.err
		return c
	}
	tokens := int(abortPromptFraction * float64(r.ctxLen-defaultMaxTokens))
	// The time to first token of such a prompt, run to the end, bounds
	// where an abort lands before the first token.
	mp := r.gen.markedPrompt(r.wordsFor(tokens))
	first, err := aborter.chat(ctx, chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: defaultMaxTokens})
	if err != nil || first.Status != http.StatusOK || !first.Complete {
		c.Verdict = VerdictInconclusive
		c.Summary = fmt.Sprintf("a ~%d-token prompt did not complete (%v %d %s): nothing to abort", tokens, err, first.Status, first.ErrCode)
		return c
	}
	ttft := first.TTFT
	var landed, late, same, differ, failed, leaks int
	for round := range r.cfg.AbortRounds {
		// A random point in the middle half of the time to first token.
		delay := ttft/4 + time.Duration(r.gen.intn(int(ttft/2)+1))
		mp := r.gen.markedPrompt(r.wordsFor(tokens))
		label := fmt.Sprintf("key %s, ~%d-token prompt aborted after %v (round %d), markers %s…%s",
			aborter.label, tokens, delay.Round(time.Millisecond), round+1, mp.Markers[0], mp.Markers[2])
		r.index.add(label, mp)
		res, err := aborter.chat(ctx, chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: defaultMaxTokens,
			Abort: abortAfterDelay, AbortDelay: delay})
		if errors.Is(err, errBudget) || ctx.Err() != nil {
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
			got, err := victim.chat(ctx, chatRequest{Model: r.model, Prompt: b.prompt, MaxTokens: consistencyMaxTokens})
			flabel := fmt.Sprintf("key %s, consistency prompt %d after round %d's abort", victim.label, i+1, round+1)
			switch {
			case err != nil || got.Status != http.StatusOK || !got.Complete:
				failed++
				continue
			case b.answers[got.Text] > 0:
				same++
			default:
				differ++
				c.evidence("%s: %q; alone: %q (after [%s])", flabel, got.Text, keys(b.answers), label)
			}
			for _, l := range r.index.check(flabel, got.Text) {
				leaks++
				c.evidence("LEAK in response to [%s]: %s from [%s]", flabel, l.Evidence, l.Source)
			}
		}
	}
	c.Data = map[string]any{"aborts_before_first_token": landed, "aborts_late": late, "distinct_alone": len(b.answers),
		"same": same, "differ": differ, "failed": failed, "leaks": leaks, "ttft_ms": first.TTFT.Milliseconds()}
	switch {
	case leaks > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d answers right after %s aborts hold text of an aborted prompt", leaks, who)
	case len(b.answers) > 1:
		c.Verdict = VerdictInconclusive
		c.Summary = fmt.Sprintf("the endpoint is not deterministic at temperature 0 with a seed (%d distinct answers alone)", len(b.answers))
	case differ > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers right after %s aborts (whole prompt sent, hung up before the first token) differ from the deterministic answer alone", differ, same+differ, who)
	case landed == 0 || same == 0:
		c.Verdict = VerdictInconclusive
		c.Summary = fmt.Sprintf("%d aborts landed before the first token, %d answers after them (%d failed)", landed, same, failed)
	default:
		c.Verdict = VerdictPass
		c.Summary = fmt.Sprintf("%d answers right after %d of %s aborts before the first token equal the answer alone", same, landed, who)
	}
	return c
}
