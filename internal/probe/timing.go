package probe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
)

// The prefix-cache timing check is a sequential sign test on pairs. Each
// round key A primes two secret prefixes; then, in random order, A probes
// its first one and a fresh one (the same-key control), and B probes A's
// second one and a fresh one (the cross-key comparison). A pair is won
// when its primed probe's time to first token is below its fresh one's.
// Without a channel the primed probe wins half the pairs whatever the
// machine's speed or load (the order is random and both probes of a pair
// run in the same moment of the run); through a cache shared across keys
// it wins nearly all. Wald's sequential probability ratio test between
// the two stops as soon as the evidence is overwhelming either way.
const (
	// timingP1 is the win rate of the alternative: a channel the check
	// must see. A prefix cache hit that saves most of a prefill wins
	// nearly every pair (warden's own cache, in the same-key control:
	// every pair); a slight benign bias (healthy warden's cross-key
	// comparison: 61% of pairs) must not read as one.
	timingP1 = 0.95
	// timingMinRounds is the fewest rounds before a verdict.
	timingMinRounds = 6
)

// sprt is a sequential probability ratio test of a win rate: 0.5 against
// timingP1.
type sprt struct {
	Wins   int     `json:"wins"`
	Losses int     `json:"losses"`
	LLR    float64 `json:"log_likelihood_ratio"`
}

// add records a pair: primed time below fresh time is a win; a tie
// carries no evidence.
func (s *sprt) add(primed, fresh float64) {
	switch {
	case primed < fresh:
		s.Wins++
		s.LLR += math.Log(timingP1 / 0.5)
	case primed > fresh:
		s.Losses++
		s.LLR += math.Log((1 - timingP1) / 0.5)
	}
}

// decide returns +1 (a channel), -1 (none of the alternative's size) or 0
// (not yet), at error rates alpha both ways.
func (s *sprt) decide(alpha float64) int {
	switch {
	case s.LLR >= math.Log((1-alpha)/alpha):
		return 1
	case s.LLR <= math.Log(alpha/(1-alpha)):
		return -1
	}
	return 0
}

// timingGroup is the samples of one comparison, for the report.
type timingGroup struct {
	Test     sprt      `json:"sequential_sign_test"`
	Primed   []float64 `json:"-"`
	Fresh    []float64 `json:"-"`
	PrimedMs float64   `json:"primed_median_ms"`
	FreshMs  float64   `json:"fresh_median_ms"`
	KS       KSResult  `json:"ks"`
}

func (g *timingGroup) add(primed, fresh float64) {
	g.Test.add(primed, fresh)
	g.Primed, g.Fresh = append(g.Primed, primed), append(g.Fresh, fresh)
}

func (g *timingGroup) summarize() {
	g.PrimedMs, g.FreshMs, g.KS = median(g.Primed), median(g.Fresh), KSTest(g.Primed, g.Fresh)
}

func (g *timingGroup) String() string {
	return fmt.Sprintf("primed probe faster in %d of %d pairs, median %.1f ms vs fresh %.1f ms", g.Test.Wins, g.Test.Wins+g.Test.Losses, g.PrimedMs, g.FreshMs)
}

