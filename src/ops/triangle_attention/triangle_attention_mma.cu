// Triangle attention on tensor cores (fp16/bf16 in, fp32 accumulate), flash-attention style:
// a block owns 64 queries (or 64 keys), each of its 4 warps 16 of them, and streams the other
// side through shared memory in tiles of 64. Scores, probabilities and their gradients live in
// registers; only the output, one log-sum-exp per row and the gradients are written, so no
// kernel stores anything of size N^3.
//
// Backward runs three kernels so that no gradient needs a cross-block sum (no atomics, hence
// bitwise-reproducible results):
//   dq     owns queries, loops over keys     dQ = dS K
//   dkv    owns keys, loops over queries     dK = dS^T Q,  dV = P^T dO
//   dbias  owns a 64x64 (query, key) tile, loops over the rows r of a chunk: sum_r dS
// with dS = P * (dO V^T - delta). Chunk partials of dbias are added in order afterwards.
// The softmax runs in base 2: logits are scaled by log2(e) once so every exponential is one
// ex2 instruction. Every streamed tile (keys or queries, their bias tile, mask or row
// statistics) is fetched with cp.async one step ahead into the other half of a double buffer,
// so global latency hides behind the tensor-core work of the current step.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/triangle_attention/triangle_attention_cuda.h"

