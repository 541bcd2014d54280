package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/fairqueue"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
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
	priority int // the request's; its tenant may use it (Acquire checked)
	tok      *modelTokenizer
	// log has the model; the request's context (d.req.Context()) adds
	// request_id, tenant, trace_id and span_id to each line.
	log  *slog.Logger
	span trace.Span // the request span; finish ends it

	prompt    []int32
	maxTokens int64
	sampling  *controlpb.SamplingParams
	stops     []string
	pages     int64 // KV pages the request needs on its decode worker

	// results
	prefilled  int64 // prompt tokens in the cache (Ready)
	generated  int64 // completion tokens, as billed
	received   int64 // tokens received from the worker
	stopped    bool  // a stop string ended the request
	firstToken time.Time
	lastToken  time.Time
	done       []func() // routing load to give back
}

// endError is why a request did not complete: its terminal state, cause
// and the error the client sees.
type endError struct {
	state  lifecycle.State
	cause  string
	client *api.Error
	err    error // the underlying error, for logs
}

func (e *endError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%s (%s): %v", e.state, e.cause, e.err)
	}
	return fmt.Sprintf("%s (%s)", e.state, e.cause)
}

func (e *endError) Unwrap() error { return e.err }

// rejected ends a request that no worker has started on; cause defaults
// to the client error's code.
func rejected(cause string, client *api.Error) *endError {
	if cause == "" {
		cause = client.Code
	}
	return &endError{state: lifecycle.Rejected, cause: cause, client: client}
}

func failed(cause string, client *api.Error, err error) *endError {
	return &endError{state: lifecycle.Failed, cause: cause, client: client, err: err}
}

// Failure causes of requests that a worker failed.
const (
	causeDataLoss       = "data_loss"
	causeOwnerViolation = "owner_violation"
	causeCountMismatch  = "count_mismatch"
	causeWorkerGone     = "worker_unavailable"
	causeWorkerError    = "worker_error"
	causeProtocol       = "protocol"
)

// workerUnavailable is the client error of a request whose worker failed
// or went away: retrying may succeed elsewhere.
func workerUnavailable(msg string) *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeServer, Code: "worker_unavailable",
		Message: msg, Headers: http.Header{"Retry-After": {"1"}}}
}

