// Shared definitions of warden's CUDA kernels. Every kernel is extern "C"
// (stable names for cuModuleGetFunction) and takes only 8-byte parameters:
// device pointers, long long and double. The Go launcher passes each
// parameter as one 64-bit word.
//
// Layouts shared with the Go side (worker/cuda) are spelled out here and in
// layout.go; both must change together.
#pragma once

#include <cuda_fp16.h>

typedef long long i64;
typedef unsigned long long u64;

// Geometry is the model and pool shape, uploaded once (Go: geometry).
struct Geometry {
  i64 hidden, inter, layers, heads, kv_heads, head_dim;
  i64 qkv_dim, vocab, max_pos, page_tokens, page_floats, num_pages;
  double eps, scale;
};

// Tag is one KV page's tag on the device (Go: devTag). For an owned page
// (state TAG_OWNED: Reserved or InUse) hash is the keyed hash of its owner
// and epoch the owner's epoch; for a sealed prefix page (TAG_SEALED) hash
// is the keyed hash of its prefix tag (cache domain, model/format version,
// chain hash) and epoch the keyed hash of its cache domain alone.
struct Tag {
  u64 hash, epoch;
  int written, state;
};

// Tag states (Go: tagUnreadable, tagOwned, tagSealed).
enum {
  TAG_UNREADABLE = 0,  // free or quarantined
  TAG_OWNED = 1,       // readable and writable by its owner
  TAG_SEALED = 2       // read-only, readable by whoever presents its tag
};

// A chunk descriptor is CH_WORDS i64 words (Go: chunkWords). The chunks
// array holds the descriptors, then the expected tags of the chunks'
// shared pages: two words per page (tag hash, domain hash), the chunk's
// first at word CH_STAGS of the array.
enum {
  CH_START = 0,   // position of the chunk's first token
  CH_TABLE = 1,   // offset of the chunk's page table in the tables array
  CH_PAGES = 2,   // page table length
  CH_HASH = 3,    // expected owner hash
  CH_EPOCH = 4,   // expected owner epoch
  CH_SHARED = 5,  // leading pages of the table that are shared sealed pages
  CH_STAGS = 6,   // word offset of their expected tags in the chunks array
  CH_WORDS = 7
};

// Device error record (Go: errWords): [0] count of refused page accesses,
// [1] reason of the first, [2] its page, [3] its chunk.
enum {
  REASON_NO_PAGE = 1,     // page id outside the pool or the table
  REASON_UNREADABLE = 2,  // page free or quarantined
  REASON_FOREIGN = 3,     // owner hash differs
  REASON_EPOCH = 4,       // same owner hash, other epoch
  REASON_UNWRITTEN = 5,   // slot not written for the owner
  REASON_SEALED = 6,      // sealed page written, or read as an owned page
  REASON_NOT_SEALED = 7,  // shared place of the table holds no sealed page
  REASON_DOMAIN = 8,      // sealed page of another cache domain
  REASON_TAG = 9          // sealed page with another chain hash or version
};

// Element types of weight matrices: tag structs so that f16 and bf16
// (both 16-bit) select different loaders.
struct bf16_t { unsigned short bits; };
struct f16_t { unsigned short bits; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16_t v) { return __uint_as_float(((unsigned)v.bits) << 16); }
__device__ __forceinline__ float to_f32(f16_t v) { return __half2float(__ushort_as_half(v.bits)); }

__device__ __forceinline__ float bf16_bits(unsigned b) { return __uint_as_float(b << 16); }
__device__ __forceinline__ float f16_bits(unsigned b) { return __half2float(__ushort_as_half((unsigned short)b)); }

// Raw8 holds 8 consecutive elements as loaded (unpack converts them), so
// loads can be issued well before their values are needed.
template <typename T> struct Raw8 { uint4 v; };
template <> struct Raw8<float> { float4 lo, hi; };

__device__ __forceinline__ Raw8<float> load_raw(const float* p) {
  Raw8<float> r;
  r.lo = __ldg(reinterpret_cast<const float4*>(p));
  r.hi = __ldg(reinterpret_cast<const float4*>(p) + 1);
  return r;
}
template <typename T>
__device__ __forceinline__ Raw8<T> load_raw(const T* p) {
  Raw8<T> r;
  r.v = __ldg(reinterpret_cast<const uint4*>(p));
  return r;
}

