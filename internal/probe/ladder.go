package probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// ladderJob is one request of the marker test.
type ladderJob struct {
	client *client
	tokens int // target prompt length
	over   bool
	abort  abortMode
	after  int
}

// ladderFractions are the prompt lengths below the limit, as fractions of
// the context less the output; ladderOver are the lengths past it, as a
// fraction plus tokens: past the limit by well over one page or block.
var (
	ladderFractions = []float64{0.02, 0.1, 0.3, 0.5, 0.7, 0.85, 0.95}
	ladderOver      = []struct {
		frac  float64
		extra int
	}{{1.05, 16}, {1.1, 300}, {1.5, 0}, {2, 0}}
)

// tally is what the marker test saw, shared by its workers.
type tally struct {
	mu                     sync.Mutex
	marker, admit, usage   Check
	sent, completed, abort int
	statuses               map[int]int
	leaks, overServed      int
	overBad, innerRefused  int
	usageBad               int
}

// markerLadder runs the marker test (every key climbs the length ladder
// with aborts mixed in, concurrently) and, while it runs, the consistency
// prompt with key A. It returns the marker, admission and usage checks,
// and the consistency check.
func (r *run) markerLadder(ctx context.Context, baseline consistencyBaseline) ([]Check, Check) {
	t := &tally{
		marker:   Check{Name: nameForeign},
		admit:    Check{Name: nameAdmission},
		usage:    Check{Name: nameUsage},
		statuses: map[int]int{},
	}
	var jobs []ladderJob
	for round := range r.cfg.LadderRounds {
		for _, c := range r.clients {
			room := r.ctxLen - defaultMaxTokens
			for _, f := range ladderFractions {
				jobs = append(jobs, r.newJob(c, int(f*float64(room)), false, round))
			}
			for _, o := range ladderOver {
				jobs = append(jobs, r.newJob(c, int(o.frac*float64(r.ctxLen))+o.extra, true, round))
			}
		}
	}
	// Interleave keys and lengths so both tenants' long and short prompts
	// are in flight together.
	for i := len(jobs) - 1; i > 0; i-- {
		j := r.gen.intn(i + 1)
		jobs[i], jobs[j] = jobs[j], jobs[i]
	}
	queue := make(chan ladderJob)
	var wg sync.WaitGroup
	var stopErr error
	var stopOnce sync.Once
	for range r.cfg.Concurrency * len(r.clients) {
		wg.Go(func() {
			for j := range queue {
				if err := r.runJob(ctx, j, t); err != nil {
					stopOnce.Do(func() { stopErr = err })
				}
			}
		})
	}
	loaded := make(chan Check, 1)
	go func() { loaded <- r.consistencyLoaded(ctx, baseline) }()
	for _, j := range jobs {
		if stopErr != nil {
			break
		}
		select {
		case queue <- j:
		case <-ctx.Done():
		}
	}
	close(queue)
	wg.Wait()
	cons := <-loaded
	r.cfg.Progress("marker test: %d requests, %d complete, %d aborted on purpose", t.sent, t.completed, t.abort)
	return t.verdicts(r, stopErr), cons
}

func (r *run) newJob(c *client, tokens int, over bool, round int) ladderJob {
	j := ladderJob{client: c, tokens: max(tokens, 8), over: over}
	// The first round runs every length to the end (so admission and usage
	// are judged on each); later ones abort some, mid-prompt or mid-stream.
	if round > 0 {
		switch k := r.gen.intn(10); {
		case k < 2:
			j.abort = abortMidPrompt
		case k < 5:
			j.abort, j.after = abortMidStream, 1+r.gen.intn(4)
		}
	}
	return j
}

func (r *run) runJob(ctx context.Context, j ladderJob, t *tally) error {
	mp := r.gen.markedPrompt(r.wordsFor(j.tokens))
	label := fmt.Sprintf("key %s, ~%d-token prompt, markers %s…%s", j.client.label, j.tokens, mp.Markers[0], mp.Markers[2])
	res, found, err := r.send(ctx, j.client, "length ladder", label, chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: defaultMaxTokens, Abort: j.abort, AbortAfter: j.after, OneRetry: j.over}, mp)
	if errors.Is(err, errBudget) || ctx.Err() != nil {
		return errBudget
	}
	exact := -1
	if r.tok != nil {
		exact = r.exactTokens(mp.Text)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	if res.Aborted {
		t.abort++
	}
	if err != nil {
		t.statuses[-1]++
		t.marker.evidence("%s: transport error: %v", label, err)
		return nil
	}
	t.statuses[res.Status]++
	if res.Status == http.StatusOK && res.Complete {
		t.completed++
	}
	t.leaks += len(found)
	sent := exact
	if sent < 0 {
		sent = r.tokensFor(r.wordsFor(j.tokens))
	}
	if j.over {
		t.judgeOver(r, label, res, sent)
		return nil
	}
	if res.Status == http.StatusBadRequest && res.ErrCode == "context_length_exceeded" && j.tokens < r.ctxLen*9/10 {
		t.innerRefused++
		t.admit.evidence("%s: refused as too long inside the advertised context: %s", label, res.ErrMsg)
	}
	if res.Status == http.StatusOK && res.PromptTokens >= 0 {
		t.judgeUsage(label, res, exact, sent)
	}
	return nil
}

