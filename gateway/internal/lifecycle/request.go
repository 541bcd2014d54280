package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/internal/obs"
)

// Epoch is the epoch of a request's first (and, in this gateway, only)
// attempt: a request is never re-run under its ID.
const Epoch uint64 = 1

// Request is one request's lifecycle. Advance and Finish belong to the
// goroutine driving the request; Abort and the readers may be called from
// anywhere.
type Request struct {
	table  *Table
	info   Info
	ctx    context.Context
	cancel func(error)
	done   chan struct{} // closed at the terminal state, after the fan-out started

	mu           sync.Mutex
	state        State
	stage        State // last non-terminal state
	cause        string
	entered      [Failed + 1]time.Time
	participants []*participant
	prompt       int64
	completion   int64
}

type participant struct {
	p    Participant
	role string
	// placed: the worker holds the request (Placed)
	placed bool
	// set by the fan-out
	abortSent    bool
	abortErr     string
	drainRelayed bool
}

// Context is cancelled when the request is aborted (Abort, deadline) or
// finished. Use it for every call made on the request's behalf.
func (r *Request) Context() context.Context { return r.ctx }

// Done is closed when the request has reached its terminal state.
func (r *Request) Done() <-chan struct{} { return r.done }

// ID returns the gateway-assigned request ID.
func (r *Request) ID() string { return r.info.ID }

// Info returns what the request was started with.
func (r *Request) Info() Info { return r.info }

// Owner returns the request's KV owner tag: tenant, request ID, Epoch and
// adapter.
func (r *Request) Owner() Owner {
	return Owner{Tenant: r.info.Tenant, RequestID: r.info.ID, Epoch: Epoch, Adapter: r.info.Adapter}
}

// State returns the current state.
func (r *Request) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Abort cancels the request's context with cause; the driver then
// finishes the request as aborted. The first cause wins; aborting a
// finished request does nothing.
func (r *Request) Abort(cause string) {
	r.cancel(&abortError{cause: cause})
}

// AbortCause returns the cause the request was aborted with (by Abort or
// its deadline), or "" when it was not.
func (r *Request) AbortCause() string {
	var ae *abortError
	if errors.As(context.Cause(r.ctx), &ae) {
		return ae.cause
	}
	return ""
}

// Involve records that w takes part in the request in role (prefill,
// decode or both). Call it before sending w anything that may make it hold
// state for the request, so that an abort reaches it. Involving the same
// worker twice keeps one entry.
func (r *Request) Involve(w Participant, role string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.participants {
		if p.p.ID() == w.ID() {
			return
		}
	}
	r.participants = append(r.participants, &participant{p: w, role: role})
}

// Placed records whether the involved worker workerID holds the request
// now: its reservation was granted (a decode worker's Reserve; a both
// worker's Generate, until it refuses it for capacity) or, for a prefill
// worker, the request was sent to it with the reservation's ticket. A
// worker is involved before it is asked (Involve, so that an abort
// reaches it) but placed only once it holds the request: a Reserve refused
// for capacity leaves the request waiting, and placed nowhere. Snapshot
// shows it (Worker.Placed). A worker not involved is ignored.
func (r *Request) Placed(workerID string, placed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.participants {
		if p.p.ID() == workerID {
			p.placed = placed
		}
	}
}

func (r *Request) involves(workerID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.participants {
		if p.p.ID() == workerID {
			return true
		}
	}
	return false
}

// SetUsage records the request's token counts: prompt tokens prefilled
// and completion tokens generated (I7).
func (r *Request) SetUsage(prompt, completion int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prompt, r.completion = prompt, completion
}

