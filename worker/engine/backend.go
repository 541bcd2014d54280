package engine

import (
	"context"

	"github.com/warden-ai/warden/worker/kvpool"
)

// Backend runs the model's forward pass on one device. Implementations:
// the cpu backend (worker/internal/cpu) and the cuda backend (worker/cuda,
// build tag cuda).
//
// A Backend is driven by one goroutine at a time (the engine's loop).
type Backend interface {
	// Forward runs one step over a batch of chunks. For every chunk it
	// computes positions [Start, Start+len(Tokens)), writes their K/V into
	// the chunk's pages (position t lives in Pages[t/PageTokens], slot
	// t%PageTokens) and, when the chunk's Logits is non-nil, fills it with
	// the logits of the chunk's last len(Logits)/VocabSize positions, one
	// row after the other in position order (one row, the last position's,
	// but for speculative decoding). The engine has verified the pages
	// (owner and written slots) before calling.
	//
	// The result for a chunk must not depend on the other chunks in the
	// batch nor on how a prompt was split into chunks (determinism).
	//
	// A backend that checks page tags itself fails a step it refused with
	// a *kvpool.ViolationError whose Want is the refused chunk's Owner
	// (zero when it cannot tell). It must then have written the other
	// chunks' K/V as a successful step would, or not at all: the engine
	// ends the refused owner's sequences and runs the others' chunks again.
	Forward(ctx context.Context, batch []Chunk) error
	// VocabSize is the length of a logits row.
	VocabSize() int
	// MaxBatchTokens is the most tokens one Forward call accepts.
	MaxBatchTokens() int
}

// Chunk is one sequence's slice of work in a forward step.
type Chunk struct {
	// Owner is the sequence's owner; a backend that checks page tags on
	// its device compares them with it.
	Owner  kvpool.Owner
	Tokens []int32
	// Start is the position of Tokens[0]; positions [0, Start) are already
	// in the KV cache.
	Start int
	Pages []kvpool.PageID
	// Shared are the prefix tags of the leading shared (sealed, read-only)
	// pages of Pages, Shared[i] for Pages[i]: computed by the engine from
	// the sequence's own tokens and cache domain (kvpool.Tags), as it
	// presents them to kvpool.VerifyPrefix. A backend that checks page
	// tags on its device compares each shared page's tag with them and
	// never writes those pages; the others (the cpu backend) ignore it.
	Shared []kvpool.Tag
	// Logits receives the logits of the chunk's last m positions, m rows
	// of VocabSize in position order, m = len(Logits)/VocabSize between 1
	// and len(Tokens) (m > 1: a speculative chunk, whose every position's
	// logits the engine verifies); nil when the chunk is an intermediate
	// prefill chunk.
	Logits []float32
	// Adapter is the LoRA adapter the chunk is computed under (the
	// sequence's Request.Adapter, made by this backend's PrepareAdapter),
	// nil for the base model. A backend adds the adapter's update to the
	// chunk's rows only: the chunk's result is the one it gets alone.
	Adapter Adapter
}