namespace megafold::ops::cuda {
namespace {

using mma::cp_async16;
using mma::cp_async4;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::exp2_approx;
using mma::lds32;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma16816;
using mma::pack2;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 16 * kWarps;  // rows a block owns = rows of a streamed tile
constexpr int kNT = kTile / 8;      // 8-wide column tiles across a streamed tile
constexpr int kBS = kTile + 8;      // row stride of a shared 64x64 bias tile (bank spread)
constexpr float kLog2e = 1.4426950408889634f;

// Head dim d padded to the mma k-step (16); shared rows get 8 more elements so that the
// 32-bit fragment loads and ldmatrix rows of 8 consecutive rows hit distinct banks.
template <int D>
struct Dim {
  static constexpr int P = (D + 15) / 16 * 16;
  static constexpr int S = P + 8;
};

// Shared-memory pieces (bytes, all multiples of 16): a [kTile][S] operand tile, a
// [kTile][kBS] bias tile, a vector of kTile floats.
template <typename T, int D>
struct Bytes {
  static constexpr int tile = kTile * Dim<D>::S * sizeof(T);
  static constexpr int bias = kTile * kBS * sizeof(T);
  static constexpr int vec = kTile * sizeof(float);
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

// Queues rows n0..n0+kTile of a slice into a [kTile][S] shared tile, zeros past N and past
// d. vec: elements per global load the strides allow; 8 (16 bytes) goes through cp.async,
// narrower layouts are copied synchronously.
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

template <typename T, int D>
__device__ __forceinline__ void load_tile(T* tile, Slice<T> src, int64_t n0, int64_t N, int vec) {
  constexpr int S = Dim<D>::S, kChunks = Dim<D>::P / 8;
  static_assert(kTile * kChunks % kThreads == 0, "whole chunks per thread");
  const T* rows = src.base + n0 * src.stride_n;
#pragma unroll
  for (int it = 0; it < kTile * kChunks / kThreads; ++it) {
    const int idx = threadIdx.x + it * kThreads;
    const int row = idx / kChunks, c = (idx % kChunks) * 8;
    const bool valid = n0 + row < N && c < D;
    T* dst = tile + row * S + c;
    const T* from = rows + row * src.stride_n + c;
    if (vec == 8) {
      cp_async16(dst, valid ? from : src.base, valid);
    } else {
      *reinterpret_cast<uint4*>(dst) = valid ? load8_unaligned(from, vec) : make_uint4(0, 0, 0, 0);
    }
  }
}

// Queues m[r0.., c0..] (a 64x64 window of a contiguous [N, N] matrix) into a [kTile][kBS]
// tile, zeros outside. Rows are 16-byte aligned when N % 8 == 0; otherwise synchronous.
template <typename T>
__device__ __forceinline__ void load_bias_tile(T* tile, const T* m, int64_t r0, int64_t c0, int64_t N) {
#pragma unroll
  for (int it = 0; it < kTile * 8 / kThreads; ++it) {
    const int idx = threadIdx.x + it * kThreads;
    const int row = idx / 8, c = (idx % 8) * 8;
    const int64_t rr = r0 + row, cc = c0 + c;
    T* dst = tile + row * kBS + c;
    if (N % 8 == 0) {
      const bool valid = rr < N && cc < N;
      cp_async16(dst, valid ? m + rr * N + cc : m, valid);
      continue;
    }
    T e[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) e[x] = rr < N && cc + x < N ? m[rr * N + cc + x] : static_cast<T>(0.f);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(e);
  }
}

// Queues src[n0 .. n0+kTile] into a shared vector: `past` for entries at or past N, 0 where
// there is no src (a missing additive key mask attends every real key).
__device__ __forceinline__ void load_vec(float* dst, const float* src, int64_t n0, int64_t N, float past) {
  if (threadIdx.x >= kTile) return;
  const int64_t n = n0 + threadIdx.x;
  if (n >= N || src == nullptr)
    dst[threadIdx.x] = n >= N ? past : 0.f;
  else
    cp_async4(dst + threadIdx.x, src + n, true);
}

// A fragments of rows 16w..16w+15 of a shared tile, all k-steps of the head dim.
template <typename T, int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[Dim<D>::P / 16][4], const T* tile, int warp, int lane) {
  constexpr int S = Dim<D>::S;
  // Tiles: rows 0-7 / 8-15 (lane bit 3) x columns 0-7 / 8-15 (lane bit 4) = a0, a1, a2, a3.
  const T* row = tile + (16 * warp + (lane / 8 % 2) * 8 + lane % 8) * S + (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < Dim<D>::P / 16; ++kk) ldmatrix_x4(a[kk], row + 16 * kk);
}

// acc[nt] (16 x kTile) = A (16 x d) . tile^T, tile stored [kTile][S] (n-major B operand).
template <typename T, int D>
__device__ __forceinline__ void gemm_abt(float (&acc)[kNT][4], const uint32_t (&a)[Dim<D>::P / 16][4],
                                         const T* tile, int lane) {
  constexpr int S = Dim<D>::S;
  // Tiles: columns 0-7 / 8-15 of the k-step (lane bit 3) x n-tiles nt / nt + 1 (lane bit 4).
  const T* rows = tile + ((lane / 16) * 8 + lane % 8) * S + (lane / 8 % 2) * 8;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
  for (int nt = 0; nt < kNT; nt += 2)
#pragma unroll
    for (int kk = 0; kk < Dim<D>::P / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, rows + 8 * nt * S + 16 * kk);
      mma16816<T>(acc[nt], a[kk], b[0], b[1]);
      mma16816<T>(acc[nt + 1], a[kk], b[2], b[3]);
    }
}

// acc (16 x P) += X (16 x kTile, fp32 C fragments) . tile, tile stored [kTile][S] (k-major B
// operand, read with ldmatrix.trans). X is rounded to T on the way in.
template <typename T, int D>
__device__ __forceinline__ void gemm_xb(float (&acc)[Dim<D>::P / 8][4], const float (&x)[kNT][4],
                                        const T* tile, int lane) {
  constexpr int S = Dim<D>::S;
#pragma unroll
  for (int kb = 0; kb < kTile / 16; ++kb) {
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
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Everything a block needs about (b, r, h).
struct Row {
  int64_t b, r, h;
};

__device__ __forceinline__ Row row_of(const TriangleAttentionParams& p, int64_t x) {
  return {x / (p.R * p.H), (x / p.H) % p.R, x % p.H};
}

__device__ __forceinline__ const float* mask_row(const TriangleAttentionParams& p, Row x) {
  return p.mask != nullptr ? p.mask + (x.b * p.R + x.r) * p.N : nullptr;
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

template <typename T>
__device__ __forceinline__ Slice<T> dense_slice(const TriangleAttentionParams& p, const void* t, Row x) {
  return {static_cast<const T*>(t) + dense_row(p, x, 0), p.H * p.d};
}

// The [N, N] bias matrix of (b, h), or null.
template <typename T>
__device__ __forceinline__ const T* bias_matrix(const TriangleAttentionParams& p, int64_t b, int64_t h) {
  return p.bias != nullptr ? static_cast<const T*>(p.bias) + (b * p.H + h) * p.N * p.N : nullptr;
}

// Logits in place for a 16 x kTile score block of warp `warp` whose rows are the rows of
// bias tile `bt` (null: no bias) and whose columns are keys with additive mask `km` (-inf =
// masked or past N): s * scale + bias + km. kMasked = false skips the mask (a tile of real,
// unmasked keys).
template <typename T, bool kMasked>
__device__ __forceinline__ void to_logits(float (&s)[kNT][4], const T* bt, const float* km, float scale, int warp,
                                          int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = 8 * nt + 2 * t;
      float2 b = make_float2(0.f, 0.f);
      if (bt != nullptr) b = mma::unpack2<T>(lds32(bt + (16 * warp + g + 8 * h) * kBS + col));
      s[nt][2 * h] = fmaf(s[nt][2 * h], scale, b.x);
      s[nt][2 * h + 1] = fmaf(s[nt][2 * h + 1], scale, b.y);
      if (kMasked) {
        const float2 m = *reinterpret_cast<const float2*>(km + col);
        s[nt][2 * h] += m.x;
        s[nt][2 * h + 1] += m.y;
      }
    }
}

// to_logits for key tile j0: the mask is applied only where some key may be masked.
template <typename T>
__device__ __forceinline__ void to_logits(float (&s)[kNT][4], const T* bt, const float* km, float scale, int warp,
                                          int lane, const TriangleAttentionParams& p, int64_t j0) {
  if (p.mask != nullptr || j0 + kTile > p.N)
    to_logits<T, true>(s, bt, km, scale, warp, lane);
  else
    to_logits<T, false>(s, bt, km, scale, warp, lane);
}

// Stores a 16 x P fp32 fragment block (rows i_a and i_a + 8) times mul[half] into a
// contiguous [B, R, N, H, d] tensor of T; with a gate, times sigmoid(gate) too.
template <typename T, int D>
__device__ __forceinline__ void store_rows(void* out, const TriangleAttentionParams& p, Row x, int64_t i_a,
                                           const float (&acc)[Dim<D>::P / 8][4], const float (&mul)[2],
                                           const void* gate, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = i_a + 8 * half;
    if (i >= p.N) continue;
    T* row = static_cast<T*>(out) + dense_row(p, x, i);
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
  static constexpr int bytes = 2 * B::tile + B::bias + B::vec;
  unsigned char* at;  // one half of the double buffer
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(at + B::tile); }
  __device__ __forceinline__ T* bias() const { return reinterpret_cast<T*>(at + 2 * B::tile); }
  __device__ __forceinline__ float* mask() const { return reinterpret_cast<float*>(at + 2 * B::tile + B::bias); }
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
    load_tile<T, D>(k(), src.k, j0, N, src.vec);
    load_tile<T, D>(v(), src.v, j0, N, src.vec);
    if (src.bias != nullptr) load_bias_tile<T>(bias(), src.bias, i0, j0, N);
    load_vec(mask(), src.mask, j0, N, -INFINITY);
  }

};

template <typename T, int D>
constexpr int forward_smem() { return Bytes<T, D>::tile + 2 * KeyStage<T, D>::bytes; }

// Forward: block = (b, r, h, 64 queries); loops over key tiles with an online softmax.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  T* qs = carve.take<T>(Bytes<T, D>::tile);
  const KeyStage<T, D> stage{carve.take<unsigned char>(2 * KeyStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int64_t n_tiles = (p.N + kTile - 1) / kTile;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t i0 = blockIdx.x % n_tiles * kTile;
  const bool has_bias = p.bias != nullptr;
  const auto src = KeyStage<T, D>::source(p, x, vec);

  load_tile<T, D>(qs, slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0, p.N, vec);
  stage.load(src, p.N, i0, 0);
  cp_async_commit();

  uint32_t qa[P / 16][4];
  float acc[P / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int64_t steps = (p.N + kTile - 1) / kTile;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, i0, (step + 1) * kTile);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const KeyStage<T, D> cur = stage.half(step % 2);
    if (step == 0) load_a<T, D>(qa, qs, warp, lane);
    float s[kNT][4];
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    to_logits<T>(s, has_bias ? cur.bias() : nullptr, cur.mask(), p.scale, warp, lane, p, step * kTile);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m[h], quad_max(mx[h]));
      // A row with no valid key so far keeps max -inf; subtract 0 instead (all terms are 0).
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float corr = exp2_approx((m[h] - m_use) * kLog2e);
      m[h] = m_new;
      mx[h] = -m_use * kLog2e;
      l[h] *= corr;
#pragma unroll
      for (int nt = 0; nt < P / 8; ++nt) acc[nt][2 * h] *= corr, acc[nt][2 * h + 1] *= corr;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2_approx(fmaf(s[nt][e], kLog2e, mx[e / 2]));
        l[e / 2] += s[nt][e];
      }
    gemm_xb<T, D>(acc, s, cur.v(), lane);
    __syncthreads();  // this half of the buffer is refilled next step
  }
  const int64_t i_a = i0 + 16 * warp + g;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_sum(l[h]);
    inv[h] = l[h] > 0.f ? 1.f / l[h] : 0.f;  // a fully masked row gives zeros
    const int64_t i = i_a + 8 * h;
    if (i < p.N && lane % 4 == 0) p.lse[stat(p, x, i)] = l[h] > 0.f ? fmaf(m[h], kLog2e, log2f(l[h])) : INFINITY;
  }
  store_rows<T, D>(p.o, p, x, i_a, acc, inv, nullptr, lane);
  // The gated output straight from the registers: the gate costs no extra pass over o.
  if (p.gate != nullptr) store_rows<T, D>(p.out, p, x, i_a, acc, inv, p.gate, lane);
}

