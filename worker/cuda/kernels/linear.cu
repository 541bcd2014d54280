// Linear layers: y[r][n] = x[r] · W[n] for activation rows r (float32) and
// weight rows n (float32, float16, bfloat16 or q8, [N][K] row-major as
// Hugging Face stores them), accumulated in float32.
//
// A q8 row is K/32 blocks of 32 int8 quants followed by their float32
// scale (Q8_BLOCK_BYTES bytes, the cpu backend's Q8 layout,
// worker/internal/kernels): weight k of the row is q·scale, one float32
// multiplication, so a q8 layer computes the float32 layer of its
// dequantized matrix. The activations stay float32 (the cpu backend
// quantizes them too, so the two agree within quantization error, not to
// the last bit).
//
// Determinism: every output element is reduced in one canonical order,
// whatever the number of rows in the launch, the rows-per-warp tiling or
// the other outputs of the warp. Lane l of the warp that owns element
// (r, n) accumulates, with fmaf, the products of k = 256·j + 8·l + i for
// j = 0, 1, … and i = 0..7 in that order; the 32 lane sums are then added
// by an xor butterfly (offsets 16, 8, 4, 2, 1) and lane 0's value is the
// result. So a sequence's activations do not depend on its batch
// neighbours (engine.Backend's determinism contract).
#include "common.cuh"

enum { MODE_STORE = 0, MODE_ADD = 1, MODE_SWIGLU = 2 };

#define LINEAR_THREADS 256

enum { Q8_BLOCK = 32, Q8_BLOCK_BYTES = Q8_BLOCK + 4 };

// q8_t tags q8 weight rows (byte-addressed blocks).
struct q8_t { unsigned char b; };

// Raw8<q8_t> is 8 consecutive quants of one block and the block's scale.
template <> struct Raw8<q8_t> { uint2 q; float d; };

// weight_row is the start of row n of a K = k_dim matrix.
template <typename T>
__device__ __forceinline__ const T* weight_row(const T* w, i64 n, i64 k_dim) { return w + n * k_dim; }
__device__ __forceinline__ const q8_t* weight_row(const q8_t* w, i64 n, i64 k_dim) {
  return w + n * (k_dim / Q8_BLOCK) * Q8_BLOCK_BYTES;
}

// load_w loads weights k..k+7 of a row (k a multiple of 8).
template <typename T>
__device__ __forceinline__ Raw8<T> load_w(const T* row, i64 k) { return load_raw(row + k); }
__device__ __forceinline__ Raw8<q8_t> load_w(const q8_t* row, i64 k) {
  // Blocks are 4-byte aligned (36 bytes): two 4-byte loads of quants.
  const unsigned char* blk = &row[(k / Q8_BLOCK) * Q8_BLOCK_BYTES].b;
  const unsigned* q = reinterpret_cast<const unsigned*>(blk + (k % Q8_BLOCK));
  Raw8<q8_t> r;
  r.q = make_uint2(__ldg(q), __ldg(q + 1));
  r.d = __ldg(reinterpret_cast<const float*>(blk + Q8_BLOCK));
  return r;
}

__device__ __forceinline__ void unpack(const Raw8<q8_t>& r, float v[8]) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] = (float)(signed char)(r.q.x >> (8 * i)) * r.d;
    v[4 + i] = (float)(signed char)(r.q.y >> (8 * i)) * r.d;
  }
}

// weight_at is weight k of a row, for the scalar path.
template <typename T>
__device__ __forceinline__ float weight_at(const T* row, i64 k) { return to_f32(row[k]); }
__device__ __forceinline__ float weight_at(const q8_t* row, i64 k) {
  const unsigned char* blk = &row[(k / Q8_BLOCK) * Q8_BLOCK_BYTES].b;
  return (float)(signed char)blk[k % Q8_BLOCK] * __ldg(reinterpret_cast<const float*>(blk + Q8_BLOCK));
}

// fma8 adds the 8 products w[i]·xv[i] to acc in order i = 0..7.
__device__ __forceinline__ float fma8(const float w[8], const float xv[8], float acc) {
#pragma unroll
  for (int i = 0; i < 8; i++) acc = fmaf(w[i], xv[i], acc);
  return acc;
}

