package registry

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
)

// Failover: a worker whose connection is refused or reset is not left in
// routing until its heartbeat deadline passes. The driver of the request
// that saw it calls Suspect, which marks the worker down at once (Change
// Suspected), as a missed heartbeat would; a live worker is then told
// to register again by its next heartbeat and serves again from that
// registration.

// NotSent reports whether err is a call that never reached the worker:
// its connection could not be established — refused or unreachable, or
// reset during the TLS handshake (a worker killed while accepting), which
// comes before any byte of a call — so the worker received nothing and
// holds nothing for the call. Such a call may be placed again on another
// worker.
func NotSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.Contains(msg, "Error while dialing") || strings.Contains(msg, "authentication handshake failed")
}

// Untouched reports whether the call that failed with err left nothing on
// the worker, so the request may be placed again elsewhere: it never
// reached it (NotSent), or a draining worker refused it before reserving
// a page or opening a transfer (controlpb.IsDraining).
func Untouched(err error) bool { return NotSent(err) || controlpb.IsDraining(err) }

// ConnectionLost reports whether err is the loss of the connection to the
// worker: refused, or reset or closed under a call (which may have reached
// the worker). It is never a status the worker sent itself.
func ConnectionLost(err error) bool {
	if NotSent(err) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.HasPrefix(msg, "error reading from server") || strings.HasPrefix(msg, "transport is closing") ||
		strings.HasPrefix(msg, "connection error")
}

// Suspect marks the worker down at once because its connection was
// refused or reset (err, for the log). It does nothing to a worker that is
// already down or unknown. The change feed hears Suspected.
func (r *Registry) Suspect(id string, err error) {
	r.mu.Lock()
	w := r.byID[id]
	if w == nil || !w.healthy {
		r.mu.Unlock()
		return
	}
	w.healthy, w.lostAt = false, r.cfg.Now()
	snap := w.snapshotLocked()
	r.mu.Unlock()
	r.cfg.Logger.Warn("worker suspect: its connection was refused or reset", "worker", snap.ID, "role", snap.Role,
		"model", snap.Model, "err", err)
	r.emit(Change{Kind: Suspected, Worker: snap})
}

// MarkDraining takes worker id out of placement because it refused a
// call as draining (controlpb.IsDraining) before its heartbeat saying so
// arrived; its requests in flight run on. The next registration or
// heartbeat sets the mark from what the worker reports.
func (r *Registry) MarkDraining(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.byID[id]; w != nil && !w.draining {
		w.draining = true
		r.cfg.Logger.Info("worker draining: it refused new work; no new placements", "worker", id)
	}
}

// PrefillFor returns the least-loaded healthy prefill worker that can push
// KV to decode, or nil: the replacement of a prefill worker that was
// found unreachable.
func (r *Registry) PrefillFor(decode *Worker) *Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.prefillFor(decode, nil)
}
