package controlpb

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// drainingMessage starts the message of the status a draining worker
// refuses new work with.
const drainingMessage = "worker is draining: "

// ErrDraining is the status a draining worker (one that received SIGTERM
// and told its gateways) answers a call that would start new work on it
// (Reserve, Prefill, Generate without a reservation), before it touched
// anything for the call: no page reserved, no transfer opened. The
// gateway may place such a request again elsewhere (IsDraining).
func ErrDraining(detail string) error {
	return status.Error(codes.Unavailable, drainingMessage+detail)
}

// IsDraining reports whether err is ErrDraining: the worker refused the
// call untouched because it is shutting down.
func IsDraining(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), drainingMessage)
}
