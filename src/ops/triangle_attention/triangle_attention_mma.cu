// Triangle attention on tensor cores (fp16/bf16 in, fp32 accumulate), flash-attention style:
// a block of 8 warps owns 128 queries (or 128 keys), each warp 16 of them, and streams the
// other side through shared memory in tiles of 64. Scores, probabilities and their gradients
// live in registers; only the output, one log-sum-exp per row and the gradients are written,
// so no kernel stores anything of size N^3.
//
// Backward runs three kernels so that no gradient needs a cross-block sum (no atomics, hence
// bitwise-reproducible results):
//   dq     owns queries, loops over keys     dQ = dS K
//   dkv    owns keys, loops over queries     dK = dS^T Q,  dV = P^T dO
//   dbias  owns a 128x64 (query, key) tile, loops over the rows r of a chunk: sum_r dS
// with dS = P * (dO V^T - delta). Chunk partials of dbias are added in order afterwards.
// The softmax runs in base 2: logits are scaled by log2(e) once so every exponential is one
// ex2 instruction. Every streamed tile (keys or queries, their bias tile, mask or row
// statistics) is fetched with cp.async one step ahead into the other half of a double buffer,
// so global latency hides behind the tensor-core work of the current step.
//
// Why 128 owned rows and 64 streamed: every streamed byte comes from L2, and at d = 32 the
// L2 -> SM traffic (keys/values and the bias tile, ~4 bytes per score element with 64x64
// tiles) rivals the exponential unit as the bound. A 128-row block halves the streamed
// operand bytes per score; 8 warps at <= 128 registers keep 16 warps resident per SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/triangle_attention/triangle_attention_cuda.h"
#include "ops/launch.cuh"
#include "ops/ordered_sum.cuh"

