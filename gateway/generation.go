package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/reasoning"
	"github.com/warden-ai/warden/internal/toolcall"
	"github.com/warden-ai/warden/tenant"
)

// generation is an admitted request as the HTTP layer sees it. A driver
// goroutine runs the request and hands events over a channel; Close only
// aborts, the driver finishes.
type generation struct {
	req    *lifecycle.Request
	events chan api.Event
	// err is the request's failure as the client sees it; set before
	// events is closed, nil after a normal end.
	err error
}

var _ api.Generation = (*generation)(nil)

// Next implements api.Generation.
func (gen *generation) Next(ctx context.Context) (api.Event, error) {
	select {
	case ev, ok := <-gen.events:
		if ok {
			return ev, nil
		}
		if gen.err != nil {
			return api.Event{}, gen.err
		}
		return api.Event{}, io.EOF
	case <-ctx.Done():
		return api.Event{}, ctx.Err()
	}
}

// Close implements api.Generation: it aborts the request unless it has
// finished (the client went away, or the handler stopped early).
func (gen *generation) Close() {
	gen.req.Abort(lifecycle.CauseClientDisconnect)
}

// driver runs one admitted request: it waits for capacity, drives the
// workers, turns tokens into text and finishes the request's lifecycle.
type driver struct {
	g        *Gateway
	req      *lifecycle.Request
	gen      *generation
	lease    *tenant.Lease
	weight   int
	priority int // what the store granted: the request's, or 0 on a degraded lease
	tok      *modelTokenizer
	// log has the model; the request's context (d.req.Context()) adds
	// request_id, tenant, trace_id and span_id to each line.
	log  *slog.Logger
	span trace.Span // the request span; finish ends it

	prompt      []int32
	promptParam string // "prompt" or "messages", for errors
	maxTokens   int64  // per choice
	n           int    // choices (n), at least 1
	sampling    *controlpb.SamplingParams
	// constraintParam is the field the sampling constraint came from
	// (response_format, tools, …), for a worker's refusal of it.
	constraintParam string
	stops           []string
	// tools starts the tool-call parser of choice k; nil without tools.
	tools func(k int) *toolcall.Parser
	// reason starts the reasoning parser of choice k; nil when the
	// output is not parsed for reasoning.
	reason func(k int) *reasoning.Parser
	// markers are the special tokens the parsers read, kept in the text.
	markers map[int32]bool
	pages   int64 // KV pages the request needs on its decode worker
	// adapter is the LoRA adapter the request runs under (nil: the base
	// model); adapterPushed, the workers it was pushed to after they
	// refused the request without it (once each).
	adapter       *tenant.Adapter
	adapterPushed map[string]bool
	// The prefix cache (prefixcache.go): the request's domain and whether
	// it uses the cache.
	domain  cachekey.Domain
	cacheOn bool
	// prefillDue delivers the P/D Prefill call's result until the relay
	// took it (nil then, for a both worker, and for n > 1, whose Prefill
	// call returns before decode's Generate is sent).
	prefillDue <-chan prefillResult
	// reserveLease is the lease of decode's reservation (Reserve's
	// lease_ms; 0: it takes no renewals); renewing, while set, stops
	// keepReservation's renewals of it.
	reserveLease time.Duration
	renewing     func()
	// firstLogprobs is the P/D first token's logprobs of each choice, from
	// the Prefill response; firstTokens, for n > 1, every choice's first
	// token, which decode's Generate carries.
	firstLogprobs []*controlpb.LogprobsToken
	firstTokens   []int32
	// prefillPrompt is the prompt's logprobs from the Prefill response,
	// when the sampling asked for them (P/D: prefill computes them).
	prefillPrompt []*controlpb.LogprobsToken

	// results
	prefilled  int64 // prompt tokens in the cache (Ready)
	cached     int64 // of those, reused from the prefix cache
	generated  int64 // completion tokens, as billed
	received   int64 // tokens received from the worker
	stopped    bool  // a stop string ended the request
	failovers  int   // placements again after an unreachable worker
	firstToken time.Time
	lastToken  time.Time
	done       []func() // routing load to give back
}

// run is the driver goroutine.
func (d *driver) run() {
	defer d.g.running.Done()
	err := d.serve()
	d.finish(err)
	close(d.gen.events)
}

// serve runs the request and returns nil once it completed.
func (d *driver) serve() error {
	ctx := d.req.Context()
	stopLease := d.keepLease(ctx)
	defer stopLease()
	for {
		rt, ticket, err := d.place(ctx)
		if err != nil {
			return d.aborted(err)
		}
		if rt.Prefill != nil {
			return d.aborted(d.runPD(ctx, rt, ticket))
		}
		err = d.runSingle(ctx, rt.Decode)
		if !errors.Is(err, errRetry) {
			return d.aborted(err)
		}
		d.releaseRoute()
		d.req.Placed(rt.Decode.ID(), false)
		if err := d.req.Advance(lifecycle.Admitted); err != nil {
			return failed(lifecycle.CauseInternal, api.Internal(), err)
		}
	}
}

