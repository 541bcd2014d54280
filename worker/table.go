package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/brokenmode"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/adapters"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// reqKey names a request on this worker. The pool holds at most one set of
// pages per key, whatever the epoch, and so does the request table.
type reqKey struct{ tenant, request string }

// Stages a request goes through on this worker, as Status lists them.
const (
	stageReserved     = "reserved"     // decode: pages reserved, transfer awaited
	stageWaiting      = "waiting_kv"   // decode: Generate waits for the transfer
	stagePrefilling   = "prefilling"   // the engine computes the prompt
	stageTransferring = "transferring" // prefill: pages are being pushed
	stageDecoding     = "decoding"     // the engine generates
)

// entry is one request's state on this worker. Fields after mu's comment
// are guarded by Worker.mu; the others are fixed at creation.
//
// Exactly one party tears an entry down (claimLocked then releaseEntry):
// the handler (Generate or Prefill) that owns it, or, when none does,
// whoever ends it (Abort, the reservation timeout, a failed transfer, the
// shutdown). Others wait for gone.
type entry struct {
	// ctx carries the request's identity and trace (no cancellation), for
	// logs and spans about it after its call returned.
	ctx   context.Context
	key   reqKey
	epoch uint64 // the gateway's epoch of this attempt
	// owner tags the pages (the gateway's owner); teardown fences a copy.
	owner kvpool.Owner
	pages []kvpool.PageID
	// tokens is what the pages were reserved for.
	tokens int
	// weight is the owner's fair-scheduling weight the gateway sent with
	// Generate (engine.Request.Weight); set with handler.
	weight int
	// ticket is the transfer ticket Reserve issued (decode, both).
	ticket *kvtransfer.Ticket
	// choices (decode, both): the n the reservation was made for
	// (engine.ChoicePages for n > 1).
	choices int
	// prefix (decode, both): the reservation shares ticket.HeldPages
	// sealed prefix pages of this cache domain; the decode sequence
	// presents their tags and seals the transferred full prompt pages.
	prefix *engine.Prefix
	// hit (prefill): how many leading pages the reservation shares from
	// this worker's prefix cache.
	hit int
	// adapter keeps the LoRA adapter the request runs under loaded until
	// the entry is released (nil: the base model).
	adapter *adapters.Handle
	// transferred is closed when the ticket's transfer completed or failed.
	transferred chan struct{}
	// gone is closed when teardown finished: the pages are released, or
	// fenced and handed to the receiver's deferred release.
	gone chan struct{}

	// Guarded by Worker.mu.
	stage string
	// live: the receiver may still admit the ticket's transfer (Lookup).
	live        bool
	completed   bool // the transfer verified
	completion  kvtransfer.Completion
	transferErr error
	// handler: a Generate or Prefill handler owns the entry; cancel stops it.
	handler bool
	cancel  context.CancelCauseFunc
	torn    bool
	// The lease of a reservation (decode, both; see the package
	// documentation's reservation states): timer runs expire at deadline;
	// lease is the last one granted (reserveTimeoutFor, then each
	// renewal's worker.transfer.reserve_timeout).
	timer    *time.Timer
	deadline time.Time
	lease    time.Duration
	// drain (prefill): the request's transfer stream stopped early and
	// drained (noteDrain); the Abort answer reports it.
	drain kvtransfer.Drain
}

// newEntry records owner's pages; ctx is the call's, with the request's
// identity (requestContext).
func newEntry(ctx context.Context, owner kvpool.Owner, pages []kvpool.PageID, tokens int, stage string) *entry {
	return &entry{
		ctx:   context.WithoutCancel(ctx),
		key:   reqKey{owner.Tenant, owner.Request},
		epoch: owner.Epoch, owner: owner, pages: pages, tokens: tokens,
		gone: make(chan struct{}), stage: stage,
	}
}

