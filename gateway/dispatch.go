package gateway

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
)

// workerContext returns the context of calls to workers: cancelled when
// ctx ends, but without ctx's deadline, which gRPC would pass on. A
// worker thus never ends a request on its own clock before the gateway
// has recorded why it ends (deadline, abort), and the gateway tells it
// by cancelling the call and sending Abort.
func workerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return wctx, func() { stop(); cancel() }
}

// runSingle runs the request on one both worker.
func (d *driver) runSingle(ctx context.Context, w *registry.Worker) error {
	sctx, cancel := workerContext(ctx)
	defer cancel()
	d.req.Involve(participant{w}, registry.RoleBoth)
	d.req.Placed(w.ID(), true) // until it refuses the Generate (errRetry)
	d.span.SetAttributes(attrDecodeWorker.String(w.ID()))
	if err := d.req.Advance(lifecycle.Prefilling); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	stream, err := w.Client().Generate(d.withDomain(sctx), &controlpb.GenerateRequest{
		Owner: ownerPB(d.req.Owner()), Prompt: d.prompt, Sampling: d.sampling, TenantWeight: int32(d.weight),
		Adapter: adapters.Ref(d.adapter),
	})
	if err != nil {
		return d.workerError("generate", w, err)
	}
	if d.cacheOn {
		// The header comes with the first event; a failed stream has none.
		if md, err := stream.Header(); err == nil {
			if vs := md.Get(cachekey.MetadataCachedTokens); len(vs) == 1 {
				n, _ := strconv.ParseInt(vs[0], 10, 64)
				d.cached = min(max(n, 0), int64(len(d.prompt)))
			}
		}
	}
	return d.relay(ctx, w, newReceiver(sctx, stream), true)
}

// runPD runs the request on a prefill and a decode worker: Generate on
// decode (it waits for the KV) and Prefill concurrently. For n > 1 decode
// forks the choices from the first tokens prefill sampled, which its
// Generate carries: it is sent once the Prefill call returned.
func (d *driver) runPD(ctx context.Context, rt registry.Route, ticket *controlpb.Ticket) error {
	sctx, cancel := workerContext(ctx)
	defer cancel()
	d.renewing = d.keepReservation(sctx, rt.Decode, ticket)
	defer d.stopRenewing()
	if err := d.req.Advance(lifecycle.Reserved); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	if d.n > 1 {
		if err := d.startPrefill(ctx, rt); err != nil {
			return err
		}
		resp, err := d.prefill(sctx, rt, ticket)
		if err != nil {
			return err
		}
		if err := d.onPrefilled(ctx, prefillResult{resp, nil}); err != nil {
			return err
		}
	}
	stream, err := rt.Decode.Client().Generate(sctx, &controlpb.GenerateRequest{
		Owner: ownerPB(d.req.Owner()), Prompt: d.prompt, Sampling: d.sampling, Ticket: ticket, TenantWeight: int32(d.weight),
		FirstTokens: d.firstTokens, Adapter: adapters.Ref(d.adapter),
	})
	if err != nil {
		return d.workerError("generate", rt.Decode, err)
	}
	if d.n > 1 { // the Prefill call has returned
		return d.relay(ctx, rt.Decode, newReceiver(sctx, stream), false)
	}
	if err := d.startPrefill(ctx, rt); err != nil {
		return err
	}
	prefilled := make(chan prefillResult, 1)
	go func() {
		resp, err := d.prefill(sctx, rt, ticket)
		prefilled <- prefillResult{resp, err}
	}()
	d.prefillDue = prefilled
	err = d.relay(ctx, rt.Decode, newReceiver(sctx, stream), false)
	if err == nil && d.prefillDue != nil {
		// Decode verified the transfer, so its verdict is on the way to
		// prefill, whose call ends by itself. Cancelling the call first
		// would abort prefill's transfer stream while it waits for that
		// verdict: prefill would record the transfer decode verified as
		// aborted (its send span, transfer metrics and drain).
		select {
		case <-d.prefillDue:
		case <-ctx.Done():
		}
	}
	return err
}

