package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/kvtransfer"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// The gateway maps these gRPC codes to request outcomes; they are part of
// the control-plane contract (see the package documentation).

// neverFits is the OutOfRange answer for a request larger than the pool.
func neverFits(tokens, capacity int64) error {
	return status.Errorf(codes.OutOfRange, "can never fit: %d tokens > pool capacity %d", tokens, capacity)
}

// poolStatus maps a kvpool error of Reserve.
func poolStatus(err error, tokens, capacity int64) error {
	switch {
	case errors.Is(err, kvpool.ErrNeverFits):
		return neverFits(tokens, capacity)
	case errors.Is(err, kvpool.ErrNoSpace):
		return status.Errorf(codes.ResourceExhausted, "KV pool full: %v", err)
	case errors.Is(err, kvpool.ErrOwnerExists):
		return status.Errorf(codes.AlreadyExists, "%v", err)
	case errors.Is(err, kvpool.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return status.Errorf(codes.Internal, "KV pool: %v", err)
}

// engineStatus maps the error a sequence finished with.
func engineStatus(err error) error {
	switch {
	case errors.Is(err, kvpool.ErrOwnerViolation):
		return status.Errorf(codes.Internal, "kv owner violation: %v", err)
	case errors.Is(err, engine.ErrBadRequest):
		return status.Errorf(codes.InvalidArgument, "%v", err)
	case errors.Is(err, engine.ErrAborted):
		return status.Errorf(codes.Aborted, "%v", err)
	case errors.Is(err, engine.ErrStopped):
		return status.Errorf(codes.Unavailable, "worker is shutting down: %v", err)
	}
	return status.Errorf(codes.Internal, "engine: %v", err)
}

// receiveStatus maps a KV transfer error on the receiving (decode) side:
// a transfer whose connection ended before COMPLETE (the writer crashed
// or went away) is Unavailable, the same answer as the writer's own loss,
// so that one cause gives the client one status (a 503 to retry, not a
// 500); anything else as transferStatus.
func receiveStatus(err error) error {
	if errors.Is(err, kvtransfer.ErrIncomplete) && connectionLost(err) {
		return status.Errorf(codes.Unavailable, "kv transfer: the writer went away: %v", err)
	}
	return transferStatus(err)
}

// transferStatus maps a KV transfer error: a transfer that failed
// verification is DataLoss, with kvtransfer's text.
func transferStatus(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, kvtransfer.ErrAborted):
		code = codes.Aborted
	case errors.Is(err, kvtransfer.ErrChecksum), errors.Is(err, kvtransfer.ErrIncomplete),
		errors.Is(err, kvtransfer.ErrTokenCount), errors.Is(err, kvtransfer.ErrStaleEpoch),
		errors.Is(err, kvtransfer.ErrDuplicate), errors.Is(err, kvtransfer.ErrOwnerMismatch),
		errors.Is(err, kvtransfer.ErrProtocol):
		code = codes.DataLoss
	case errors.Is(err, kvtransfer.ErrInvalidTicket), errors.Is(err, kvtransfer.ErrSegment):
		code = codes.InvalidArgument
	case errors.Is(err, kvtransfer.ErrUnauthenticated), errors.Is(err, kvtransfer.ErrBusy):
		// Decode no longer (or never) accepts this ticket: it expired, was
		// aborted, or is being served by another connection.
		code = codes.FailedPrecondition
	default:
		// Dial or TLS failure: decode is unreachable.
		code = codes.Unavailable
	}
	return status.Errorf(code, "kv transfer: %v", err)
}

// connectionLost reports whether err ends in the loss of a connection
// (the peer closed or reset it), not in a bad frame.
func connectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// abortError is the cancellation cause of a handler stopped on purpose:
// an Abort RPC, an abandoned reservation or the worker shutting down. It
// is the status the handler returns.
type abortError struct{ st error }

func (a abortError) Error() string { return a.st.Error() }

// stoppedStatus is the status of a handler whose context ended: the cause
// it was cancelled with, or Canceled when the gateway went away.
func stoppedStatus(ctx context.Context) error {
	var a abortError
	if errors.As(context.Cause(ctx), &a) {
		return a.st
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Aborted, "request aborted")
}

// invalid returns an InvalidArgument status.
func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}