// aborted replaces err by the request's abort, when it was aborted: the
// failure is then only the consequence.
func (d *driver) aborted(err error) error {
	if err == nil {
		return nil
	}
	if cause := d.req.AbortCause(); cause != "" {
		return &endError{state: lifecycle.Aborted, cause: cause,
			client: abortedError(cause, d.g.cfg.Gateway.RequestTimeout), err: err}
	}
	return err
}

// finish ends the request's lifecycle: terminal state, lease release with
// the actual usage (I7), metrics, and the error the client sees.
func (d *driver) finish(err error) {
	d.releaseRoute()
	d.g.queue.Signal() // capacity may have been freed
	state, cause, clientErr := lifecycle.Completed, "", (*api.Error)(nil)
	var end *endError
	switch {
	case err == nil:
		if d.stopped {
			cause = lifecycle.CauseStop
		}
	case errors.As(err, &end):
		state, cause, clientErr = end.state, end.cause, end.client
	default:
		state, cause, clientErr = lifecycle.Failed, lifecycle.CauseInternal, api.Internal()
	}
	if state != lifecycle.Completed {
		// Billed for what was done: the prompt if it was prefilled, and
		// the tokens received.
		d.generated = d.received
	}
	d.req.SetUsage(d.prefilled, d.generated)
	ctx := d.req.Context() // for its values: the request's identity and trace
	if ferr := d.req.Finish(state, cause); ferr != nil {
		d.log.ErrorContext(ctx, "finishing request", "err", ferr)
		state, clientErr = lifecycle.Failed, api.Internal()
	}
	d.g.releaseLease(d.lease, d.req.ID(), tenant.Consumed{PromptTokens: d.prefilled, CompletionTokens: d.generated,
		CachedTokens: min(d.cached, d.prefilled), CachedRate: d.g.auth.cachedRate(d.req.Info().Tenant)})

	httpStatus := http.StatusOK
	if clientErr != nil {
		httpStatus = clientErr.Status
		d.gen.err = clientErr
	}
	snap := d.req.Snapshot()
	d.g.metrics.finished(snap, httpStatus, d.firstToken, d.lastToken)
	d.g.metrics.prefixCache(snap.Model, snap.Tenant, d.prefilled, min(d.cached, d.prefilled))
	endRequestSpan(d.span, snap)
	attrs := []any{"state", snap.State.String(), "cause", snap.Cause, "stage", snap.Stage.String(),
		"prompt_tokens", d.prefilled, "completion_tokens", d.generated, "status", httpStatus}
	switch {
	case state == lifecycle.Failed && (cause == causeDataLoss || cause == causeOwnerViolation || cause == causeCountMismatch):
		// A KV integrity problem (I3, I4, I7): the request was stopped
		// before any wrong token could reach the client.
		d.g.metrics.integrityFailure(cause)
		d.log.ErrorContext(ctx, "request failed a KV integrity check", append(attrs, "err", err)...)
	case state == lifecycle.Failed:
		d.log.WarnContext(ctx, "request failed", append(attrs, "err", err)...)
	case state != lifecycle.Completed:
		d.log.InfoContext(ctx, "request ended", append(attrs, "err", err)...)
	default:
		d.log.DebugContext(ctx, "request completed", attrs...)
	}
}

// keepLease renews the tenant lease halfway to its expiry while the
// request runs, and checks the tenant each time: a tenant deleted or
// disabled meanwhile aborts the request with cause quota.
func (d *driver) keepLease(ctx context.Context) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	tenantID := d.req.Info().Tenant
	go func() {
		for {
			wait := max(time.Until(d.lease.Info().ExpiresAt)/2, time.Second)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			t, err := d.g.store.GetTenant(ctx, tenantID)
			if errors.Is(err, tenant.ErrNotFound) || (err == nil && t.Disabled) {
				d.log.WarnContext(ctx, "tenant deleted or disabled while its request ran: aborting it")
				d.req.Abort(lifecycle.CauseQuota)
				return
			}
			switch err := d.lease.Renew(ctx); {
			case err == nil, ctx.Err() != nil:
			case errors.Is(err, tenant.ErrLeaseExpired), errors.Is(err, tenant.ErrLeaseReleased):
				// The request may finish; it no longer holds a slot.
				d.log.WarnContext(ctx, "tenant lease expired while the request ran", "err", err)
				return
			default:
				d.log.WarnContext(ctx, "renewing tenant lease", "err", err)
			}
		}
	}()
	return stop
}

// rateLimitHeaders renders rate-limit state as OpenAI's x-ratelimit-*
// headers; a limit of 0 (unlimited) omits its group.
func rateLimitHeaders(qt tenant.Quota) http.Header {
	h := http.Header{}
	if qt.LimitRequests > 0 {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(qt.LimitRequests, 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(max(qt.RemainingRequests, 0), 10))
		h.Set("X-Ratelimit-Reset-Requests", resetString(qt.ResetRequests))
	}
	if qt.LimitTokens > 0 {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(qt.LimitTokens, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(max(qt.RemainingTokens, 0), 10))
		h.Set("X-Ratelimit-Reset-Tokens", resetString(qt.ResetTokens))
	}
	return h
}

func resetString(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