namespace megafold::ops::cuda {
namespace {

using mma::cp_async16;
using mma::cp_async4;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::exp2_approx;
using mma::ldmatrix_x2_trans;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma16816;
using mma::pack2;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // rows a block owns (queries, or keys for dkv)
constexpr int kCols = 64;           // rows of a streamed tile
constexpr int kNT = kCols / 8;      // 8-wide column tiles across a streamed tile
constexpr int kHalfNT = kNT / 2;    // ... across half of one (dkv works in halves)
constexpr float kLog2e = 1.4426950408889634f;

// Head dim d padded to the mma k-step (16), and on to a row of 16-byte pieces whose count
// divides the block's threads, so that a tile loader's pass covers whole rows (d = 48 pads to
// 64: six pieces do not divide 256 threads); the padding is zeros and never stored.
constexpr int padded_head_dim(int d) {
  int p = (d + 15) / 16 * 16;
  while (kThreads % (p / 8) != 0) p += 16;
  return p;
}

// Shared rows get 8 more elements than P so that the 32-bit fragment loads and ldmatrix rows
// of 8 consecutive rows hit distinct banks.
template <int D>
struct Dim {
  static constexpr int P = padded_head_dim(D);
  static constexpr int S = P + 8;
};

// Row stride (floats) of the dbias kernel's fp32 bias tile: 8 more than its kCols columns,
// so that the 8-byte fragment loads of rows g = 0..3 (a half warp) hit distinct banks.
constexpr int kBiasStride = kCols + 8;

// Shared-memory pieces (bytes, all multiples of 16): a [rows][S] operand tile, a
// [rows][cols + 8] bias tile of T (the 8 spread ldmatrix rows over the banks), a vector of
// floats.
template <typename T, int D>
struct Bytes {
  template <int rows>
  static constexpr int tile = rows * Dim<D>::S * sizeof(T);
  template <int rows, int cols>
  static constexpr int bias = rows * (cols + 8) * sizeof(T);
  template <int n>
  static constexpr int vec = n * sizeof(float);
};

// Hands out consecutive pieces of the dynamic shared memory.
struct Carve {
  unsigned char* at;
  template <typename U>
  __device__ __forceinline__ U* take(int bytes) {
    U* r = reinterpret_cast<U*>(at);
    at += bytes;
    return r;
  }
};

// One [N, d] slice (fixed b, r, h) of a strided [B, R, N, H, d] tensor.
template <typename T>
struct Slice {
  const T* base;
  int64_t stride_n;
};

template <typename T>
__device__ __forceinline__ Slice<T> slice(const void* t, const int64_t* s, int64_t b, int64_t r,
                                          int64_t h) {
  return {static_cast<const T*>(t) + b * s[0] + r * s[1] + h * s[3], s[2]};
}

// Eight elements from a row start that is not 16-byte aligned (vec = 2: 4-byte aligned).
template <typename T>
__device__ __noinline__ uint4 load8_unaligned(const T* from, int vec) {
  if (vec == 2)
    return make_uint4(*reinterpret_cast<const uint32_t*>(from), *reinterpret_cast<const uint32_t*>(from + 2),
                      *reinterpret_cast<const uint32_t*>(from + 4), *reinterpret_cast<const uint32_t*>(from + 6));
  T e[8];
#pragma unroll
  for (int x = 0; x < 8; ++x) e[x] = from[x];
  return *reinterpret_cast<const uint4*>(e);
}

// The loaders below give each thread fixed chunks of 8 elements (16 bytes): column c of rows
// row0, row0 + R, row0 + 2R, ... where R = kThreads / (chunks per row). A thread's source
// address is computed once per tile and stepped by R rows, and the bounds checks compare
// against the rows left, so a chunk costs a handful of instructions: at d = 32 the loaders
// issue ~7 chunks per thread and step, next to ~300 instructions of arithmetic.

// Queues rows n0..n0+rows of a slice into a [rows][S] shared tile, zeros past N and past
// d. vec: elements per global load the strides allow; 8 (16 bytes) goes through cp.async,
// narrower layouts are copied synchronously.
template <typename T, int D, int rows>
__device__ __forceinline__ void load_tile(T* tile, Slice<T> src, int64_t n0, int64_t N, int vec) {
  constexpr int S = Dim<D>::S, kChunks = Dim<D>::P / 8, R = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0, "whole rows per pass");
  const int row0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks * 8;
  if (rows < R && row0 >= rows) return;
  const int64_t left = N - n0 - row0;  // rows this thread's chunks may still read
  const T* from = src.base + (n0 + row0) * src.stride_n + c;
  T* dst = tile + row0 * S + c;
#pragma unroll
  for (int it = 0; it < (rows + R - 1) / R; ++it) {
    const bool valid = it * R < left && c < D;
    const int64_t at = static_cast<int64_t>(it) * R * src.stride_n;
    if (vec == 8) {
      cp_async16(dst + it * R * S, valid ? from + at : src.base, valid);
    } else {
      *reinterpret_cast<uint4*>(dst + it * R * S) = valid ? load8_unaligned(from + at, vec) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Queues m[r0.., c0..] (a rows x cols window of a contiguous [N, N] matrix) into a
// [rows][cols + 8] tile, zeros outside. Rows are 16-byte aligned when N % 8 == 0; otherwise
// synchronous.
template <typename T, int rows, int cols>
__device__ __forceinline__ void load_bias_tile(T* tile, const T* m, int64_t r0, int64_t c0, int64_t N) {
  constexpr int R = kThreads / (cols / 8);
  static_assert(kThreads % (cols / 8) == 0 && rows % R == 0, "whole rows per pass, whole passes per tile");
  const int row0 = threadIdx.x / (cols / 8), c = threadIdx.x % (cols / 8) * 8;
  const int64_t left = N - r0 - row0, cc = c0 + c;
  const T* from = m + (r0 + row0) * N + cc;
  T* dst = tile + row0 * (cols + 8) + c;
#pragma unroll
  for (int it = 0; it < rows / R; ++it) {
    const int64_t at = static_cast<int64_t>(it) * R * N;
    if (N % 8 == 0) {
      const bool valid = it * R < left && cc < N;
      cp_async16(dst + it * R * (cols + 8), valid ? from + at : m, valid);
      continue;
    }
    T e[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) e[x] = it * R < left && cc + x < N ? from[at + x] : static_cast<T>(0.f);
    *reinterpret_cast<uint4*>(dst + it * R * (cols + 8)) = *reinterpret_cast<const uint4*>(e);
  }
}

// Queues src[n0 .. n0+n] into a shared vector: `past` for entries at or past N, 0 where
// there is no src (a missing additive key mask attends every real key). Entry i is written
// by thread i, which is what lets that thread read it back after its own cp.async wait.
template <int n>
__device__ __forceinline__ void load_vec(float* dst, const float* src, int64_t n0, int64_t N, float past) {
  static_assert(n <= kThreads, "one entry per thread");
  if (threadIdx.x >= n) return;
  const int64_t i = n0 + threadIdx.x;
  if (i >= N || src == nullptr)
    dst[threadIdx.x] = i >= N ? past : 0.f;
  else
    cp_async4(dst + threadIdx.x, src + i, true);
}

// Waits for the current stage and joins the block (as __syncthreads) and tells whether any
// of its kCols additive key-mask entries masks a key, so that tiles of real, unmasked keys
// skip the mask.
__device__ __forceinline__ bool sync_any_masked(const float* mask) {
  return __syncthreads_or(threadIdx.x < kCols && mask[threadIdx.x] != 0.f);
}

// A fragments of rows n0..n0+15 of a slice, all k-steps of the head dim, straight from
// global memory (each block reads its own rows once, so they need no shared-memory tile);
// zeros past N and past d. vec: as for load_tile (1: 16-bit loads).
template <typename T, int D>
__device__ __forceinline__ void load_a_global(uint32_t (&a)[Dim<D>::P / 16][4], Slice<T> src, int64_t n0,
                                              int64_t N, int vec, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < Dim<D>::P / 16; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // a0 = (g, 2t..), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..)
      const int64_t n = n0 + g + 8 * (q % 2);
      const int c = 16 * kk + 2 * t + 8 * (q / 2);
      uint32_t v = 0;
      if (n < N && c < D) {
        const T* e = src.base + n * src.stride_n + c;
        if (vec >= 2) {
          v = *reinterpret_cast<const uint32_t*>(e);
        } else {
          const T pair[2] = {e[0], e[1]};
          v = *reinterpret_cast<const uint32_t*>(pair);
        }
      }
      a[kk][q] = v;
    }
}

// A fragments of rows 16w..16w+15 of a [rows][S] shared tile, all k-steps of the head dim.
template <typename T, int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[Dim<D>::P / 16][4], const T* tile, int warp, int lane) {
  constexpr int S = Dim<D>::S;
  // Tiles: rows 0-7 / 8-15 (lane bit 3) x columns 0-7 / 8-15 (lane bit 4) = a0, a1, a2, a3.
  const T* row = tile + (16 * warp + (lane / 8 % 2) * 8 + lane % 8) * S + (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < Dim<D>::P / 16; ++kk) ldmatrix_x4(a[kk], row + 16 * kk);
}

// acc[nt] (16 x 8NT) += A (16 x d) . tile^T, tile stored [8NT][S] (n-major B operand).
template <typename T, int D, int NT>
__device__ __forceinline__ void gemm_abt(float (&acc)[NT][4], const uint32_t (&a)[Dim<D>::P / 16][4],
                                         const T* tile, int lane) {
  constexpr int S = Dim<D>::S;
  // Tiles: columns 0-7 / 8-15 of the k-step (lane bit 3) x n-tiles nt / nt + 1 (lane bit 4).
  const T* rows = tile + ((lane / 16) * 8 + lane % 8) * S + (lane / 8 % 2) * 8;
#pragma unroll
  for (int nt = 0; nt < NT; nt += 2)
#pragma unroll
    for (int kk = 0; kk < Dim<D>::P / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, rows + 8 * nt * S + 16 * kk);
      mma16816<T>(acc[nt], a[kk], b[0], b[1]);
      mma16816<T>(acc[nt + 1], a[kk], b[2], b[3]);
    }
}

// acc (16 x P) += X (16 x 8NT, fp32 C fragments) . tile, tile stored [8NT][S] (k-major B
// operand, read with ldmatrix.trans). X is rounded to T on the way in.
template <typename T, int D, int NT>
__device__ __forceinline__ void gemm_xb(float (&acc)[Dim<D>::P / 8][4], const float (&x)[NT][4],
                                        const T* tile, int lane) {
  constexpr int S = Dim<D>::S;
#pragma unroll
  for (int kb = 0; kb < NT / 2; ++kb) {
    const uint32_t a[4] = {pack2<T>(x[2 * kb][0], x[2 * kb][1]), pack2<T>(x[2 * kb][2], x[2 * kb][3]),
                           pack2<T>(x[2 * kb + 1][0], x[2 * kb + 1][1]),
                           pack2<T>(x[2 * kb + 1][2], x[2 * kb + 1][3])};
    const T* rows = tile + (16 * kb + (lane / 8 % 2) * 8 + lane % 8) * S + (lane / 16) * 8;
#pragma unroll
    for (int np = 0; np < Dim<D>::P / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, rows + 16 * np);
      mma16816<T>(acc[2 * np], a, b[0], b[1]);
      mma16816<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Everything a block needs about (b, r, h).
struct Row {
  int64_t b, r, h;
};

__device__ __forceinline__ Row row_of(const TriangleAttentionParams& p, int64_t x) {
  return {x / (p.R * p.H), (x / p.H) % p.R, x % p.H};
}

__device__ __forceinline__ const float* mask_row(const TriangleAttentionParams& p, Row x) {
  return p.mask != nullptr ? p.mask + (x.b * p.R + x.r) * p.mask_ld : nullptr;
}

// Row statistics lse and delta are [B, R, H, N]; this is the start of one (b, r, h) row.
__device__ __forceinline__ int64_t stat(const TriangleAttentionParams& p, Row x, int64_t n) {
  return ((x.b * p.R + x.r) * p.H + x.h) * p.N + n;
}

// d_o, o and the gradients are contiguous [B, R, N, H, d]; every instantiated d is a multiple
// of 8, so their rows are 16-byte aligned.
constexpr int kDenseVec = 8;

__device__ __forceinline__ int64_t dense_row(const TriangleAttentionParams& p, Row x, int64_t n) {
  return (((x.b * p.R + x.r) * p.N + n) * p.H + x.h) * p.d;
}

struct Strides5 {
  int64_t s[5];
};
__device__ __forceinline__ Strides5 dense_strides(const TriangleAttentionParams& p) {
  return {{p.R * p.N * p.H * p.d, p.N * p.H * p.d, p.H * p.d, p.d, 1}};
}

template <typename T>
__device__ __forceinline__ Slice<T> dense_slice(const TriangleAttentionParams& p, const void* t, Row x) {
  return {static_cast<const T*>(t) + dense_row(p, x, 0), p.H * p.d};
}

// The [N, N] bias matrix of (b, h), or null.
template <typename T>
__device__ __forceinline__ const T* bias_matrix(const TriangleAttentionParams& p, int64_t b, int64_t h) {
  return p.bias != nullptr ? static_cast<const T*>(p.bias) + (b * p.H + h) * p.N * p.N : nullptr;
}

// s = s * scale + bias for a 16 x 8NT score block, the bias read from a shared tile of T with
// ldmatrix straight into the C-fragment layout (one instruction per 16 x 16). lane_row: this
// lane's ldmatrix row address for the first 16 x 16 (see the callers); step: elements from
// one 16 x 16 to the next. With kTrans the tile is stored transposed ([column][row]).
// Register q of each ldmatrix holds c0c1 (q = 0, 2) or c2c3 (q = 1, 3) of n-tile 2kk + q / 2.
template <typename T, bool kTrans, int NT>
__device__ __forceinline__ void scale_add_bias(float (&s)[NT][4], const T* lane_row, int step, float scale) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t b[4];
    if (kTrans)
      ldmatrix_x4_trans(b, lane_row + kk * step);
    else
      ldmatrix_x4(b, lane_row + kk * step);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 bf = mma::unpack2<T>(b[q]);
      float* c = &s[2 * kk + q / 2][2 * (q % 2)];
      c[0] = fmaf(c[0], scale, bf.x);
      c[1] = fmaf(c[1], scale, bf.y);
    }
  }
}

