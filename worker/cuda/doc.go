//go:build cuda

// Package cuda is warden's GPU compute backend: the Llama-family forward
// pass of worker/internal/cpu, on one NVIDIA GPU (compute capability 8.0 or
// later), through the CUDA driver API (gorgonia.org/cu) and kernels of its
// own (kernels/*.cu, compiled to PTX by scripts/gen-ptx.sh and embedded).
//
// Every file is behind the cuda build tag: gorgonia.org/cu initialises the
// driver in an init function and exits the process when that fails, so a
// build without the tag must not link it. docs/cuda.md says how to build,
// check and run it.
//
// # Numerics
//
// Weights stay on the device in the model's dtype (float32, float16 or
// bfloat16; a checkpoint that mixes matrix dtypes is uploaded as float32),
// or, with Options.Quantize, the projections and the LM head are the cpu
// backend's q8 blocks, dequantized inside the linear kernel; activations, the KV cache and every accumulation are float32, so the
// backend computes the cpu backend's function up to summation order.
// Linear layers use the kernels' canonical reduction order (see
// kernels/linear.cu), so a sequence's results do not depend on its batch
// neighbours or on how its prompt was chunked (engine.Backend's
// determinism contract) — the reason the GEMMs are not cuBLAS calls, whose
// algorithm choice depends on the batch shape and which has no
// bfloat16-weight × float32-activation product.
//
// # KV pages and owner tags
//
// KV pages live in device memory in the cpu backend's layout
// ([layer][k|v][slot][kv_heads·head_dim] float32), so pages move between
// cpu and cuda workers unchanged. The kvpool keeps the metadata; its host
// slab is address space only (NewPool). Besides the engine's host check
// before every step (kvpool.Pool.Verify), each page has an owner tag on the
// device — a keyed hash of (tenant, request), the epoch, the written slots
// and whether it is readable — which the backend refreshes from the pool
// for the pages of every step. The KV-write and attention kernels check
// every page they touch against the chunk's expected owner; a refused page
// is neither written nor read, and the step fails with an error wrapping
// kvpool.ErrOwnerViolation and delivers no logits; the engine counts it in
// the pool's Violations (kvpool.Pool.RecordViolation).
package cuda

//go:generate ../../scripts/gen-ptx.sh
