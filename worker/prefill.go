package worker

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// prefill handles Prefill (prefill, both): it computes the prompt's KV in
// local pages, pushes each page to the ticket's decode worker as soon as
// all its positions are in the cache, completes the transfer with the
// first sampled token (of each choice, n > 1: the prompt is computed and
// sent once) and frees the local pages on every path.
func (w *Worker) prefill(ctx context.Context, req *controlpb.PrefillRequest) (_ *controlpb.PrefillResponse, err error) {
	if w.role == config.RoleDecode {
		return nil, status.Error(codes.FailedPrecondition, "Prefill: this is a decode worker")
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	// The gateway's trace arrives in the call's metadata; the request's
	// traceparent field stands in when the metadata carried none.
	ctx = requestContext(obs.WithRemoteParent(ctx, req.GetTraceparent()), owner)
	prompt := req.GetPrompt()
	ctx, span := w.startSpan(ctx, spanPrefill, obs.OperationPrefill, owner, trace.SpanKindInternal,
		obs.AttrInputTokens.Int(len(prompt)))
	defer func() { endSpan(span, err) }()
	if err := checkPrompt(prompt); err != nil {
		return nil, err
	}
	sp, err := samplingFrom(req.GetSampling())
	if err != nil {
		return nil, err
	}
	n, err := choicesFrom(req.GetSampling())
	if err != nil {
		return nil, err
	}
	if sp.Constraint, err = w.constraintFor(req.GetSampling()); err != nil {
		return nil, err
	}
	t, err := ticketFrom(req.GetTicket())
	if err != nil {
		return nil, err
	}
	switch c := w.capacity; {
	case kvpool.Owner(t.Owner) != owner:
		return nil, invalid("ticket is for %v, the request is %v", kvpool.Owner(t.Owner), owner)
	case t.PromptTokens != int64(len(prompt)):
		return nil, invalid("prompt has %d tokens, the ticket covers %d", len(prompt), t.PromptTokens)
	case int64(len(prompt)) > c.Tokens:
		return nil, neverFits(int64(len(prompt)), c.Tokens)
	case int(t.PageTokens) != c.PageTokens || t.PageBytes != int64(c.PageBytes):
		return nil, status.Errorf(codes.FailedPrecondition,
			"decode pages are %d tokens of %d bytes, this worker's %d tokens of %d bytes: the workers serve different models or page sizes",
			t.PageTokens, t.PageBytes, c.PageTokens, c.PageBytes)
	}
	px, err := w.prefixFor(ctx)
	if err != nil {
		return nil, err
	}
	if sp.PromptLogprobs {
		px = nil // the whole prompt is computed: no cache hit can serve it
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	h, err := w.adapters.ForRequest(req.GetAdapter(), owner.Adapter)
	if err != nil {
		return nil, err
	}
	e, err := w.reservePrefill(ctx, cancel, owner, len(prompt), w.prefillTags(px, owner, prompt), h)
	if err != nil {
		h.Release()
		return nil, err
	}
	if px != nil {
		px.Hit = e.hit
	}

	resp, err := w.runPrefill(ctx, e, t, prompt, sp, px, n)
	w.finish(e, err)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// reservePrefill reserves local pages for a prompt and records the
// request (cancel ends its handler on an abort); the leading pages found
// sealed under tags (prefillTags) are shared, e.hit says how many; the
// entry holds adapter (nil: the base model) until its release. Prefill pages are held only while a prompt is computed and
// sent, so when the pool is momentarily full (a finished request's pages
// wait for decode's verdict) the call waits for pages, until ctx ends,
// instead of failing a request that fits.
func (w *Worker) reservePrefill(ctx context.Context, cancel context.CancelCauseFunc, owner kvpool.Owner, tokens int, tags []kvpool.Tag, adapter *adapters.Handle) (*entry, error) {
	pool := w.rt.Pool
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		w.mu.Lock()
		if err := w.admitLocked(owner); err != nil {
			w.mu.Unlock()
			return nil, err
		}
		seen := pool.Version()
		pages, hit, err := pool.ReservePrefix(owner, tokens, tags)
		if err == nil {
			e := newEntry(ctx, owner, pages, tokens, stagePrefilling)
			e.handler, e.cancel, e.hit, e.adapter = true, cancel, hit, adapter
			w.reqs[e.key] = e
			w.mu.Unlock()
			return e, nil
		}
		w.mu.Unlock()
		if !errors.Is(err, kvpool.ErrNoSpace) {
			return nil, poolStatus(err, int64(tokens), w.capacity.Tokens)
		}
		// The pool has no change notification (it never calls out under
		// its lock): poll its version, backing off; an Abort meanwhile
		// (it finds no entry yet, only leaves a tomb) ends the wait.
		for pool.Version() == seen {
			select {
			case <-ctx.Done():
				return nil, status.FromContextError(context.Cause(ctx)).Err()
			case <-time.After(wait):
			}
			w.mu.Lock()
			err := w.tombs.check(reqKey{owner.Tenant, owner.Request}, owner.Epoch)
			w.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
	}
}

// runPrefill runs the prefill and the transfer — only the pages after the
// ticket's HeldPages, which decode already holds sealed; with px, the
// engine computes only the positions after px.Hit pages prefill's own
// cache holds (verifying them against the tags it computes, before the
// first chunk, so a page pushed from the cache was verified) and seals
// the prompt's full pages when it is done. For n > 1 the engine samples
// every choice's first token from the one prefill (SubmitChoices,
// PrefillOnly). On failure or abort it
// returns only once the engine and the transfer stream have both stopped
// (the stream drained: it can write no further byte to decode). The
// transfer is traced as warden.kv.send, whose context the handshake
// carries to decode.
func (w *Worker) runPrefill(ctx context.Context, e *entry, t *kvtransfer.Ticket, prompt []int32, sp engine.Sampling, px *engine.Prefix, n int) (_ *controlpb.PrefillResponse, err error) {
	pool := w.rt.Pool
	if err := pool.Activate(e.owner); err != nil {
		return nil, status.Errorf(codes.Internal, "activating pages: %v", err)
	}
	streams, err := w.submitPrefill(ctx, engine.Request{
		Owner: e.owner, Pages: e.pages, Prompt: prompt, Sampling: sp,
		PrefillOnly: true, ReportProgress: true, Prefix: px, Adapter: e.adapter.Adapter(),
	}, n)
	if err != nil {
		return nil, engineStatus(err)
	}
	// Stopping the first choice stops them all: the others end before it.
	es := streams[0]
	start := time.Now()
	sctx, send := w.startSpan(ctx, spanSend, obs.OperationTransfer, e.owner, trace.SpanKindProducer, transferAttrs(t)...)
	defer func() { endSpan(send, err) }()
	// The stream opens when the engine first reports progress (or the
	// result), not now: the sequence may wait in the engine's queue for
	// longer than decode's receiver waits between frames, and an open
	// stream with nothing to send would time out there. The handshake is
	// not cancelled half-way: a sender that gives up after decode accepted
	// it would never send its drain ack, and decode would have to
	// quarantine the pages (I5). Once open, the stream is drained
	// explicitly on every exit, and Push and Complete watch ctx.
	var st *kvtransfer.Stream
	open := func() error {
		if st != nil {
			return nil
		}
		if h := w.hooks.beforeOpen; h != nil {
			h(ctx)
		}
		s, err := w.sender.Open(context.WithoutCancel(sctx), t)
		if err != nil {
			return err
		}
		st = s
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.setStage(e, stageTransferring)
		return nil
	}
	npages, pt := t.PromptPages(), w.capacity.PageTokens
	pushed := t.HeldPages
	var res *engine.Result
	var first *engine.Logprobs // the first token's, when asked for
	var promptLps []engine.Logprobs
	for res == nil {
		ev, err := es.Next(ctx)
		if err != nil {
			stopSequence(es)
			w.drainStream(e, st)
			return nil, stoppedStatus(ctx)
		}
		switch ev.Kind {
		case engine.EventProgress:
			// A page can go once every one of its positions is in the
			// cache: prefill only moves forward, so it is final.
			ready := ev.Positions / pt
			if ev.Positions == len(prompt) {
				ready = npages
			}
			for ; pushed < ready; pushed++ {
				if err := open(); err != nil {
					stopSequence(es)
					w.drainStream(e, st)
					return nil, sendStatus(ctx, err)
				}
				if h := w.hooks.beforePush; h != nil {
					h(ctx, pushed)
				}
				err := ctx.Err() // Push may still write once after ctx ended
				if err == nil {
					err = st.Push(ctx, pushed, 0, pool.Data(e.pages[pushed]))
				}
				if err != nil {
					stopSequence(es)
					w.drainStream(e, st)
					return nil, sendStatus(ctx, err)
				}
			}
		case engine.EventToken:
			first = ev.Logprobs
		case engine.EventPromptLogprobs:
			promptLps = ev.PromptLogprobs
		case engine.EventDone:
			res = ev.Result
		}
	}
	switch {
	case res.Finish != engine.FinishPrefilled && res.Finish != engine.FinishStop:
		w.drainStream(e, st)
		if ctx.Err() != nil {
			return nil, stoppedStatus(ctx)
		}
		w.logEngineFailure(ctx, e, res.Err)
		return nil, engineStatus(res.Err)
	case pushed != npages:
		w.drainStream(e, st)
		return nil, status.Errorf(codes.Internal, "prefill finished with %d of %d pages pushed", pushed, npages)
	case ctx.Err() != nil:
		w.drainStream(e, st)
		return nil, stoppedStatus(ctx)
	}
	choices, err := firstChoices(ctx, streams, res.FirstToken, first)
	if err != nil {
		w.drainStream(e, st)
		if ctx.Err() != nil {
			return nil, stoppedStatus(ctx)
		}
		w.logEngineFailure(ctx, e, err)
		return nil, engineStatus(err)
	}
	if err := open(); err != nil { // every page was held or pushed: nothing opened it yet
		w.drainStream(e, st)
		return nil, sendStatus(ctx, err)
	}
	r, err := st.Complete(ctx, int64(len(prompt)), res.FirstToken)
	if err != nil {
		w.noteDrain(e, r.Drain) // decode rejected it, or it was aborted
		return nil, sendStatus(ctx, err)
	}
	w.metrics.transferSeconds.WithLabelValues(sideSend).Observe(time.Since(start).Seconds())
	send.SetAttributes(obs.AttrPages.Int(r.Pages), obs.AttrBytes.Int64(r.Bytes))
	return &controlpb.PrefillResponse{
		PromptTokens:       int64(res.PromptTokens),
		FirstToken:         res.FirstToken,
		BytesSent:          r.Bytes,
		PagesSent:          int32(r.Pages),
		FirstTokenLogprobs: logprobsToProto(first),
		CachedTokens:       int64(res.CachedTokens),
		Choices:            choices,
		PromptLogprobs:     promptLogprobsToProto(promptLps),
	}, nil
}

// submitPrefill submits a prefill-only request of n choices: one stream,
// or for n > 1 one per choice (every choice's table is the prefill's
// pages: the others only sample their first token).
func (w *Worker) submitPrefill(ctx context.Context, req engine.Request, n int) ([]*engine.Stream, error) {
	if n == 1 {
		es, err := w.rt.Engine.Submit(ctx, req)
		return []*engine.Stream{es}, err
	}
	tables := make([][]kvpool.PageID, n)
	for k := range tables {
		tables[k] = req.Pages
	}
	return w.rt.Engine.SubmitChoices(ctx, req, tables)
}

// firstChoices is every choice's first token of an n > 1 prefill whose
// first choice sampled first (with its logprobs, when asked for); nil for
// one choice. The engine ended the other choices before the first one's
// result, so their events are all buffered by now.
func firstChoices(ctx context.Context, streams []*engine.Stream, first int32, lp *engine.Logprobs) ([]*controlpb.ChoiceFirst, error) {
	if len(streams) == 1 {
		return nil, nil
	}
	out := []*controlpb.ChoiceFirst{{Token: first, Logprobs: logprobsToProto(lp)}}
	for _, es := range streams[1:] {
		c := &controlpb.ChoiceFirst{}
		for done := false; !done; {
			ev, err := es.Next(ctx)
			if err != nil {
				return nil, err
			}
			switch ev.Kind {
			case engine.EventToken:
				c.Logprobs = logprobsToProto(ev.Logprobs)
			case engine.EventDone:
				if r := ev.Result; r.Finish != engine.FinishPrefilled && r.Finish != engine.FinishStop {
					return nil, r.Err
				}
				c.Token, done = ev.Result.FirstToken, true
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// drainStream aborts st (nil: not opened) — once it returns, the stream can write no
// further byte to decode — and records its Drain on e.
func (w *Worker) drainStream(e *entry, st *kvtransfer.Stream) {
	if st == nil {
		return // never opened: decode saw no byte of it
	}
	w.noteDrain(e, st.Abort())
}

// noteDrain records on e that its transfer stream stopped early and
// drained, for the Abort answer (AbortResponse.drain): the gateway relays
// it to decode, whose DRAIN_ACK for it may have been lost with the
// connection. The zero Drain (nothing was left to stop) records nothing.
func (w *Worker) noteDrain(e *entry, d kvtransfer.Drain) {
	if d.IsZero() {
		return
	}
	w.mu.Lock()
	e.drain = d
	w.mu.Unlock()
}

// sendStatus is the status of a failed transfer: the abort's when ctx
// ended (the stream stopped because of it), else the transfer error's.
func sendStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return stoppedStatus(ctx)
	}
	return transferStatus(err)
}

// maxEmbedInputs bounds the inputs of one Embed call (the gateway's own
// bound is the same: OpenAI's 2048).
const maxEmbedInputs = 2048

// embed handles Embed (prefill, both): every input is prefilled as its
// own sequence (submitted together, so the engine batches them) into
// pages reserved for the call, under the call's LoRA adapter if it names
// one (held until the pages are freed), pooled into a normalised
// embedding, and the pages are freed on every path. Like a prefill it
// waits for pages when the pool is momentarily full.
func (w *Worker) embed(ctx context.Context, req *controlpb.EmbedRequest) (_ *controlpb.EmbedResponse, err error) {
	if w.role == config.RoleDecode {
		return nil, status.Error(codes.FailedPrecondition, "Embed: this is a decode worker")
	}
	if w.rt.Engine.HiddenSize() == 0 {
		return nil, status.Errorf(codes.Unimplemented, "Embed: %v", engine.ErrNoEmbeddings)
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	var pooling engine.Pooling
	switch req.GetPooling() {
	case controlpb.Pooling_POOLING_LAST:
		pooling = engine.PoolingLast
	case controlpb.Pooling_POOLING_MEAN:
		pooling = engine.PoolingMean
	default:
		return nil, invalid("pooling must be last or mean, got %v", req.GetPooling())
	}
	inputs := req.GetInputs()
	if len(inputs) == 0 || len(inputs) > maxEmbedInputs {
		return nil, invalid("an Embed call takes 1 to %d inputs, got %d", maxEmbedInputs, len(inputs))
	}
	pt := w.capacity.PageTokens
	var tokens, positions int64
	for i, in := range inputs {
		n := len(in.GetTokens())
		if n == 0 {
			return nil, invalid("input %d is empty", i)
		}
		positions += int64(n)
		tokens += int64((n+pt-1)/pt) * int64(pt)
	}
	if tokens > w.capacity.Tokens {
		return nil, neverFits(tokens, w.capacity.Tokens)
	}
	ctx = requestContext(ctx, owner)
	ctx, span := w.startSpan(ctx, spanPrefill, obs.OperationPrefill, owner, trace.SpanKindInternal,
		obs.AttrInputTokens.Int64(positions))
	defer func() { endSpan(span, err) }()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h, err := w.adapters.ForRequest(req.GetAdapter(), owner.Adapter)
	if err != nil {
		return nil, err
	}
	e, err := w.reservePrefill(ctx, cancel, owner, int(tokens), nil, h)
	if err != nil {
		h.Release()
		return nil, err
	}
	e.weight = int(req.GetTenantWeight())
	resp, err := w.runEmbed(ctx, e, inputs, pooling)
	w.finish(e, err)
	return resp, err
}

// runEmbed submits an Embed call's inputs over e's pages (each input its
// own leading pages, in order) and collects their embeddings. On failure
// or abort it returns only once every sequence has stopped.
func (w *Worker) runEmbed(ctx context.Context, e *entry, inputs []*controlpb.EmbedInput, pooling engine.Pooling) (*controlpb.EmbedResponse, error) {
	if err := w.rt.Pool.Activate(e.owner); err != nil {
		return nil, status.Errorf(codes.Internal, "activating pages: %v", err)
	}
	pt := w.capacity.PageTokens
	streams := make([]*engine.Stream, 0, len(inputs))
	stopAll := func() {
		for _, es := range streams {
			stopSequence(es)
		}
	}
	at := 0
	for _, in := range inputs {
		np := (len(in.GetTokens()) + pt - 1) / pt
		es, err := w.rt.Engine.Submit(ctx, engine.Request{
			Owner: e.owner, Weight: e.weight, Pages: e.pages[at : at+np], Prompt: in.GetTokens(), Embed: pooling,
			Adapter: e.adapter.Adapter(),
		})
		if err != nil {
			stopAll()
			return nil, engineStatus(err)
		}
		streams = append(streams, es)
		at += np
	}
	resp := &controlpb.EmbedResponse{Embeddings: make([]*controlpb.Embedding, len(streams))}
	for i, es := range streams {
		for resp.Embeddings[i] == nil {
			ev, err := es.Next(ctx)
			if err != nil {
				stopAll()
				return nil, stoppedStatus(ctx)
			}
			if ev.Kind != engine.EventDone {
				continue
			}
			if r := ev.Result; r.Finish != engine.FinishEmbedded {
				stopAll()
				if ctx.Err() != nil {
					return nil, stoppedStatus(ctx)
				}
				w.logEngineFailure(ctx, e, r.Err)
				return nil, engineStatus(r.Err)
			}
			resp.Embeddings[i] = &controlpb.Embedding{Values: ev.Result.Embedding}
			resp.PromptTokens += int64(ev.Result.PromptTokens)
		}
	}
	return resp, nil
}