// Logits of warp `warp`'s 16 x kCols block from its scores: s * scale + bias, where bt is a
// [kRows][kCols + 8] bias tile whose rows are the block's rows (null: no bias).
template <typename T>
__device__ __forceinline__ void scores_to_logits(float (&s)[kNT][4], const T* bt, float scale, int warp, int lane) {
  if (bt != nullptr) {
    // 8x8 tiles (rows 0-7 | 8-15 of the warp: lane bit 3) x (n-tile 2kk | 2kk + 1: lane bit 4).
    const T* row = bt + (16 * warp + (lane / 8 % 2) * 8 + lane % 8) * (kCols + 8) + (lane / 16) * 8;
    scale_add_bias<T, false>(s, row, 16, scale);
    return;
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] *= scale;
}

// Score accumulators of a 16 x 8NT block (rows row0..row0+15 of a [rows][kBiasStride] fp32
// bias tile, columns col0..) initialised to bias / scale, so that the products accumulate on
// top of it and scale * acc are the logits; zeros without a bias (bt null).
template <int NT>
__device__ __forceinline__ void init_scores(float (&s)[NT][4], const float* bt, int row0, int col0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float2 b = make_float2(0.f, 0.f);
      if (bt != nullptr) b = *reinterpret_cast<const float2*>(bt + (row0 + g + 8 * h) * kBiasStride + col0 + 8 * nt + 2 * t);
      s[nt][2 * h] = b.x;
      s[nt][2 * h + 1] = b.y;
    }
}

template <int NT>
__device__ __forceinline__ void zero(float (&a)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) a[nt][0] = a[nt][1] = a[nt][2] = a[nt][3] = 0.f;
}

// Adds the additive key mask km (-inf = masked or past N) of a tile's keys to a 16 x kCols
// score block.
__device__ __forceinline__ void add_key_mask(float (&s)[kNT][4], const float* km, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const float2 m = *reinterpret_cast<const float2*>(km + 8 * nt + 2 * t);
    s[nt][0] += m.x, s[nt][1] += m.y, s[nt][2] += m.x, s[nt][3] += m.y;
  }
}

// Stores a 16 x P fp32 fragment block (rows i_a and i_a + 8) times mul[half] into a
// [B, R, N, H, d] tensor of T with strides `s`; with a gate, times sigmoid(gate) too.
template <typename T, int D>
__device__ __forceinline__ void store_rows(void* out, const int64_t (&s)[5], const TriangleAttentionParams& p, Row x,
                                           int64_t i_a, const float (&acc)[Dim<D>::P / 8][4], const float (&mul)[2],
                                           const void* gate, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i_a + 8 * half;
    if (i >= p.N) continue;
    T* row = static_cast<T*>(out) + x.b * s[0] + x.r * s[1] + i * s[2] + x.h * s[3];
    const T* g = gate == nullptr ? nullptr
                                 : static_cast<const T*>(gate) + x.b * p.gate_stride[0] + x.r * p.gate_stride[1] +
                                       i * p.gate_stride[2] + x.h * p.gate_stride[3];
#pragma unroll
    for (int nt = 0; nt < Dim<D>::P / 8; ++nt) {
      const int c = 8 * nt + 2 * t;
      if (c >= D) continue;
      float v0 = acc[nt][2 * half] * mul[half], v1 = acc[nt][2 * half + 1] * mul[half];
      if (g != nullptr) {
        v0 /= 1.f + __expf(-static_cast<float>(g[c]));
        v1 /= 1.f + __expf(-static_cast<float>(g[c + 1]));
      }
      *reinterpret_cast<uint32_t*>(row + c) = pack2<T>(v0, v1);
    }
  }
}

