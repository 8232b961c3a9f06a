// Triangle attention for fp32 inputs on CUDA cores (fp16/bf16 use the tensor-core kernels of
// triangle_attention_mma.cu): every thread owns one query row (or one key, or one bias
// column), keys and queries stream through shared memory in tiles, and
// the softmax is computed online, so nothing of size N^3 is stored: forward saves the output
// and one log-sum-exp per row. Backward recomputes probabilities from the log-sum-exp.
// The pair-bias gradient is a sum over the R rows; one thread owns each bias element and adds
// the rows in a fixed order, so it is deterministic without atomics.
#include <cmath>

#include "core/cuda_check.h"
#include "ops/triangle_attention/triangle_attention_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

constexpr int kThreads = 64;   // rows (or keys) per block, one per thread
constexpr int kTile = 32;      // keys (or queries) per shared-memory tile
constexpr int kBiasRows = 16;  // query rows per block in the bias-gradient kernel
constexpr float kLog2e = 1.4426950408889634f;  // lse is stored in base 2 (see the params)

__device__ __forceinline__ int64_t at5(const int64_t* s, int64_t b, int64_t r, int64_t n, int64_t h, int64_t c) {
  return b * s[0] + r * s[1] + n * s[2] + h * s[3] + c * s[4];
}

__device__ __forceinline__ float load5(const void* base, const int64_t* s, int64_t b, int64_t r,
                                       int64_t n, int64_t h, int64_t c) {
  return static_cast<const float*>(base)[at5(s, b, r, n, h, c)];
}

__device__ __forceinline__ float load_bias(const TriangleAttentionParams& p, int64_t b, int64_t h,
                                           int64_t i, int64_t j) {
  if (p.bias == nullptr || i >= p.N || j >= p.N) return 0.f;
  return static_cast<const float*>(p.bias)[((b * p.H + h) * p.N + i) * p.N + j];
}

__device__ __forceinline__ float key_valid(const TriangleAttentionParams& p, int64_t b, int64_t r, int64_t j) {
  if (j >= p.N) return 0.f;
  return p.mask == nullptr || p.mask[(b * p.R + r) * p.mask_ld + j] == 0.f ? 1.f : 0.f;  // additive mask
}

// Row-major [B, R, N, H, d] offset of a contiguous tensor; [B, R, H, N] for per-row stats.
__device__ __forceinline__ int64_t dense5(const TriangleAttentionParams& p, int64_t b, int64_t r, int64_t n, int64_t h) {
  return (((b * p.R + r) * p.N + n) * p.H + h) * p.d;
}
// The same offset through explicit strides (the outputs written into a caller's layout).
__device__ __forceinline__ int64_t strided5(const int64_t (&s)[5], int64_t b, int64_t r, int64_t n, int64_t h) {
  return b * s[0] + r * s[1] + n * s[2] + h * s[3];
}
__device__ __forceinline__ int64_t row_stat(const TriangleAttentionParams& p, int64_t b, int64_t r, int64_t h, int64_t n) {
  return ((b * p.R + r) * p.H + h) * p.N + n;
}

// Keys j0.. of row (b, r, h) into shared memory for a block of kThreads query rows (block y):
// keys, values, the bias tile and the key validity.
template <int D>
__device__ __forceinline__ void load_key_tile(const TriangleAttentionParams& p, int64_t b, int64_t r, int64_t h,
                                              int64_t j0, float (&ks)[kTile][D], float (&vs)[kTile][D],
                                              float (&bs)[kThreads][kTile + 1], float (&ms)[kTile]) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
    const int jj = idx / D, c = idx % D;
    const int64_t j = j0 + jj;
    ks[jj][c] = j < p.N ? load5(p.k, p.k_stride, b, r, j, h, c) : 0.f;
    vs[jj][c] = j < p.N ? load5(p.v, p.v_stride, b, r, j, h, c) : 0.f;
  }
  for (int idx = threadIdx.x; idx < kThreads * kTile; idx += kThreads) {
    const int ii = idx / kTile, jj = idx % kTile;
    bs[ii][jj] = load_bias(p, b, h, static_cast<int64_t>(blockIdx.y) * kThreads + ii, j0 + jj);
  }
  if (threadIdx.x < kTile) ms[threadIdx.x] = key_valid(p, b, r, j0 + threadIdx.x);
}

