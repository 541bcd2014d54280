// Element-wise and per-row kernels of the forward step: embedding gather,
// RMSNorm, the q/k/v bias and per-head q/k norm of the Qwen families, RoPE
// with the KV write into owner-tagged pages, greedy argmax, the owner-tag
// and page-fill maintenance kernels, and the SwiGLU of unfused gate and up
// outputs (a step with LoRA gate/up updates).
#include "common.cuh"

// embed_*: x[r] = E[tokens[r]] as float32. Grid: rows; any block size.
template <typename T>
__device__ __forceinline__ void embed_impl(float* x, const T* table, const int* tokens, i64 hidden) {
  const i64 r = blockIdx.x;
  const T* src = table + (i64)tokens[r] * hidden;
  float* dst = x + r * hidden;
  for (i64 i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = to_f32(src[i]);
}

extern "C" __global__ void embed_f32(float* x, const float* table, const int* tokens, i64 hidden) {
  embed_impl(x, table, tokens, hidden);
}
extern "C" __global__ void embed_f16(float* x, const f16_t* table, const int* tokens, i64 hidden) {
  embed_impl(x, table, tokens, hidden);
}
extern "C" __global__ void embed_bf16(float* x, const bf16_t* table, const int* tokens, i64 hidden) {
  embed_impl(x, table, tokens, hidden);
}

// rmsnorm: out[r] = (x[src] · inv) · w with inv = 1 / sqrt(mean(x[src]²) +
// eps), the mean's sum reduced in block_sum's fixed order, the square root
// taken in double and rounded once (as the cpu backend does). src is
// rows[r] when rows is non-null (gathering the rows that need logits),
// else r. Grid: output rows; block: a multiple of 32.
extern "C" __global__ void rmsnorm(float* out, const float* x, const float* w, const int* rows, i64 n,
                                   double eps) {
  __shared__ float scratch[33];
  const i64 r = blockIdx.x;
  const i64 src = rows ? rows[r] : r;
  const float* xr = x + src * n;
  float s = 0.f;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
  s = block_sum(s, scratch);
  const float mean = s / (float)n;
  const float inv = 1.0f / (float)sqrt((double)(mean + (float)eps));
  float* o = out + r * n;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) o[i] = (xr[i] * inv) * w[i];
}

// qkv_prep applies, to each row's [q | k | v] (width qkv_dim) before
// rope_kv, the family's extra attention steps, as the cpu backend does:
// first, when bias is non-null, the q/k/v projection biases (bias is
// [qkv_dim], stacked like the row: x += b, one float32 addition); then,
// when q_norm and k_norm are non-null, an RMSNorm of every query and key
// head over head_dim with weight q_norm or k_norm ([head_dim] each) and
// eps, computed as rmsnorm computes it. Grid: (rows, heads + 2·kv_heads),
// one block per head slice of the row (query heads, key heads, value
// heads); block: a multiple of 32.
extern "C" __global__ void qkv_prep(float* qkv, const float* bias, const float* q_norm, const float* k_norm,
                                    const Geometry* g) {
  __shared__ float scratch[33];
  const i64 hd = g->head_dim, slice = blockIdx.y;
  float* x = qkv + (i64)blockIdx.x * g->qkv_dim + slice * hd;
  if (bias) {
    const float* b = bias + slice * hd;
    for (i64 i = threadIdx.x; i < hd; i += blockDim.x) x[i] += b[i];
  }
  // The weight is the same for the whole block, so every thread of it
  // returns here or none does (block_sum needs them all).
  const float* w = slice < g->heads ? q_norm : slice < g->heads + g->kv_heads ? k_norm : nullptr;
  if (!w) return;
  // Each thread sums the elements it wrote itself: no barrier needed.
  float s = 0.f;
  for (i64 i = threadIdx.x; i < hd; i += blockDim.x) s = fmaf(x[i], x[i], s);
  s = block_sum(s, scratch);
  const float mean = s / (float)hd;
  const float inv = 1.0f / (float)sqrt((double)(mean + (float)g->eps));
  for (i64 i = threadIdx.x; i < hd; i += blockDim.x) x[i] = (x[i] * inv) * w[i];
}