// One streamed step of the forward and dQ kernels: a key tile, its values, the bias tile
// (this block's queries x these keys) and the key mask.
// Each stage type is a view of one half of a double buffer: piece addresses are computed from
// its base (half(buf) moves to the other half) rather than kept in an array indexed at run
// time, which would put them in local memory and lose their shared-memory address space.
template <typename T, int D>
struct KeyStage {
  using B = Bytes<T, D>;
  static constexpr int tile = B::template tile<kCols>, bias_bytes = B::template bias<kRows, kCols>;
  static constexpr int bytes = 2 * tile + bias_bytes + B::template vec<kCols>;
  unsigned char* at;  // one half of the double buffer
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(at + tile); }
  __device__ __forceinline__ T* bias() const { return reinterpret_cast<T*>(at + 2 * tile); }
  __device__ __forceinline__ float* mask() const { return reinterpret_cast<float*>(at + 2 * tile + bias_bytes); }
  __device__ __forceinline__ KeyStage half(int64_t buf) const { return {at + buf * bytes}; }

  // Where the tiles come from; fixed for a block.
  struct Source {
    Slice<T> k, v;
    const T* bias;
    const float* mask;
    int vec;
  };
  __device__ __forceinline__ static Source source(const TriangleAttentionParams& p, Row x, int vec) {
    return {slice<T>(p.k, p.k_stride, x.b, x.r, x.h), slice<T>(p.v, p.v_stride, x.b, x.r, x.h),
            bias_matrix<T>(p, x.b, x.h), mask_row(p, x), vec};
  }
  __device__ __forceinline__ void load(const Source& src, int64_t N, int64_t i0, int64_t j0) const {
    load_tile<T, D, kCols>(k(), src.k, j0, N, src.vec);
    load_tile<T, D, kCols>(v(), src.v, j0, N, src.vec);
    if (src.bias != nullptr) load_bias_tile<T, kRows, kCols>(bias(), src.bias, i0, j0, N);
    load_vec<kCols>(mask(), src.mask, j0, N, -INFINITY);
  }
};

template <typename T, int D>
constexpr int key_loop_smem() { return 2 * KeyStage<T, D>::bytes; }

// The column of the value tiles' padding that holds ones: P . [V | 1] gives the softmax row
// sums on the tensor cores (one more n-tile of products instead of a float add per score).
template <int D>
constexpr int kOnesCol = Dim<D>::P;

// Writes the ones column (and zeros beside it) into the padding of both value buffers; the
// tile loads never touch the padding.
template <typename T, int D>
__device__ __forceinline__ void init_ones_column(const KeyStage<T, D>& stage) {
  if (threadIdx.x >= 2 * kCols) return;
  T* row = stage.half(threadIdx.x / kCols).v() + (threadIdx.x % kCols) * Dim<D>::S + kOnesCol<D>;
  T e[8];
#pragma unroll
  for (int x = 0; x < 8; ++x) e[x] = static_cast<T>(x == 0 ? 1.f : 0.f);
  *reinterpret_cast<uint4*>(row) = *reinterpret_cast<const uint4*>(e);
}

// l (16 x 8, column 0 = row sums) += X (16 x kCols) . [ones column block of the value tile].
template <typename T, int D>
__device__ __forceinline__ void gemm_row_sums(float (&l)[4], const float (&x)[kNT][4], const T* vtile, int lane) {
  constexpr int S = Dim<D>::S;
#pragma unroll
  for (int kb = 0; kb < kNT / 2; ++kb) {
    const uint32_t a[4] = {pack2<T>(x[2 * kb][0], x[2 * kb][1]), pack2<T>(x[2 * kb][2], x[2 * kb][3]),
                           pack2<T>(x[2 * kb + 1][0], x[2 * kb + 1][1]),
                           pack2<T>(x[2 * kb + 1][2], x[2 * kb + 1][3])};
    uint32_t b[2];
    ldmatrix_x2_trans(b, vtile + (16 * kb + (lane / 8 % 2) * 8 + lane % 8) * S + kOnesCol<D>);
    mma16816<T>(l, a, b[0], b[1]);
  }
}

// Forward: block = (b, r, h, 128 queries); loops over key tiles with an online softmax.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) forward_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  const KeyStage<T, D> stage{smem};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n_tiles = (p.N + kRows - 1) / kRows;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t i0 = blockIdx.x % n_tiles * kRows;
  const auto src = KeyStage<T, D>::source(p, x, vec);
  const bool has_bias = p.bias != nullptr;

  stage.load(src, p.N, i0, 0);
  cp_async_commit();
  init_ones_column<T, D>(stage);
  uint32_t qa[P / 16][4];
  load_a_global<T, D>(qa, slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0 + 16 * warp, p.N, vec, lane);

  float acc[P / 8][4] = {}, l[4] = {};
  float m[2] = {-INFINITY, -INFINITY};  // running row maxima of the logits
  const int64_t steps = (p.N + kCols - 1) / kCols;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, i0, (step + 1) * kCols);
    cp_async_commit();
    cp_async_wait<1>();
    const KeyStage<T, D> cur = stage.half(step % 2);
    const bool masked = sync_any_masked(cur.mask());
    float s[kNT][4];
    zero(s);
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    scores_to_logits<T>(s, has_bias ? cur.bias() : nullptr, p.scale, warp, lane);
    if (masked) add_key_mask(s, cur.mask(), lane);
    float off[2];  // -(row max) * log2(e)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Pairwise tree: short dependency chains.
      float mx[kNT];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
      for (int w = kNT / 2; w > 0; w /= 2)
#pragma unroll
        for (int nt = 0; nt < w; ++nt) mx[nt] = fmaxf(mx[nt], mx[nt + w]);
      const float m_new = fmaxf(m[h], quad_max(mx[0]));
      // A row with no valid key so far keeps max -inf; subtract 0 instead (all terms are 0).
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2_approx((m[h] - m_use) * kLog2e);
      m[h] = m_new;
      off[h] = -m_use * kLog2e;
      l[2 * h] *= corr;
#pragma unroll
      for (int nt = 0; nt < P / 8; ++nt) acc[nt][2 * h] *= corr, acc[nt][2 * h + 1] *= corr;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = exp2_approx(fmaf(s[nt][e], kLog2e, off[e / 2]));
    gemm_xb<T, D>(acc, s, cur.v(), lane);
    gemm_row_sums<T, D>(l, s, cur.v(), lane);
    __syncthreads();  // this half of the buffer is refilled next step
  }
  const int64_t i_a = i0 + 16 * warp + g;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = __shfl_sync(0xffffffffu, l[2 * h], lane & ~3);  // column 0 sits at t = 0
    inv[h] = sum > 0.f ? 1.f / sum : 0.f;  // a fully masked row gives zeros
    const int64_t i = i_a + 8 * h;
    if (i < p.N && t == 0) p.lse[stat(p, x, i)] = sum > 0.f ? fmaf(m[h], kLog2e, log2f(sum)) : INFINITY;
  }
  store_rows<T, D>(p.o, dense_strides(p).s, p, x, i_a, acc, inv, nullptr, lane);
  // The gated output straight from the registers: the gate costs no extra pass over o.
  if (p.gate != nullptr) store_rows<T, D>(p.out, p.out_stride, p, x, i_a, acc, inv, p.gate, lane);
}

// dS = P * (dP - delta) for a 16 x 8NT block: s holds c * s = base-2 logits and dp holds
// dO V^T on entry; s holds dS on exit. lse2: the rows' base-2 log-sum-exp (+inf: fully masked
// or past N).
template <int NT>
__device__ __forceinline__ void scores_to_ds(float (&s)[NT][4], const float (&dp)[NT][4], const float (&lse2)[2],
                                             const float (&delta)[2], float c) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[nt][e] = exp2_approx(fmaf(s[nt][e], c, -lse2[e / 2])) * (dp[nt][e] - delta[e / 2]);
}

