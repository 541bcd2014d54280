package gateway

import (
	"context"
	"fmt"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/reasoning"
	"github.com/warden-ai/warden/internal/toolcall"
)

// choice is one of a request's n choices as the relay sees it: its text
// (stop strings apply per choice), its reasoning parser (nil for a model
// without a reasoning format) and tool-call parser (nil without tools),
// the tokens received for it, and whether it ended (a stop string
// matched).
type choice struct {
	text     *textStream
	reason   *reasoning.Parser
	tools    *toolcall.Parser
	received int64
	ended    bool
}

// newChoices starts the relay's state of the request's choices.
func (d *driver) newChoices() []*choice {
	cs := make([]*choice, d.n)
	for k := range cs {
		cs[k] = &choice{text: newTextStream(d.tok.tok, d.stops, d.markers)}
		if d.tools != nil {
			cs[k].tools = d.tools(k)
		}
		if d.reason != nil {
			cs[k].reason = d.reason(k)
		}
	}
	return cs
}

func allEnded(cs []*choice) bool {
	for _, c := range cs {
		if !c.ended {
			return false
		}
	}
	return true
}

// doneChoices is every choice's outcome in a Done: its choices for n > 1,
// else the one outcome it carries.
func doneChoices(done *controlpb.Done) []*controlpb.NChoicesDone {
	if cs := done.GetChoices(); len(cs) > 0 {
		return cs
	}
	return []*controlpb.NChoicesDone{{FinishReason: done.GetFinishReason(), CompletionTokens: done.GetCompletionTokens()}}
}

// checkDone checks a Done against what the relay counted (I7): the prompt
// once, every choice's tokens (a final stop token is counted but not
// sent), and their sum.
func checkDone(done *controlpb.Done, prefilled int64, cs []*choice) error {
	outs := doneChoices(done)
	if done.GetPromptTokens() != prefilled || len(outs) != len(cs) {
		return fmt.Errorf("Done{prompt %d, %d choices} disagrees with %d prompt tokens and %d choices", done.GetPromptTokens(), len(outs), prefilled, len(cs))
	}
	var sum int64
	for k, o := range outs {
		n, reason := o.GetCompletionTokens(), o.GetFinishReason()
		sum += n
		if !(n == cs[k].received || (reason == "stop" && n == cs[k].received+1)) || (reason != "stop" && reason != "length") {
			return fmt.Errorf("Done{%s, completion %d} of choice %d disagrees with the %d tokens received", reason, n, k, cs[k].received)
		}
	}
	if sum != done.GetCompletionTokens() {
		return fmt.Errorf("Done's completion tokens %d are not its choices' sum %d", done.GetCompletionTokens(), sum)
	}
	return nil
}

// finishChoices ends every choice still open with its rest of text and
// finish reason; the last event carries the request's usage.
func (d *driver) finishChoices(ctx context.Context, done *controlpb.Done, cs []*choice) error {
	type last struct {
		k            int
		rest, reason string
	}
	var open []last
	for k, o := range doneChoices(done) {
		if cs[k].ended {
			continue
		}
		reason := o.GetFinishReason()
		rest, stopped := cs[k].text.flush()
		if stopped {
			reason = "stop"
			if len(cs) == 1 {
				d.stopped = true
			}
		}
		open = append(open, last{k, rest, reason})
	}
	usage, err := d.finalUsage(ctx)
	if err != nil {
		return err
	}
	if len(open) == 0 {
		return d.emit(ctx, api.Event{Usage: usage})
	}
	for i, l := range open {
		var u *api.Usage
		if i == len(open)-1 {
			u = usage
		}
		if err := d.emitLast(ctx, l.k, cs[l.k], l.rest, nil, l.reason, u); err != nil {
			return err
		}
	}
	return nil
}