// rope_kv rotates each row's queries and keys (Hugging Face rotate-half:
// pair (i, i+half) of every head) by the row's position, and writes the
// rotated keys and the values into the row's KV page slot — after the
// device owner check of that page (tag, epoch, owned: a sealed page is
// never written; a refused page is flagged in err and not written). Rows are [q | k | v] of width qkv_dim.
// Page layout: [layer][k=0|v=1][slot][kv_heads·head_dim] float32.
// Grid: rows; block: any multiple of 32.
extern "C" __global__ void rope_kv(float* qkv, float* kv, const int* row_chunk, const int* row_pos,
                                   const i64* chunks, const int* tables, const Tag* tags, int* err,
                                   const float* rope_cos, const float* rope_sin, const Geometry* g,
                                   i64 layer) {
  __shared__ int page_s;
  const i64 r = blockIdx.x;
  const int c = row_chunk[r];
  const i64* ch = chunks + (i64)c * CH_WORDS;
  const i64 pos = row_pos[r];
  const i64 hd = g->head_dim, half = hd / 2, pt = g->page_tokens;
  const i64 kv_dim = g->kv_heads * hd;
  if (threadIdx.x == 0) {
    const int page = page_of(tables, ch, pos, pt);
    // The slot is about to be written: no written slots are needed, and
    // a sealed page is refused (read-only).
    const int reason = check_page(tags, g->num_pages, page, chunks, ch, pos / pt, 0, true);
    if (reason != 0) flag(err, reason, page, c);
    page_s = reason == 0 ? page : -1;
  }
  __syncthreads();

  float* row = qkv + r * g->qkv_dim;
  const float* cs = rope_cos + pos * half;
  const float* sn = rope_sin + pos * half;
  for (i64 idx = threadIdx.x; idx < g->heads * half; idx += blockDim.x) {
    const i64 h = idx / half, i = idx % half;
    float* q = row + h * hd;
    const float x1 = q[i], x2 = q[i + half];
    q[i] = x1 * cs[i] - x2 * sn[i];
    q[i + half] = x2 * cs[i] + x1 * sn[i];
  }
  const int page = page_s;
  if (page < 0) return;
  const i64 slot = pos % pt;
  float* base = kv + (i64)page * g->page_floats;
  float* kdst = base + ((layer * 2 + 0) * pt + slot) * kv_dim;
  float* vdst = base + ((layer * 2 + 1) * pt + slot) * kv_dim;
  const float* k = row + g->heads * hd;
  const float* v = k + kv_dim;
  for (i64 idx = threadIdx.x; idx < g->kv_heads * half; idx += blockDim.x) {
    const i64 h = idx / half, i = idx % half;
    const float x1 = k[h * hd + i], x2 = k[h * hd + i + half];
    kdst[h * hd + i] = x1 * cs[i] - x2 * sn[i];
    kdst[h * hd + i + half] = x2 * cs[i] + x1 * sn[i];
  }
  for (i64 idx = threadIdx.x; idx < kv_dim; idx += blockDim.x) vdst[idx] = v[idx];
}

// argmax: out[r] = the index of the largest element of row r of x (n
// columns), NaNs skipped, the lowest index winning ties, 0 when every
// element is NaN — the engine's greedy rule. Grid: rows; block: 256.
extern "C" __global__ void __launch_bounds__(256) argmax(int* out, const float* x, i64 n) {
  __shared__ float sv[256];
  __shared__ int si[256];
  const float* row = x + (i64)blockIdx.x * n;
  float bv = 0.f;
  int bi = -1;
  for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (v != v) continue;
    if (bi < 0 || v > bv) {
      bv = v;
      bi = (int)i;
    }
  }
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) {
      const float ov = sv[threadIdx.x + step];
      const int oi = si[threadIdx.x + step];
      const int mi = si[threadIdx.x];
      const float mv = sv[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > mv || (ov == mv && oi < mi))) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0] < 0 ? 0 : si[0];
}

// apply_tags: tags[ids[i]] = updates[i] for i < n (owner tags that changed
// since the device last saw them). Grid: ceil(n / block).
extern "C" __global__ void apply_tags(Tag* tags, const int* ids, const Tag* updates, i64 n) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tags[ids[i]] = updates[i];
}

// fill_pages sets every 32-bit word of the pages ids[0..n) to word (0 for
// zero-on-release, the poison NaN for poison-on-reserve). Grid: (blocks
// over the page's words, n).
extern "C" __global__ void fill_pages(float* kv, const int* ids, i64 page_floats, i64 word) {
  unsigned* page = reinterpret_cast<unsigned*>(kv) + (i64)ids[blockIdx.y] * page_floats;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < page_floats; i += (i64)gridDim.x * blockDim.x)
    page[i] = (unsigned)word;
}

// swiglu: y[i] = silu(g[i])·u[i] for i < n — the linear kernels'
// MODE_SWIGLU epilogue (the sigmoid in double, rounded once, then one
// float multiplication) on unfused gate and up outputs, so the rows of a
// step computed unfused (a LoRA gate/up update) get the bits the fused
// kernel gives. Grid: ceil(n / block); any block size.
extern "C" __global__ void swiglu(float* y, const float* g, const float* u, i64 n) {
  const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double gd = (double)g[i];
  const float s = (float)(gd / (1.0 + exp(-gd)));
  y[i] = s * u[i];
}
