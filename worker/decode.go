package worker

import (
	"context"
	"github.com/warden-ai/warden/internal/brokenmode"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// reserve handles Reserve (decode, both): pages for the whole sequence
// (of each of its choices, n > 1: choiceTokens), all or nothing, and the
// ticket that lets one prefill worker fill the prompt's pages.
func (w *Worker) reserve(ctx context.Context, req *controlpb.ReserveRequest) (*controlpb.ReserveResponse, error) {
	if w.role == config.RolePrefill {
		return nil, status.Error(codes.FailedPrecondition, "Reserve: this is a prefill worker")
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	prompt, total, n := req.GetPromptTokens(), req.GetTotalTokens(), int(max(req.GetChoices(), 1))
	switch {
	case prompt < 1:
		return nil, invalid("prompt_tokens must be >= 1 (got %d)", prompt)
	case total < prompt:
		return nil, invalid("total_tokens %d < prompt_tokens %d", total, prompt)
	case total > w.capacity.Tokens:
		return nil, neverFits(total, w.capacity.Tokens)
	}
	if total = w.choiceTokens(int(prompt), int(total-prompt), n); total > w.capacity.Tokens {
		// Checked before anything is reserved: a request the pool can
		// never hold gets no partial reservation (I1, defence in depth
		// behind the gateway's admission).
		return nil, neverFits(total, w.capacity.Tokens)
	}
	px, tags, err := w.reservePrefix(ctx, owner, req)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.admitLocked(owner); err != nil {
		return nil, err
	}
	// The reservation holds its adapter from now to its release: the
	// Generate after the transfer finds it loaded.
	h, err := w.adapters.ForRequest(req.GetAdapter(), owner.Adapter)
	if err != nil {
		return nil, err
	}
	pages, hit, err := w.rt.Pool.ReservePrefix(owner, int(total), tags)
	if err != nil {
		h.Release()
		return nil, poolStatus(err, total, w.capacity.Tokens)
	}
	if px != nil {
		px.Hit = hit
	}
	t := &kvtransfer.Ticket{
		TransferID:   kvtransfer.NewTransferID(),
		Owner:        kvtransfer.Owner(owner),
		Pages:        make([]int32, len(pages)),
		PageTokens:   int32(w.capacity.PageTokens),
		PromptTokens: prompt,
		PageBytes:    int64(w.capacity.PageBytes),
		AuthToken:    kvtransfer.NewAuthToken(),
		Addr:         w.transferAddr,
		Backend:      kvtransfer.Backend(w.cfg.Worker.Transfer.Backend),
		HeldPages:    hit,
	}
	for i, p := range pages {
		t.Pages[i] = int32(p)
	}
	if w.segment != nil {
		t.ShmPath = w.segment.Path()
	}
	e := newEntry(requestContext(ctx, owner), owner, pages, int(total), stageReserved)
	e.ticket, e.prefix, e.live, e.transferred, e.choices, e.adapter = t, px, true, make(chan struct{}), n, h
	w.reqs[e.key] = e
	w.byTransfer[t.TransferID] = e
	e.lease = w.reserveTimeoutFor(req.GetTimeoutMs())
	e.deadline = time.Now().Add(e.lease)
	e.timer = time.AfterFunc(e.lease, func() { w.expire(e) })
	return &controlpb.ReserveResponse{Ticket: ticketToProto(t, w.id), LeaseMs: w.reserveTimeout.Milliseconds()}, nil
}

// reserveTimeoutFor is a reservation's first lease, before any renewal:
// what the gateway asked for (its measured prefill time for the prompt,
// with a margin), clamped to [worker.transfer.reserve_timeout,
// worker.transfer.reserve_timeout_max].
func (w *Worker) reserveTimeoutFor(askedMs int64) time.Duration {
	d := min(time.Duration(askedMs)*time.Millisecond, w.cfg.Worker.Transfer.ReserveTimeoutMax)
	return max(d, w.reserveTimeout)
}

// generate handles Generate. An owner with a reservation (Reserve) is
// decoded from its transfer, on decode and both workers alike; on a both
// worker an owner without one is run entirely here.
func (w *Worker) generate(req *controlpb.GenerateRequest, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) error {
	if w.role == config.RolePrefill {
		return status.Error(codes.FailedPrecondition, "Generate: this is a prefill worker")
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return err
	}
	prompt := req.GetPrompt()
	if err := checkPrompt(prompt); err != nil {
		return err
	}
	sp, err := samplingFrom(req.GetSampling())
	if err != nil {
		return err
	}
	if sp.Constraint, err = w.constraintFor(req.GetSampling()); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(requestContext(srv.Context(), owner))
	defer cancel(nil)

	w.mu.Lock()
	e := w.reqs[reqKey{owner.Tenant, owner.Request}]
	n, err := choicesFrom(req.GetSampling())
	if err != nil {
		w.mu.Unlock()
		return err
	}
	if e == nil || e.ticket == nil {
		if w.role == config.RoleDecode || req.GetTicket() != nil {
			if err := w.admitLocked(owner); err != nil {
				w.mu.Unlock()
				return err
			}
			w.mu.Unlock()
			return status.Errorf(codes.NotFound, "no reservation for request %s/%s: Reserve first", owner.Tenant, owner.Request)
		}
		px, err := w.prefixFor(srv.Context())
		if err != nil {
			w.mu.Unlock()
			return err
		}
		if sp.PromptLogprobs {
			px = nil // the whole prompt is computed: no cache hit can serve it
		}
		h, err := w.adapters.ForRequest(req.GetAdapter(), owner.Adapter)
		if err != nil {
			w.mu.Unlock()
			return err
		}
		e, err = w.reserveLocalLocked(ctx, owner, prompt, sp.MaxTokens, n, px)
		if err != nil {
			w.mu.Unlock()
			h.Release()
			return err
		}
		e.handler, e.cancel, e.weight, e.adapter = true, cancel, int(req.GetTenantWeight()), h
		w.mu.Unlock()
		return w.runLocal(ctx, e, prompt, sp, n, px, srv)
	}
	if err := w.claimReservationLocked(e, owner, req, len(prompt), sp.MaxTokens, n); err != nil {
		w.mu.Unlock()
		return err
	}
	e.handler, e.cancel, e.stage, e.weight = true, cancel, stageWaiting, int(req.GetTenantWeight())
	w.mu.Unlock()
	// The prefill worker computed the prompt's logprobs.
	sp.PromptLogprobs, sp.PromptTopLogprobs = false, 0
	return w.runReserved(ctx, e, prompt, sp, req.GetFirstTokens(), srv)
}

// reserveLocalLocked reserves pages for a whole request of n choices on
// a both worker (n > 1: the prompt's full pages once, engine.ChoicePages);
// with px, the prompt's leading pages found sealed in px's domain are
// shared instead (px.Hit says how many). Called with w.mu held.
func (w *Worker) reserveLocalLocked(ctx context.Context, owner kvpool.Owner, prompt []int32, maxTokens, n int, px *engine.Prefix) (*entry, error) {
	total := w.choiceTokens(len(prompt), maxTokens, n)
	if total > w.capacity.Tokens {
		return nil, neverFits(total, w.capacity.Tokens)
	}
	if err := w.admitLocked(owner); err != nil {
		return nil, err
	}
	var tags []kvpool.Tag
	if px != nil {
		// The last prompt token is always computed: its logits give the
		// first output token.
		tags = kvpool.Tags(px.Domain, px.Version, owner.Adapter, prompt[:len(prompt)-1], w.capacity.PageTokens)
	}
	pages, hit, err := w.rt.Pool.ReservePrefix(owner, int(total), tags)
	if err != nil {
		return nil, poolStatus(err, total, w.capacity.Tokens)
	}
	if px != nil {
		px.Hit = hit
	}
	e := newEntry(ctx, owner, pages, int(total), stagePrefilling)
	w.reqs[e.key] = e
	return e, nil
}

// claimReservationLocked checks a Generate of n choices against the
// reservation it decodes from (I4: the owner, adapter included, and the
// prompt must be the ones the ticket covers; the reservation is for n
// choices, each with a first token).
// Called with w.mu held.
func (w *Worker) claimReservationLocked(e *entry, owner kvpool.Owner, req *controlpb.GenerateRequest, prompt, maxTokens, n int) error {
	if err := w.tombs.check(e.key, owner.Epoch); err != nil {
		return err
	}
	if err := adapters.CheckRef(req.GetAdapter(), owner.Adapter); err != nil {
		return err
	}
	t, ticket := e.ticket, req.GetTicket()
	switch {
	case w.closing:
		return status.Error(codes.Unavailable, "worker is shutting down")
	case owner.Epoch != e.epoch:
		return invalid("request %s/%s is reserved at epoch %d, Generate is for epoch %d", owner.Tenant, owner.Request, e.epoch, owner.Epoch)
	case owner.Adapter != e.owner.Adapter:
		// The reserved pages take KV computed under the reservation's
		// adapter only (DESIGN I8a).
		return invalid("request %s/%s is reserved under adapter %q, Generate is for adapter %q", owner.Tenant, owner.Request, e.owner.Adapter, owner.Adapter)
	case e.handler:
		return status.Errorf(codes.AlreadyExists, "request %s/%s is already being generated", owner.Tenant, owner.Request)
	case ticket != nil && ticket.GetTransferId() != t.TransferID.String():
		return invalid("ticket %s is not the reservation's (%s)", ticket.GetTransferId(), t.TransferID)
	case int64(prompt) != t.PromptTokens:
		return invalid("prompt has %d tokens, the reservation's ticket covers %d", prompt, t.PromptTokens)
	case w.choiceTokens(prompt, maxTokens, n) > int64(e.tokens):
		return invalid("prompt %d + max_tokens %d of %d choices exceed the %d tokens reserved", prompt, maxTokens, n, e.tokens)
	case n != e.choices:
		return invalid("Generate asks for %d choices, the reservation is for %d", n, e.choices)
	case n > 1 && len(req.GetFirstTokens()) != n:
		return invalid("%d choices need %d first tokens, got %d", n, n, len(req.GetFirstTokens()))
	}
	return nil
}

// runReserved waits for the reservation's transfer, verifies it and
// decodes, traced as warden.decode from the verified transfer on. For
// n > 1 choices (firstTokens: each choice's, from prefill) it forks them
// from the one transferred prompt (SubmitChoices).
func (w *Worker) runReserved(ctx context.Context, e *entry, prompt []int32, sp engine.Sampling, firstTokens []int32, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) (err error) {
	select {
	case <-e.transferred:
	case <-ctx.Done():
		st := stoppedStatus(ctx)
		w.finish(e, st)
		return st
	}
	w.mu.Lock()
	terr, c := e.transferErr, e.completion
	w.mu.Unlock()
	if terr != nil {
		st := receiveStatus(terr)
		w.finish(e, st)
		return st
	}
	if c.Tokens != int64(len(prompt)) {
		// The receiver checked COMPLETE against the ticket, and the ticket
		// against this prompt; checked again because decoding from a short
		// transfer is the failure this system exists to prevent (I4).
		st := status.Errorf(codes.DataLoss, "kv transfer delivered %d prompt tokens, the prompt has %d", c.Tokens, len(prompt))
		w.finish(e, st)
		return st
	}
	if e.choices > 1 && firstTokens[0] != c.FirstToken {
		// The choices' first tokens came through the gateway; the first
		// one must be the token the verified transfer carries.
		st := status.Errorf(codes.DataLoss, "kv transfer carries first token %d, Generate's first choice has %d", c.FirstToken, firstTokens[0])
		w.finish(e, st)
		return st
	}
	ctx, span := w.startSpan(ctx, spanDecode, obs.OperationDecode, e.owner, trace.SpanKindInternal,
		obs.AttrInputTokens.Int(len(prompt)))
	defer func() { endSpan(span, err) }()
	if err := w.rt.Pool.Activate(e.owner); err != nil {
		st := status.Errorf(codes.Internal, "activating pages: %v", err)
		w.finish(e, st)
		return st
	}
	if brokenmode.On(brokenmode.ReleaseWithoutDrain) {
		if n := w.late.land(w.rt.Pool, e.pages); n > 0 {
			w.log.WarnContext(ctx, "WARDEN_BROKEN=release-without-drain: an aborted writer's late write landed in this request's pages", "pages", n)
		}
	}
	w.setStage(e, stageDecoding)
	if err := srv.Send(readyEvent(len(prompt), nil)); err != nil {
		st := stoppedStatus(ctx)
		w.finish(e, st)
		return st
	}
	// With a prefix, the engine verifies the held pages against the tags
	// it computes from this prompt (a Generate whose prompt differs from
	// the Reserve's is an owner violation) and seals the transferred full
	// prompt pages: the transfer is verified by now.
	req := engine.Request{
		Owner: e.owner, Weight: e.weight, Pages: e.pages, Prompt: prompt,
		Prefilled: true, FirstToken: c.FirstToken, Sampling: sp, Prefix: e.prefix, Adapter: e.adapter.Adapter(),
	}
	if e.choices > 1 {
		req.FirstTokens = firstTokens
		return w.submitChoices(ctx, e, req, e.choices, srv, false)
	}
	es, err := w.rt.Engine.Submit(ctx, req)
	if err != nil {
		st := engineStatus(err)
		w.finish(e, st)
		return st
	}
	return w.serve(ctx, e, es, srv, len(prompt), false)
}

// runLocal prefills and decodes a request on a both worker, traced as
// warden.generate with an event when the prompt is in the cache.
func (w *Worker) runLocal(ctx context.Context, e *entry, prompt []int32, sp engine.Sampling, n int, px *engine.Prefix, srv grpc.ServerStreamingServer[controlpb.GenerateEvent]) (err error) {
	ctx, span := w.startSpan(ctx, spanGenerate, obs.OperationGenerate, e.owner, trace.SpanKindInternal,
		obs.AttrInputTokens.Int(len(prompt)))
	defer func() { endSpan(span, err) }()
	if err := w.rt.Pool.Activate(e.owner); err != nil {
		st := status.Errorf(codes.Internal, "activating pages: %v", err)
		w.finish(e, st)
		return st
	}
	if px != nil {
		// Sent with the first event: the tokens the reservation reused.
		srv.SetHeader(metadata.Pairs(cachekey.MetadataCachedTokens, strconv.Itoa(px.Hit*w.capacity.PageTokens)))
	}
	req := engine.Request{
		Owner: e.owner, Weight: e.weight, Pages: e.pages, Prompt: prompt, Sampling: sp, ReportProgress: true, Prefix: px,
		Adapter: e.adapter.Adapter(),
	}
	if n > 1 {
		return w.submitChoices(ctx, e, req, n, srv, true)
	}
	es, err := w.rt.Engine.Submit(ctx, req)
	if err != nil {
		st := engineStatus(err)
		w.finish(e, st)
		return st
	}
	return w.serve(ctx, e, es, srv, len(prompt), true)
}

// serve relays a sequence's events to the gateway, tears the request down
// and ends the stream: Done after a normal finish (the pages are already
// free), or the status of the failure or abort.
func (w *Worker) serve(ctx context.Context, e *entry, es *engine.Stream, srv grpc.ServerStreamingServer[controlpb.GenerateEvent], prompt int, readyOnProgress bool) error {
	res, err := w.relay(ctx, e, es, srv, prompt, readyOnProgress)
	if err != nil {
		stopSequence(es)
		st := stoppedStatus(ctx)
		w.finish(e, st)
		return st
	}
	switch res.Finish {
	case engine.FinishStop, engine.FinishLength:
		trace.SpanFromContext(ctx).SetAttributes(obs.AttrOutputTokens.Int(res.CompletionTokens))
		w.finish(e, nil)
		return srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Done{Done: &controlpb.Done{
			FinishReason:     string(res.Finish),
			PromptTokens:     int64(res.PromptTokens),
			CompletionTokens: int64(res.CompletionTokens),
		}}})
	}
	st := engineStatus(res.Err)
	if ctx.Err() != nil {
		st = stoppedStatus(ctx)
	}
	w.logEngineFailure(ctx, e, res.Err)
	w.finish(e, st)
	return st
}

