//go:build cuda

package cuda

import (
	"unsafe"

	cpukernels "github.com/warden-ai/warden/worker/internal/kernels"
	"github.com/warden-ai/warden/worker/kvpool"
)

// Go mirrors of the layouts in kernels/common.cuh; both must change
// together.

// geometry mirrors struct Geometry: the model and pool shape the kernels
// read from device memory.
type geometry struct {
	Hidden, Inter, Layers, Heads, KVHeads, HeadDim       int64
	QKVDim, Vocab, MaxPos, PageTokens, PageFloats, Pages int64
	Eps, Scale                                           float64
}

// devTag mirrors struct Tag: one page's tag on the device. For an owned
// page Hash is the keyed hash of its owner and Epoch the owner's epoch;
// for a sealed page Hash is the keyed hash of its kvpool.Tag and Epoch the
// keyed hash of the tag's cache domain.
type devTag struct {
	Hash, Epoch uint64
	// Written is the page's written slots; State is a tag state.
	Written, State int32
}

// Tag states (TAG_* in common.cuh).
const (
	tagUnreadable = iota // free or quarantined
	tagOwned             // Reserved or InUse: read and written by its owner
	tagSealed            // a sealed prefix page: read-only
)

// The q8 block the linear kernel reads (Q8_BLOCK and Q8_BLOCK_BYTES in
// linear.cu): q8Block int8 quants, then their float32 scale. The weights
// are quantized by the cpu backend's code (cpukernels.Matrix.QuantizeQ8), so
// both backends hold the same q8 matrices.
const (
	q8Block      = 32
	q8BlockBytes = q8Block + 4
)

// Compile-time checks that the Go structs have the C sizes and the cpu
// backend's Q8 layout is the one the kernel reads.
var (
	_ [112]byte          = [unsafe.Sizeof(geometry{})]byte{}
	_ [24]byte           = [unsafe.Sizeof(devTag{})]byte{}
	_ [q8Block]byte      = [cpukernels.Q8Block]byte{}
	_ [q8BlockBytes]byte = [cpukernels.Q8BlockBytes]byte{}
)

// A chunk descriptor is chunkWords int64 words: start position, offset and
// length of its page table, expected owner hash and epoch, how many leading
// pages of the table are shared sealed pages and the word offset (in the
// chunks array, after every descriptor) of their expected tags, two words
// per page: tag hash, domain hash.
const (
	chStart = iota
	chTable
	chPages
	chHash
	chEpoch
	chShared
	chSharedTags
	chunkWords
)

// The device error record is errWords int32 words: count of refused page
// accesses, then the first one's reason, page and chunk.
const errWords = 4

// Device refusal reasons (REASON_* in common.cuh).
const (
	reasonNoPage = iota + 1
	reasonUnreadable
	reasonForeign
	reasonEpoch
	reasonUnwritten
	reasonSealed
	reasonNotSealed
	reasonDomain
	reasonTag
)

// Linear kernel modes (MODE_* in linear.cu).
const (
	modeStore = iota
	modeAdd
	modeSwiGLU
)

// bytesOf views a fixed-layout value as bytes, for uploads.
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// sliceBytes views a slice of fixed-layout values as bytes.
func sliceBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// poolReason maps a device refusal to the kvpool reason it corresponds to,
// refined by the page's host metadata where the device code is coarser.
func poolReason(code int32, info kvpool.PageInfo, want kvpool.Owner) kvpool.Reason {
	switch code {
	case reasonNoPage:
		return kvpool.ReasonNoSuchPage
	case reasonUnreadable:
		if info.State == kvpool.Quarantined {
			return kvpool.ReasonQuarantined
		}
		return kvpool.ReasonFree
	case reasonForeign:
		switch {
		case info.Owner.Tenant != want.Tenant:
			return kvpool.ReasonForeignTenant
		case info.Owner.Request == want.Request && info.Owner.Adapter != want.Adapter:
			return kvpool.ReasonForeignAdapter
		}
		return kvpool.ReasonForeignRequest
	case reasonEpoch:
		return kvpool.ReasonStaleEpoch
	case reasonSealed:
		return kvpool.ReasonSealed
	case reasonNotSealed:
		return kvpool.ReasonNotSealed
	case reasonDomain:
		return kvpool.ReasonForeignDomain
	case reasonTag:
		return kvpool.ReasonTagMismatch
	default:
		return kvpool.ReasonUnwritten
	}
}