// dS = P * (dP - delta) for a 16 x kTile block: s holds logits and dp holds dO V^T on entry;
// s holds dS on exit. lse2: the rows' base-2 log-sum-exp (+inf: fully masked or past N).
__device__ __forceinline__ void logits_to_ds(float (&s)[kNT][4], const float (&dp)[kNT][4], const float (&lse2)[2],
                                             const float (&delta)[2]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[nt][e] = exp2_approx(fmaf(s[nt][e], kLog2e, -lse2[e / 2])) * (dp[nt][e] - delta[e / 2]);
}

template <typename T, int D>
constexpr int dq_smem() { return 2 * Bytes<T, D>::tile + 2 * KeyStage<T, D>::bytes; }

// dQ: block = (b, r, h, 64 queries); loops over key tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  T* qs = carve.take<T>(Bytes<T, D>::tile);
  T* dos = carve.take<T>(Bytes<T, D>::tile);
  const KeyStage<T, D> stage{carve.take<unsigned char>(2 * KeyStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
  const int64_t n_tiles = (p.N + kTile - 1) / kTile;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t i0 = blockIdx.x % n_tiles * kTile;
  const int64_t i_a = i0 + 16 * warp + g;
  const bool has_bias = p.bias != nullptr;
  const auto src = KeyStage<T, D>::source(p, x, vec);

  load_tile<T, D>(qs, slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0, p.N, vec);
  load_tile<T, D>(dos, dense_slice<T>(p, p.d_o, x), i0, p.N, kDenseVec);
  stage.load(src, p.N, i0, 0);
  cp_async_commit();
  float lse2[2], delta[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = i_a + 8 * h;
    lse2[h] = i < p.N ? p.lse[stat(p, x, i)] : INFINITY;
    delta[h] = i < p.N ? p.delta[stat(p, x, i)] : 0.f;
  }

  uint32_t qa[P / 16][4], da[P / 16][4];
  float acc[P / 8][4] = {};
  const int64_t steps = (p.N + kTile - 1) / kTile;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, i0, (step + 1) * kTile);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const KeyStage<T, D> cur = stage.half(step % 2);
    if (step == 0) {
      load_a<T, D>(qa, qs, warp, lane);
      load_a<T, D>(da, dos, warp, lane);
    }
    float s[kNT][4], dp[kNT][4];
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    gemm_abt<T, D>(dp, da, cur.v(), lane);
    to_logits<T>(s, has_bias ? cur.bias() : nullptr, cur.mask(), p.scale, warp, lane, p, step * kTile);
    logits_to_ds(s, dp, lse2, delta);
    gemm_xb<T, D>(acc, s, cur.k(), lane);
    __syncthreads();
  }
  const float mul[2] = {p.scale, p.scale};
  store_rows<T, D>(p.dq, p, x, i_a, acc, mul, nullptr, lane);
}

