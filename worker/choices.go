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
	"github.com/warden-ai/warden/worker/kvpool"
)

// choicesFrom is the number of choices a request asks for (at least 1);
// n > 1 is served only where the whole request runs (a both worker
// without a reservation): prefill and decode workers refuse it.
func choicesFrom(p *controlpb.SamplingParams, local bool) (int, error) {
	n := int(p.GetN())
	switch {
	case n < 0:
		return 0, invalid("sampling: n must be >= 0, got %d", n)
	case n > 1 && !local:
		return 0, invalid("sampling: n = %d needs a worker that prefills and decodes the request itself", n)
	}
	return max(n, 1), nil
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
// choice's final event.
func (w *Worker) serveChoices(ctx context.Context, e *entry, streams []*engine.Stream, srv grpc.ServerStreamingServer[controlpb.GenerateEvent], prompt int) error {
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
	ready := false
	for left := len(streams); left > 0; {
		var ce choiceEvent
		select {
		case ce = <-events:
		case <-ctx.Done():
			return abort(stoppedStatus(ctx))
		}
		if ce.err != nil {
			return abort(stoppedStatus(ctx))
		}
		// Every choice's first token comes after the one prefill: Ready
		// goes out at its progress event or before the first token of
		// any choice, whichever the readers deliver first.
		if !ready && (ce.ev.Kind == engine.EventToken || (ce.ev.Kind == engine.EventProgress && ce.ev.Positions == prompt)) {
			ready = true
			trace.SpanFromContext(ctx).AddEvent("prefilled")
			w.setStage(e, stageDecoding)
			if err := srv.Send(readyEvent(prompt)); err != nil {
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

// choiceTables is the page tables of a request's n choices over the
// pages its reservation holds (engine.ChoicePages); nil for one choice.
func (w *Worker) choiceTables(e *entry, prompt []int32, maxTokens, n int) [][]kvpool.PageID {
	_, tables := engine.ChoicePages(w.capacity.PageTokens, len(prompt), maxTokens, n)
	return tables(slices.Clip(e.pages))
}
