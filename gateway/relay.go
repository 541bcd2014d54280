package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// received is one Recv result of a Generate stream.
type received struct {
	ev  *controlpb.GenerateEvent
	err error
}

// newReceiver pumps a Generate stream into a channel, so the driver can
// wait for it and for the prefill result at once. The channel delivers
// every event and then the stream's error; the pump stops there or when
// ctx ends.
func newReceiver(ctx context.Context, stream interface {
	Recv() (*controlpb.GenerateEvent, error)
}) <-chan received {
	ch := make(chan received)
	go func() {
		for {
			ev, err := stream.Recv()
			select {
			case ch <- received{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// prefillResult is the Prefill call's answer.
type prefillResult struct {
	resp *controlpb.PrefillResponse
	err  error
}

// relay forwards the decode worker's events until Done, a stop string or a
// failure. d.prefillDue, when set, delivers the Prefill call's result: a
// failure before decode is ready fails the request; after, decode has
// verified the KV already and the failure is only logged. With retryable
// (a both worker), ResourceExhausted before Ready is errRetry.
func (d *driver) relay(ctx context.Context, w *registry.Worker, events <-chan received, retryable bool) error {
	choices := d.newChoices()
	for {
		var r received
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case p := <-d.prefillDue:
			if err := d.onPrefilled(ctx, p); err != nil {
				return err
			}
			continue
		case r = <-events:
		}
		if d.needsFirstLogprobs(r.ev, choices) {
			// Decode sent the first token before the Prefill call
			// returned its logprobs: wait for them.
			if err := d.awaitPrefill(ctx); err != nil {
				return err
			}
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return failed(causeProtocol, workerUnavailable("The worker ended the request without finishing it; retry the request."),
					fmt.Errorf("worker %s ended the Generate stream without Done", w.ID()))
			}
			if retryable && d.req.State() == lifecycle.Prefilling {
				if retry, err := d.adapterMissing(ctx, w, r.err); retry || err != nil {
					return cmp.Or(err, errRetry) // pushed: place it again
				}
			}
			if retryable && status.Code(r.err) == codes.ResourceExhausted && d.req.State() == lifecycle.Prefilling {
				// Nothing is held: a both worker reserves all or nothing.
				w.Exhausted(d.pages)
				return errRetry
			}
			if retryable && d.req.State() == lifecycle.Prefilling && d.failover(w, r.err) {
				return errRetry // never reached the worker: place it again
			}
			return d.workerError("generate", w, r.err)
		}
		if end, err := d.onEvent(ctx, w, r.ev, choices); end || err != nil {
			return err
		}
	}
}

// onEvent handles one event of the decode stream; end is true once the
// request completed.
func (d *driver) onEvent(ctx context.Context, w *registry.Worker, ev *controlpb.GenerateEvent, choices []*choice) (end bool, err error) {
	state := d.req.State()
	protocol := func(format string, args ...any) error {
		return failed(causeProtocol, api.Internal(), fmt.Errorf("worker %s: "+format, append([]any{w.ID()}, args...)...))
	}
	switch e := ev.GetEvent().(type) {
	case *controlpb.GenerateEvent_Ready:
		if state != lifecycle.Prefilling && state != lifecycle.Transferring {
			return false, protocol("Ready while %s", state)
		}
		if n := e.Ready.GetPromptTokens(); n != int64(len(d.prompt)) {
			// The incident this gateway exists to prevent: decode ready on
			// a prompt other than the one admitted.
			return false, failed(causeCountMismatch, api.Internal(),
				fmt.Errorf("worker %s is ready with %d prompt tokens, %d were admitted", w.ID(), n, len(d.prompt)))
		}
		if err := d.req.Advance(lifecycle.Decoding); err != nil {
			return false, failed(lifecycle.CauseInternal, api.Internal(), err)
		}
		d.prefilled = int64(len(d.prompt))
		d.stopRenewing() // the transfer is verified and claimed
		if started := d.req.Snapshot().Entered[lifecycle.Prefilling]; !started.IsZero() {
			d.g.rates.observe(d.req.Info().Model, len(d.prompt), time.Since(started))
		}
		first := api.Event{Headers: rateLimitHeaders(d.lease.Info().Quota)}
		if first.PromptLogprobs, err = d.promptLogprobs(ctx, e.Ready); err != nil {
			return false, err
		}
		// The first event commits the response: its status and headers.
		if err := d.emit(ctx, first); err != nil {
			return false, err
		}
		runHook(ctx, &d.g.hooks.afterReady)
		return false, nil

	case *controlpb.GenerateEvent_Tokens:
		if state != lifecycle.Decoding {
			return false, protocol("tokens while %s", state)
		}
		ids := e.Tokens.GetIds()
		k := int(e.Tokens.GetChoice())
		if k < 0 || k >= len(choices) {
			return false, protocol("tokens of choice %d of %d", k, len(choices))
		}
		c := choices[k]
		now := time.Now()
		if d.firstToken.IsZero() {
			d.firstToken = now
		}
		d.lastToken = now
		var lps []api.TokenLogprob
		if d.sampling.GetLogprobs() {
			var first *controlpb.LogprobsToken
			if d.needsFirstLogprobs(ev, choices) && k < len(d.firstLogprobs) {
				first = d.firstLogprobs[k]
			}
			if lps, err = tokenLogprobs(d.tok.tok, ids, e.Tokens.GetLogprobs(), first, int(d.sampling.GetTopLogprobs())); err != nil {
				return false, protocol("logprobs: %v", err)
			}
		}
		d.received += int64(len(ids))
		c.received += int64(len(ids))
		if c.received > d.maxTokens {
			return false, protocol("sent %d tokens for choice %d, max_tokens is %d", c.received, k, d.maxTokens)
		}
		if c.ended {
			// Generated past the choice's stop string (other choices
			// still run): billed, not shown.
			return false, nil
		}
		delta, stopped, err := c.text.add(ids)
		if err != nil {
			return false, protocol("undecodable token: %v", err)
		}
		if stopped {
			c.ended = true
			if !allEnded(choices) {
				return false, d.emitLast(ctx, k, c, delta, lps, "stop", nil)
			}
			// Billed: the tokens received; the worker is told to stop
			// (Finish with CauseStop).
			d.stopped, d.generated = true, d.received
			usage, err := d.finalUsage(ctx)
			if err != nil {
				return false, err
			}
			return true, d.emitLast(ctx, k, c, delta, lps, "stop", usage)
		}
		return false, d.emitText(ctx, k, c, delta, lps)

	case *controlpb.GenerateEvent_Done:
		if state != lifecycle.Decoding {
			return false, protocol("Done while %s", state)
		}
		done := e.Done
		if err := checkDone(done, d.prefilled, choices); err != nil {
			return false, failed(causeCountMismatch, api.Internal(), fmt.Errorf("worker %s: %w", w.ID(), err))
		}
		d.generated = done.GetCompletionTokens()
		return true, d.finishChoices(ctx, done, choices)
	}
	return false, protocol("unknown event %T", ev.GetEvent())
}

// promptLogprobs is the prompt's tokens with their logprobs when the
// sampling asked for them (nil otherwise): a both worker's Ready carries
// them, in P/D the Prefill response does (awaited).
func (d *driver) promptLogprobs(ctx context.Context, ready *controlpb.Ready) ([]api.PromptToken, error) {
	if d.sampling.PromptLogprobs == nil {
		return nil, nil
	}
	lps := ready.GetPromptLogprobs()
	if d.prefillDue != nil || d.prefillPrompt != nil {
		if err := d.awaitPrefill(ctx); err != nil {
			return nil, err
		}
		lps = d.prefillPrompt
	}
	pts, err := promptTokens(d.tok.tok, d.prompt, lps, int(d.sampling.GetPromptLogprobs()))
	if err != nil {
		return nil, failed(causeProtocol, api.Internal(), fmt.Errorf("prompt logprobs: %w", err))
	}
	return pts, nil
}

// onPrefilled takes the Prefill call's result: the first token's logprobs
// and the prompt positions prefill reused from its prefix cache (usage
// cached_tokens).
func (d *driver) onPrefilled(ctx context.Context, p prefillResult) error {
	d.prefillDue = nil
	switch state := d.req.State(); {
	case p.err == nil:
		d.takeFirstChoices(p.resp)
		d.cached = min(max(p.resp.GetCachedTokens(), 0), int64(len(d.prompt)))
		if state == lifecycle.Prefilling {
			if err := d.req.Advance(lifecycle.Transferring); err != nil {
				return failed(lifecycle.CauseInternal, api.Internal(), err)
			}
		}
	case state != lifecycle.Decoding:
		return p.err
	default:
		d.log.WarnContext(ctx, "prefill reported an error after decode verified the KV", "err", p.err)
	}
	return nil
}

// awaitPrefill waits for the Prefill call's result when it is still due:
// decode may send tokens, even finish, before the Prefill answer arrives,
// and the first token's logprobs and the cached prompt count (the final
// usage) come with it.
func (d *driver) awaitPrefill(ctx context.Context) error {
	if d.prefillDue == nil {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case p := <-d.prefillDue:
		return d.onPrefilled(ctx, p)
	}
}

// finalUsage is the usage of the request's last event, once the Prefill
// answer (and its cached count) arrived.
func (d *driver) finalUsage(ctx context.Context) (*api.Usage, error) {
	if err := d.awaitPrefill(ctx); err != nil {
		return nil, err
	}
	return d.usage(), nil
}

// needsFirstLogprobs says whether ev is a decode worker's first Tokens
// of a choice of a request that asked for logprobs, without the first
// token's entry (a P/D request: prefill computed it; see
// controlpb.Tokens).
func (d *driver) needsFirstLogprobs(ev *controlpb.GenerateEvent, choices []*choice) bool {
	t := ev.GetTokens()
	if !d.sampling.GetLogprobs() || t == nil || len(t.GetLogprobs()) != len(t.GetIds())-1 {
		return false
	}
	k := int(t.GetChoice())
	return k >= 0 && k < len(choices) && choices[k].received == 0
}

// emitText hands output text of choice k to the HTTP layer, through the
// choice's reasoning parser (its reasoning apart, the rest on) and
// tool-call parser when it has them.
func (d *driver) emitText(ctx context.Context, k int, c *choice, text string, lps []api.TokenLogprob) error {
	var thought string
	if c.reason != nil {
		out := c.reason.Add(text)
		thought, text = out.Reasoning, out.Content
	}
	return d.emitParsed(ctx, k, c, thought, text, lps)
}

// emitParsed hands choice k's next reasoning and answer text, the answer
// through the tool-call parser when the choice has one.
func (d *driver) emitParsed(ctx context.Context, k int, c *choice, thought, text string, lps []api.TokenLogprob) error {
	ev := api.Event{TextDelta: text}
	if c.tools != nil {
		ev = toolEvent(c.tools.Add(text))
	}
	ev.Choice, ev.Logprobs, ev.ReasoningDelta = k, lps, thought
	if ev.TextDelta == "" && ev.ReasoningDelta == "" && len(ev.ToolCalls) == 0 && len(ev.Logprobs) == 0 {
		return nil
	}
	return d.emit(ctx, ev)
}

// emitLast hands choice k's last text and its finish ("tool_calls"
// instead of "stop" when the output made tool calls), with usage when it
// is the request's last event.
func (d *driver) emitLast(ctx context.Context, k int, c *choice, text string, lps []api.TokenLogprob, reason string, usage *api.Usage) error {
	ev := api.Event{TextDelta: text, Logprobs: lps}
	if c.reason != nil || c.tools != nil {
		if err := d.emitText(ctx, k, c, text, lps); err != nil {
			return err
		}
		ev = api.Event{}
		if c.reason != nil {
			out := c.reason.End()
			if c.tools == nil {
				ev = api.Event{ReasoningDelta: out.Reasoning, TextDelta: out.Content}
			} else if err := d.emitParsed(ctx, k, c, out.Reasoning, out.Content, nil); err != nil {
				return err
			}
		}
		if c.tools != nil {
			ev = toolEvent(c.tools.End())
			if reason == "stop" && c.tools.Calls() > 0 {
				reason = "tool_calls"
			}
		}
	}
	ev.Choice, ev.FinishReason, ev.Usage = k, reason, usage
	return d.emit(ctx, ev)
}

// usage is what the request has consumed so far (I7): the prompt tokens
// prefilled and the tokens generated.
func (d *driver) usage() *api.Usage {
	return &api.Usage{PromptTokens: d.prefilled, CompletionTokens: d.generated, CachedTokens: min(d.cached, d.prefilled)}
}

// emit hands one event to the HTTP layer, waiting while the client reads.
func (d *driver) emit(ctx context.Context, ev api.Event) error {
	select {
	case d.gen.events <- ev:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