// One streamed step of the dK/dV kernel: a query tile, its output gradient, the bias tile
// (these queries x this block's keys) and the queries' lse and delta.
template <typename T, int D>
struct QueryStage {
  using B = Bytes<T, D>;
  static constexpr int bytes = 2 * B::tile + B::bias + 2 * B::vec;
  unsigned char* at;
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* d_o() const { return reinterpret_cast<T*>(at + B::tile); }
  __device__ __forceinline__ T* bias() const { return reinterpret_cast<T*>(at + 2 * B::tile); }
  __device__ __forceinline__ float* lse() const { return reinterpret_cast<float*>(at + 2 * B::tile + B::bias); }
  __device__ __forceinline__ float* delta() const { return lse() + kTile; }
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
    load_tile<T, D>(q(), src.q, i0, N, src.vec);
    load_tile<T, D>(d_o(), src.d_o, i0, N, kDenseVec);
    if (src.bias != nullptr) load_bias_tile<T>(bias(), src.bias, i0, j0, N);
    load_vec(lse(), src.lse, i0, N, INFINITY);  // queries past N get P = 0
    load_vec(delta(), src.delta, i0, N, 0.f);
  }
};

template <typename T, int D>
constexpr int dkv_smem() { return 2 * Bytes<T, D>::tile + 2 * QueryStage<T, D>::bytes; }