// keepReservation renews the decode reservation of ticket on w every
// third of its lease (d.reserveLease, from Reserve's answer) until the
// returned stop is called: once decode is ready (the transfer verified
// and claimed, after which the reservation needs no lease) or when the
// attempt ends. So a reservation lives as long as its request does,
// however long its prefill queues or runs (bounded by the request's own
// deadline), and decode abandons it only when this gateway stops
// renewing: it died, or cannot reach decode for a whole lease. A renewal
// that says the reservation ended, or that the worker takes none, stops
// the renewals (the Generate stream reports why); other failures are
// retried at the next tick (a lost worker is the heartbeat's to find).
func (d *driver) keepReservation(ctx context.Context, w *registry.Worker, ticket *controlpb.Ticket) (stop func()) {
	every := d.reserveLease / 3
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	req := &controlpb.RenewReservationRequest{Owner: ticket.GetOwner(), TransferId: ticket.GetTransferId()}
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, every)
			_, err := w.Client().RenewReservation(rctx, req)
			rcancel()
			switch status.Code(err) {
			case codes.OK:
			case codes.NotFound, codes.Aborted, codes.FailedPrecondition, codes.Unimplemented:
				if ctx.Err() == nil {
					d.log.InfoContext(d.req.Context(), "reservation no longer renewable", "worker", w.ID(), "err", err)
				}
				return
			default:
				if ctx.Err() == nil {
					d.log.WarnContext(d.req.Context(), "renewing reservation", "worker", w.ID(), "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// stopRenewing stops keepReservation's renewals, if they run.
func (d *driver) stopRenewing() {
	if d.renewing != nil {
		d.renewing()
		d.renewing = nil
	}
}

// startPrefill enters the prefilling stage on rt's prefill worker.
func (d *driver) startPrefill(ctx context.Context, rt registry.Route) error {
	d.req.Involve(participant{rt.Prefill}, registry.RolePrefill)
	d.req.Placed(rt.Prefill.ID(), true)
	if err := d.req.Advance(lifecycle.Prefilling); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	runHook(ctx, &d.g.hooks.beforePrefill)
	return nil
}

// prefill sends the prompt and the ticket to rt's prefill worker. When
// that worker cannot be reached (nothing was sent, so nothing holds the
// ticket) or refused the call as draining (before it opened the transfer:
// it never writes with the ticket), the same ticket goes to another healthy prefill worker that can
// push to the same decode worker: decode's reservation, the owner and the
// epoch stay, and the one writer of the transfer is still the only one
// that ever received its ticket (bounded by maxFailovers).
func (d *driver) prefill(ctx context.Context, rt registry.Route, ticket *controlpb.Ticket) (*controlpb.PrefillResponse, error) {
	w := rt.Prefill
	ctx = d.withDomain(ctx) // prefill reuses its own cache too
	for {
		var resp *controlpb.PrefillResponse
		err := d.withAdapter(ctx, w, func() (err error) {
			resp, err = w.Client().Prefill(ctx, &controlpb.PrefillRequest{
				Owner: ticket.GetOwner(), Prompt: d.prompt, Sampling: d.sampling, Ticket: ticket, Traceparent: obs.Traceparent(ctx),
				Adapter: adapters.Ref(d.adapter),
			})
			return err
		})
		switch {
		case err == nil && resp.GetPromptTokens() != int64(len(d.prompt)):
			return nil, failed(causeCountMismatch, api.Internal(), fmt.Errorf(
				"prefill worker %s reports %d prompt tokens pushed, the prompt has %d", w.ID(), resp.GetPromptTokens(), len(d.prompt)))
		case err == nil:
			if err := d.checkFirstChoices(w, resp); err != nil {
				return nil, err
			}
			return resp, nil
		case d.failover(w, err):
			if next := d.g.reg.PrefillFor(rt.Decode); next != nil {
				d.req.Involve(participant{next}, registry.RolePrefill)
				d.req.Placed(w.ID(), false)
				d.req.Placed(next.ID(), true)
				d.span.SetAttributes(attrPrefillWorker.String(next.ID()))
				w = next
				continue
			}
		}
		return nil, d.workerError("prefill", w, err)
	}
}

// checkFirstChoices checks that a Prefill response for n > 1 holds one
// first token per choice, the first one the token the transfer carries.
func (d *driver) checkFirstChoices(w *registry.Worker, resp *controlpb.PrefillResponse) error {
	if cs := resp.GetChoices(); d.n > 1 && (len(cs) != d.n || cs[0].GetToken() != resp.GetFirstToken()) {
		return failed(causeProtocol, api.Internal(), fmt.Errorf(
			"prefill worker %s returned %d first tokens for %d choices", w.ID(), len(cs), d.n))
	}
	return nil
}

// takeFirstChoices records each choice's first token's logprobs from a
// Prefill response and, for n > 1, its first token (checkFirstChoices);
// and the prompt's logprobs when asked for.
func (d *driver) takeFirstChoices(resp *controlpb.PrefillResponse) {
	d.prefillPrompt = resp.GetPromptLogprobs()
	if d.n == 1 {
		d.firstLogprobs = []*controlpb.LogprobsToken{resp.GetFirstTokenLogprobs()}
		return
	}
	for _, c := range resp.GetChoices() {
		d.firstTokens = append(d.firstTokens, c.GetToken())
		d.firstLogprobs = append(d.firstLogprobs, c.GetLogprobs())
	}
}

// participant adapts a registry worker to the lifecycle's abort fan-out.
type participant struct{ w *registry.Worker }

var _ lifecycle.Participant = participant{}

func (p participant) ID() string { return p.w.ID() }

// Abort sends Abort and returns the drain a prefill worker reports: the
// transfer stream it stopped, which the fan-out relays to decode.
func (p participant) Abort(ctx context.Context, owner lifecycle.Owner, cause string) (lifecycle.Drain, error) {
	resp, err := p.w.Client().Abort(ctx, &controlpb.AbortRequest{Owner: ownerPB(owner), Cause: cause})
	if err != nil {
		return lifecycle.Drain{}, err
	}
	d := resp.GetDrain()
	if !resp.GetDrained() || d.GetTransferId() == "" {
		return lifecycle.Drain{}, nil
	}
	return lifecycle.Drain{TransferID: d.GetTransferId(), Epoch: d.GetEpoch()}, nil
}

// decodeParticipant is the decode worker of a P/D request: it also takes
// the relay of prefill's drain (lifecycle.DrainReceiver).
type decodeParticipant struct{ participant }

var _ lifecycle.DrainReceiver = decodeParticipant{}

// WriterDrained relays to decode that the writer of d drained.
func (p decodeParticipant) WriterDrained(ctx context.Context, owner lifecycle.Owner, d lifecycle.Drain) error {
	_, err := p.w.Client().WriterDrained(ctx, &controlpb.WriterDrainedRequest{
		Owner: ownerPB(owner), Drain: &controlpb.Drain{TransferId: d.TransferID, Epoch: d.Epoch},
	})
	return err
}

// withAdapter runs call on w; when w refuses it for lack of the request's
// LoRA adapter, pushes the adapter there and runs call once more
// (adapters.Registry.Retry).
func (d *driver) withAdapter(ctx context.Context, w *registry.Worker, call func() error) error {
	if d.adapter == nil {
		return call()
	}
	return d.g.adapters.Retry(ctx, w.Client(), d.adapter, call, func(n int64) { w.AdapterLoaded(d.adapter.Hash, n) })
}

// adapterMissing handles a both worker's refusal of the request's
// Generate for lack of its LoRA adapter: it pushes the adapter there,
// once per worker, and reports whether the request may be placed again
// (errRetry); a failed push is the request's failure.
func (d *driver) adapterMissing(ctx context.Context, w *registry.Worker, err error) (retry bool, _ error) {
	if h, ok := controlpb.IsAdapterNotLoaded(err); !ok || d.adapter == nil || h != d.adapter.Hash || d.adapterPushed[w.ID()] {
		return false, nil
	}
	if d.adapterPushed == nil {
		d.adapterPushed = make(map[string]bool)
	}
	d.adapterPushed[w.ID()] = true
	n, err := d.g.adapters.Push(ctx, w.Client(), *d.adapter)
	if err != nil {
		return false, d.workerError("load adapter", w, err)
	}
	w.AdapterLoaded(d.adapter.Hash, n)
	return true, nil
}

func ownerPB(o lifecycle.Owner) *controlpb.Owner {
	return &controlpb.Owner{Tenant: o.Tenant, RequestId: o.RequestID, Epoch: o.Epoch, Adapter: o.Adapter}
}