// The lse (base 2) and delta of this thread's rows i_a and i_a + 8 (past N: P = 0).
__device__ __forceinline__ void row_stats(const TriangleAttentionParams& p, Row x, int64_t i_a, float (&lse2)[2],
                                          float (&delta)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = i_a + 8 * h;
    lse2[h] = i < p.N ? p.lse[stat(p, x, i)] : INFINITY;
    delta[h] = i < p.N ? p.delta[stat(p, x, i)] : 0.f;
  }
}

// dQ: block = (b, r, h, 128 queries); loops over key tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) dq_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  const KeyStage<T, D> stage{smem};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int64_t n_tiles = (p.N + kRows - 1) / kRows;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t i0 = blockIdx.x % n_tiles * kRows;
  const int64_t i_a = i0 + 16 * warp + g;
  const auto src = KeyStage<T, D>::source(p, x, vec);
  const bool has_bias = p.bias != nullptr;

  stage.load(src, p.N, i0, 0);
  cp_async_commit();
  uint32_t qa[P / 16][4], da[P / 16][4];
  load_a_global<T, D>(qa, slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0 + 16 * warp, p.N, vec, lane);
  load_a_global<T, D>(da, dense_slice<T>(p, p.d_o, x), i0 + 16 * warp, p.N, kDenseVec, lane);
  float lse2[2], delta[2];
  row_stats(p, x, i_a, lse2, delta);

  float acc[P / 8][4] = {};
  const int64_t steps = (p.N + kCols - 1) / kCols;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, i0, (step + 1) * kCols);
    cp_async_commit();
    cp_async_wait<1>();
    const KeyStage<T, D> cur = stage.half(step % 2);
    const bool masked = sync_any_masked(cur.mask());
    float s[kNT][4], dp[kNT][4];
    zero(s);
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    zero(dp);
    gemm_abt<T, D>(dp, da, cur.v(), lane);
    scores_to_logits<T>(s, has_bias ? cur.bias() : nullptr, p.scale, warp, lane);
    if (masked) add_key_mask(s, cur.mask(), lane);
    scores_to_ds(s, dp, lse2, delta, kLog2e);
    gemm_xb<T, D>(acc, s, cur.k(), lane);
    __syncthreads();
  }
  const float mul[2] = {p.scale, p.scale};
  store_rows<T, D>(p.dq, p.dq_stride, p, x, i_a, acc, mul, nullptr, lane);
}

// One streamed step of the dK/dV kernel: a query tile, its output gradient, the bias tile
// (these queries x this block's keys) and the queries' lse and delta.
template <typename T, int D>
struct QueryStage {
  using B = Bytes<T, D>;
  static constexpr int tile = B::template tile<kCols>, bias_bytes = B::template bias<kCols, kRows>;
  static constexpr int bytes = 2 * tile + bias_bytes + 2 * B::template vec<kCols>;
  unsigned char* at;
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* d_o() const { return reinterpret_cast<T*>(at + tile); }
  __device__ __forceinline__ T* bias() const { return reinterpret_cast<T*>(at + 2 * tile); }
  __device__ __forceinline__ float* lse() const { return reinterpret_cast<float*>(at + 2 * tile + bias_bytes); }
  __device__ __forceinline__ float* delta() const { return lse() + kCols; }
  __device__ __forceinline__ QueryStage half(int64_t buf) const { return {at + buf * bytes}; }

  struct Source {
    Slice<T> q, d_o;
    const T* bias;
    const float *lse, *delta;
    int vec;
  };
  __device__ __forceinline__ static Source source(const TriangleAttentionParams& p, Row x, int vec) {
    return {slice<T>(p.q, p.q_stride, x.b, x.r, x.h), dense_slice<T>(p, p.d_o, x), bias_matrix<T>(p, x.b, x.h),
            p.lse + stat(p, x, 0), p.delta + stat(p, x, 0), vec};
  }
  __device__ __forceinline__ void load(const Source& src, int64_t N, int64_t i0, int64_t j0) const {
    load_tile<T, D, kCols>(q(), src.q, i0, N, src.vec);
    load_tile<T, D, kCols>(d_o(), src.d_o, i0, N, kDenseVec);
    if (src.bias != nullptr) load_bias_tile<T, kCols, kRows>(bias(), src.bias, i0, j0, N);
    load_vec<kCols>(lse(), src.lse, i0, N, INFINITY);  // queries past N get P = 0
    load_vec<kCols>(delta(), src.delta, i0, N, 0.f);
  }
};

template <typename T, int D>
constexpr int dkv_smem() { return 2 * Bytes<T, D>::template tile<kRows> + 2 * QueryStage<T, D>::bytes; }

// dK, dV: block = (b, r, h, 128 keys); loops over query tiles, each in two halves of 32
// queries (half the score registers, which keeps the kernel at two blocks per SM). Works on
// transposed scores S^T = K Q^T so that the keys are the fragment rows. A masked key has
// P = 0 in every row, so its dK and dV are zero: the mask is applied once, at the store.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) dkv_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P, S = Dim<D>::S;
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  T* ks = carve.take<T>(Bytes<T, D>::template tile<kRows>);
  T* vs = carve.take<T>(Bytes<T, D>::template tile<kRows>);
  const QueryStage<T, D> stage{carve.take<unsigned char>(2 * QueryStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n_tiles = (p.N + kRows - 1) / kRows;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t j0 = blockIdx.x % n_tiles * kRows;
  const int64_t j_a = j0 + 16 * warp + g;
  const bool has_bias = p.bias != nullptr;

  load_tile<T, D, kRows>(ks, slice<T>(p.k, p.k_stride, x.b, x.r, x.h), j0, p.N, vec);
  load_tile<T, D, kRows>(vs, slice<T>(p.v, p.v_stride, x.b, x.r, x.h), j0, p.N, vec);
  const auto src = QueryStage<T, D>::source(p, x, vec);
  stage.load(src, p.N, 0, j0);
  cp_async_commit();

  float dk[P / 8][4] = {}, dv[P / 8][4] = {};
  const int64_t steps = (p.N + kCols - 1) / kCols;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, (step + 1) * kCols, j0);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const QueryStage<T, D> cur = stage.half(step % 2);
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      const int q0 = half * (kCols / 2);  // first query of this half within the tile
      float s[kHalfNT][4], dp[kHalfNT][4];
      zero(s);
      zero(dp);
      {
        // K and V fragments are re-read from shared memory (4 ldmatrix per product) rather
        // than held: 16 fewer live registers keep the kernel at two blocks per SM.
        uint32_t a[P / 16][4];
        load_a<T, D>(a, ks, warp, lane);
        gemm_abt<T, D>(s, a, cur.q() + q0 * S, lane);
        load_a<T, D>(a, vs, warp, lane);
        gemm_abt<T, D>(dp, a, cur.d_o() + q0 * S, lane);
      }
      if (has_bias) {
        // Bias^T in the C-fragment layout of S^T: ldmatrix.trans of the [query][key] tile,
        // 8x8 tiles (keys 0-7 | 8-15 of the warp: lane bit 3) x (queries of n-tile 2kk |
        // 2kk + 1: lane bit 4).
        const T* row = cur.bias() + (q0 + (lane / 16) * 8 + lane % 8) * (kRows + 8) + 16 * warp + (lane / 8 % 2) * 8;
        scale_add_bias<T, true>(s, row, 16 * (kRows + 8), p.scale);
      } else {
#pragma unroll
        for (int nt = 0; nt < kHalfNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale;
      }
#pragma unroll
      for (int nt = 0; nt < kHalfNT; ++nt) {
        const int ii = q0 + 8 * nt + 2 * t;  // the query (column of S^T) of e = 0, 2; ii + 1 of e = 1, 3
        const float2 lse = *reinterpret_cast<const float2*>(cur.lse() + ii);
        const float2 del = *reinterpret_cast<const float2*>(cur.delta() + ii);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pr = exp2_approx(fmaf(s[nt][e], kLog2e, -(e & 1 ? lse.y : lse.x)));
          s[nt][e] = pr;                                          // P^T, for dV
          dp[nt][e] = pr * (dp[nt][e] - (e & 1 ? del.y : del.x));  // dS^T, for dK
        }
      }
      gemm_xb<T, D>(dv, s, cur.d_o() + q0 * S, lane);
      gemm_xb<T, D>(dk, dp, cur.q() + q0 * S, lane);
    }
    __syncthreads();
  }
  const float* mrow = mask_row(p, x);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t j = j_a + 8 * h;
    if (j < p.N && (mrow == nullptr || mrow[j] == 0.f)) continue;
