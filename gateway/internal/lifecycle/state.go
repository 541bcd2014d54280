// Package lifecycle is the gateway's request state machine (invariant I6):
// every request the gateway accepts gets one Request in a Table, moves
// forward through
//
//	received → admitted → reserved → prefilling → transferring → decoding
//
// and ends in exactly one terminal state: completed, rejected, aborted or
// failed. The Table is the gateway's in-flight list (plus a bounded history
// of finished requests) and the place where aborts fan out.
//
// # Ownership
//
// One goroutine drives each request (the gateway's orchestration): it alone
// calls Advance and Finish. Everyone else (the HTTP layer on a client
// disconnect, the registry on a worker loss, the admin API, the deadline)
// calls Abort, which only cancels the request's context with a cause; the
// driver notices, stops what it is doing and calls Finish. That keeps one
// writer per request while letting any party stop it at once.
//
// # Abort fan-out
//
// Before the driver sends a worker anything that may make it hold state
// for the request (Reserve, Prefill, Generate), it records the worker with
// Involve. When the request finishes in any state but a plain completed
// (completed after a stop string included), the Table sends Abort to every
// involved worker, prefill and decode alike, with the cause, retrying until
// AbortTimeout. Abort is idempotent on workers, so telling a worker that
// holds nothing is harmless; forgetting one would leave pages reserved.
//
// # Drain relay
//
// A prefill worker answers Abort once its transfer stream to decode can
// write no further byte, and names that transfer and epoch (a Drain). The
// stream's own DRAIN_ACK tells decode the same, unless it is lost with the
// transfer connection (decode ended the session on a bad frame, the
// connection died); decode would then keep the pages held and, after its
// drain timeout, quarantined until it restarts (I5). So when an Abort
// returns a Drain, the fan-out relays it to every other involved worker
// that receives KV (a DrainReceiver: decode), asynchronously, retried
// until AbortTimeout, best effort. The relay comes only from the writer's
// own answer, after it drained: a relay sent before would let decode reuse
// pages a one-sided write may still land in (the protocol model checks
// both, kvtransfer/internal/protomodel).
//
// # Tracing
//
// When the context a request is started with carries a span (the
// gateway's request span), every transition is recorded on it as an event
// named after the new state, at the time the state was entered: received,
// admitted, reserved, prefilling, transferring, decoding, and the terminal
// one, whose event carries the cause (obs.AttrCause) and the stage it
// ended in (obs.AttrStage). The fan-out's Abort calls carry the span's
// context, so they join the request's trace.
//
// # Illegal transitions
//
// Transitions go forward along the edges in the table below, with one
// exception: prefilling → admitted, for a both worker that refused the
// request's Generate for lack of free KV pages (it reserves nothing then,
// all or nothing), so the request waits for capacity again. A terminal
// state is final. An illegal Advance is a bug in the driver: it is
// logged at ERROR, the request is finished as failed (cause "internal") and
// ErrIllegalTransition is returned. A second Finish returns ErrFinished and
// changes nothing.
package lifecycle

import "fmt"

// State is the position of a request in its lifecycle.
type State uint8

// The states, in lifecycle order.
const (
	// Received: the gateway has the request; nothing is checked yet.
	Received State = iota + 1
	// Admitted: the request fits the model's effective context and the
	// tenant's limits; no worker has been contacted.
	Admitted
	// Reserved: a decode (or both) worker holds KV pages for it.
	Reserved
	// Prefilling: a worker is computing the prompt's KV.
	Prefilling
	// Transferring: prefill pushed the KV; decode is verifying it.
	Transferring
	// Decoding: the prompt is in decode's cache; tokens are being generated.
	Decoding
	// Completed: the request ended normally (EOS, a stop string or length).
	Completed
	// Rejected: refused before any work was done (context length, rate
	// limits, no capacity within the queue wait, model unavailable).
	Rejected
	// Aborted: stopped on purpose (client disconnect, deadline, worker
	// lost, admin, quota, shutdown).
	Aborted
	// Failed: stopped by an error (worker error, transfer verification,
	// internal error).
	Failed
)

var stateNames = [...]string{
	Received:     "received",
	Admitted:     "admitted",
	Reserved:     "reserved",
	Prefilling:   "prefilling",
	Transferring: "transferring",
	Decoding:     "decoding",
	Completed:    "completed",
	Rejected:     "rejected",
	Aborted:      "aborted",
	Failed:       "failed",
}

// String returns the state's lower-case name, as shown by the admin API.
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Terminal reports whether s is one of the four end states.
func (s State) Terminal() bool {
	return s >= Completed && s <= Failed
}

// edges lists the legal transitions. Every non-terminal state may go to
// aborted and failed; only received and admitted may be rejected (nothing
// has been done yet); only decoding completes; prefilling may go back to
// admitted (see the package doc).
var edges = map[State][]State{
	Received:     {Admitted, Rejected, Aborted, Failed},
	Admitted:     {Reserved, Prefilling, Rejected, Aborted, Failed},
	Reserved:     {Prefilling, Aborted, Failed},
	Prefilling:   {Transferring, Decoding, Admitted, Aborted, Failed},
	Transferring: {Decoding, Aborted, Failed},
	Decoding:     {Completed, Aborted, Failed},
}

// CanTransition reports whether from → to is a legal transition.
func CanTransition(from, to State) bool {
	for _, s := range edges[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Abort and finish causes. Workers receive them in AbortRequest.cause.
const (
	CauseClientDisconnect = "client_disconnect"
	CauseDeadline         = "deadline"
	CauseWorkerLost       = "worker_lost"
	CauseAdmin            = "admin"
	CauseQuota            = "quota"
	CauseShutdown         = "shutdown"
	// CauseStop: the gateway matched a stop string and ends generation
	// early; the request itself completes.
	CauseStop = "stop"
	// CauseError: a worker or transfer error failed the request.
	CauseError = "error"
	// CauseInternal: a gateway bug (an illegal transition, for instance).
	CauseInternal = "internal"
)
