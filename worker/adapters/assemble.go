package adapters

import (
	"errors"
	"fmt"
	"io"

	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/lora"
)

// Errors of a LoadAdapter stream (INVALID_ARGUMENT).
var (
	// ErrStream: the stream's parts do not follow the protocol.
	ErrStream = errors.New("adapters: malformed LoadAdapter stream")
	// ErrTooLarge: the declared weights cannot fit the adapter memory.
	ErrTooLarge = errors.New("adapters: adapter larger than the adapter memory")
)

// headerAllowance is what a safetensors file may hold besides the tensor
// data. The data takes at most twice the bytes of the prepared form (f32
// values that are all bf16 are held in bf16), so weights over twice the
// capacity plus this allowance cannot fit.
const headerAllowance = 1 << 20

// maxWeights is the largest weights_size a memory of capacity bytes
// accepts.
func maxWeights(capacity int64) int64 { return 2*capacity + headerAllowance }

// Upload is an assembled LoadAdapter stream.
type Upload struct {
	Ref        *controlpb.AdapterRef
	ConfigJSON []byte
	Weights    []byte
	Pin        bool
}

// Assemble reads a LoadAdapter stream until io.EOF: the first part names
// the adapter (ref with a content hash), carries adapter_config.json (at
// most lora.MaxConfigBytes) and declares weights_size, at most what
// could fit capacity (the adapter memory's; maxWeights), before any
// weights are buffered; every part may carry the next bytes of the weights, which
// must add up to weights_size exactly. A later part that names an
// adapter, a config or a size is refused. recv is the stream's Recv.
func Assemble(recv func() (*controlpb.AdapterPart, error), capacity int64) (*Upload, error) {
	first, err := recv()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: empty stream", ErrStream)
	}
	if err != nil {
		return nil, err
	}
	ref, size := first.GetRef(), first.GetWeightsSize()
	switch {
	case ref == nil || !lora.ValidHash(ref.GetHash()):
		return nil, fmt.Errorf("%w: the first part must name the adapter by its content hash (64 lowercase hex digits)", ErrStream)
	case len(first.GetConfigJson()) == 0 || len(first.GetConfigJson()) > lora.MaxConfigBytes:
		return nil, fmt.Errorf("%w: the first part must carry adapter_config.json of 1 to %d bytes", ErrStream, lora.MaxConfigBytes)
	case size <= 0:
		return nil, fmt.Errorf("%w: weights_size must be positive", ErrStream)
	case size > maxWeights(capacity):
		return nil, fmt.Errorf("%w: weights of %d bytes, the memory holds %d", ErrTooLarge, size, capacity)
	}
	u := &Upload{Ref: ref, ConfigJSON: first.GetConfigJson(), Pin: first.GetPin(), Weights: make([]byte, 0, size)}
	for p := first; ; {
		if int64(len(p.GetWeights())) > size-int64(len(u.Weights)) {
			return nil, fmt.Errorf("%w: more weights than the declared %d bytes", ErrStream, size)
		}
		u.Weights = append(u.Weights, p.GetWeights()...)
		p, err = recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if p.GetRef() != nil || len(p.GetConfigJson()) > 0 || p.GetWeightsSize() != 0 || p.GetPin() {
			return nil, fmt.Errorf("%w: only the first part may carry ref, config_json, weights_size and pin", ErrStream)
		}
	}
	if int64(len(u.Weights)) != size {
		return nil, fmt.Errorf("%w: %d bytes of weights, %d declared", ErrStream, len(u.Weights), size)
	}
	return u, nil
}
