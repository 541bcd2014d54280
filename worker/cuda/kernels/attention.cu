// Paged attention over owner-tagged KV pages.
//
// One block computes one (row, query head): softmax(q·Kᵀ·scale)·V over the
// positions 0..pos of the row's sequence, reading K and V from the pages of
// the sequence's table in position order (GQA: query head h reads KV head
// h / (heads / kv_heads)). The softmax is computed online over tiles of
// ATT_THREADS positions (running maximum and rescaled sums, in float32),
// in the same order whatever the batch, so a row's result does not depend
// on the other rows.
//
// Before it reads a position, the thread that owns it checks the page's
// device tag (check_page): a shared sealed page against the prefix tag the
// chunk presents for it, any other page against the chunk's expected owner
// (hash, epoch, readable) and, for positions before the chunk's start
// (written by earlier steps), that the slot was written for that owner. A refused page is flagged in err and
// contributes nothing: its bytes are never read. The host turns a flagged
// step into kvpool.ErrOwnerViolation and discards the step's output.
#include "common.cuh"

#define ATT_THREADS 128
#define ATT_MAX_HEAD_DIM 256

// Grid: (rows, heads); block: ATT_THREADS. out is [rows][heads·head_dim].
extern "C" __global__ void __launch_bounds__(ATT_THREADS)
    attention(float* out, const float* qkv, const float* kv, const int* row_chunk, const int* row_pos,
              const i64* chunks, const int* tables, const Tag* tags, int* err, const Geometry* g,
              i64 layer) {
  __shared__ float q_s[ATT_MAX_HEAD_DIM];
  __shared__ float p_s[ATT_THREADS];
  __shared__ i64 v_s[ATT_THREADS];
  __shared__ float scratch[33];

  const i64 r = blockIdx.x, h = blockIdx.y;
  const int tid = threadIdx.x;
  const i64 hd = g->head_dim, pt = g->page_tokens;
  const i64 kv_dim = g->kv_heads * hd;
  const i64 grp = h / (g->heads / g->kv_heads);
  const int c = row_chunk[r];
  const i64* ch = chunks + (i64)c * CH_WORDS;
  const i64 start = ch[CH_START];
  const i64 n = (i64)row_pos[r] + 1;
  const float scale = (float)g->scale;

  for (i64 d = tid; d < hd; d += ATT_THREADS) q_s[d] = qkv[r * g->qkv_dim + h * hd + d];
  __syncthreads();

  const i64 k_off = (layer * 2 + 0) * pt * kv_dim + grp * hd;
  const i64 v_off = (layer * 2 + 1) * pt * kv_dim + grp * hd;
  const bool vec = (hd & 3) == 0 && (kv_dim & 3) == 0;

  float m = -INFINITY, l = 0.f;
  float acc0 = 0.f, acc1 = 0.f;  // dimensions tid and tid + ATT_THREADS
  for (i64 base = 0; base < n; base += ATT_THREADS) {
    const i64 j = base + tid;
    float s = -INFINITY;
    i64 vo = -1;
    if (j < n) {
      const int page = page_of(tables, ch, j, pt);
      const i64 slot = j % pt;
      // Positions before the chunk were written by earlier steps and must
      // be marked written; the chunk's own were written by rope_kv.
      const int need = j < start ? (int)slot + 1 : 0;
      const int reason = check_page(tags, g->num_pages, page, chunks, ch, j / pt, need, false);
      if (reason != 0) {
        flag(err, reason, page, c);
      } else {
        const i64 page_base = (i64)page * g->page_floats;
        const float* kp = kv + page_base + k_off + slot * kv_dim;
        float dot = 0.f;
        if (vec) {
          for (i64 d = 0; d < hd; d += 4) {
            const float4 k4 = *reinterpret_cast<const float4*>(kp + d);
            dot = fmaf(q_s[d], k4.x, dot);
            dot = fmaf(q_s[d + 1], k4.y, dot);
            dot = fmaf(q_s[d + 2], k4.z, dot);
            dot = fmaf(q_s[d + 3], k4.w, dot);
          }
        } else {
          for (i64 d = 0; d < hd; d++) dot = fmaf(q_s[d], kp[d], dot);
        }
        s = dot * scale;
        vo = page_base + v_off + slot * kv_dim;
      }
    }
    const float m_new = fmaxf(m, block_max(s, scratch));
    // Every position so far masked or refused: nothing to rescale yet.
    const float e = vo >= 0 ? expf(s - m_new) : 0.f;
    const float corr = m == -INFINITY ? 0.f : expf(m - m_new);
    const float tile_sum = block_sum(e, scratch);
    l = l * corr + tile_sum;
    p_s[tid] = e;
    v_s[tid] = vo;
    __syncthreads();
    const int cnt = (int)min((i64)ATT_THREADS, n - base);
    if (tid < hd) {
      float a = acc0 * corr;
      for (int jj = 0; jj < cnt; jj++)
        if (v_s[jj] >= 0) a = fmaf(p_s[jj], kv[v_s[jj] + tid], a);
      acc0 = a;
    }
    if (tid + ATT_THREADS < hd) {
      float a = acc1 * corr;
      for (int jj = 0; jj < cnt; jj++)
        if (v_s[jj] >= 0) a = fmaf(p_s[jj], kv[v_s[jj] + tid + ATT_THREADS], a);
      acc1 = a;
    }
    if (m_new != -INFINITY) m = m_new;
    __syncthreads();
  }
  float* o = out + r * g->heads * hd + h * hd;
  if (tid < hd) o[tid] = acc0 / l;
  if (tid + ATT_THREADS < hd) o[tid + ATT_THREADS] = acc1 / l;
}