// dK, dV: block = (b, r, h, 64 keys); loops over query tiles. Works on transposed scores
// S^T = K Q^T so that the keys are the fragment rows.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const TriangleAttentionParams p, int vec) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  T* ks = carve.take<T>(Bytes<T, D>::tile);
  T* vs = carve.take<T>(Bytes<T, D>::tile);
  const QueryStage<T, D> stage{carve.take<unsigned char>(2 * QueryStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n_tiles = (p.N + kTile - 1) / kTile;
  const Row x = row_of(p, blockIdx.x / n_tiles);
  const int64_t j0 = blockIdx.x % n_tiles * kTile;
  const int64_t j_a = j0 + 16 * warp + g;
  const float* mrow = mask_row(p, x);
  // Additive mask of this thread's two keys.
  auto key_add = [&](int64_t j) { return j < p.N && (mrow == nullptr || mrow[j] == 0.f) ? 0.f : -INFINITY; };
  const float kadd[2] = {key_add(j_a), key_add(j_a + 8)};
  const bool has_bias = p.bias != nullptr;

  load_tile<T, D>(ks, slice<T>(p.k, p.k_stride, x.b, x.r, x.h), j0, p.N, vec);
  load_tile<T, D>(vs, slice<T>(p.v, p.v_stride, x.b, x.r, x.h), j0, p.N, vec);
  const auto src = QueryStage<T, D>::source(p, x, vec);
  stage.load(src, p.N, 0, j0);
  cp_async_commit();

  uint32_t ka[P / 16][4], va[P / 16][4];
  float dk[P / 8][4] = {}, dv[P / 8][4] = {};
  const int64_t steps = (p.N + kTile - 1) / kTile;
  for (int64_t step = 0; step < steps; ++step) {
    if (step + 1 < steps) stage.half((step + 1) % 2).load(src, p.N, (step + 1) * kTile, j0);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const QueryStage<T, D> cur = stage.half(step % 2);
    if (step == 0) {
      load_a<T, D>(ka, ks, warp, lane);
      load_a<T, D>(va, vs, warp, lane);
    }
    float s[kNT][4], dp[kNT][4];
    gemm_abt<T, D>(s, ka, cur.q(), lane);
    gemm_abt<T, D>(dp, va, cur.d_o(), lane);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ii = 8 * nt + 2 * t + (e & 1);  // query (column of S^T)
        const float b = has_bias ? static_cast<float>(cur.bias()[ii * kBS + 16 * warp + g + 8 * (e / 2)]) : 0.f;
        const float z = fmaf(s[nt][e], p.scale, b) + kadd[e / 2];
        const float pr = exp2_approx(fmaf(z, kLog2e, -cur.lse()[ii]));
        s[nt][e] = pr;                                  // P^T, for dV
        dp[nt][e] = pr * (dp[nt][e] - cur.delta()[ii]);  // dS^T, for dK
      }
    gemm_xb<T, D>(dv, s, cur.d_o(), lane);
    gemm_xb<T, D>(dk, dp, cur.q(), lane);
    __syncthreads();
  }
  const float k_mul[2] = {p.scale, p.scale}, v_mul[2] = {1.f, 1.f};
  store_rows<T, D>(p.dk, p, x, j_a, dk, k_mul, nullptr, lane);
  store_rows<T, D>(p.dv, p, x, j_a, dv, v_mul, nullptr, lane);
}

