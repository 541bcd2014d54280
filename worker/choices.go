package worker

import (
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/worker/engine"
)

// choicesFrom is the number of choices a request asks for (at least 1).
// n > 1 runs on a both worker without a reservation (SubmitChoices over
// its own pages), on a prefill worker (the prompt once, n first tokens)
// and on a decode worker whose reservation was made for n choices.
func choicesFrom(p *controlpb.SamplingParams) (int, error) {
	n := int(p.GetN())
	if n < 0 {
		return 0, invalid("sampling: n must be >= 0, got %d", n)
	}
	return max(n, 1), nil
}

// choiceTokens is the KV positions a request of n choices reserves: the
// prompt plus maxTokens for one choice; for n > 1 the pages of
// engine.ChoicePages (the prompt's full pages once, then each choice's
// own).
func (w *Worker) choiceTokens(prompt, maxTokens, n int) int64 {
	if n == 1 {
		return int64(prompt) + int64(maxTokens)
	}
	pages, _ := engine.ChoicePages(w.capacity.PageTokens, prompt, maxTokens, n)
	return int64(pages) * int64(w.capacity.PageTokens)
}

// choiceEvent is one engine event of choice k.
type choiceEvent struct {
	k   int
	ev  engine.Event
	err error
}

// serveChoices relays the n choices of one request (SubmitChoices) to the
// gateway: Ready once the prompt is prefilled, Tokens with their choice
// index, then one Done with every choice's outcome (the prompt counted
// once, completion tokens summed). Pages are released only after every
// choice's final event. With readyOnProgress Ready goes out when the
// prompt is prefilled here; without, the caller sent it (a verified
// transfer).
func (w *Worker) serveChoices(ctx context.Context, e *entry, streams []*engine.Stream, srv grpc.ServerStreamingServer[controlpb.GenerateEvent], prompt int, readyOnProgress bool) error {
	events := make(chan choiceEvent)
	// The readers stop (readCtx) before an abort drains the streams
	// itself: a stream has one reader at a time.
	readCtx, stop := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer stop()
	for k, es := range streams {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				ev, err := es.Next(readCtx)
				select {
				case events <- choiceEvent{k, ev, err}:
				case <-readCtx.Done():
					return
				}
				if err != nil || ev.Kind == engine.EventDone {
					return
				}
			}
		}()
	}
	results := make([]*engine.Result, len(streams))
	abort := func(st error) error {
		stop()
		readers.Wait()
		for k, es := range streams {
			if results[k] == nil {
				stopSequence(es)
			}
		}
		w.finish(e, st)
		return st
	}
	ready := !readyOnProgress
	// held are the other choices' tokens the readers delivered before the
	// first choice's progress event: the prompt's logprobs, which Ready
	// carries, come on the first choice's stream just before it.
	var held []choiceEvent
	var promptLps []*controlpb.LogprobsToken
	for left := len(streams); left > 0; {
		var ce choiceEvent
		if ready && len(held) > 0 {
			ce, held = held[0], held[1:]
		} else {
			select {
			case ce = <-events:
			case <-ctx.Done():
				return abort(stoppedStatus(ctx))
			}
		}
		if ce.err != nil {
			return abort(stoppedStatus(ctx))
		}
		switch {
		case ce.ev.Kind == engine.EventPromptLogprobs:
			promptLps = promptLogprobsToProto(ce.ev.PromptLogprobs)
			continue
		case !ready && ce.k > 0 && ce.ev.Kind == engine.EventToken:
			held = append(held, ce)
			continue
		}
		// Every choice's first token comes after the one prefill, which
		// the first choice reports (Request.ReportProgress): Ready goes
		// out at that progress event (or the first choice's first token).
		if !ready && (ce.ev.Kind == engine.EventToken || (ce.ev.Kind == engine.EventProgress && ce.ev.Positions == prompt)) {
			ready = true
			trace.SpanFromContext(ctx).AddEvent("prefilled")
			w.setStage(e, stageDecoding)
			if err := srv.Send(readyEvent(prompt, promptLps)); err != nil {
				return abort(stoppedStatus(ctx))
			}
		}
		switch ce.ev.Kind {
		case engine.EventToken:
			toks := &controlpb.Tokens{Choice: int32(ce.k)}
			addToken(toks, ce.ev)
			if err := srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Tokens{Tokens: toks}}); err != nil {
				return abort(stoppedStatus(ctx))
			}
		case engine.EventDone:
			results[ce.k] = ce.ev.Result
			left--
			if r := ce.ev.Result; r.Finish != engine.FinishStop && r.Finish != engine.FinishLength {
				w.logEngineFailure(ctx, e, r.Err)
				st := engineStatus(r.Err)
				if ctx.Err() != nil {
					st = stoppedStatus(ctx)
				}
				return abort(st)
			}
		}
	}
	done := &controlpb.Done{PromptTokens: int64(results[0].PromptTokens)}
	for _, r := range results {
		done.CompletionTokens += int64(r.CompletionTokens)
		done.Choices = append(done.Choices, &controlpb.NChoicesDone{FinishReason: string(r.Finish), CompletionTokens: int64(r.CompletionTokens)})
	}
	trace.SpanFromContext(ctx).SetAttributes(obs.AttrOutputTokens.Int(int(done.CompletionTokens)))
	w.finish(e, nil)
	return srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Done{Done: done}})
}

// submitChoices runs req's n choices over the pages e's reservation holds
// (engine.ChoicePages) and serves them (serveChoices).
func (w *Worker) submitChoices(ctx context.Context, e *entry, req engine.Request, n int, srv grpc.ServerStreamingServer[controlpb.GenerateEvent], readyOnProgress bool) error {
	_, tables := engine.ChoicePages(w.capacity.PageTokens, len(req.Prompt), req.Sampling.MaxTokens, n)
	streams, err := w.rt.Engine.SubmitChoices(ctx, req, tables(slices.Clip(e.pages)))
	if err != nil {
		st := engineStatus(err)
		w.finish(e, st)
		return st
	}
	return w.serveChoices(ctx, e, streams, srv, len(req.Prompt), readyOnProgress)
}