#pragma unroll
    for (int nt = 0; nt < P / 8; ++nt) dk[nt][2 * h] = dk[nt][2 * h + 1] = dv[nt][2 * h] = dv[nt][2 * h + 1] = 0.f;
  }
  const float k_mul[2] = {p.scale, p.scale}, v_mul[2] = {1.f, 1.f};
  store_rows<T, D>(p.dk, p.dk_stride, p, x, j_a, dk, k_mul, nullptr, lane);
  store_rows<T, D>(p.dv, p.dv_stride, p, x, j_a, dv, v_mul, nullptr, lane);
}

// One streamed step of the bias-gradient kernel: row r's queries and output gradient (the
// block's 128), its keys and values (the block's 64), its key mask and the queries' lse and
// delta.
template <typename T, int D>
struct RowStage {
  using B = Bytes<T, D>;
  static constexpr int rows = B::template tile<kRows>, cols = B::template tile<kCols>;
  static constexpr int bytes = 2 * rows + 2 * cols + B::template vec<kCols> + 2 * B::template vec<kRows>;
  unsigned char* at;
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* d_o() const { return reinterpret_cast<T*>(at + rows); }
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(at + 2 * rows); }
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(at + 2 * rows + cols); }
  __device__ __forceinline__ float* mask() const { return reinterpret_cast<float*>(at + 2 * rows + 2 * cols); }
  __device__ __forceinline__ float* lse() const { return mask() + kCols; }
  __device__ __forceinline__ float* delta() const { return lse() + kRows; }
  __device__ __forceinline__ RowStage half(int64_t buf) const { return {at + buf * bytes}; }

  __device__ __forceinline__ void load(const TriangleAttentionParams& p, Row x, int64_t i0, int64_t j0, int vec) const {
    load_tile<T, D, kRows>(q(), slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0, p.N, vec);
    load_tile<T, D, kRows>(d_o(), dense_slice<T>(p, p.d_o, x), i0, p.N, kDenseVec);
    load_tile<T, D, kCols>(k(), slice<T>(p.k, p.k_stride, x.b, x.r, x.h), j0, p.N, vec);
    load_tile<T, D, kCols>(v(), slice<T>(p.v, p.v_stride, x.b, x.r, x.h), j0, p.N, vec);
    load_vec<kCols>(mask(), mask_row(p, x), j0, p.N, -INFINITY);
    load_vec<kRows>(lse(), p.lse + stat(p, x, 0), i0, p.N, INFINITY);  // queries past N get P = 0
    load_vec<kRows>(delta(), p.delta + stat(p, x, 0), i0, p.N, 0.f);
  }
};

template <typename T, int D>
constexpr int dbias_smem() { return kRows * kBiasStride * sizeof(float) + 2 * RowStage<T, D>::bytes; }

// Bias gradient partial: block = (b, h, chunk, 128 queries, 64 keys); loops over the rows
// r of its chunk in order and keeps sum_r dS in registers.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) dbias_kernel(const TriangleAttentionParams p, int vec, int64_t chunks) {
  constexpr int P = Dim<D>::P;
  static_assert(Bytes<T, D>::template bias<kRows, kCols> <= RowStage<T, D>::bytes, "raw bias tile fits a stage");
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  float* bias = carve.take<float>(kRows * kBiasStride * sizeof(float));
  const RowStage<T, D> stage{carve.take<unsigned char>(2 * RowStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row_tiles = (p.N + kRows - 1) / kRows, col_tiles = (p.N + kCols - 1) / kCols;
  const int64_t j0 = blockIdx.x % col_tiles * kCols, i0 = blockIdx.x / col_tiles % row_tiles * kRows;
  const int64_t rest = blockIdx.x / (col_tiles * row_tiles), chunk = rest % chunks, bh = rest / chunks;
  const int64_t b = bh / p.H, h = bh % p.H;
  const int64_t rows_per = (p.R + chunks - 1) / chunks;
  const int64_t r_begin = chunk * rows_per < p.R ? chunk * rows_per : p.R;
  const int64_t r_end = r_begin + rows_per < p.R ? r_begin + rows_per : p.R;
  const int64_t i_a = i0 + 16 * warp + g;
  const float c = p.scale * kLog2e;

  // The bias tile is the same for every row r: read once, kept as float divided by scale so
  // that it initialises the score accumulators (scale * acc are the logits). The first row's
  // stage doubles as the staging area of the raw tile.
  if (p.bias != nullptr) {
    T* raw = reinterpret_cast<T*>(stage.at);
    load_bias_tile<T, kRows, kCols>(raw, bias_matrix<T>(p, b, h), i0, j0, p.N);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRows * kCols; idx += kThreads) {
      const int row = idx / kCols, col = idx % kCols;
      bias[row * kBiasStride + col] = static_cast<float>(raw[row * (kCols + 8) + col]) / p.scale;
    }
    __syncthreads();
  }
  if (r_begin < r_end) stage.load(p, {b, r_begin, h}, i0, j0, vec);
  cp_async_commit();

  float acc[kNT][4] = {};
  for (int64_t r = r_begin; r < r_end; ++r) {
    if (r + 1 < r_end) stage.half((r - r_begin + 1) % 2).load(p, {b, r + 1, h}, i0, j0, vec);
    cp_async_commit();
    cp_async_wait<1>();
    const RowStage<T, D> cur = stage.half((r - r_begin) % 2);
    const bool masked = sync_any_masked(cur.mask());
    uint32_t qa[P / 16][4], da[P / 16][4];
    load_a<T, D>(qa, cur.q(), warp, lane);
    load_a<T, D>(da, cur.d_o(), warp, lane);
    const int row = 16 * warp + g;
    const float lse2[2] = {cur.lse()[row], cur.lse()[row + 8]}, delta[2] = {cur.delta()[row], cur.delta()[row + 8]};
    float s[kNT][4], dp[kNT][4];
    init_scores(s, p.bias != nullptr ? bias : nullptr, 16 * warp, 0, lane);
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    zero(dp);
    gemm_abt<T, D>(dp, da, cur.v(), lane);
    if (masked) add_key_mask(s, cur.mask(), lane);
    scores_to_ds(s, dp, lse2, delta, c);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nt][e] += s[nt][e];
    __syncthreads();
  }
  float* out = p.dbias_partial + (chunk * p.B * p.H + bh) * p.N * p.N;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int64_t i = i_a + 8 * (e / 2);
    if (i >= p.N) continue;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t j = j0 + 8 * nt + 2 * t + (e & 1);
      if (j < p.N) out[i * p.N + j] = acc[nt][e];
    }
  }
}

