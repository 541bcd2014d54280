package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Errors returned by the Table and by Request.
var (
	// ErrIllegalTransition: the driver asked for a transition the state
	// machine does not allow (a bug; the request has been failed).
	ErrIllegalTransition = errors.New("lifecycle: illegal transition")
	// ErrFinished: the request already reached its terminal state.
	ErrFinished = errors.New("lifecycle: request already finished")
	// ErrNotFound: no request with that ID is in flight or in the history.
	ErrNotFound = errors.New("lifecycle: request not found")
	// ErrExists: a request with that ID is already in flight.
	ErrExists = errors.New("lifecycle: request ID already in flight")
)

// Defaults for zero Config fields.
const (
	DefaultHistory      = 1024
	DefaultAbortTimeout = 5 * time.Second
)

// Owner identifies a request's KV pages on workers: the tenant, the
// gateway-assigned request ID and the epoch.
type Owner struct {
	Tenant    string
	RequestID string
	Epoch     uint64
	// Adapter is the LoRA adapter's content hash, empty for the base
	// model (Info.Adapter).
	Adapter string
}

// Participant is a worker a request involves.
type Participant interface {
	// ID names the worker.
	ID() string
	// Abort tells the worker to stop the request and free (or quarantine)
	// what it holds for owner. It must be idempotent. A KV writer
	// (prefill) returns the Drain of the transfer stream it stopped; the
	// zero Drain when it had none, or when its transfer completed.
	Abort(ctx context.Context, owner Owner, cause string) (Drain, error)
}

// Drain is a KV writer's word, in its Abort answer, that it can write no
// further byte of transfer TransferID at Epoch.
type Drain struct {
	TransferID string
	Epoch      uint64
}

// IsZero reports whether d names no transfer.
func (d Drain) IsZero() bool { return d.TransferID == "" }

// DrainReceiver is a Participant whose pages a KV writer writes (decode).
// When another participant's Abort returns a Drain, the fan-out relays it
// with WriterDrained (see the package documentation, "Drain relay").
type DrainReceiver interface {
	Participant
	// WriterDrained tells the worker that the writer of d has drained, so
	// that it releases the pages it keeps for d's drain ack. It must be
	// idempotent and treat a drain it does not know as a no-op.
	WriterDrained(ctx context.Context, owner Owner, d Drain) error
}

// Info is what a request is known by when it starts.
type Info struct {
	// ID is the gateway-assigned request ID (I6).
	ID string
	// ClientRequestID is the client's own ID, kept for correlation only.
	ClientRequestID string
	Tenant          string
	Model           string
	// Adapter is the content hash of the LoRA adapter the request runs
	// under (lora.Hash), empty for the base model; it is part of the
	// request's KV owner.
	Adapter string
	// Priority is the scheduling priority the request asked for (and its
	// tenant may use).
	Priority int
	// Received is when the gateway got the request; zero means now.
	Received time.Time
	// Deadline, if set, aborts the request with CauseDeadline when passed.
	Deadline time.Time
}