// Block x = (b, r, h), block y = tile of kThreads query rows.
template <int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(const TriangleAttentionParams p) {
  const int64_t b = blockIdx.x / (p.R * p.H), r = (blockIdx.x / p.H) % p.R, h = blockIdx.x % p.H;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool row = i < p.N;
  __shared__ float ks[kTile][D], vs[kTile][D], bs[kThreads][kTile + 1], ms[kTile];
  float q[D], acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) {
    q[c] = row ? load5(p.q, p.q_stride, b, r, i, h, c) * p.scale : 0.f;
    acc[c] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = 0; j0 < p.N; j0 += kTile) {
    load_key_tile<D>(p, b, r, h, j0, ks, vs, bs, ms);
    __syncthreads();
    if (row) {
      for (int jj = 0; jj < kTile; ++jj) {
        if (ms[jj] == 0.f) continue;
        float s = bs[threadIdx.x][jj];
#pragma unroll
        for (int c = 0; c < D; ++c) s += q[c] * ks[jj][c];
        if (s > m) {  // rescale what was accumulated under the old maximum
          const float corr = expf(m - s);
          l *= corr;
#pragma unroll
          for (int c = 0; c < D; ++c) acc[c] *= corr;
          m = s;
        }
        const float e = expf(s - m);
        l += e;
#pragma unroll
        for (int c = 0; c < D; ++c) acc[c] += e * vs[jj][c];
      }
    }
    __syncthreads();
  }
  if (!row) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // a fully masked row gives zeros
  float* o = static_cast<float*>(p.o) + dense5(p, b, r, i, h);
#pragma unroll
  for (int c = 0; c < D; ++c) o[c] = acc[c] * inv;
  p.lse[row_stat(p, b, r, h, i)] = l > 0.f ? (m + logf(l)) * kLog2e : INFINITY;
  if (p.gate == nullptr) return;
  float* out = static_cast<float*>(p.out) + strided5(p.out_stride, b, r, i, h);
#pragma unroll
  for (int c = 0; c < D; ++c) out[c] = acc[c] * inv / (1.f + expf(-load5(p.gate, p.gate_stride, b, r, i, h, c)));
}

// dQ: block x = (b, r, h), block y = tile of query rows; loops over key tiles.
template <int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const TriangleAttentionParams p) {
  const int64_t b = blockIdx.x / (p.R * p.H), r = (blockIdx.x / p.H) % p.R, h = blockIdx.x % p.H;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool row = i < p.N;
  __shared__ float ks[kTile][D], vs[kTile][D], bs[kThreads][kTile + 1], ms[kTile];
  float q[D], d_o[D], dq[D];
  const float lse = row ? p.lse[row_stat(p, b, r, h, i)] / kLog2e : INFINITY;
  const float delta = row ? p.delta[row_stat(p, b, r, h, i)] : 0.f;
#pragma unroll
  for (int c = 0; c < D; ++c) {
    q[c] = row ? load5(p.q, p.q_stride, b, r, i, h, c) * p.scale : 0.f;
    d_o[c] = row ? static_cast<const float*>(p.d_o)[dense5(p, b, r, i, h) + c] : 0.f;
    dq[c] = 0.f;
  }
  for (int64_t j0 = 0; j0 < p.N; j0 += kTile) {
    load_key_tile<D>(p, b, r, h, j0, ks, vs, bs, ms);
    __syncthreads();
    if (row && lse != INFINITY) {
      for (int jj = 0; jj < kTile; ++jj) {
        if (ms[jj] == 0.f) continue;
        float s = bs[threadIdx.x][jj], dp = 0.f;
#pragma unroll
        for (int c = 0; c < D; ++c) {
          s += q[c] * ks[jj][c];
          dp += d_o[c] * vs[jj][c];
        }
        const float ds = expf(s - lse) * (dp - delta);
#pragma unroll
        for (int c = 0; c < D; ++c) dq[c] += ds * ks[jj][c];
      }
    }
    __syncthreads();
  }
  if (!row) return;
  float* out = static_cast<float*>(p.dq) + strided5(p.dq_stride, b, r, i, h);
#pragma unroll
  for (int c = 0; c < D; ++c) out[c] = dq[c] * p.scale;
}

