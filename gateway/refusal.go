package gateway

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reasons a worker's registration is refused: the reason label of
// warden_worker_registrations_refused_total.
const (
	refusedUnknownModel      = "unknown_model"
	refusedTokenizerMismatch = "tokenizer_mismatch"
	refusedAssetsUnavailable = "assets_unavailable"
	refusedAssetsInvalid     = "assets_invalid"
)

// refusal is a registration the gateway refuses: the gRPC status the
// worker gets and the reason it is counted under.
type refusal struct {
	reason string
	st     *status.Status
}

// refuse returns a refusal with the given reason, code and message.
func refuse(reason string, code codes.Code, format string, a ...any) *refusal {
	return &refusal{reason: reason, st: status.New(code, fmt.Sprintf(format, a...))}
}

// Error returns the status message.
func (r *refusal) Error() string { return r.st.Message() }

// GRPCStatus makes the refusal the status the registering worker gets.
func (r *refusal) GRPCStatus() *status.Status { return r.st }