// One streamed step of the bias-gradient kernel: row r's queries, output gradient, keys and
// values of this block's tile, its key mask and the queries' lse and delta.
template <typename T, int D>
struct RowStage {
  using B = Bytes<T, D>;
  static constexpr int bytes = 4 * B::tile + 3 * B::vec;
  unsigned char* at;
  __device__ __forceinline__ T* q() const { return reinterpret_cast<T*>(at); }
  __device__ __forceinline__ T* d_o() const { return reinterpret_cast<T*>(at + B::tile); }
  __device__ __forceinline__ T* k() const { return reinterpret_cast<T*>(at + 2 * B::tile); }
  __device__ __forceinline__ T* v() const { return reinterpret_cast<T*>(at + 3 * B::tile); }
  __device__ __forceinline__ float* mask() const { return reinterpret_cast<float*>(at + 4 * B::tile); }
  __device__ __forceinline__ float* lse() const { return mask() + kTile; }
  __device__ __forceinline__ float* delta() const { return mask() + 2 * kTile; }
  __device__ __forceinline__ RowStage half(int64_t buf) const { return {at + buf * bytes}; }

  __device__ __forceinline__ void load(const TriangleAttentionParams& p, Row x, int64_t i0, int64_t j0, int vec) const {
    load_tile<T, D>(q(), slice<T>(p.q, p.q_stride, x.b, x.r, x.h), i0, p.N, vec);
    load_tile<T, D>(d_o(), dense_slice<T>(p, p.d_o, x), i0, p.N, kDenseVec);
    load_tile<T, D>(k(), slice<T>(p.k, p.k_stride, x.b, x.r, x.h), j0, p.N, vec);
    load_tile<T, D>(v(), slice<T>(p.v, p.v_stride, x.b, x.r, x.h), j0, p.N, vec);
    load_vec(mask(), mask_row(p, x), j0, p.N, -INFINITY);
    load_vec(lse(), p.lse + stat(p, x, 0), i0, p.N, INFINITY);  // queries past N get P = 0
    load_vec(delta(), p.delta + stat(p, x, 0), i0, p.N, 0.f);
  }
};

template <typename T, int D>
constexpr int dbias_smem() { return Bytes<T, D>::bias + 2 * RowStage<T, D>::bytes; }

// Bias gradient partial: block = (b, h, chunk, 64 queries, 64 keys); loops over the rows
// r of its chunk in order and keeps sum_r dS in registers.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dbias_kernel(const TriangleAttentionParams p, int vec, int64_t chunks) {
  constexpr int P = Dim<D>::P;
  extern __shared__ __align__(16) unsigned char smem[];
  Carve carve{smem};
  T* bias = carve.take<T>(Bytes<T, D>::bias);
  const RowStage<T, D> stage{carve.take<unsigned char>(2 * RowStage<T, D>::bytes)};
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t n_tiles = (p.N + kTile - 1) / kTile;
  const int64_t j0 = blockIdx.x % n_tiles * kTile, i0 = blockIdx.x / n_tiles % n_tiles * kTile;
  const int64_t rest = blockIdx.x / (n_tiles * n_tiles), chunk = rest % chunks, bh = rest / chunks;
  const int64_t b = bh / p.H, h = bh % p.H;
  const int64_t rows_per = (p.R + chunks - 1) / chunks;
  const int64_t r_begin = chunk * rows_per < p.R ? chunk * rows_per : p.R;
  const int64_t r_end = r_begin + rows_per < p.R ? r_begin + rows_per : p.R;
  const int64_t i_a = i0 + 16 * warp + g;

  // The bias tile is the same for every row r: read once.
  load_bias_tile<T>(bias, bias_matrix<T>(p, b, h), i0, j0, p.N);
  if (r_begin < r_end) stage.load(p, {b, r_begin, h}, i0, j0, vec);
  cp_async_commit();

  float acc[kNT][4] = {};
  for (int64_t r = r_begin; r < r_end; ++r) {
    if (r + 1 < r_end) stage.half((r - r_begin + 1) % 2).load(p, {b, r + 1, h}, i0, j0, vec);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const RowStage<T, D> cur = stage.half((r - r_begin) % 2);
    uint32_t qa[P / 16][4], da[P / 16][4];
    load_a<T, D>(qa, cur.q(), warp, lane);
    load_a<T, D>(da, cur.d_o(), warp, lane);
    const int row = 16 * warp + g;
    const float lse2[2] = {cur.lse()[row], cur.lse()[row + 8]}, delta[2] = {cur.delta()[row], cur.delta()[row + 8]};
    float s[kNT][4], dp[kNT][4];
    gemm_abt<T, D>(s, qa, cur.k(), lane);
    gemm_abt<T, D>(dp, da, cur.v(), lane);
    to_logits<T>(s, bias, cur.mask(), p.scale, warp, lane, p, j0);
    logits_to_ds(s, dp, lse2, delta);
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

// dbias = sum over chunks, in chunk order.
template <typename T>
__global__ void dbias_reduce_kernel(const float* partial, T* dbias, int64_t chunks, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * n + idx];
    dbias[idx] = static_cast<T>(sum);
  }
}

