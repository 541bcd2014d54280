package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/fairqueue"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// errRetry: a both worker had no free pages for the request's Generate;
// the request waits for capacity again.
var errRetry = errors.New("gateway: worker full, waiting for capacity")

// place waits for capacity and picks the workers. For P/D it also
// reserves the decode pages and returns the ticket. Requests skip the
// fair queue only when nobody waits in it; in it, they wait at their
// priority (higher levels first), then in weighted fair order.
func (d *driver) place(ctx context.Context) (registry.Route, *controlpb.Ticket, error) {
	q := d.g.queue
	if q.Len() == 0 {
		rt, ticket, ok, err := d.try(ctx)
		if ok || err != nil {
			return rt, ticket, err
		}
	}
	w, err := q.Enter(ctx, d.req.Info().Tenant, d.priority, d.weight, int64(len(d.prompt))+d.maxTokens)
	switch {
	case errors.Is(err, fairqueue.ErrFull):
		return registry.Route{}, nil, rejected("queue_full", api.RateLimited(
			"The model is at capacity and too many requests are waiting; retry shortly.", time.Second, rateLimitHeaders(d.lease.Info().Quota)))
	case err != nil:
		return registry.Route{}, nil, err
	}
	defer w.Done()
	for {
		<-w.Ready()
		if err := w.Err(); err != nil {
			if errors.Is(err, fairqueue.ErrTimeout) {
				return registry.Route{}, nil, rejected("queue_timeout", api.RateLimited(fmt.Sprintf(
					"The model stayed at capacity for %s; retry shortly.", d.g.cfg.Gateway.Queue.MaxWait),
					time.Second, rateLimitHeaders(d.lease.Info().Quota)))
			}
			return registry.Route{}, nil, err
		}
		rt, ticket, ok, err := d.try(ctx)
		if ok || err != nil {
			w.Done() // hand the turn on at once
			return rt, ticket, err
		}
		w.Retry()
	}
}

// try picks workers and, for P/D, reserves the decode pages. ok is false
// when there is no capacity now (the caller waits); nothing is held then.
func (d *driver) try(ctx context.Context) (rt registry.Route, ticket *controlpb.Ticket, ok bool, err error) {
	model := d.req.Info().Model
	total := int64(len(d.prompt)) + d.maxTokens
	rt, err = d.pick(model, total)
	if err != nil {
		return rt, nil, false, rejected("", api.ModelUnavailable(model, "no healthy worker serves it"))
	}
	if rt.Busy {
		// Every worker runs what it can: wait here, in fair order.
		return rt, nil, false, nil
	}
	if rt.Prefill == nil {
		// A both worker reserves by itself when Generate arrives, and says
		// so there if its pool is full (runSingle, errRetry); skip the
		// call when its last heartbeat already shows too few free pages.
		if rt.FreePages < rt.Pages {
			return rt, nil, false, nil
		}
		d.pages = rt.Pages
		d.done = append(d.done, rt.Decode.Begin(rt.Pages))
		return rt, nil, true, nil
	}
	d.req.Involve(decodeParticipant{participant{rt.Decode}}, registry.RoleDecode)
	d.span.SetAttributes(attrDecodeWorker.String(rt.Decode.ID()), attrPrefillWorker.String(rt.Prefill.ID()))
	rctx, cancel := workerContext(ctx)
	defer cancel()
	resp, err := rt.Decode.Client().Reserve(rctx, &controlpb.ReserveRequest{
		Owner: ownerPB(d.req.Owner()), PromptTokens: int64(len(d.prompt)), TotalTokens: total,
	})
	switch status.Code(err) {
	case codes.OK:
	case codes.ResourceExhausted:
		rt.Decode.Exhausted(rt.Pages)
		return rt, nil, false, nil
	default:
		return rt, nil, false, d.workerError("reserve", rt.Decode, err)
	}
	t := resp.GetTicket()
	if o := t.GetOwner(); o.GetTenant() != d.req.Info().Tenant || o.GetRequestId() != d.req.ID() ||
		o.GetEpoch() != lifecycle.Epoch || t.GetPromptTokens() != int64(len(d.prompt)) || t.GetDecodeWorkerId() != rt.Decode.ID() {
		return rt, nil, false, failed(causeProtocol, api.Internal(),
			fmt.Errorf("decode worker %s returned a ticket for another request or prompt", rt.Decode.ID()))
	}
	d.done = append(d.done, rt.Decode.Begin(rt.Pages), rt.Prefill.Begin(0))
	return rt, t, true, nil
}

// releaseRoute gives back the routing load of the current attempt.
func (d *driver) releaseRoute() {
	for _, done := range d.done {
		done()
	}
	d.done = nil
}
