package adapters

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/tenant"
)

// ErrNoRoom: a worker refused to load an adapter for lack of adapter
// memory (its pinned adapters and those in use fill it).
var ErrNoRoom = errors.New("adapters: no room for the adapter on the worker")

// ChunkBytes is the most weights bytes one AdapterPart carries.
const ChunkBytes = 1 << 20

// Ref is the AdapterRef of a, nil for none (the base model).
func Ref(a *tenant.Adapter) *controlpb.AdapterRef {
	if a == nil {
		return nil
	}
	return &controlpb.AdapterRef{Name: a.Name, Hash: a.Hash}
}

// Push loads a into a worker's adapter memory with LoadAdapter: the first
// part carries the ref, adapter_config.json, the weights' size and the
// pin; the weights follow in parts of ChunkBytes. It returns the size the
// worker reports. A refusal for lack of room wraps ErrNoRoom.
func (r *Registry) Push(ctx context.Context, client controlpb.WorkerClient, a tenant.Adapter) (int64, error) {
	cfg, weights, err := r.store.AdapterFiles(ctx, a.Hash)
	if err != nil {
		return 0, fmt.Errorf("adapters: files of %s: %w", a.Name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if a send fails
	stream, err := client.LoadAdapter(ctx)
	if err != nil {
		return 0, fmt.Errorf("adapters: load %s: %w", a.Name, err)
	}
	first := &controlpb.AdapterPart{Ref: Ref(&a), ConfigJson: cfg, WeightsSize: int64(len(weights)), Pin: a.Pinned}
	parts := slices.Collect(slices.Chunk(weights, ChunkBytes))
	if len(parts) > 0 {
		first.Weights, parts = parts[0], parts[1:]
	}
	err = stream.Send(first)
	for _, p := range parts {
		if err != nil {
			break
		}
		err = stream.Send(&controlpb.AdapterPart{Weights: p})
	}
	// A failed Send's cause is the stream's status, which CloseAndRecv
	// returns.
	resp, cerr := stream.CloseAndRecv()
	if cerr != nil {
		if status.Code(cerr) == codes.ResourceExhausted {
			// %v: the refusal must not read as the call's own RESOURCE_EXHAUSTED
			return 0, fmt.Errorf("%w: load %s: %v", ErrNoRoom, a.Name, cerr)
		}
		return 0, fmt.Errorf("adapters: load %s: %w", a.Name, cerr)
	}
	return resp.GetBytes(), nil
}

// Retry runs call, and when the worker of client refuses it because it
// does not hold a's adapter, pushes the adapter, reports the loaded size
// to loaded and runs call once more. With a nil (the base model) it only
// runs call.
func (r *Registry) Retry(ctx context.Context, client controlpb.WorkerClient, a *tenant.Adapter, call func() error, loaded func(bytes int64)) error {
	err := call()
	if a == nil {
		return err
	}
	if h, ok := controlpb.IsAdapterNotLoaded(err); !ok || h != a.Hash {
		return err
	}
	n, err := r.Push(ctx, client, *a)
	if err != nil {
		return err
	}
	loaded(n)
	return call()
}
