package probe

import (
	"context"
	"fmt"
	"net/http"
)

// timingPrefixTokens bounds the secret prefix of the timing test: long
// enough that a cache hit saves a measurable prefill.
const timingPrefixTokens = 512

// timingSample is one probe: primed (its prefix was sent before, by the
// primer) or fresh.
type timingSample struct {
	primed bool
	ttftMs float64
}

// timing runs the prefix-cache timing test. Key A primes secret prefixes;
// key B probes with primed and fresh ones; a same-key control (A probing
// what A primed) shows whether the test can see a cache hit at all.
func (r *run) timing(ctx context.Context) Check {
	c := Check{Name: "prefix-cache timing"}
	n := r.cfg.TimingSamples
	if n <= 0 {
		c.Verdict, c.Summary = VerdictSkipped, "--timing-samples 0"
		return c
	}
	words := r.wordsFor(min(timingPrefixTokens, r.ctxLen/3))
	a := r.clients[0]
	control, err := r.timingGroup(ctx, a, a, words, n)
	if err != nil {
		c.Verdict, c.Summary = VerdictInconclusive, "control: "+err.Error()
		return c
	}
	ctrl := ks(control)
	c.Data = map[string]any{"samples_per_group": n, "alpha": r.cfg.Alpha, "control": ctrl}
	powerNote := fmt.Sprintf("same-key control: hit median %.1f ms vs fresh %.1f ms, p=%.2g", ctrl.HitMs, ctrl.FreshMs, ctrl.P)
	if len(r.clients) < 2 {
		c.Verdict, c.Summary = VerdictSkipped, "one key: no cross-tenant timing test; "+powerNote
		return c
	}
	cross, err := r.timingGroup(ctx, a, r.clients[1], words, n)
	if err != nil {
		c.Verdict, c.Summary = VerdictInconclusive, "cross-key: "+err.Error()
		return c
	}
	x := ks(cross)
	c.Data["cross"] = x
	crossNote := fmt.Sprintf("key B on A's prefixes: median %.1f ms vs fresh %.1f ms, p=%.2g", x.HitMs, x.FreshMs, x.P)
	visible := ctrl.P < r.cfg.Alpha && ctrl.HitMs < ctrl.FreshMs
	switch {
	case x.P < r.cfg.Alpha && x.HitMs < x.FreshMs:
		c.Verdict = VerdictFinding
		c.Summary = "cross-tenant prefix timing is distinguishable: " + crossNote
		c.evidence("%s", crossNote)
		c.evidence("%s", powerNote)
	case visible:
		c.Verdict = VerdictPass
		c.Summary = "no cross-tenant channel (" + crossNote + "), while the test sees hits: " + powerNote
	default:
		c.Verdict = VerdictPass
		c.Summary = "no cross-tenant channel (" + crossNote + "); no cache hit visible even within one key (" + powerNote + "), so the test's power here is unknown"
	}
	return c
}

// ksSummary is a KS test with the groups' medians.
type ksSummary struct {
	KSResult
	HitMs   float64 `json:"hit_median_ms"`
	FreshMs float64 `json:"fresh_median_ms"`
}

func ks(s []timingSample) ksSummary {
	var hit, fresh []float64
	for _, x := range s {
		if x.primed {
			hit = append(hit, x.ttftMs)
		} else {
			fresh = append(fresh, x.ttftMs)
		}
	}
	return ksSummary{KSResult: KSTest(hit, fresh), HitMs: median(hit), FreshMs: median(fresh)}
}

// timingGroup takes n primed and n fresh samples, in random order:
// primer sends a prefix, then prober sends the same prefix with another
// ending (primed), or prober sends a prefix nobody sent (fresh).
func (r *run) timingGroup(ctx context.Context, primer, prober *client, words, n int) ([]timingSample, error) {
	order := make([]bool, 0, 2*n)
	for i := range 2 * n {
		order = append(order, i%2 == 0)
	}
	for i := len(order) - 1; i > 0; i-- {
		j := r.gen.intn(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	out := make([]timingSample, 0, len(order))
	for _, primed := range order {
		prefix := r.gen.words(words)
		if primed {
			if _, err := r.ttft(ctx, primer, prefix+" "+r.gen.words(8)); err != nil {
				return out, err
			}
		}
		ms, err := r.ttft(ctx, prober, prefix+" "+r.gen.words(8))
		if err != nil {
			return out, err
		}
		out = append(out, timingSample{primed: primed, ttftMs: ms})
	}
	return out, nil
}

// ttft sends prompt for one token and returns the time to its first token
// in milliseconds.
func (r *run) ttft(ctx context.Context, c *client, prompt string) (float64, error) {
	res, err := c.chat(ctx, chatRequest{Model: r.model, Prompt: prompt, MaxTokens: 1})
	if err != nil {
		return 0, err
	}
	if res.Status != http.StatusOK {
		return 0, fmt.Errorf("key %s: %d %s %s", c.label, res.Status, res.ErrCode, res.ErrMsg)
	}
	return float64(res.TTFT.Microseconds()) / 1000, nil
}
