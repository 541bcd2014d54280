package controlpb

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// adapterNotLoadedPrefix starts the message of AdapterNotLoaded.
const adapterNotLoadedPrefix = "adapter not loaded: "

// AdapterNotLoaded is a worker's refusal of a call naming a LoRA adapter
// it does not hold (AdapterRef): FAILED_PRECONDITION with the message
// "adapter not loaded: <hash>". The gateway answers it with LoadAdapter
// and calls again.
func AdapterNotLoaded(hash string) *status.Status {
	return status.New(codes.FailedPrecondition, adapterNotLoadedPrefix+hash)
}

// IsAdapterNotLoaded reports whether err is an AdapterNotLoaded status,
// and for which hash.
func IsAdapterNotLoaded(err error) (hash string, ok bool) {
	st, isStatus := status.FromError(err)
	if err == nil || !isStatus || st.Code() != codes.FailedPrecondition {
		return "", false
	}
	return strings.CutPrefix(st.Message(), adapterNotLoadedPrefix)
}