// abortedError is the client error of a request aborted with cause.
func abortedError(cause string, timeout time.Duration) *api.Error {
	switch cause {
	case lifecycle.CauseDeadline:
		return &api.Error{Status: http.StatusGatewayTimeout, Type: api.TypeServer, Code: "timeout",
			Message: fmt.Sprintf("The request did not finish within the server's limit of %s.", timeout)}
	case lifecycle.CauseWorkerLost:
		return workerUnavailable("The worker serving this request stopped responding; retry the request.")
	case lifecycle.CauseQuota:
		return &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeRateLimit, Code: "insufficient_quota",
			Message: "The request was stopped: your tenant's quota or access changed while it ran."}
	case lifecycle.CauseShutdown:
		return &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeServer, Code: "shutting_down",
			Message: "The server is shutting down; retry the request.", Headers: http.Header{"Retry-After": {"1"}}}
	case lifecycle.CauseAdmin:
		return &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeServer, Code: "request_aborted",
			Message: "The request was aborted by an operator."}
	}
	return &api.Error{Status: 499, Type: api.TypeInvalidRequest, Code: "request_aborted",
		Message: "The request was aborted by the client."}
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
	rt, err = d.g.reg.Pick(model, total)
	if err != nil {
		return rt, nil, false, rejected("", api.ModelUnavailable(model, "no healthy worker serves it"))
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
	d.req.Involve(participant{rt.Decode}, registry.RoleDecode)
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

// releaseRoute gives back the routing load of the current attempt.
func (d *driver) releaseRoute() {
	for _, done := range d.done {
		done()
	}
	d.done = nil
}

// runSingle runs the request on one both worker.
func (d *driver) runSingle(ctx context.Context, w *registry.Worker) error {
	sctx, cancel := workerContext(ctx)
	defer cancel()
	d.req.Involve(participant{w}, registry.RoleBoth)
	d.span.SetAttributes(attrDecodeWorker.String(w.ID()))
	if err := d.req.Advance(lifecycle.Prefilling); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	stream, err := w.Client().Generate(sctx, &controlpb.GenerateRequest{
		Owner: ownerPB(d.req.Owner()), Prompt: d.prompt, Sampling: d.sampling,
	})
	if err != nil {
		return d.workerError("generate", w, err)
	}
	return d.relay(ctx, w, newReceiver(sctx, stream), nil, true)
}

// runPD runs the request on a prefill and a decode worker: Generate on
// decode (it waits for the KV) and Prefill concurrently.
func (d *driver) runPD(ctx context.Context, rt registry.Route, ticket *controlpb.Ticket) error {
	if err := d.req.Advance(lifecycle.Reserved); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	sctx, cancel := workerContext(ctx)
	defer cancel()
	owner := ownerPB(d.req.Owner())
	stream, err := rt.Decode.Client().Generate(sctx, &controlpb.GenerateRequest{
		Owner: owner, Prompt: d.prompt, Sampling: d.sampling, Ticket: ticket,
	})
	if err != nil {
		return d.workerError("generate", rt.Decode, err)
	}
	d.req.Involve(participant{rt.Prefill}, registry.RolePrefill)
	if err := d.req.Advance(lifecycle.Prefilling); err != nil {
		return failed(lifecycle.CauseInternal, api.Internal(), err)
	}
	runHook(ctx, &d.g.hooks.beforePrefill)
	prefilled := make(chan error, 1)
	go func() {
		resp, err := rt.Prefill.Client().Prefill(sctx, &controlpb.PrefillRequest{
			Owner: owner, Prompt: d.prompt, Sampling: d.sampling, Ticket: ticket, Traceparent: obs.Traceparent(sctx),
		})
		if err == nil && resp.GetPromptTokens() != int64(len(d.prompt)) {
			err = failed(causeCountMismatch, api.Internal(), fmt.Errorf(
				"prefill worker %s reports %d prompt tokens pushed, the prompt has %d", rt.Prefill.ID(), resp.GetPromptTokens(), len(d.prompt)))
		} else if err != nil {
			err = d.workerError("prefill", rt.Prefill, err)
		}
		prefilled <- err
	}()
	return d.relay(ctx, rt.Decode, newReceiver(sctx, stream), prefilled, false)
}

// receiver pumps a Generate stream into a channel, so the driver can wait
// for it and for the prefill result at once.
type received struct {
	ev  *controlpb.GenerateEvent
	err error
}

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

// relay forwards the decode worker's events until Done, a stop string or a
// failure. prefilled, when set, delivers the Prefill call's result: a
// failure before decode is ready fails the request; after, decode has
// verified the KV already and the failure is only logged. With retryable
// (a both worker), ResourceExhausted before Ready is errRetry.
func (d *driver) relay(ctx context.Context, w *registry.Worker, events <-chan received, prefilled <-chan error, retryable bool) error {
	text := newTextStream(d.tok.tok, d.stops)
	for {
		var r received
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case err := <-prefilled:
			prefilled = nil
			switch state := d.req.State(); {
			case err == nil && state == lifecycle.Prefilling:
				if err := d.req.Advance(lifecycle.Transferring); err != nil {
					return failed(lifecycle.CauseInternal, api.Internal(), err)
				}
			case err != nil && state != lifecycle.Decoding:
				return err
			case err != nil:
				d.log.WarnContext(ctx, "prefill reported an error after decode verified the KV", "err", err)
			}
			continue
		case r = <-events:
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return failed(causeProtocol, workerUnavailable("The worker ended the request without finishing it; retry the request."),
					fmt.Errorf("worker %s ended the Generate stream without Done", w.ID()))
			}
			if retryable && status.Code(r.err) == codes.ResourceExhausted && d.req.State() == lifecycle.Prefilling {
				// Nothing is held: a both worker reserves all or nothing.
				w.Exhausted(d.pages)
				return errRetry
			}
			return d.workerError("generate", w, r.err)
		}
		if end, err := d.onEvent(ctx, w, r.ev, text); end || err != nil {
			return err
		}
	}
}