// relay forwards events until the sequence's result, which it returns; an
// error means ctx ended or the gateway's stream broke. Tokens produced
// together are sent together, but a token never waits for the next one.
func (w *Worker) relay(ctx context.Context, e *entry, es *engine.Stream, srv grpc.ServerStreamingServer[controlpb.GenerateEvent], prompt int, readyOnProgress bool) (*engine.Result, error) {
	// A cancelled context makes Next return only what is already buffered.
	buffered, cancel := context.WithCancel(context.Background())
	cancel()
	var promptLps []*controlpb.LogprobsToken // sent with Ready
	for {
		// Next returns buffered events even after ctx ended; an aborted
		// request must not stream them.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ev, err := es.Next(ctx)
		if err != nil {
			return nil, err
		}
		var done *engine.Result
		switch ev.Kind {
		case engine.EventDone:
			return ev.Result, nil
		case engine.EventPromptLogprobs:
			promptLps = promptLogprobsToProto(ev.PromptLogprobs)
			continue
		case engine.EventProgress:
			if readyOnProgress && ev.Positions == prompt {
				trace.SpanFromContext(ctx).AddEvent("prefilled")
				w.setStage(e, stageDecoding)
				if err := srv.Send(readyEvent(prompt, promptLps)); err != nil {
					return nil, err
				}
			}
			continue
		}
		toks := &controlpb.Tokens{}
		addToken(toks, ev)
		for done == nil {
			ev, err := es.Next(buffered)
			if err != nil {
				break
			}
			switch ev.Kind {
			case engine.EventToken:
				addToken(toks, ev)
			case engine.EventDone:
				done = ev.Result
			}
		}
		if h := w.hooks.beforeTokens; h != nil {
			h(ctx)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := srv.Send(&controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Tokens{Tokens: toks}}); err != nil {
			return nil, err
		}
		if done != nil {
			return done, nil
		}
	}
}