// Advance moves the request to the non-terminal state to. Moving to the
// current state is a no-op. An illegal transition is a bug: it is logged,
// the request is failed with CauseInternal and ErrIllegalTransition is
// returned; on a finished request Advance returns ErrFinished.
func (r *Request) Advance(to State) error {
	if to.Terminal() {
		return r.illegal(to, "use Finish for terminal states")
	}
	r.mu.Lock()
	from := r.state
	switch {
	case from == to:
		r.mu.Unlock()
		return nil
	case from.Terminal():
		r.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrFinished, r.info.ID, from)
	case !CanTransition(from, to):
		r.mu.Unlock()
		return r.illegal(to, "")
	}
	r.state, r.stage = to, to
	now := r.table.cfg.Now()
	r.entered[to] = now
	r.mu.Unlock()
	trace.SpanFromContext(r.ctx).AddEvent(to.String(), trace.WithTimestamp(now))
	return nil
}

// illegal logs and fails the request after an illegal transition request.
func (r *Request) illegal(to State, why string) error {
	from := r.State()
	r.table.cfg.Logger.Error("illegal request state transition (bug)",
		"request_id", r.info.ID, "tenant", r.info.Tenant, "from", from.String(), "to", to.String(), "why", why)
	_ = r.Finish(Failed, CauseInternal)
	return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, to)
}

// Finish ends the request in the terminal state with cause (the abort
// cause, the rejection code or the failure kind; "" for a normal
// completion, CauseStop for a stop string). Unless it completed without
// CauseStop, Abort is sent to every involved worker. A second Finish
// returns ErrFinished and changes nothing.
func (r *Request) Finish(state State, cause string) error {
	if !state.Terminal() {
		return r.illegal(state, "Finish needs a terminal state")
	}
	r.mu.Lock()
	from := r.state
	if from.Terminal() {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s is %s", ErrFinished, r.info.ID, from)
	}
	if !CanTransition(from, state) {
		r.mu.Unlock()
		// Fail instead: only aborted and failed are legal from every state.
		r.table.cfg.Logger.Error("illegal request state transition (bug)",
			"request_id", r.info.ID, "tenant", r.info.Tenant, "from", from.String(), "to", state.String())
		if err := r.Finish(Failed, CauseInternal); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s → %s", ErrIllegalTransition, from, state)
	}
	r.state, r.cause = state, cause
	now := r.table.cfg.Now()
	r.entered[state] = now
	stage := r.stage
	var fan []*participant
	if state != Completed || cause == CauseStop {
		fan = append(fan, r.participants...)
	}
	r.mu.Unlock()

	trace.SpanFromContext(r.ctx).AddEvent(state.String(), trace.WithTimestamp(now),
		trace.WithAttributes(obs.AttrCause.String(cause), obs.AttrStage.String(stage.String())))
	r.cancel(nil) // release the context's resources; an abort cause stays
	r.fanOut(fan, cause)
	r.table.retire(r)
	close(r.done)
	if r.table.cfg.OnFinish != nil {
		r.table.cfg.OnFinish(r.Snapshot())
	}
	return nil
}

// fanOut sends Abort to every participant, each in its own goroutine with
// retries until the table's AbortTimeout. A Drain an Abort returns is
// relayed to the other participants that receive KV (relayDrain).
func (r *Request) fanOut(ps []*participant, cause string) {
	if cause == "" {
		cause = CauseError
	}
	owner := r.Owner()
	t := r.table
	// The Aborts belong to the request's trace (its context's values),
	// not to its cancellation.
	parent := context.WithoutCancel(r.ctx)
	for _, p := range ps {
		t.fanout.Add(1)
		go func() {
			defer t.fanout.Done()
			var d Drain
			err := retry(parent, t.cfg.AbortTimeout, func(ctx context.Context) (err error) {
				d, err = p.p.Abort(ctx, owner, cause)
				return err
			})
			r.mu.Lock()
			p.abortSent = err == nil
			if err != nil {
				p.abortErr = err.Error()
			}
			r.mu.Unlock()
			if err != nil {
				t.cfg.Logger.Warn("abort did not reach worker", "request_id", owner.RequestID,
					"tenant", owner.Tenant, "worker", p.p.ID(), "role", p.role, "cause", cause, "err", err)
				return
			}
			if !d.IsZero() {
				r.relayDrain(parent, ps, p, d)
			}
		}()
	}
}