// Each warp owns two weight rows — columns (2p, 2p+1) in MODE_STORE and
// MODE_ADD, gate row p of w and up row p of w2 in MODE_SWIGLU — and R
// activation rows starting at blockIdx.x·R.
template <typename T, int R>
__device__ __forceinline__ void linear_impl(float* __restrict__ y, const float* __restrict__ x,
                                            const T* __restrict__ w, const T* __restrict__ w2,
                                            i64 rows, i64 n_out, i64 k_dim, i64 mode) {
  const int lane = threadIdx.x & 31;
  const i64 pair = (i64)blockIdx.y * (LINEAR_THREADS / 32) + (threadIdx.x >> 5);
  const i64 r0 = (i64)blockIdx.x * R;
  i64 col_a, col_b;
  const T* wa;
  const T* wb;
  if (mode == MODE_SWIGLU) {
    col_a = pair;
    col_b = pair;
    if (col_a >= n_out) return;
    wa = weight_row(w, col_a, k_dim);
    wb = weight_row(w2, col_a, k_dim);
  } else {
    col_a = 2 * pair;
    col_b = col_a + 1;
    if (col_a >= n_out) return;
    wa = weight_row(w, col_a, k_dim);
    // An odd last column reuses row a; its result is not stored.
    wb = col_b < n_out ? weight_row(w, col_b, k_dim) : wa;
  }
  const int nr = (int)min((i64)R, rows - r0);
  const float* xr = x + r0 * k_dim;

  float acc_a[R], acc_b[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    acc_a[r] = 0.f;
    acc_b[r] = 0.f;
  }

  if ((k_dim & 7) == 0) {
    // Vector path: rows are 16-byte aligned, 8 elements per load (q8: 8
    // quants and their block's scale, K a multiple of 32). The
    // weights of U steps are loaded before any of them is used, so U loads
    // per row are in flight (decode, R = 1, is bound by memory latency).
    constexpr int U = R == 1 ? 4 : 2;
    const i64 full = k_dim / 256;
    i64 j = 0;
    for (; j + U <= full; j += U) {
      Raw8<T> ra[U], rb[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const i64 k = (j + u) * 256 + 8 * lane;
        ra[u] = load_w(wa, k);
        rb[u] = load_w(wb, k);
      }
      if constexpr (R == 1) {
        // One activation row: its values are loaded up front too.
        Raw8<float> rx[U];
#pragma unroll
        for (int u = 0; u < U; u++) rx[u] = load_raw(xr + (j + u) * 256 + 8 * lane);
#pragma unroll
        for (int u = 0; u < U; u++) {
          float a[8], b[8], xv[8];
          unpack(ra[u], a);
          unpack(rb[u], b);
          unpack(rx[u], xv);
          acc_a[0] = fma8(a, xv, acc_a[0]);
          acc_b[0] = fma8(b, xv, acc_b[0]);
        }
      } else {
#pragma unroll
        for (int u = 0; u < U; u++) {
          const i64 k = (j + u) * 256 + 8 * lane;
          float a[8], b[8];
          unpack(ra[u], a);
          unpack(rb[u], b);
#pragma unroll
          for (int r = 0; r < R; r++) {
            if (r < nr) {
              float xv[8];
              load8(xr + r * k_dim + k, xv);
              acc_a[r] = fma8(a, xv, acc_a[r]);
              acc_b[r] = fma8(b, xv, acc_b[r]);
            }
          }
        }
      }
    }
    // The remaining full steps, then the partial one (k + 8 ≤ k_dim holds
    // for every lane with k < k_dim, since k_dim and k are multiples of 8).
    for (; j <= full; j++) {
      const i64 k = j * 256 + 8 * lane;
      if (k >= k_dim) break;
      float a[8], b[8];
      unpack(load_w(wa, k), a);
      unpack(load_w(wb, k), b);
#pragma unroll
      for (int r = 0; r < R; r++) {
        if (R == 1 || r < nr) {
          float xv[8];
          load8(xr + r * k_dim + k, xv);
          acc_a[r] = fma8(a, xv, acc_a[r]);
          acc_b[r] = fma8(b, xv, acc_b[r]);
        }
      }
    }
  } else {
    // Scalar path, same order.
    for (i64 base = 8 * lane; base < k_dim; base += 256) {
      for (int i = 0; i < 8; i++) {
        const i64 k = base + i;
        if (k < k_dim) {
          const float a = weight_at(wa, k), b = weight_at(wb, k);
#pragma unroll
          for (int r = 0; r < R; r++) {
            if (r < nr) {
              const float xv = xr[r * k_dim + k];
              acc_a[r] = fmaf(a, xv, acc_a[r]);
              acc_b[r] = fmaf(b, xv, acc_b[r]);
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < R; r++) {
    for (int off = 16; off > 0; off >>= 1) {
      acc_a[r] += __shfl_xor_sync(0xffffffffu, acc_a[r], off);
      acc_b[r] += __shfl_xor_sync(0xffffffffu, acc_b[r], off);
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; r++) {
    if (r >= nr) continue;
    float* yr = y + (r0 + r) * n_out;
    if (mode == MODE_SWIGLU) {
      // silu(g)·u as the cpu backend computes it: the sigmoid in double,
      // rounded once, then one float multiplication.
      const double g = (double)acc_a[r];
      const float s = (float)(g / (1.0 + exp(-g)));
      yr[col_a] = s * acc_b[r];
    } else if (mode == MODE_ADD) {
      yr[col_a] = yr[col_a] + acc_a[r];
      if (col_b < n_out) yr[col_b] = yr[col_b] + acc_b[r];
    } else {
      yr[col_a] = acc_a[r];
      if (col_b < n_out) yr[col_b] = acc_b[r];
    }
  }
}

// Launch: block LINEAR_THREADS, grid.x = ceil(rows / R), grid.y =
// ceil(pairs / 8) where pairs = n_out for MODE_SWIGLU, else ceil(n_out / 2).
// y has n_out columns; MODE_ADD adds to y in place (the residual stream).
// The launch bounds (two blocks per SM) leave ptxas the registers to issue
// all of a U-step group's loads before the first multiply.
#define LINEAR(NAME, T, R)                                                                      \
  extern "C" __global__ void __launch_bounds__(LINEAR_THREADS, 2)                               \
      NAME(float* y, const float* x, const T* w, const T* w2, i64 rows, i64 n_out, i64 k_dim, \
           i64 mode) {                                                                          \
    linear_impl<T, R>(y, x, w, w2, rows, n_out, k_dim, mode);                                   \
  }

LINEAR(linear_f32_r1, float, 1)
LINEAR(linear_f32_r8, float, 8)
LINEAR(linear_f16_r1, f16_t, 1)
LINEAR(linear_f16_r8, f16_t, 8)
LINEAR(linear_bf16_r1, bf16_t, 1)
LINEAR(linear_bf16_r8, bf16_t, 8)
LINEAR(linear_q8_r1, q8_t, 1)
LINEAR(linear_q8_r8, q8_t, 8)
