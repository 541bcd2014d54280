//go:build cuda

package runtime

import (
	"github.com/warden-ai/warden/worker/cuda"
	"github.com/warden-ai/warden/worker/model"
)

var _ poolMaker = (*cuda.Backend)(nil)

// newCUDABackend uploads the model to GPU 0 (CUDA_VISIBLE_DEVICES picks
// the GPU) without a KV pool: open builds it before sizing the pool, so the
// device's free memory is measured with the weights resident, and then has
// it make the pool (poolMaker).
func newCUDABackend(opt Options, m *model.Model) (closingBackend, error) {
	return cuda.FromModel(m, cuda.Options{
		MaxBatchTokens: opt.ChunkTokens + opt.MaxBatch,
		MaxLogitRows:   opt.MaxBatch,
		PageTokens:     opt.PageTokens,
		Quantize:       opt.Quantize,
		Logger:         opt.Logger,
	})
}

// cudaFreeMemory is GPU 0's free memory, device-wide. open calls it after
// newCUDABackend, so the weights and the backend's scratch are already
// resident and excluded.
func cudaFreeMemory(*model.Model) (int64, error) { return cuda.FreeMemory(0) }