__device__ __forceinline__ void unpack(const Raw8<float>& r, float v[8]) {
  v[0] = r.lo.x; v[1] = r.lo.y; v[2] = r.lo.z; v[3] = r.lo.w;
  v[4] = r.hi.x; v[5] = r.hi.y; v[6] = r.hi.z; v[7] = r.hi.w;
}
__device__ __forceinline__ void unpack(const Raw8<bf16_t>& r, float v[8]) {
  const uint4 u = r.v;
  v[0] = bf16_bits(u.x & 0xffffu); v[1] = bf16_bits(u.x >> 16);
  v[2] = bf16_bits(u.y & 0xffffu); v[3] = bf16_bits(u.y >> 16);
  v[4] = bf16_bits(u.z & 0xffffu); v[5] = bf16_bits(u.z >> 16);
  v[6] = bf16_bits(u.w & 0xffffu); v[7] = bf16_bits(u.w >> 16);
}
__device__ __forceinline__ void unpack(const Raw8<f16_t>& r, float v[8]) {
  const uint4 u = r.v;
  v[0] = f16_bits(u.x & 0xffffu); v[1] = f16_bits(u.x >> 16);
  v[2] = f16_bits(u.y & 0xffffu); v[3] = f16_bits(u.y >> 16);
  v[4] = f16_bits(u.z & 0xffffu); v[5] = f16_bits(u.z >> 16);
  v[6] = f16_bits(u.w & 0xffffu); v[7] = f16_bits(u.w >> 16);
}

// load8 reads 8 consecutive elements at p (16-byte aligned) as floats.
__device__ __forceinline__ void load8(const float* p, float v[8]) {
  float4 a = __ldg(reinterpret_cast<const float4*>(p));
  float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

template <typename T>
__device__ __forceinline__ void load8(const T* p, float v[8]) {
  unpack(load_raw(p), v);
}

// flag records a refused page access: the first one's details are kept.
__device__ __forceinline__ void flag(int* err, int reason, int page, int chunk) {
  if (atomicAdd(&err[0], 1) == 0) {
    err[1] = reason;
    err[2] = page;
    err[3] = chunk;
  }
}

// check_page is the device-side tag check of page, the idx-th page of a
// chunk's table (ch is its descriptor, chunks the whole array). A shared place
// (idx < CH_SHARED) must hold a sealed page whose domain and tag hashes
// equal the ones the chunk presents, and is never written; any other place
// must exist, be owned (not free, quarantined or sealed), carry the chunk's
// expected owner hash and epoch, and have at least `need` written slots.
// It returns 0 or a REASON_ code.
__device__ __forceinline__ int check_page(const Tag* tags, i64 num_pages, int page, const i64* chunks,
                                          const i64* ch, i64 idx, int need, bool write) {
  if (page < 0 || page >= num_pages) return REASON_NO_PAGE;
  const Tag t = tags[page];
  if (idx < ch[CH_SHARED]) {
    if (write) return REASON_SEALED;
    if (t.state != TAG_SEALED) return REASON_NOT_SEALED;
    const i64* want = chunks + ch[CH_STAGS] + 2 * idx;
    if (t.epoch != (u64)want[1]) return REASON_DOMAIN;
    if (t.hash != (u64)want[0]) return REASON_TAG;
    return 0;  // sealed pages are complete
  }
  if (t.state == TAG_SEALED) return REASON_SEALED;
  if (t.state != TAG_OWNED) return REASON_UNREADABLE;
  if (t.hash != (u64)ch[CH_HASH]) return REASON_FOREIGN;
  if (t.epoch != (u64)ch[CH_EPOCH]) return REASON_EPOCH;
  if (t.written < need) return REASON_UNWRITTEN;
  return 0;
}

// page_of returns the page holding position pos of a chunk's sequence, or
// -1 when the table is too short.
__device__ __forceinline__ int page_of(const int* tables, const i64* ch, i64 pos, i64 page_tokens) {
  i64 p = pos / page_tokens;
  if (p >= ch[CH_PAGES]) return -1;
  return tables[ch[CH_TABLE] + p];
}

// Block-wide reductions over blockDim.x threads (a multiple of 32, at most
// 1024) in a fixed order: a butterfly inside each warp, then warp 0 adds the
// warp results in warp order. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = 0.f;
    for (int i = 0; i < nw; i++) s += scratch[i];
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  return scratch[32];
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0 && lane == 0) {
    float m = scratch[0];
    for (int i = 1; i < nw; i++) m = fmaxf(m, scratch[i]);
    scratch[32] = m;
  }
  __syncthreads();
  return scratch[32];
}
