package probe

import (
	"context"
	"fmt"
	"net/http"
)

// consistencyPrompt is a consistency prompt and the answers it got alone
// from source (a key's label).
type consistencyPrompt struct {
	mp      markedPrompt
	answers map[string]int
	source  string
}

// consistencyBaseline is what the consistency prompt gives alone.
type consistencyBaseline struct {
	consistencyPrompt
	// err says why the checks that need the baseline cannot run; needs
	// what they would take.
	err, needs string
	// nondeterministic: the answers alone differ.
	nondeterministic bool
}

// consistencyAlone sends the consistency prompt a few times with key A and
// nothing else in flight, to learn the endpoint's own nondeterminism.
func (r *run) consistencyAlone(ctx context.Context) consistencyBaseline {
	words := r.wordsFor(consistencyTokens(r.ctxLen))
	mp := r.gen.markedPrompt(words)
	b := consistencyBaseline{consistencyPrompt: consistencyPrompt{mp: mp, answers: map[string]int{}, source: "key " + r.clients[0].label}}
	for i := range consistencyAloneRuns {
		res, _, err := r.send(ctx, r.clients[0], nameConsLoaded, fmt.Sprintf("key A, consistency prompt alone %d", i+1),
			chatRequest{Model: r.model, Prompt: b.mp.Text, MaxTokens: consistencyMaxTokens}, mp)
		if err != nil || res.Status != http.StatusOK || !res.Complete {
			b.err = fmt.Sprintf("baseline request: %v %d %s", err, res.Status, res.ErrCode)
			b.needs = "an endpoint that answers the consistency prompt"
			return b
		}
		b.answers[res.Text]++
	}
	if len(b.answers) > 1 {
		b.err = fmt.Sprintf("the endpoint is not deterministic at temperature 0 with a seed (%d distinct answers to one prompt alone): these checks compare answers and cannot run; the markers, cache, cross-talk, cached_tokens, usage and timing checks do not need determinism", len(b.answers))
		b.needs = "an endpoint deterministic at temperature 0 with a seed"
		b.nondeterministic = true
	}
	return b
}

// consistencyTokens is the length of a consistency prompt for a context of
// ctxLen tokens.
func consistencyTokens(ctxLen int) int { return min(ctxLen/4, 1024) }

// consistencyLoaded sends the same prompt with key A while the marker test
// loads the endpoint from every key, and compares with the baseline.
func (r *run) consistencyLoaded(ctx context.Context, b consistencyBaseline) Check {
	c := Check{Name: nameConsLoaded}
	if b.err != "" {
		c.inconclusive(b.err, b.needs)
		return c
	}
	var same, differ, failed int
	for i := range consistencyLoadedRuns {
		res, _, err := r.send(ctx, r.clients[0], c.Name, fmt.Sprintf("key A, consistency prompt under load %d", i+1),
			chatRequest{Model: r.model, Prompt: b.mp.Text, MaxTokens: consistencyMaxTokens}, b.mp)
		switch {
		case err != nil || res.Status != http.StatusOK || !res.Complete:
			failed++
		case b.answers[res.Text] > 0:
			same++
		default:
			differ++
			c.evidence("under load: %q; alone: %q", res.Text, keys(b.answers))
		}
	}
	c.Data = map[string]any{"distinct_alone": len(b.answers), "same": same, "differ": differ, "failed": failed}
	load := "the other key's"
	if len(r.clients) == 1 {
		load = "the same key's (one key: cross-tenant load not tested)"
	}
	switch {
	case r.ev.count(c.Name) > 0:
		c.Verdict, c.Summary = VerdictFinding, "an answer to the consistency prompt holds another request's content"
	case differ > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers under %s load differ from the deterministic answer alone", differ, same+differ, load)
	case same == 0:
		c.inconclusive(fmt.Sprintf("no answer under load (%d failed)", failed), "an endpoint that answers under load")
	default:
		c.Verdict, c.Summary = VerdictPass, fmt.Sprintf("%d answers under %s load equal the answer alone", same, load)
	}
	return c
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