// timing runs the sequential prefix-cache timing test.
func (r *run) timing(ctx context.Context) Check {
	c := Check{Name: nameTiming}
	maxRounds := r.cfg.TimingSamples
	if maxRounds <= 0 {
		c.Verdict, c.Summary = VerdictSkipped, "skipped on request (--timing-samples 0)"
		return c
	}
	words := r.wordsFor(min(r.cfg.TimingPrefixTokens, r.ctxLen/3))
	a := r.clients[0]
	b := a
	if len(r.clients) > 1 {
		b = r.clients[1]
	}
	var ctrl, cross timingGroup
	rounds := 0
	decided := 0
	for rounds < maxRounds {
		probes, err := r.timingRound(ctx, a, b, words, rounds)
		if err != nil {
			needs := "an endpoint that stays reachable"
			if errors.Is(err, errBudget) || ctx.Err() != nil {
				needs = fmt.Sprintf("about %d more requests (--budget, --duration)", 6*(maxRounds-rounds))
			}
			c.inconclusive(fmt.Sprintf("stopped after %d rounds: %v", rounds, err), needs)
			break
		}
		rounds++
		ctrl.add(probes[0], probes[1])
		cross.add(probes[2], probes[3])
		if rounds >= timingMinRounds {
			if decided = cross.Test.decide(r.cfg.Alpha); decided != 0 {
				break
			}
		}
	}
	ctrl.summarize()
	cross.summarize()
	c.Data = map[string]any{"rounds": rounds, "max_rounds": maxRounds, "alpha": r.cfg.Alpha, "p1": timingP1, "control": ctrl, "cross": cross,
		"prefix_words": words}
	power := "same-key control: " + ctrl.String()
	switch ctrl.Test.decide(r.cfg.Alpha) {
	case 1:
		power += " (the check sees a cache hit)"
	case -1:
		power += " (no cache hit visible within one key: the check's power here is unknown)"
	default:
		power += " (not yet decided)"
	}
	crossNote := "key B on key A's prefixes: " + cross.String()
	if len(r.clients) < 2 {
		c.inconclusive("one key: no cross-key comparison; "+power, "a second tenant's key (--key twice)")
		return c
	}
	if c.Verdict != "" {
		c.Summary += "; " + crossNote
		return c
	}
	switch decided {
	case 1:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("cross-key prefix timing is a channel after %d rounds: %s", rounds, crossNote)
		c.evidence("%s", crossNote)
		c.evidence("%s", power)
	case -1:
		c.Verdict = VerdictPass
		c.Summary = fmt.Sprintf("no cross-key channel after %d rounds (%s); %s", rounds, crossNote, power)
	default:
		c.inconclusive(fmt.Sprintf("no decision after %d rounds (%s)", rounds, crossNote),
			fmt.Sprintf("more rounds: --timing-samples above %d", maxRounds))
	}
	return c
}

// timingRound primes two fresh secret prefixes with A and returns the
// times to first token of four probes, sent in random order: A on its
// primed prefix and on a fresh one, B on A's other primed prefix and on a
// fresh one.
func (r *run) timingRound(ctx context.Context, a, b *client, words, round int) ([4]float64, error) {
	var out [4]float64
	var prefix [4]string
	for i := range prefix {
		prefix[i] = r.gen.words(words)
	}
	for _, i := range []int{0, 2} {
		if _, err := r.ttft(ctx, a, fmt.Sprintf("key A, timing round %d, priming prefix %d", round+1, i), prefix[i]+" "+r.gen.words(8)); err != nil {
			return out, err
		}
	}
	order := []int{0, 1, 2, 3}
	for i := len(order) - 1; i > 0; i-- {
		j := r.gen.intn(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	for _, i := range order {
		k := a
		if i >= 2 {
			k = b
		}
		ms, err := r.ttft(ctx, k, fmt.Sprintf("key %s, timing round %d, probe %d", k.label, round+1, i), prefix[i]+" "+r.gen.words(8))
		if err != nil {
			return out, err
		}
		out[i] = ms
	}
	return out, nil
}

// ttft sends prompt for one token and returns the time to its first token
// in milliseconds.
func (r *run) ttft(ctx context.Context, c *client, label, prompt string) (float64, error) {
	res, _, err := r.send(ctx, c, nameTiming, label, chatRequest{Model: r.model, Prompt: prompt, MaxTokens: 1}, markedPrompt{Text: prompt})
	if err != nil {
		return 0, err
	}
	if res.Status != http.StatusOK {
		return 0, fmt.Errorf("key %s: %d %s %s", c.label, res.Status, res.ErrCode, res.ErrMsg)
	}
	return float64(res.TTFT.Microseconds()) / 1000, nil
}
