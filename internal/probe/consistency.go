package probe

import (
	"context"
	"fmt"
	"net/http"
)

// consistencyBaseline is what the consistency prompt gives alone.
type consistencyBaseline struct {
	prompt  string
	answers map[string]int
	err     string
}

// consistencyAlone sends the consistency prompt a few times with key A and
// nothing else in flight, to learn the endpoint's own nondeterminism.
func (r *run) consistencyAlone(ctx context.Context) consistencyBaseline {
	words := r.wordsFor(min(r.ctxLen/4, 1024))
	b := consistencyBaseline{prompt: r.gen.markedPrompt(words).Text, answers: map[string]int{}}
	for range consistencyAloneRuns {
		res, err := r.clients[0].chat(ctx, chatRequest{Model: r.model, Prompt: b.prompt, MaxTokens: consistencyMaxTokens})
		if err != nil || res.Status != http.StatusOK || !res.Complete {
			b.err = fmt.Sprintf("baseline request: %v %d %s", err, res.Status, res.ErrCode)
			return b
		}
		b.answers[res.Text]++
	}
	return b
}

// consistencyLoaded sends the same prompt with key A while the marker test
// loads the endpoint from every key, and compares with the baseline.
func (r *run) consistencyLoaded(ctx context.Context, b consistencyBaseline) Check {
	c := Check{Name: "consistency under load"}
	if b.err != "" {
		c.Verdict, c.Summary = VerdictInconclusive, b.err
		return c
	}
	var same, differ, failed int
	for range consistencyLoadedRuns {
		res, err := r.clients[0].chat(ctx, chatRequest{Model: r.model, Prompt: b.prompt, MaxTokens: consistencyMaxTokens})
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
	case len(b.answers) > 1:
		c.Verdict = VerdictInconclusive
		c.Summary = fmt.Sprintf("the endpoint is not deterministic at temperature 0 with a seed (%d distinct answers alone): %d of %d loaded answers match one of them", len(b.answers), same, same+differ)
	case differ > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers under %s load differ from the deterministic answer alone", differ, same+differ, load)
	case same == 0:
		c.Verdict, c.Summary = VerdictInconclusive, fmt.Sprintf("no answer under load (%d failed)", failed)
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