// dK, dV: block x = (b, r, h), block y = tile of keys; loops over query tiles.
template <int D>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const TriangleAttentionParams p) {
  const int64_t b = blockIdx.x / (p.R * p.H), r = (blockIdx.x / p.H) % p.R, h = blockIdx.x % p.H;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool key = key_valid(p, b, r, j) != 0.f;
  __shared__ float qs[kTile][D], dos[kTile][D], bs[kTile][kThreads + 1], lses[kTile], deltas[kTile];
  float k[D], v[D], dk[D], dv[D];
#pragma unroll
  for (int c = 0; c < D; ++c) {
    k[c] = key ? load5(p.k, p.k_stride, b, r, j, h, c) : 0.f;
    v[c] = key ? load5(p.v, p.v_stride, b, r, j, h, c) : 0.f;
    dk[c] = dv[c] = 0.f;
  }
  for (int64_t i0 = 0; i0 < p.N; i0 += kTile) {
    for (int idx = threadIdx.x; idx < kTile * D; idx += kThreads) {
      const int ii = idx / D, c = idx % D;
      const int64_t i = i0 + ii;
      qs[ii][c] = i < p.N ? load5(p.q, p.q_stride, b, r, i, h, c) * p.scale : 0.f;
      dos[ii][c] = i < p.N ? static_cast<const float*>(p.d_o)[dense5(p, b, r, i, h) + c] : 0.f;
    }
    for (int idx = threadIdx.x; idx < kTile * kThreads; idx += kThreads) {
      const int ii = idx / kThreads, jj = idx % kThreads;
      bs[ii][jj] = load_bias(p, b, h, i0 + ii, static_cast<int64_t>(blockIdx.y) * kThreads + jj);
    }
    if (threadIdx.x < kTile) {
      const int64_t i = i0 + threadIdx.x;
      lses[threadIdx.x] = i < p.N ? p.lse[row_stat(p, b, r, h, i)] / kLog2e : INFINITY;
      deltas[threadIdx.x] = i < p.N ? p.delta[row_stat(p, b, r, h, i)] : 0.f;
    }
    __syncthreads();
    if (key) {
      for (int ii = 0; ii < kTile; ++ii) {
        if (lses[ii] == INFINITY) continue;  // padding row or fully masked row
        float s = bs[ii][threadIdx.x], dp = 0.f;
#pragma unroll
        for (int c = 0; c < D; ++c) {
          s += qs[ii][c] * k[c];
          dp += dos[ii][c] * v[c];
        }
        const float pr = expf(s - lses[ii]);
        const float ds = pr * (dp - deltas[ii]);
#pragma unroll
        for (int c = 0; c < D; ++c) {
          dv[c] += pr * dos[ii][c];
          dk[c] += ds * qs[ii][c];  // qs carries the 1/sqrt(d) scale
        }
      }
    }
    __syncthreads();
  }
  if (j >= p.N) return;
  float* dk_out = static_cast<float*>(p.dk) + strided5(p.dk_stride, b, r, j, h);
  float* dv_out = static_cast<float*>(p.dv) + strided5(p.dv_stride, b, r, j, h);
#pragma unroll
  for (int c = 0; c < D; ++c) {
    dk_out[c] = dk[c];
    dv_out[c] = dv[c];
  }
}