// Config tunes a Table. Zero fields take the defaults.
type Config struct {
	// History is how many finished requests are kept for Get and List.
	History int
	// AbortTimeout bounds the Abort fan-out to one worker, retries
	// included, and likewise each drain relay.
	AbortTimeout time.Duration
	// OnFinish, if set, is called once per request right after it reaches
	// its terminal state (metrics). It must not block.
	OnFinish func(Snapshot)
	// Logger receives illegal transitions, failed aborts and relays.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Table is the set of in-flight requests and the recent history.
type Table struct {
	cfg Config

	mu       sync.Mutex
	inflight map[string]*Request
	history  []*Request // ring of finished requests
	next     int        // next ring slot
	byID     map[string]*Request
	fanout   sync.WaitGroup
}

// NewTable returns an empty table.
func NewTable(cfg Config) *Table {
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	if cfg.AbortTimeout <= 0 {
		cfg.AbortTimeout = DefaultAbortTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Table{
		cfg:      cfg,
		inflight: make(map[string]*Request),
		history:  make([]*Request, 0, cfg.History),
		byID:     make(map[string]*Request),
	}
}

// abortError is the context cause of an aborted request.
type abortError struct{ cause string }

func (e *abortError) Error() string { return "request aborted: " + e.cause }

// Start records a new request in state received. Its context keeps ctx's
// values but not its cancellation: a request ends by Abort, its deadline
// or Finish, never because the caller's context ended.
func (t *Table) Start(ctx context.Context, info Info) (*Request, error) {
	if info.ID == "" {
		return nil, fmt.Errorf("lifecycle: empty request ID")
	}
	now := t.cfg.Now()
	if info.Received.IsZero() {
		info.Received = now
	}
	rctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	cancel := func(err error) { cancelCause(err) }
	if !info.Deadline.IsZero() {
		var stop context.CancelFunc
		rctx, stop = context.WithDeadlineCause(rctx, info.Deadline, &abortError{CauseDeadline})
		// The parent's cause, cancelled first, propagates to rctx; stop
		// only releases the timer.
		cancel = func(err error) { cancelCause(err); stop() }
	}
	r := &Request{
		table:  t,
		info:   info,
		ctx:    rctx,
		cancel: cancel,
		state:  Received,
		stage:  Received,
		done:   make(chan struct{}),
	}
	r.entered[Received] = info.Received
	trace.SpanFromContext(rctx).AddEvent(Received.String(), trace.WithTimestamp(info.Received))

	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.inflight[info.ID]; dup {
		r.cancel(nil)
		return nil, fmt.Errorf("%w: %s", ErrExists, info.ID)
	}
	t.inflight[info.ID] = r
	t.byID[info.ID] = r
	return r, nil
}

// Get returns the snapshot of an in-flight or recently finished request.
func (t *Table) Get(id string) (Snapshot, bool) {
	t.mu.Lock()
	r, ok := t.byID[id]
	t.mu.Unlock()
	if !ok {
		return Snapshot{}, false
	}
	return r.Snapshot(), true
}

// Find returns the in-flight request id.
func (t *Table) Find(id string) (*Request, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.inflight[id]
	return r, ok
}

// List returns every in-flight request and the history, newest first.
func (t *Table) List() []Snapshot {
	t.mu.Lock()
	rs := make([]*Request, 0, len(t.byID))
	for _, r := range t.byID {
		rs = append(rs, r)
	}
	t.mu.Unlock()
	out := make([]Snapshot, len(rs))
	for i, r := range rs {
		out[i] = r.Snapshot()
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Received.Equal(out[j].Received) {
			return out[i].Received.After(out[j].Received)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// InFlight returns how many requests have not finished.
func (t *Table) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.inflight)
}

// Abort stops the in-flight request id with cause: ErrFinished if it has
// already ended, ErrNotFound if it is unknown.
func (t *Table) Abort(id, cause string) error {
	t.mu.Lock()
	r, inflight := t.inflight[id]
	_, known := t.byID[id]
	t.mu.Unlock()
	switch {
	case inflight:
		r.Abort(cause)
		return nil
	case known:
		return ErrFinished
	}
	return ErrNotFound
}

// AbortWorker aborts, with cause, every in-flight request that involves
// the worker, and returns how many it aborted.
func (t *Table) AbortWorker(workerID, cause string) int {
	n := 0
	for _, r := range t.snapshotInflight() {
		if r.involves(workerID) {
			r.Abort(cause)
			n++
		}
	}
	return n
}

// AbortAll aborts every in-flight request with cause and returns how many.
func (t *Table) AbortAll(cause string) int {
	rs := t.snapshotInflight()
	for _, r := range rs {
		r.Abort(cause)
	}
	return len(rs)
}

// Wait blocks until every in-flight request has finished and every abort
// fan-out has ended, or ctx is done.
func (t *Table) Wait(ctx context.Context) error {
	for _, r := range t.snapshotInflight() {
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fan := make(chan struct{})
	go func() { t.fanout.Wait(); close(fan) }()
	select {
	case <-fan:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Table) snapshotInflight() []*Request {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := make([]*Request, 0, len(t.inflight))
	for _, r := range t.inflight {
		rs = append(rs, r)
	}
	return rs
}

// retire moves a finished request from the in-flight set to the history.
// It runs under no request lock.
func (t *Table) retire(r *Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inflight, r.info.ID)
	if len(t.history) < t.cfg.History {
		t.history = append(t.history, r)
		return
	}
	old := t.history[t.next]
	if cur, ok := t.byID[old.info.ID]; ok && cur == old {
		delete(t.byID, old.info.ID)
	}
	t.history[t.next] = r
	t.next = (t.next + 1) % t.cfg.History
}