// Zeros n elements from `to` on in the widest aligned stores (16 bytes at most).
template <typename Out>
__device__ __forceinline__ void zero_run(Out* to, int64_t n) {
  static_assert(sizeof(Out) >= 2, "2-byte stores at the narrowest");
  char* at = reinterpret_cast<char*>(to);
  char* const end = at + n * static_cast<int64_t>(sizeof(Out));
  auto fits = [&](int bytes) { return reinterpret_cast<uintptr_t>(at) % bytes == 0 && at + bytes <= end; };
  while (at < end) {
    const int bytes = fits(16) ? 16 : fits(8) ? 8 : fits(4) ? 4 : 2;
    if (bytes == 16) *reinterpret_cast<uint4*>(at) = make_uint4(0, 0, 0, 0);
    else if (bytes == 8) *reinterpret_cast<uint2*>(at) = make_uint2(0, 0);
    else if (bytes == 4) *reinterpret_cast<uint32_t*>(at) = 0;
    else *reinterpret_cast<uint16_t*>(at) = 0;
    at += bytes;
  }
}

// dbias = sum over chunks, in chunk order, rounded once to Out and stored through dbias_stride.
// Block x = row (b, i), block y = 256 keys j, a thread per (b, i, j) over all heads (no 64-bit
// index division, which cost as much as the traffic): each head's partials are read coalesced.
// kHeads adjacent heads go out as one store: 4 when the output is the projection's bias columns
// (heads adjacent, rows 4 H d + H elements apart, where the stores are sectors apart and one
// 8-byte store a pair row beats four 2-byte ones), else 1. A projection's padding columns after
// the heads (dbias_zero_after) are zeroed here too, by the thread that owns the pair row: a
// strided fill of their own took 0.08 ms at N = 768 and left both writes partial sectors.
// kRun64: the model's layout, four 16-bit heads and 28 padding columns making one 16-byte aligned
// 64-byte run per pair row: a warp's 32 runs go out as whole 16-byte pieces, four lanes to a run
// (each lane storing its own run made every store instruction touch 32 sectors: 0.12 ms a call
// at N = 768).
template <typename Out, int kHeads, bool kRun64 = false>
__global__ void dbias_reduce_kernel(const TriangleAttentionParams p, int64_t chunks) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const bool in = j < p.N;
  if (!kRun64 && !in) return;  // with kRun64 every lane of a warp takes part in the exchange
  const int n = static_cast<int>(p.N), row = static_cast<int>(blockIdx.x);  // B * N < 2^31 (the grid's limit)
  const int64_t b = row / n, i = row % n, plane = p.N * p.N, chunk = p.B * p.H * plane;
  const int64_t* s = p.dbias_stride;
  Out* const pair_rows = static_cast<Out*>(p.dbias) + b * s[0] + i * s[2];
  for (int64_t h0 = 0; h0 < p.H; h0 += kHeads) {
    Out v[kHeads];
#pragma unroll
    for (int k = 0; k < kHeads; ++k) {
      const float* partial = p.dbias_partial + (b * p.H + h0 + k) * plane + i * p.N + j;
      v[k] = static_cast<Out>(in ? ordered_sum(partial, chunks, chunk) : 0.f);
    }
    if constexpr (kRun64) {
      static_assert(kHeads * sizeof(Out) == 8, "four 16-bit heads");
      const uint2 heads = *reinterpret_cast<const uint2*>(v);
      const int lane = static_cast<int>(threadIdx.x % 32), piece = lane % 4;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int owner = 8 * r + lane / 4;
        const uint32_t x = __shfl_sync(0xffffffffu, heads.x, owner), y = __shfl_sync(0xffffffffu, heads.y, owner);
        const int64_t j_run = j - lane + owner;
        if (j_run < p.N)
          *reinterpret_cast<uint4*>(pair_rows + j_run * s[3] + 8 * piece) =
              piece == 0 ? make_uint4(x, y, 0, 0) : make_uint4(0, 0, 0, 0);
      }
    } else if constexpr (kHeads == 1) {
      pair_rows[h0 * s[1] + j * s[3]] = v[0];
    } else {
      static_assert(kHeads * sizeof(Out) == 8, "one 8-byte store");
      *reinterpret_cast<uint2*>(pair_rows + h0 * s[1] + j * s[3]) = *reinterpret_cast<const uint2*>(v);
    }
  }
  if (!kRun64 && p.dbias_zero_after > 0) zero_run(pair_rows + p.H + j * s[3], p.dbias_zero_after);
}

int64_t tiles(int64_t n, int per) { return (n + per - 1) / per; }

}  // namespace

void dbias_reduce(const TriangleAttentionParams& p, int64_t chunks, void* stream) {
  if (chunks == 1 && static_cast<void*>(p.dbias_partial) == p.dbias) return;  // written in place
  MF_CHECK(p.B * p.N <= 0x7fffffff, "triangle_attention CUDA: ", p.B * p.N, " bias rows exceed the grid limit");
  const dim3 blocks(static_cast<unsigned int>(p.B * p.N),
                    static_cast<unsigned int>((p.N + kBlockThreads - 1) / kBlockThreads));
  const auto s = static_cast<cudaStream_t>(stream);
  // Four adjacent 16-bit heads per store when every group of them starts 8-byte aligned.
  const int64_t* st = p.dbias_stride;
  MF_CHECK(p.dbias_zero_after == 0 || st[1] == 1,
           "triangle_attention CUDA: zeros after the bias heads need the heads adjacent");
  const bool packed = p.dbias_dtype != DType::kFloat32 && st[1] == 1 && p.H % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(p.dbias) % 8 == 0 && st[0] % 4 == 0 && st[2] % 4 == 0 &&
                      st[3] % 4 == 0;
  // The model's 64-byte runs of heads and padding (every run 16-byte aligned).
  const bool run64 = packed && p.H == 4 && 8 + 2 * p.dbias_zero_after == 64 &&
                     reinterpret_cast<uintptr_t>(p.dbias) % 16 == 0 && st[0] % 8 == 0 && st[2] % 8 == 0 &&
                     st[3] % 8 == 0;
  auto run = [&](auto kernel) { launch_kernel(kernel, blocks, kBlockThreads, 0, s, p, chunks); };
  auto run16 = [&](auto t) {
    using T = decltype(t);
    if (run64) run(dbias_reduce_kernel<T, 4, true>);
    else if (packed) run(dbias_reduce_kernel<T, 4>);
    else run(dbias_reduce_kernel<T, 1>);
  };
  switch (p.dbias_dtype) {
    case DType::kFloat32: return run(dbias_reduce_kernel<float, 1>);
    case DType::kFloat16: return run16(__half{});
    case DType::kBFloat16: return run16(__nv_bfloat16{});
  }
}