// dBias[b, h, i, j] = sum over rows r of dS[b, r, h, i, j], rows added in order.
// Block x = (b, h, tile of kBiasRows queries), block y = tile of kThreads keys (one per thread).
template <int D>
__global__ void __launch_bounds__(kThreads) dbias_kernel(const TriangleAttentionParams p) {
  const int64_t i_tiles = (p.N + kBiasRows - 1) / kBiasRows;
  const int64_t b = blockIdx.x / (p.H * i_tiles), h = (blockIdx.x / i_tiles) % p.H;
  const int64_t i0 = (blockIdx.x % i_tiles) * kBiasRows;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  __shared__ float qs[kBiasRows][D], dos[kBiasRows][D], lses[kBiasRows], deltas[kBiasRows];
  float acc[kBiasRows], bias[kBiasRows];
#pragma unroll
  for (int ii = 0; ii < kBiasRows; ++ii) {
    acc[ii] = 0.f;
    bias[ii] = load_bias(p, b, h, i0 + ii, j);
  }
  for (int64_t r = 0; r < p.R; ++r) {
    for (int idx = threadIdx.x; idx < kBiasRows * D; idx += kThreads) {
      const int ii = idx / D, c = idx % D;
      const int64_t i = i0 + ii;
      qs[ii][c] = i < p.N ? load5(p.q, p.q_stride, b, r, i, h, c) * p.scale : 0.f;
      dos[ii][c] = i < p.N ? static_cast<const float*>(p.d_o)[dense5(p, b, r, i, h) + c] : 0.f;
    }
    if (threadIdx.x < kBiasRows) {
      const int64_t i = i0 + threadIdx.x;
      lses[threadIdx.x] = i < p.N ? p.lse[row_stat(p, b, r, h, i)] / kLog2e : INFINITY;
      deltas[threadIdx.x] = i < p.N ? p.delta[row_stat(p, b, r, h, i)] : 0.f;
    }
    __syncthreads();
    if (key_valid(p, b, r, j) != 0.f) {
      float k[D], v[D];
#pragma unroll
      for (int c = 0; c < D; ++c) {
        k[c] = load5(p.k, p.k_stride, b, r, j, h, c);
        v[c] = load5(p.v, p.v_stride, b, r, j, h, c);
      }
#pragma unroll
      for (int ii = 0; ii < kBiasRows; ++ii) {
        if (lses[ii] == INFINITY) continue;
        float s = bias[ii], dp = 0.f;
#pragma unroll
        for (int c = 0; c < D; ++c) {
          s += qs[ii][c] * k[c];
          dp += dos[ii][c] * v[c];
        }
        acc[ii] += expf(s - lses[ii]) * (dp - deltas[ii]);
      }
    }
    __syncthreads();
  }
  if (j >= p.N) return;
  const int64_t* s = p.dbias_stride;
  for (int ii = 0; ii < kBiasRows; ++ii) {
    const int64_t i = i0 + ii;
    if (i < p.N) static_cast<float*>(p.dbias)[b * s[0] + h * s[1] + i * s[2] + j * s[3]] = acc[ii];
  }
}

unsigned int tiles(int64_t n, int per) { return static_cast<unsigned int>((n + per - 1) / per); }

template <int D>
void launch_forward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(p.B * p.R * p.H), tiles(p.N, kThreads));
  launch_kernel(forward_kernel<D>, grid, kThreads, 0, stream, p);
}

template <int D>
void launch_backward(const TriangleAttentionParams& p, cudaStream_t stream) {
  const dim3 rows(static_cast<unsigned int>(p.B * p.R * p.H), tiles(p.N, kThreads));
  launch_kernel(dq_kernel<D>, rows, kThreads, 0, stream, p);
  launch_kernel(dkv_kernel<D>, rows, kThreads, 0, stream, p);
  if (p.dbias != nullptr) {
    MF_CHECK(p.dbias_dtype == DType::kFloat32, "triangle_attention CUDA-core kernels write a float bias gradient");
    const dim3 grid(static_cast<unsigned int>(p.B * p.H) * tiles(p.N, kBiasRows), tiles(p.N, kThreads));
    launch_kernel(dbias_kernel<D>, grid, kThreads, 0, stream, p);
  }
}

void dispatch(const TriangleAttentionParams& p, void* stream, bool backward) {
  MF_CHECK(p.dtype == DType::kFloat32, "triangle_attention CUDA-core kernels take fp32");
  const auto s = static_cast<cudaStream_t>(stream);
  auto run = [&](auto fwd, auto bwd) { backward ? bwd(p, s) : fwd(p, s); };
  switch (p.d) {
    case 16: return run(launch_forward<16>, launch_backward<16>);
    case 24: return run(launch_forward<24>, launch_backward<24>);
    case 32: return run(launch_forward<32>, launch_backward<32>);
    case 48: return run(launch_forward<48>, launch_backward<48>);
    case 64: return run(launch_forward<64>, launch_backward<64>);
    default: MF_CHECK(false, "triangle_attention CUDA: head dim ", p.d, " is not instantiated");
  }
}

}  // namespace

void forward_simt(const TriangleAttentionParams& p, void* stream) { dispatch(p, stream, false); }
void backward_simt(const TriangleAttentionParams& p, void* stream) { dispatch(p, stream, true); }

}  // namespace megafold::ops::cuda