int64_t tiles(int64_t n) { return (n + kTile - 1) / kTile; }

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

int sm_count() {
  int device = 0, count = 0;
  MF_CUDA_CHECK(cudaGetDevice(&device));
  MF_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// Launches a kernel that takes `bytes` of dynamic shared memory (above the 48 KB default).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int bytes, cudaStream_t stream, Args... args) {
  MF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<grid, kThreads, bytes, stream>>>(args...);
  MF_CUDA_CHECK(cudaGetLastError());
}

// Grids are 1D with the tile index fastest: the blocks that share a row's keys and values
// (or, for dbias, one row r's tiles) run side by side and find them in L2.
template <typename T, int D>
void launch_forward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(grid_size(p.B * p.R * p.H * tiles(p.N)));
  launch(forward_kernel<T, D>, grid, forward_smem<T, D>(), stream, p, vector_width(p));
}

template <typename T, int D>
void launch_backward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const int vec = vector_width(p);
  const dim3 grid(grid_size(p.B * p.R * p.H * tiles(p.N)));
  launch(dq_kernel<T, D>, grid, dq_smem<T, D>(), stream, p, vec);
  launch(dkv_kernel<T, D>, grid, dkv_smem<T, D>(), stream, p, vec);
  if (p.dbias == nullptr) return;
  const int64_t chunks = dbias_partials_mma(p);
  const dim3 bias_grid(grid_size(p.B * p.H * chunks * tiles(p.N) * tiles(p.N)));
  launch(dbias_kernel<T, D>, bias_grid, dbias_smem<T, D>(), stream, p, vec, chunks);
  const int64_t n = p.B * p.H * p.N * p.N;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((n + 255) / 256, 4096));
  dbias_reduce_kernel<T><<<blocks, 256, 0, stream>>>(p.dbias_partial, static_cast<T*>(p.dbias), chunks, n);
  MF_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void dispatch(const TriangleAttentionParams& p, cudaStream_t stream, bool backward) {
  auto run = [&](auto launch_fwd, auto launch_bwd) { backward ? launch_bwd(p, stream) : launch_fwd(p, stream); };
  switch (p.d) {
    case 16: return run(launch_forward<T, 16>, launch_backward<T, 16>);
    case 24: return run(launch_forward<T, 24>, launch_backward<T, 24>);
    case 32: return run(launch_forward<T, 32>, launch_backward<T, 32>);
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
  // Enough row chunks for ~16 blocks per SM (about five waves at three resident blocks per
  // SM, so the last, partial wave costs little); no more chunks than rows.
  static const int sms = sm_count();
  const int64_t blocks = p.B * p.H * tiles(p.N) * tiles(p.N);
  const int64_t want = (16 * sms + blocks - 1) / blocks;
  return std::max<int64_t>(1, std::min<int64_t>(want, p.R));
}

void forward_mma(const TriangleAttentionParams& p, void* stream) { dispatch_dtype(p, stream, false); }
void backward_mma(const TriangleAttentionParams& p, void* stream) { dispatch_dtype(p, stream, true); }

}  // namespace megafold::ops::cuda