// admitLocked checks that a new attempt for owner may start: the worker is
// not closing or draining (controlpb.ErrDraining, before anything is
// touched for the call), the attempt was not aborted already, and the request holds
// nothing here. Called with w.mu held.
func (w *Worker) admitLocked(owner kvpool.Owner) error {
	// Closing comes after the drain (or instead of it): a call that raced
	// with either is refused before anything is touched for it, so it gets
	// the draining refusal the gateway places elsewhere, not a failure.
	if w.closing || w.drainingLocked() {
		return controlpb.ErrDraining("it is shutting down; place the request on another worker")
	}
	key := reqKey{owner.Tenant, owner.Request}
	if err := w.tombs.check(key, owner.Epoch); err != nil {
		return err
	}
	if e := w.reqs[key]; e != nil {
		return status.Errorf(codes.AlreadyExists, "request %s/%s already holds pages here (epoch %d, %s)",
			owner.Tenant, owner.Request, e.epoch, e.stage)
	}
	return nil
}

// claimLocked takes e out of the table so that its caller alone tears it
// down, and reports whether the caller won (false: someone else already
// did). With tomb set, later calls for this attempt get tomb. Called with
// w.mu held.
func (w *Worker) claimLocked(e *entry, tomb error) bool {
	if e.torn {
		return false
	}
	e.torn, e.live = true, false
	delete(w.reqs, e.key)
	if e.ticket != nil {
		delete(w.byTransfer, e.ticket.TransferID)
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	if tomb != nil {
		w.tombs.add(e.key, e.epoch, tomb, time.Now())
		w.tombs.setDrain(e.key, e.epoch, e.drain)
	}
	return true
}

// finish tears down an entry its handler owns: normal (pages released at
// once) or, with tomb set, after an abort or a failure (fenced first).
func (w *Worker) finish(e *entry, tomb error) {
	w.mu.Lock()
	won := w.claimLocked(e, tomb)
	completed := e.completed
	w.mu.Unlock()
	if won {
		w.releaseEntry(e, completed, tomb != nil)
	}
}

// releaseEntry frees a claimed entry's pages and closes gone. With fence,
// the pages are first retagged with a new epoch (BumpEpoch), so anything
// still acting for the old one — a late transfer frame, a stale reader — is
// refused. If a transfer into them may still be running it hands the
// release to the receiver, which waits out a tcp copy in flight or, for
// shm, the sender's drain (I5). It must not be called with w.mu held.
func (w *Worker) releaseEntry(e *entry, transferCompleted, fence bool) {
	defer close(e.gone)
	e.adapter.Release()
	pool := w.rt.Pool
	owner := e.owner
	if fence {
		o, err := pool.BumpEpoch(owner)
		if err != nil {
			w.log.ErrorContext(e.ctx, "fencing pages", "epoch", owner.Epoch, "err", err)
		} else {
			owner = o
		}
	}
	if e.ticket != nil && !transferCompleted {
		if brokenmode.On(brokenmode.ReleaseWithoutDrain) {
			w.releaseWithoutDrain(e, owner)
			return
		}
		w.receiver.Abort(e.ticket.TransferID,
			func() { w.freePages(e.ctx, owner) },
			func() { w.quarantine(e, owner) })
		return
	}
	if _, err := pool.Release(owner); err != nil {
		w.log.ErrorContext(e.ctx, "freeing pages", "epoch", e.epoch, "fenced_epoch", owner.Epoch, "err", err)
	}
}

// quarantine parks the pages of an aborted shm transfer whose writer did
// not acknowledge its drain within the drain timeout (I5): they are not
// reused until the ack arrives or the worker restarts.
func (w *Worker) quarantine(e *entry, owner kvpool.Owner) {
	n, err := w.rt.Pool.Quarantine(owner)
	if err != nil {
		w.log.ErrorContext(e.ctx, "quarantining pages", "epoch", e.epoch, "fenced_epoch", owner.Epoch, "err", err)
		return
	}
	const maxListed = 16
	w.log.ErrorContext(e.ctx, "kv pages quarantined (I5): the transfer's writer did not acknowledge its drain in time",
		"epoch", e.epoch, "fenced_epoch", owner.Epoch, "transfer", e.ticket.TransferID.String(), "drain_timeout", w.cfg.Worker.Transfer.DrainTimeout,
		"pages", n, "page_ids", e.pages[:min(len(e.pages), maxListed)])
}

// freePages releases owner's pages whether or not they were quarantined
// meanwhile (a drain ack after the deferred-release timeout).
func (w *Worker) freePages(ctx context.Context, owner kvpool.Owner) {
	pool := w.rt.Pool
	_, err := pool.Release(owner)
	if errors.Is(err, kvpool.ErrState) {
		if _, err = pool.ReleaseQuarantined(owner); err == nil {
			w.log.InfoContext(ctx, "quarantined kv pages released: the writer's drain arrived late, or it can write no more", "fenced_epoch", owner.Epoch)
		}
	}
	if err != nil {
		w.log.ErrorContext(ctx, "freeing pages", "fenced_epoch", owner.Epoch, "err", err)
	}
}

// abortEntry ends e on behalf of someone other than its handler (Abort,
// shutdown) with status st, and returns gone.
func (w *Worker) abortEntry(e *entry, st error) <-chan struct{} {
	w.mu.Lock()
	then := w.abortLocked(e, st)
	w.mu.Unlock()
	then()
	return e.gone
}

// abortLocked starts ending e with status st: a running handler is
// cancelled and tears down itself; otherwise the returned function, to be
// called once w.mu is released, does. Called with w.mu held.
func (w *Worker) abortLocked(e *entry, st error) (then func()) {
	if e.handler {
		w.tombs.add(e.key, e.epoch, st, time.Now())
		cancel := e.cancel
		return func() { cancel(abortError{st}) }
	}
	if !w.claimLocked(e, st) {
		return func() {}
	}
	completed := e.completed
	return func() { w.releaseEntry(e, completed, true) }
}

// expire abandons a reservation whose lease ran out: its transfer did not
// complete, or no Generate claimed it, and nobody renewed it (its gateway
// is gone or cannot reach this worker). A renewal that raced with the
// timer moved the deadline, and the timer runs again then.
func (w *Worker) expire(e *entry) {
	w.mu.Lock()
	if e.torn || (e.handler && e.completed) || time.Now().Before(e.deadline) {
		w.mu.Unlock()
		return
	}
	st := status.Errorf(codes.Aborted, "reservation abandoned: not renewed for %s with its KV transfer not completed and claimed", e.lease)
	then := w.abortLocked(e, st)
	w.mu.Unlock()
	w.metrics.leases.WithLabelValues(leaseExpired).Inc()
	w.log.WarnContext(e.ctx, "abandoning reservation: its lease expired unrenewed", "epoch", e.epoch, "lease", e.lease)
	then()
}

// renewReservation handles RenewReservation (decode, both): the gateway
// still wants owner's reservation, so its deadline moves to
// worker.transfer.reserve_timeout from now (never earlier than it was).
// An attempt that ended here answers with the status it ended with
// (Aborted for an abandoned reservation); one that holds no reservation,
// or another ticket, NotFound.
func (w *Worker) renewReservation(_ context.Context, req *controlpb.RenewReservationRequest) (*controlpb.RenewReservationResponse, error) {
	if w.role == config.RolePrefill {
		return nil, status.Error(codes.FailedPrecondition, "RenewReservation: this is a prefill worker")
	}
	owner, err := ownerFrom(req.GetOwner())
	if err != nil {
		return nil, err
	}
	key := reqKey{owner.Tenant, owner.Request}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.tombs.check(key, owner.Epoch); err != nil {
		return nil, err
	}
	e := w.reqs[key]
	if e == nil || e.ticket == nil || e.epoch != owner.Epoch || e.ticket.TransferID.String() != req.GetTransferId() {
		return nil, status.Errorf(codes.NotFound, "no reservation for request %s/%s at epoch %d with transfer %s",
			owner.Tenant, owner.Request, owner.Epoch, req.GetTransferId())
	}
	now := time.Now()
	if d := now.Add(w.reserveTimeout); d.After(e.deadline) {
		e.deadline, e.lease = d, w.reserveTimeout
		e.timer.Reset(w.reserveTimeout)
	}
	w.metrics.leases.WithLabelValues(leaseRenewed).Inc()
	return &controlpb.RenewReservationResponse{LeaseMs: e.deadline.Sub(now).Milliseconds()}, nil
}

// tombstones remember attempts that were aborted or failed here, so that a
// call for the same attempt arriving late (a Prefill racing its Abort, a
// Generate after its transfer failed) is refused with the status the
// attempt ended with instead of starting afresh. On prefill a tombstone
// also keeps the attempt's transfer drain, so that the gateway's Abort,
// which may arrive after the handler ended (decode failed the transfer
// first), still reports it. A tombstone covers every
// epoch up to the one recorded (a retry with a newer epoch may start); it
// lasts ttl (at least tombstoneMinTTL) and at most tombstoneCap are kept.
type tombstones struct {
	ttl   time.Duration
	m     map[reqKey]tombstone
	order []tombRef // insertion order from head on, for expiry
	head  int
}

const (
	tombstoneMinTTL = time.Minute
	tombstoneCap    = 1 << 16
)

type tombstone struct {
	epoch uint64
	st    error
	at    time.Time
	drain kvtransfer.Drain // zero: none recorded
}

type tombRef struct {
	key reqKey
	at  time.Time
}

func newTombstones(ttl time.Duration) tombstones {
	return tombstones{ttl: max(ttl, tombstoneMinTTL), m: make(map[reqKey]tombstone)}
}

func (t *tombstones) add(key reqKey, epoch uint64, st error, now time.Time) {
	t.expire(now)
	old, ok := t.m[key]
	if ok && old.epoch > epoch {
		return
	}
	ts := tombstone{epoch: epoch, st: st, at: now}
	if ok && old.epoch == epoch {
		ts.drain = old.drain // the attempt's drain outlives a later Abort
	}
	t.m[key] = ts
	t.order = append(t.order, tombRef{key, now})
}

// setDrain records d (if set) on the tombstone of key's attempt at epoch.
func (t *tombstones) setDrain(key reqKey, epoch uint64, d kvtransfer.Drain) {
	if ts, ok := t.m[key]; ok && ts.epoch == epoch && !d.IsZero() {
		ts.drain = d
		t.m[key] = ts
	}
}

// drain returns the transfer drain recorded for key's attempt at epoch;
// the zero Drain when none was.
func (t *tombstones) drain(key reqKey, epoch uint64) kvtransfer.Drain {
	if ts, ok := t.m[key]; ok && ts.epoch == epoch {
		return ts.drain
	}
	return kvtransfer.Drain{}
}

// check returns the status an attempt at epoch ended with, or nil.
func (t *tombstones) check(key reqKey, epoch uint64) error {
	ts, ok := t.m[key]
	if !ok || epoch > ts.epoch || time.Since(ts.at) > t.ttl {
		return nil
	}
	return ts.st
}

// expire forgets tombstones older than ttl, and the oldest beyond the cap.
func (t *tombstones) expire(now time.Time) {
	for t.head < len(t.order) {
		ref := t.order[t.head]
		if now.Sub(ref.at) <= t.ttl && len(t.order)-t.head < tombstoneCap {
			break
		}
		if ts, ok := t.m[ref.key]; ok && ts.at == ref.at {
			delete(t.m, ref.key)
		}
		t.order[t.head] = tombRef{}
		t.head++
	}
	if t.head > len(t.order)/2 {
		n := copy(t.order, t.order[t.head:])
		t.order, t.head = t.order[:n], 0
	}
}

// listLocked describes the table for Status. Called with w.mu held.
func (w *Worker) listLocked() []string {
	out := make([]string, 0, len(w.reqs))
	for _, e := range w.reqs {
		out = append(out, fmt.Sprintf("%s/%s@%d %s", e.key.tenant, e.key.request, e.epoch, e.stage))
	}
	return out
}
