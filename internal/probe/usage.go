package probe

import (
	"context"
	"fmt"
	"net/http"
)

// usageByAdmission counts a prompt's tokens without the endpoint's
// tokenizer, the way its admission counts them: a prompt of about three
// quarters of the advertised context, sent with max_tokens m, is refused
// as context_length_exceeded exactly when its tokens plus m pass the
// context, so the largest m it is admitted with (found by bisection, each
// admitted try hung up after its first event) gives its length. The
// usage.prompt_tokens billed for it must agree: equal under "prompt +
// max_tokens ≤ context", one less under a strict "<", so a difference of
// one token above, or two below, is a finding. Endpoints that refuse with
// another code, or do not advertise their context, are left out with a
// note. It returns the note for the usage check's summary.
func (r *run) usageByAdmission(ctx context.Context) string {
	if r.ctxSource != "advertised" {
		return "not cross-checked with admission (the context is not advertised)"
	}
	a := r.clients[0]
	mp := r.gen.markedPrompt(r.wordsFor(r.ctxLen * 3 / 4))
	label := "key A, usage-by-admission prompt"
	first, _, err := r.send(ctx, a, nameUsage, label, chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: 1}, mp)
	if err != nil || first.Status != http.StatusOK || first.PromptTokens < 0 {
		return fmt.Sprintf("not cross-checked with admission (the prompt: %v %d %s)", err, first.Status, first.ErrCode)
	}
	// fits sends the prompt with max_tokens m: true admitted, false
	// refused as past the context; an error for anything else.
	fits := func(m int) (bool, error) {
		res, _, err := r.send(ctx, a, nameUsage, fmt.Sprintf("%s, max_tokens %d", label, m),
			chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: m, Abort: abortMidStream, AbortAfter: 1, AnyStatus: true})
		switch {
		case err != nil:
			return false, err
		case res.Status == http.StatusOK:
			return true, nil
		case res.Status == http.StatusBadRequest && res.ErrCode == "context_length_exceeded":
			return false, nil
		}
		return false, fmt.Errorf("max_tokens %d: %d %s", m, res.Status, res.ErrCode)
	}
	lo, hi := 1, r.ctxLen
	if ok, err := fits(hi); err != nil || ok {
		return fmt.Sprintf("not cross-checked with admission (max_tokens of the whole context: admitted %v, %v)", ok, err)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return fmt.Sprintf("not cross-checked with admission (%v)", err)
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	counted := r.ctxLen - lo
	if d := first.PromptTokens - counted; d >= 1 || d <= -2 {
		r.ev.usage("a prompt admitted with at most max_tokens %d in a %d-token context has %d tokens as admission counts them; usage.prompt_tokens says %d",
			lo, r.ctxLen, counted, first.PromptTokens)
	}
	return fmt.Sprintf("cross-checked with admission: %d prompt tokens billed, %d counted by admission (largest max_tokens admitted %d)", first.PromptTokens, counted, lo)
}
