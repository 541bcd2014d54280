package adapters

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
)

// LoadStream serves a LoadAdapter call: it assembles the stream (recv is
// its Recv), loads the adapter and answers its size, or a gRPC status
// error (Status; a stream that fails to arrive keeps its own status).
func (m *Memory) LoadStream(ctx context.Context, log *slog.Logger, recv func() (*controlpb.AdapterPart, error)) (*controlpb.LoadAdapterResponse, error) {
	if m.capacity == 0 {
		return nil, Status(ErrDisabled).Err()
	}
	u, err := Assemble(recv, m.capacity)
	if err != nil {
		return nil, statusErr(err)
	}
	n, err := m.Load(ctx, u.Ref, u.ConfigJSON, u.Weights, u.Pin)
	if err != nil {
		return nil, statusErr(err)
	}
	log.InfoContext(ctx, "LoRA adapter loaded", "adapter", u.Ref.GetName(), "adapter_hash", u.Ref.GetHash(), "bytes", n, "pinned", u.Pin)
	return &controlpb.LoadAdapterResponse{Bytes: n}, nil
}

// statusErr is err as a gRPC status error: Status's mapping, else the
// status err carries (a failed Recv, a context's end).
func statusErr(err error) error {
	if st := Status(err); st != nil {
		return st.Err()
	}
	if ctxErr := status.FromContextError(err); ctxErr.Code() != codes.Unknown {
		return ctxErr.Err()
	}
	return status.Convert(err).Err()
}

// ForRequest returns the handle a request under ref (its AdapterRef; nil
// for the base model) holds while it runs; ownerAdapter is the adapter
// hash of the request's KV owner, which ref must name. The handle is nil
// for the base model (Handle.Release and Handle.Adapter accept it). The
// error is a gRPC status error: INVALID_ARGUMENT for a ref that is not
// the owner's, FAILED_PRECONDITION "adapter not loaded: <hash>" when the
// memory does not hold it, FAILED_PRECONDITION when the worker serves no
// adapters.
func (m *Memory) ForRequest(ref *controlpb.AdapterRef, ownerAdapter string) (*Handle, error) {
	if err := CheckRef(ref, ownerAdapter); err != nil {
		return nil, err
	}
	if ref.GetHash() == "" {
		return nil, nil
	}
	h, err := m.Acquire(ref.GetHash())
	if err != nil {
		return nil, Status(err).Err()
	}
	return h, nil
}

// CheckRef checks that a request's AdapterRef names the adapter of its KV
// owner (both absent for the base model); INVALID_ARGUMENT otherwise.
func CheckRef(ref *controlpb.AdapterRef, ownerAdapter string) error {
	if ref.GetHash() != ownerAdapter {
		return status.Errorf(codes.InvalidArgument, "the request's adapter %q is not its owner's adapter %q", ref.GetHash(), ownerAdapter)
	}
	return nil
}
