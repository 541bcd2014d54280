package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/controlpb"
)

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
	// causeConstraintRefused: a worker refused the request's constraint
	// (over its limits): a 400, the client's to change.
	causeConstraintRefused = "constraint_refused"
	// causeAdapterNoRoom: no worker had room in its adapter memory for
	// the request's LoRA adapter.
	causeAdapterNoRoom = "adapter_no_room"
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
			Message: "The request was aborted by an operator.", Headers: http.Header{"Retry-After": {"1"}}}
	}
	return &api.Error{Status: 499, Type: api.TypeInvalidRequest, Code: "request_aborted",
		Message: "The request was aborted by the client."}
}

// workerError maps a worker's error on call to the request's failure
// (workerFailure). A refused or reset connection also marks the worker
// suspect at once.
func (d *driver) workerError(call string, w *registry.Worker, err error) error {
	if d.req.AbortCause() != "" {
		return err // aborted: serve reports the abort
	}
	if registry.ConnectionLost(err) {
		// Refused or reset: out of routing now, not at the heartbeat
		// deadline.
		d.g.reg.Suspect(w.ID(), err)
	}
	cause, client := workerFailure(err, d.constraintParam)
	return failed(cause, client, fmt.Errorf("%s on worker %s: %w", call, w.ID(), err))
}

// workerFailure maps a worker's gRPC error to one cause and one client
// error (the table in docs/api.md). Integrity failures (transfer
// verification, owner violations) get a generic 500; finish logs and
// counts them. Everything that retrying may fix elsewhere is a 503 with
// retry-after. A refusal of the request's constraint (from the field
// constraintParam) is the client's 400. The client error never names the
// worker.
func workerFailure(err error, constraintParam string) (cause string, client *api.Error) {
	st, _ := status.FromError(err)
	if errors.Is(err, adapters.ErrNoRoom) {
		return causeAdapterNoRoom, workerUnavailable("No worker serving the model has room for the request's adapter now; retry the request.")
	}
	if reason, ok := controlpb.ConstraintRefusal(err); ok {
		// Admission checks the constraint against the limits of the
		// model's workers, so this takes a worker with smaller limits
		// that registered since.
		return causeConstraintRefused, api.InvalidRequest(constraintParam, api.CodeInvalidValue, fmt.Sprintf(
			"Invalid '%s': the constraint cannot be enforced by the workers serving this model (%s).", constraintParam, reason))
	}
	switch {
	case st.Code() == codes.DataLoss:
		return causeDataLoss, api.Internal()
	case st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "kv owner violation"):
		return causeOwnerViolation, api.Internal()
	case st.Code() == codes.Unavailable, st.Code() == codes.Aborted, st.Code() == codes.DeadlineExceeded,
		st.Code() == codes.Canceled, st.Code() == codes.ResourceExhausted, st.Code() == codes.OutOfRange:
		// Gone, shutting down, a transfer cut short by its writer's
		// crash, or aborted on its side (an abandoned reservation);
		// capacity that changed under admission.
		return causeWorkerGone, workerUnavailable("The worker serving this request failed or went away; retry the request.")
	}
	return causeWorkerError, api.Internal()
}
