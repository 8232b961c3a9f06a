// Layout passes of triangle_multiplication around the cuBLAS contraction (see
// triangle_multiplication_cuda.h). Each block moves a 64-row x 64-channel tile through shared
// memory: it reads along the contiguous dimension of its source (a warp covers 64 consecutive
// 16-bit values, 128 bytes) and writes along the contiguous dimension of its destination, so
// both sides are coalesced; the transposing copies ATen would make instead write with a stride
// of P elements and ran at a few percent of DRAM bandwidth.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/triangle_multiplication/triangle_multiplication_cuda.h"

namespace megafold::ops::cuda {
namespace {

constexpr int kTile = 64;  // rows and channels per block
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

using mma::from_float;
using mma::to_float;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// Offset of (row r, channel ch) in the channel-major [B, c, P] layout.
__device__ __forceinline__ int64_t channel_major(int64_t r, int64_t ch, const PairLayout& l) {
  const int64_t b = r / l.plane;
  return (b * l.c + ch) * l.plane + (r - b * l.plane);
}

// Source rows -> channel-major destination. kGate: the value is the gated, masked operand
// blockIdx.z (0: a, 1: b) of the projection rows (blockIdx.z = 2: the output gate, row to
// row); otherwise the row-major value itself.
template <typename T, bool kGate>
__global__ void __launch_bounds__(kThreads) rows_to_channels_kernel(const PairLayout l, const T* __restrict__ src,
                                                                    int64_t ld, const float* __restrict__ mask,
                                                                    T* __restrict__ dst0, T* __restrict__ dst1,
                                                                    T* __restrict__ gate, int64_t c_gate) {
  __shared__ float tile[kTile][kTile + 1];  // [channel][row], +1: conflict-free column reads
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t M = l.batch * l.plane;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int op = blockIdx.z;
  if (kGate && op == 2) {  // the whole block takes this branch: no barrier is skipped
    for (int rr = warp; rr < kTile && r0 + rr < M; rr += kWarps)
      for (int cc = lane; cc < kTile && c0 + cc < c_gate; cc += 32) {
        const int64_t r = r0 + rr, ch = c0 + cc;
        gate[r * c_gate + ch] = from_float<T>(sigmoid(to_float(src[r * ld + 4 * l.c + ch])));
      }
    return;
  }
#pragma unroll 2
  for (int rr = warp; rr < kTile; rr += kWarps) {
    const int64_t r = r0 + rr;
    if (r >= M) break;
    const T* row = src + r * ld;
    const float m = kGate && mask != nullptr ? mask[r] : 1.0f;
#pragma unroll
    for (int cc = lane; cc < kTile; cc += 32) {
      const int64_t ch = c0 + cc;
      if (ch < l.c) {
        if constexpr (kGate) {
          tile[cc][rr] = to_float(row[op * l.c + ch]) * sigmoid(to_float(row[(2 + op) * l.c + ch])) * m;
        } else {
          tile[cc][rr] = to_float(row[ch]);
        }
      }
    }
  }
  __syncthreads();
  T* dst = op == 0 ? dst0 : dst1;
  for (int cc = warp; cc < kTile; cc += kWarps) {
    const int64_t ch = c0 + cc;
    if (ch >= l.c) break;
#pragma unroll
    for (int rr = lane; rr < kTile; rr += 32) {
      const int64_t r = r0 + rr;
      if (r < M) dst[channel_major(r, ch, l)] = from_float<T>(tile[cc][rr]);
    }
  }
}

// Channel-major source -> rows. kGate: the source is d(operand blockIdx.z), and the rows
// written are the gradients of its projection and gate columns (blockIdx.z = 2: the output
// gate's gradient rows give its logits' columns); otherwise the value itself.
template <typename T, bool kGate>
__global__ void __launch_bounds__(kThreads) channels_to_rows_kernel(const PairLayout l, const T* __restrict__ src0,
                                                                    const T* __restrict__ src1,
                                                                    const T* __restrict__ dgate, int64_t c_gate,
                                                                    const T* __restrict__ proj, int64_t ld,
                                                                    const float* __restrict__ mask,
                                                                    T* __restrict__ dst, int64_t ld_dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t M = l.batch * l.plane;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int op = blockIdx.z;
  if (kGate && op == 2) {  // block-uniform, as in rows_to_channels_kernel
    for (int rr = warp; rr < kTile && r0 + rr < M; rr += kWarps)
      for (int cc = lane; cc < kTile && c0 + cc < c_gate; cc += 32) {
        const int64_t r = r0 + rr, ch = c0 + cc;
        const float s = sigmoid(to_float(proj[r * ld + 4 * l.c + ch]));
        dst[r * ld_dst + 4 * l.c + ch] = from_float<T>(to_float(dgate[r * c_gate + ch]) * s * (1.0f - s));
      }
    return;
  }
  const T* src = op == 0 ? src0 : src1;
  for (int cc = warp; cc < kTile; cc += kWarps) {
    const int64_t ch = c0 + cc;
    if (ch >= l.c) break;
#pragma unroll
    for (int rr = lane; rr < kTile; rr += 32) {
      const int64_t r = r0 + rr;
      if (r < M) tile[cc][rr] = to_float(src[channel_major(r, ch, l)]);
    }
  }
  __syncthreads();
#pragma unroll 2
  for (int rr = warp; rr < kTile; rr += kWarps) {
    const int64_t r = r0 + rr;
    if (r >= M) break;
    T* out = dst + r * ld_dst;
    const float m = kGate && mask != nullptr ? mask[r] : 1.0f;
#pragma unroll
    for (int cc = lane; cc < kTile; cc += 32) {
      const int64_t ch = c0 + cc;
      if (ch >= l.c) continue;
      if constexpr (kGate) {
        // operand = p * s * m with s = sigmoid(g): d p = d * s * m, d g = d * p * m * s (1 - s)
        const T* row = proj + r * ld;
        const float d = tile[cc][rr] * m, p = to_float(row[op * l.c + ch]);
        const float s = sigmoid(to_float(row[(2 + op) * l.c + ch]));
        out[op * l.c + ch] = from_float<T>(d * s);
        out[(2 + op) * l.c + ch] = from_float<T>(d * p * s * (1.0f - s));
      } else {
        out[ch] = from_float<T>(tile[cc][rr]);
      }
    }
  }
}

dim3 grid(const PairLayout& l, int operands, int64_t c_gate = 0) {
  const int64_t row_tiles = (l.batch * l.plane + kTile - 1) / kTile;
  const int64_t channel_tiles = (std::max(l.c, c_gate) + kTile - 1) / kTile;
  MF_CHECK(row_tiles < (int64_t{1} << 31) && channel_tiles < 65536, "triangle_multiplication: pair tensor too large");
  return dim3(static_cast<unsigned int>(row_tiles), static_cast<unsigned int>(channel_tiles), operands);
}

bool empty(const PairLayout& l) { return l.batch * l.plane == 0 || l.c == 0; }

// Calls launch(T{}, stream) with T the layout's 16-bit type, unless there is nothing to do.
template <typename Launch>
void run(const PairLayout& l, void* stream, Launch&& launch) {
  if (empty(l)) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (l.dtype == DType::kBFloat16) launch(__nv_bfloat16{}, s);
  else if (l.dtype == DType::kFloat16) launch(__half{}, s);
  else MF_CHECK(false, "triangle_multiplication: the layout kernels take float16 or bfloat16");
  MF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void trimul_operands_forward(const PairLayout& l, const TrimulOperands& o, void* stream) {
  run(l, stream, [&](auto t, cudaStream_t s) {
    using T = decltype(t);
    rows_to_channels_kernel<T, true><<<grid(l, o.c_gate > 0 ? 3 : 2, o.c_gate), kThreads, 0, s>>>(
        l, static_cast<const T*>(o.proj), o.ld, o.mask, static_cast<T*>(o.a), static_cast<T*>(o.b),
        static_cast<T*>(o.gate), o.c_gate);
  });
}

void trimul_operands_backward(const PairLayout& l, const TrimulOperands& o, void* stream) {
  run(l, stream, [&](auto t, cudaStream_t s) {
    using T = decltype(t);
    channels_to_rows_kernel<T, true><<<grid(l, o.c_gate > 0 ? 3 : 2, o.c_gate), kThreads, 0, s>>>(
        l, static_cast<const T*>(o.a), static_cast<const T*>(o.b), static_cast<const T*>(o.gate), o.c_gate,
        static_cast<const T*>(o.proj), o.ld, o.mask, static_cast<T*>(o.dproj), 4 * l.c + o.c_gate);
  });
}

void channels_to_rows(const PairLayout& l, const void* src, void* dst, void* stream) {
  run(l, stream, [&](auto t, cudaStream_t s) {
    using T = decltype(t);
    channels_to_rows_kernel<T, false><<<grid(l, 1), kThreads, 0, s>>>(
        l, static_cast<const T*>(src), nullptr, nullptr, 0, nullptr, 0, nullptr, static_cast<T*>(dst), l.c);
  });
}

void rows_to_channels(const PairLayout& l, const void* src, void* dst, void* stream) {
  run(l, stream, [&](auto t, cudaStream_t s) {
    using T = decltype(t);
    rows_to_channels_kernel<T, false><<<grid(l, 1), kThreads, 0, s>>>(
        l, static_cast<const T*>(src), l.c, nullptr, static_cast<T*>(dst), nullptr, nullptr, 0);
  });
}

}  // namespace megafold::ops::cuda