// relayDrain tells every participant but from that receives KV (decode)
// that from's writer drained d: from's Abort returned it, so it can write
// no further byte of that transfer, and the receiver may release the
// pages it keeps for the drain ack that the transfer connection may no
// longer deliver. Each relay runs in its own goroutine, retried until the
// table's AbortTimeout; it is best effort (a receiver that never hears of
// it quarantines the pages after its drain timeout, as without a relay)
// and nothing waits for it but Table.Wait.
func (r *Request) relayDrain(parent context.Context, ps []*participant, from *participant, d Drain) {
	owner := r.Owner()
	t := r.table
	for _, p := range ps {
		dr, ok := p.p.(DrainReceiver)
		if !ok || p == from {
			continue
		}
		t.fanout.Add(1)
		go func() {
			defer t.fanout.Done()
			err := retry(parent, t.cfg.AbortTimeout, func(ctx context.Context) error {
				return dr.WriterDrained(ctx, owner, d)
			})
			r.mu.Lock()
			p.drainRelayed = err == nil
			r.mu.Unlock()
			if err != nil {
				t.cfg.Logger.Warn("writer drain not relayed: its pages stay held until the worker's drain timeout, then quarantined",
					"request_id", owner.RequestID, "tenant", owner.Tenant, "worker", p.p.ID(), "role", p.role,
					"writer", from.p.ID(), "transfer", d.TransferID, "epoch", d.Epoch, "err", err)
				return
			}
			t.cfg.Logger.Debug("writer drain relayed", "request_id", owner.RequestID, "tenant", owner.Tenant,
				"worker", p.p.ID(), "writer", from.p.ID(), "transfer", d.TransferID, "epoch", d.Epoch)
		}()
	}
}

// retry calls f until it succeeds or timeout passes.
func retry(parent context.Context, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Worker is one worker of a request as shown in a Snapshot.
type Worker struct {
	ID   string
	Role string
	// Placed is true while the worker holds the request (Request.Placed);
	// a worker is involved, and listed, from the moment it is asked.
	Placed bool
	// AbortSent is true once an Abort reached the worker.
	AbortSent bool
	// AbortError is the last error of a fan-out that gave up.
	AbortError string
	// DrainRelayed is true once another worker's writer drain was relayed
	// to this one (it receives KV).
	DrainRelayed bool
}

// Snapshot is a consistent copy of a request's state.
type Snapshot struct {
	ID, ClientRequestID, Tenant, Model string
	Priority                           int
	State                              State
	// Stage is the last non-terminal state (where an abort or failure
	// happened).
	Stage State
	// Cause is the abort cause, rejection code or failure kind.
	Cause                          string
	Workers                        []Worker
	PromptTokens, CompletionTokens int64
	// Entered is when the request entered each state (zero when it did
	// not), indexed by State.
	Entered  [Failed + 1]time.Time
	Received time.Time
	// Finished is when it reached its terminal state (zero in flight).
	Finished time.Time
}

// Snapshot returns a copy of the request's current state.
func (r *Request) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{
		ID: r.info.ID, ClientRequestID: r.info.ClientRequestID, Tenant: r.info.Tenant, Model: r.info.Model,
		Priority: r.info.Priority, State: r.state, Stage: r.stage, Cause: r.cause,
		PromptTokens: r.prompt, CompletionTokens: r.completion,
		Entered: r.entered, Received: r.info.Received,
	}
	if r.state.Terminal() {
		s.Finished = r.entered[r.state]
	}
	for _, p := range r.participants {
		s.Workers = append(s.Workers, Worker{ID: p.p.ID(), Role: p.role, Placed: p.placed, AbortSent: p.abortSent,
			AbortError: p.abortErr, DrainRelayed: p.drainRelayed})
	}
	return s
}