// onEvent handles one event of the decode stream; end is true once the
// request completed.
func (d *driver) onEvent(ctx context.Context, w *registry.Worker, ev *controlpb.GenerateEvent, text *textStream) (end bool, err error) {
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
		// The first event commits the response: its status and headers.
		if err := d.emit(ctx, api.Event{Headers: rateLimitHeaders(d.lease.Info().Quota)}); err != nil {
			return false, err
		}
		runHook(ctx, &d.g.hooks.afterReady)
		return false, nil

	case *controlpb.GenerateEvent_Tokens:
		if state != lifecycle.Decoding {
			return false, protocol("tokens while %s", state)
		}
		ids := e.Tokens.GetIds()
		now := time.Now()
		if d.firstToken.IsZero() {
			d.firstToken = now
		}
		d.lastToken = now
		d.received += int64(len(ids))
		if d.received > d.maxTokens {
			return false, protocol("sent %d tokens, max_tokens is %d", d.received, d.maxTokens)
		}
		delta, stopped, err := text.add(ids)
		if err != nil {
			return false, protocol("undecodable token: %v", err)
		}
		if stopped {
			// Billed: the tokens received; the worker is told to stop
			// (Finish with CauseStop).
			d.stopped, d.generated = true, d.received
			return true, d.emit(ctx, api.Event{TextDelta: delta, FinishReason: "stop", Usage: d.usage()})
		}
		if delta == "" {
			return false, nil
		}
		return false, d.emit(ctx, api.Event{TextDelta: delta})

	case *controlpb.GenerateEvent_Done:
		if state != lifecycle.Decoding {
			return false, protocol("Done while %s", state)
		}
		done := e.Done
		reason := done.GetFinishReason()
		n := done.GetCompletionTokens()
		// Done counts a final stop token that is not sent.
		countOK := n == d.received || (reason == "stop" && n == d.received+1)
		if done.GetPromptTokens() != d.prefilled || !countOK || (reason != "stop" && reason != "length") {
			return false, failed(causeCountMismatch, api.Internal(), fmt.Errorf(
				"worker %s: Done{%s, prompt %d, completion %d} disagrees with %d prompt tokens and %d tokens received",
				w.ID(), reason, done.GetPromptTokens(), n, d.prefilled, d.received))
		}
		d.generated = n
		rest, stopped := text.flush()
		if stopped {
			d.stopped, reason = true, "stop"
		}
		return true, d.emit(ctx, api.Event{TextDelta: rest, FinishReason: reason, Usage: d.usage()})
	}
	return false, protocol("unknown event %T", ev.GetEvent())
}

func (d *driver) usage() *api.Usage {
	return &api.Usage{PromptTokens: d.prefilled, CompletionTokens: d.generated}
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

// workerError maps a worker's error on call to the request's failure.
// Integrity failures (transfer verification, owner violations) get a
// generic 500; finish logs and counts them.
func (d *driver) workerError(call string, w *registry.Worker, err error) error {
	if d.req.AbortCause() != "" {
		return err // aborted: serve reports the abort
	}
	st, _ := status.FromError(err)
	wrapped := fmt.Errorf("%s on worker %s: %w", call, w.ID(), err)
	switch {
	case st.Code() == codes.DataLoss:
		return failed(causeDataLoss, api.Internal(), wrapped)
	case st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "kv owner violation"):
		return failed(causeOwnerViolation, api.Internal(), wrapped)
	case st.Code() == codes.Unavailable, st.Code() == codes.Aborted, st.Code() == codes.DeadlineExceeded,
		st.Code() == codes.Canceled, st.Code() == codes.ResourceExhausted, st.Code() == codes.OutOfRange:
		// Gone, shutting down, or aborted on its side (an abandoned
		// reservation); capacity that changed under admission.
		return failed(causeWorkerGone, workerUnavailable("The worker serving this request failed or went away; retry the request."), wrapped)
	}
	return failed(causeWorkerError, api.Internal(), wrapped)
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
	d.g.releaseLease(d.lease, d.req.ID(), tenant.Consumed{PromptTokens: d.prefilled, CompletionTokens: d.generated})

	httpStatus := http.StatusOK
	if clientErr != nil {
		httpStatus = clientErr.Status
		d.gen.err = clientErr
	}
	snap := d.req.Snapshot()
	d.g.metrics.finished(snap, httpStatus, d.firstToken, d.lastToken)
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

// participant adapts a registry worker to the lifecycle's abort fan-out.
type participant struct{ w *registry.Worker }

var _ lifecycle.Participant = participant{}

func (p participant) ID() string { return p.w.ID() }

func (p participant) Abort(ctx context.Context, owner lifecycle.Owner, cause string) error {
	_, err := p.w.Client().Abort(ctx, &controlpb.AbortRequest{Owner: ownerPB(owner), Cause: cause})
	return err
}

func ownerPB(o lifecycle.Owner) *controlpb.Owner {
	return &controlpb.Owner{Tenant: o.Tenant, RequestId: o.RequestID, Epoch: o.Epoch}
}
