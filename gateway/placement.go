package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/fairqueue"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

// errRetry: a both worker had no free pages for the request's Generate,
// or could not be reached before anything was sent to it; the request is
// placed again.
var errRetry = errors.New("gateway: worker full or unreachable, placing the request again")

// maxFailovers bounds how often one request is placed again because the
// worker chosen for it could not be reached (registry.NotSent).
const maxFailovers = 3

// failover reports whether the call on w that failed with err may be
// placed again: it left nothing on the worker (registry.Untouched: its
// connection was refused, or it refused the call as draining), the
// request was not aborted, and it has failovers left. An unreachable
// worker is marked suspect either way (workerError); a draining one
// only leaves placement (its requests in flight run on).
func (d *driver) failover(w *registry.Worker, err error) bool {
	if !registry.Untouched(err) || d.req.AbortCause() != "" || d.failovers >= maxFailovers {
		return false
	}
	d.failovers++
	if controlpb.IsDraining(err) {
		d.g.reg.MarkDraining(w.ID())
	} else {
		d.g.reg.Suspect(w.ID(), err)
	}
	d.g.metrics.failover()
	d.log.WarnContext(d.req.Context(), "worker unreachable or draining: placing the request on another worker",
		"worker", w.ID(), "attempt", d.failovers, "err", err)
	return true
}

// place waits for capacity and picks the workers. For P/D it also
// reserves the decode pages and returns the ticket. Requests skip the
// fair queue only when nobody waits in it; in it, they wait at their
// priority (higher levels first), then in weighted fair order.
func (d *driver) place(ctx context.Context) (registry.Route, *controlpb.Ticket, error) {
	q := d.g.queue
	tenant := d.req.Info().Tenant
	switch top, waiting := q.Highest(); {
	case q.Len() == 0:
		rt, ticket, ok, err := d.try(ctx, placeArrival)
		if ok || err != nil {
			return rt, ticket, err
		}
	case (!waiting || top <= d.priority) && q.Waiting(tenant) == 0:
		// An idle tenant: fair queuing would give it the next turn.
		rt, ticket, ok, err := d.try(ctx, placeNewcomer)
		if ok || err != nil {
			return rt, ticket, err
		}
	}
	w, err := q.Enter(ctx, d.req.Info().Tenant, d.priority, d.weight, d.kvTokens())
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
					"The model stayed at capacity for %s; retry shortly.", d.g.queue.MaxWait()),
					time.Second, rateLimitHeaders(d.lease.Info().Quota)))
			}
			return registry.Route{}, nil, err
		}
		rt, ticket, ok, err := d.try(ctx, placeTurn)
		if ok || err != nil {
			w.Done() // hand the turn on at once
			return rt, ticket, err
		}
		w.Retry()
	}
}

// placeMode says when try may place a request.
type placeMode uint8

const (
	// placeTurn: the request holds a turn of the fair queue; it is placed
	// where the in-flight budget has room.
	placeTurn placeMode = iota
	// placeArrival: nothing waits in the queue; the request is placed
	// where the budget has room, or as its tenant's newcomer there
	// (registry.Worker.Newcomer).
	placeArrival
	// placeNewcomer: others wait in the queue, none of its tenant and none
	// at a higher priority; the request is placed only as a newcomer.
	placeNewcomer
)

