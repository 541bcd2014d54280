package api

import (
	"context"
	"errors"
)

// echoGeneration sends a completion's prompt text (echo) as each choice's
// first text, then the generation's own events. The prompt goes out with
// the first event of the generation, so that event's headers (rate-limit
// state) still precede the response's first byte and a request rejected
// after admission echoes nothing. With logprobs (top alternatives each),
// the prompt's tokens' logprobs, which that first event carries, go with
// the echoed text.
type echoGeneration struct {
	Generation
	prompt   string
	choices  int
	logprobs bool
	top      int
	queue    []Event
	started  bool
}

var _ Generation = (*echoGeneration)(nil)

// Next implements Generation.
func (g *echoGeneration) Next(ctx context.Context) (Event, error) {
	if !g.started {
		g.started = true
		ev, err := g.Generation.Next(ctx)
		if err != nil {
			return ev, err
		}
		if g.logprobs && ev.PromptLogprobs == nil {
			return ev, errors.New("api: the generation's first event carries no prompt logprobs for echo")
		}
		for k := range g.choices {
			echo := Event{TextDelta: g.prompt, Choice: k}
			if g.logprobs {
				echo.Logprobs = echoLogprobs(ev.PromptLogprobs, g.top)
			}
			g.queue = append(g.queue, echo)
		}
		g.queue[0].Headers, ev.Headers = ev.Headers, nil
		g.queue = append(g.queue, ev)
	}
	if len(g.queue) > 0 {
		ev := g.queue[0]
		g.queue = g.queue[1:]
		return ev, nil
	}
	return g.Generation.Next(ctx)
}