namespace {

unsigned int grid_size(int64_t blocks) {
  MF_CHECK(blocks <= 0x7fffffff, "triangle_attention CUDA: ", blocks, " blocks exceed the grid limit");
  return static_cast<unsigned int>(blocks);
}

// The widest global load every q/k/v row start allows (all strides but the last, and the
// base pointers, multiples of the width).
int vector_width(const TriangleAttentionParams& p) {
  auto fits = [&](int w) {
    for (const auto& [ptr, s] : {std::pair{p.q, p.q_stride}, std::pair{p.k, p.k_stride}, std::pair{p.v, p.v_stride}}) {
      if (reinterpret_cast<uintptr_t>(ptr) % (2 * w) != 0) return false;
      for (int i = 0; i < 4; ++i)
        if (s[i] % w != 0) return false;
    }
    return true;
  };
  return fits(8) ? 8 : fits(2) ? 2 : 1;
}

// Launches a kernel of this file's block size with `bytes` of dynamic shared memory.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int bytes, cudaStream_t stream, Args... args) {
  launch_kernel(kernel, grid, kThreads, bytes, stream, args...);
}

// Grids are 1D with the tile index fastest: the blocks that share a row's keys and values
// (or, for dbias, one row r's tiles) run side by side and find them in L2.
template <typename T, int D>
void launch_forward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(grid_size(p.B * p.R * p.H * tiles(p.N, kRows)));
  launch(forward_kernel<T, D>, grid, key_loop_smem<T, D>(), stream, p, vector_width(p));
}

template <typename T, int D>
void launch_backward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const int vec = vector_width(p);
  const dim3 grid(grid_size(p.B * p.R * p.H * tiles(p.N, kRows)));
  launch(dq_kernel<T, D>, grid, key_loop_smem<T, D>(), stream, p, vec);
  launch(dkv_kernel<T, D>, grid, dkv_smem<T, D>(), stream, p, vec);
  if (p.dbias == nullptr) return;
  const int64_t chunks = dbias_partials_mma(p);
  const dim3 bias_grid(grid_size(p.B * p.H * chunks * tiles(p.N, kRows) * tiles(p.N, kCols)));
  launch(dbias_kernel<T, D>, bias_grid, dbias_smem<T, D>(), stream, p, vec, chunks);
  dbias_reduce(p, chunks, stream);
}

template <typename T>
void dispatch(const TriangleAttentionParams& p, cudaStream_t stream, bool backward) {
  auto run = [&](auto launch_fwd, auto launch_bwd) { backward ? launch_bwd(p, stream) : launch_fwd(p, stream); };
  switch (p.d) {
    case 16: return run(launch_forward<T, 16>, launch_backward<T, 16>);
    case 24: return run(launch_forward<T, 24>, launch_backward<T, 24>);
    case 32: return run(launch_forward<T, 32>, launch_backward<T, 32>);
    case 48: return run(launch_forward<T, 48>, launch_backward<T, 48>);
    case 64: return run(launch_forward<T, 64>, launch_backward<T, 64>);
    default: MF_CHECK(false, "triangle_attention CUDA: head dim ", p.d, " is not instantiated");
  }
}

void dispatch_dtype(const TriangleAttentionParams& p, void* stream, bool backward) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kFloat16) return dispatch<__half>(p, s, backward);
  MF_CHECK(p.dtype == DType::kBFloat16, "triangle_attention tensor-core kernels take fp16/bf16");
  dispatch<__nv_bfloat16>(p, s, backward);
}

}  // namespace

int64_t dbias_partials_mma(const TriangleAttentionParams& p) {
  if (p.bias == nullptr) return 0;
  // The row chunks: each block walks ceil(R / chunks) rows of one tile, and the blocks run in
  // rounds of kSlots (two per SM on a 132-SM H100/H200). The count minimises the kernel's length
  // in row steps, rounds x rows per block, plus a tenth of a block's length (the last blocks'
  // spread in finishing: two rounds of 1024-row blocks measured 3% slower than eight of 256), plus
  // what each chunk adds to the reduction (its H N^2 floats written and read, about one row step
  // per 2^19 of them on an H100), without empty chunks. A fixed target of ~1600 blocks had left
  // the last round 6-27% full: 7 rounds of 128 rows at N = 768 where 12 of 70 do, 7 of 17 at 384
  // where 3 of 35 do. The partials are transient memory of the backward: beyond one chunk they
  // stay within 2^25 floats (128 MB; the fixed target took up to 75 MB), which caps N = 1536 at 3
  // chunks and 2048 at 2 where the model alone would take 8 and 5. Constants, not the GPU's SM
  // count: the chunks fix the order of the sum, so the bias gradient is bitwise the same on
  // every GPU.
  constexpr int64_t kSlots = 264, kMaxPartials = int64_t{1} << 25;
  const int64_t tile_blocks = p.B * p.H * tiles(p.N, kRows) * tiles(p.N, kCols);
  const double chunk_cost = static_cast<double>(p.B * p.H) * static_cast<double>(p.N * p.N) / (1 << 19);
  int64_t best = 1;
  double best_cost = -1.0;
  for (int64_t c = 1; c <= p.R; ++c) {
    if (c > 1 && c * p.B * p.H * p.N * p.N > kMaxPartials) break;
    const int64_t rows_per = (p.R + c - 1) / c;
    if ((c - 1) * rows_per >= p.R) continue;  // an empty chunk
    const double cost =
        static_cast<double>(tiles(tile_blocks * c, kSlots) * rows_per) + 0.1 * rows_per + chunk_cost * c;
    if (best_cost < 0.0 || cost < best_cost) best = c, best_cost = cost;
  }
  return best;
}

void forward_mma(const TriangleAttentionParams& p, void* stream) { dispatch_dtype(p, stream, false); }
void backward_mma(const TriangleAttentionParams& p, void* stream) { dispatch_dtype(p, stream, true); }

}  // namespace megafold::ops::cuda