// try picks workers and, for P/D, reserves the decode pages. ok is false
// when there is no capacity now (the caller waits); nothing is held then.
func (d *driver) try(ctx context.Context, mode placeMode) (rt registry.Route, ticket *controlpb.Ticket, ok bool, err error) {
	model, tenant := d.req.Info().Model, d.req.Info().Tenant
	total := d.kvTokens()
	for {
		// Capacity may have shrunk since admission (quarantine, a lost
		// worker): a request that can no longer run is rejected now,
		// never left waiting (I12).
		if err := d.g.admission.Recheck(model, int64(len(d.prompt)), d.maxTokens, d.promptParam); err != nil {
			var apiErr *api.Error
			if errors.As(err, &apiErr) {
				return rt, nil, false, rejected("", apiErr)
			}
			return rt, nil, false, err
		}
		rt, err = d.pick(model, total)
		if err != nil && d.n > 1 {
			return rt, nil, false, rejected("", api.InvalidRequest("n", api.CodeIntegerTooLarge, fmt.Sprintf(
				"No worker of model %s can hold %d choices of the prompt plus max_tokens (%d tokens); lower n or max_tokens.", model, d.n, total)))
		}
		if err != nil {
			return rt, nil, false, rejected("", api.ModelUnavailable(model, "no healthy worker serves it"))
		}
		if (rt.Busy || mode == placeNewcomer) && (mode == placeTurn || !rt.Decode.Newcomer(tenant)) {
			// Every worker runs what it can: wait here, in fair order.
			return rt, nil, false, nil
		}
		if rt.Prefill == nil {
			// A both worker reserves by itself when Generate arrives, and
			// says so there if its pool is full (runSingle, errRetry);
			// skip the call when its last heartbeat already shows too few
			// free pages.
			if rt.FreePages < rt.Pages {
				return rt, nil, false, nil
			}
			d.pages = rt.Pages
			d.done = append(d.done, rt.Decode.BeginFor(tenant, rt.Pages), d.g.beginInFlight(tenant))
			return rt, nil, true, nil
		}
		// The request counts on its workers from the moment it is routed,
		// not once Reserve answered: concurrent placements (a burst of
		// new conversations) would otherwise all see the same loads and
		// pick the same workers while their Reserve calls run.
		counted := []func(){rt.Decode.BeginFor(tenant, rt.Pages), rt.Prefill.Begin(0), d.g.beginInFlight(tenant)}
		uncount := func() {
			for _, done := range counted {
				done()
			}
		}
		resp, err := d.reserve(ctx, rt)
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			uncount()
			rt.Decode.Exhausted(rt.Pages)
			return rt, nil, false, nil
		default:
			uncount()
			if d.failover(rt.Decode, err) {
				continue // nothing was reserved: another decode worker
			}
			// The request fails on this worker, which may hold the
			// reservation all the same (the error leaves it unknown, and
			// the abort reaches it): the view names it, unlike a
			// capacity refusal, which reserved nothing for certain.
			d.req.Placed(rt.Decode.ID(), true)
			return rt, nil, false, d.workerError("reserve", rt.Decode, err)
		}
		d.done = append(d.done, counted...)
		d.req.Placed(rt.Decode.ID(), true)
		d.reserveLease = time.Duration(resp.GetLeaseMs()) * time.Millisecond
		t := resp.GetTicket()
		if o := t.GetOwner(); o.GetTenant() != d.req.Info().Tenant || o.GetRequestId() != d.req.ID() ||
			o.GetEpoch() != lifecycle.Epoch || t.GetPromptTokens() != int64(len(d.prompt)) || t.GetDecodeWorkerId() != rt.Decode.ID() {
			return rt, nil, false, failed(causeProtocol, api.Internal(),
				fmt.Errorf("decode worker %s returned a ticket for another request or prompt", rt.Decode.ID()))
		}
		return rt, t, true, nil
	}
}

// reserve asks rt's decode worker for the request's pages: prompt plus
// max_tokens, for each of n choices laid out by the worker (the prompt's
// full pages once).
func (d *driver) reserve(ctx context.Context, rt registry.Route) (*controlpb.ReserveResponse, error) {
	d.req.Involve(decodeParticipant{participant{rt.Decode}}, registry.RoleDecode)
	d.span.SetAttributes(attrDecodeWorker.String(rt.Decode.ID()), attrPrefillWorker.String(rt.Prefill.ID()))
	rctx, cancel := workerContext(ctx)
	defer cancel()
	req := &controlpb.ReserveRequest{
		Owner: ownerPB(d.req.Owner()), PromptTokens: int64(len(d.prompt)), TotalTokens: int64(len(d.prompt)) + d.maxTokens,
		Choices:   int32(d.n),
		TimeoutMs: d.g.rates.reserveTimeout(d.req.Info().Model, len(d.prompt)).Milliseconds(),
	}
	// With a cache domain, decode looks up the prompt's pages it holds
	// sealed for the domain; the ticket names them (held_pages).
	rctx, req.Prompt, req.Adapter = d.withDomain(rctx), d.cachePrompt(), adapters.Ref(d.adapter)
	var resp *controlpb.ReserveResponse
	err := d.withAdapter(rctx, rt.Decode, func() (err error) {
		resp, err = rt.Decode.Client().Reserve(rctx, req)
		return err
	})
	return resp, err
}

// releaseRoute gives back the routing load of the current attempt.
func (d *driver) releaseRoute() {
	for _, done := range d.done {
		done()
	}
	d.done = nil
}

// kvTokens is the KV positions the request may hold on its decode
// worker: prompt plus max_tokens, for each of n choices. For n > 1 it is
// an estimate: the worker shares the prompt's full pages among the
// choices and gives each its own copy of the partial last page (a pool
// too full for that answers Reserve with ResourceExhausted, and the
// request waits for capacity as any other).
func (d *driver) kvTokens() int64 {
	return int64(d.n) * (int64(len(d.prompt)) + d.maxTokens)
}

// beginInFlight counts a request of tenant placed on a worker in the
// counts this gateway shares with the other replicas (tenant.FleetInFlight)
// until the returned function is called.
func (g *Gateway) beginInFlight(tenant string) func() {
	if g.fleet == nil {
		return func() {}
	}
	return g.fleet.Begin(tenant)
}