// addToken appends a token event to toks, with its logprobs when the
// engine computed them (not for a P/D request's first token: see
// controlpb.Tokens).
func addToken(toks *controlpb.Tokens, ev engine.Event) {
	toks.Ids = append(toks.Ids, ev.Token)
	if ev.Logprobs != nil {
		toks.Logprobs = append(toks.Logprobs, logprobsToProto(ev.Logprobs))
	}
}

// readyEvent is Ready for a prompt of prompt tokens, with its logprobs
// when they were asked for.
func readyEvent(prompt int, promptLps []*controlpb.LogprobsToken) *controlpb.GenerateEvent {
	return &controlpb.GenerateEvent{Event: &controlpb.GenerateEvent_Ready{Ready: &controlpb.Ready{PromptTokens: int64(prompt), PromptLogprobs: promptLps}}}
}

// stopSequence closes an engine stream and waits for its final event,
// after which the engine no longer touches the sequence's pages.
func stopSequence(es *engine.Stream) {
	es.Close()
	for {
		ev, err := es.Next(context.Background())
		if err != nil || ev.Kind == engine.EventDone {
			return
		}
	}
}

func (w *Worker) setStage(e *entry, stage string) {
	w.mu.Lock()
	e.stage = stage
	w.mu.Unlock()
}