// judgeOver judges the answer to a prompt past the context: only a 400
// is right.
func (t *tally) judgeOver(r *run, label string, res chatResult, sent int) {
	switch {
	case res.Status == http.StatusBadRequest:
		return
	case res.Status == http.StatusOK:
		t.overServed++
		what := "served"
		if res.PromptTokens >= 0 && res.PromptTokens < r.ctxLen {
			what = fmt.Sprintf("served with usage.prompt_tokens %d: silently truncated", res.PromptTokens)
		}
		t.admit.evidence("%s (context %d): %s", label, r.ctxLen, what)
	case res.Status == 0 && res.Aborted:
		return
	default:
		t.overBad++
		t.admit.evidence("%s (context %d, ~%d tokens sent): answered %d %s, not 400", label, r.ctxLen, sent, res.Status, res.ErrCode)
	}
}

// usageSlack allows the estimate (without a tokenizer) to be off: a
// bill this far above the estimate is reported.
const usageSlack = 1.25

func (t *tally) judgeUsage(label string, res chatResult, exact, estimate int) {
	switch {
	case exact >= 0 && res.PromptTokens > exact:
		t.usageBad++
		t.usage.evidence("%s: billed %d prompt tokens, the prompt has %d", label, res.PromptTokens, exact)
	case exact >= 0 && res.PromptTokens < exact && res.Complete:
		t.usageBad++
		t.usage.evidence("%s: usage says %d prompt tokens, the prompt has %d: part of it was not read", label, res.PromptTokens, exact)
	case exact < 0 && float64(res.PromptTokens) > usageSlack*float64(estimate)+8:
		t.usageBad++
		t.usage.evidence("%s: billed %d prompt tokens, about %d were sent", label, res.PromptTokens, estimate)
	}
}

func (t *tally) verdicts(r *run, stopErr error) []Check {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := &t.marker
	m.Data = map[string]any{"requests": t.sent, "completed": t.completed, "aborted_on_purpose": t.abort, "statuses": t.statuses, "leaks": t.leaks}
	// The verdict is run.foreign's, over every answer; the ladder can
	// only make it inconclusive.
	switch {
	case stopErr != nil:
		m.inconclusive(fmt.Sprintf("the length ladder stopped after %d requests: budget or duration spent", t.sent), "a larger --budget or --duration")
	case t.completed == 0:
		m.inconclusive("no ladder request completed", "an endpoint that answers")
	}
	a := &t.admit
	a.Data = map[string]any{"over_served": t.overServed, "over_not_400": t.overBad, "refused_inside": t.innerRefused}
	switch {
	case t.overServed > 0 || t.overBad > 0:
		a.Verdict = VerdictFinding
		a.Summary = fmt.Sprintf("prompts past the %d-token context: %d served, %d answered other than 400", r.ctxLen, t.overServed, t.overBad)
	case t.innerRefused > 0:
		a.Verdict = VerdictWarning
		a.Summary = fmt.Sprintf("%d prompt(s) well inside the advertised context refused as too long: the advertised context is not what is served", t.innerRefused)
	default:
		a.Verdict, a.Summary = VerdictPass, "every prompt past the context got 400"
	}
	u := &t.usage
	u.Data = map[string]any{"mismatches": t.usageBad, "exact": r.tok != nil}
	how := "estimated from calibration (no --tokenizer)"
	if r.tok != nil {
		how = "counted with the model's tokenizer"
	}
	switch {
	case t.usageBad > 0:
		u.Verdict, u.Summary = VerdictFinding, fmt.Sprintf("%d answer(s) with usage that does not match the prompt (%s)", t.usageBad, how)
	default:
		u.Verdict, u.Summary = VerdictPass, "usage.prompt_tokens matches the prompt sent ("+how+")"
	}
	return []Check{t.marker, t.admit, t.usage}
}
