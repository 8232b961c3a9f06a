// Layout passes of triangle_multiplication around the cuBLAS contraction (see
// triangle_multiplication_cuda.h). A thread owns a patch of kVec rows x kVec channels: it
// reads the patch's kVec row segments (or channel segments) as 16-byte vectors, transposes it
// in registers and writes kVec channel segments (or row segments) as 16-byte vectors. The
// eight threads next to each other in a warp own neighbouring channel groups, so a row-major
// access covers 128 contiguous bytes and a channel-major one 64 (four row patches), both whole
// 32-byte sectors; no shared memory or barriers. kVec = 8 needs every row pitch, the channel
// counts and the pair plane to be multiples of 8 (N a multiple of 4); other shapes run the
// same code on single elements (kVec = 1), which is correct but uses a quarter of each sector.
// The shared-memory tile transposes these kernels replace moved 2-byte scalars at 1.1-1.3 TB/s.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/triangle_multiplication/operand_gradients.cuh"
#include "ops/triangle_multiplication/triangle_multiplication_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

constexpr int kThreads = kBlockThreads;
constexpr int kGroups = 8;                      // channel patches per block (adjacent lanes)
constexpr int kRowPatches = kThreads / kGroups;  // row patches per block

using mma::from_float;
using mma::load_pack;
using mma::Pack;
using mma::store_pack;
using mma::to_float;

// Offset of (row r, channel ch) in the channel-major [B, c, P] layout.
__device__ __forceinline__ int64_t channel_major(int64_t r, int64_t ch, const PairLayout& l) {
  const int64_t b = r / l.plane;
  return (b * l.c + ch) * l.plane + (r - b * l.plane);
}

// This thread's patch: rows r0 .. r0 + kVec - 1, channels ch0 .. ch0 + kVec - 1. With kVec = 8
// the plane is a multiple of 8, so a patch never straddles two batch elements.
template <int kVec>
struct Patch {
  int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kRowPatches + threadIdx.x / kGroups) * kVec;
  int64_t ch0 = (static_cast<int64_t>(blockIdx.y) * kGroups + threadIdx.x % kGroups) * kVec;
};

// Source rows -> channel-major destination. kGate: the value is the gated, masked operand
// blockIdx.z (0: a, 1: b) of the projection rows (blockIdx.z = 2: the output gate, row to
// row); otherwise the row-major value itself.
template <typename T, int kVec, bool kGate>
__global__ void __launch_bounds__(kThreads) rows_to_channels_kernel(const PairLayout l, const T* __restrict__ src,
                                                                    int64_t ld, const float* __restrict__ mask,
                                                                    T* __restrict__ dst0, T* __restrict__ dst1,
                                                                    T* __restrict__ gate, int64_t c_gate) {
  const Patch<kVec> pt;
  const int op = blockIdx.z;
  if (pt.r0 >= l.batch * l.plane) return;
  if (kGate && op == 2) {
    if (pt.ch0 >= c_gate) return;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t r = pt.r0 + i;
      const Pack<T, kVec> g = load_pack<T, kVec>(src + r * ld + 4 * l.c + pt.ch0);
      Pack<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(trimul_sigmoid(to_float(g.v[k])));
      store_pack<T, kVec>(gate + r * c_gate + pt.ch0, out);
    }
    return;
  }
  if (pt.ch0 >= l.c) return;
  Pack<T, kVec> col[kVec];  // col[k].v[i]: channel ch0 + k of row r0 + i
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const T* row = src + (pt.r0 + i) * ld;
    if constexpr (kGate) {
      const float m = mask != nullptr ? mask[pt.r0 + i] : 1.0f;
      const Pack<T, kVec> p = load_pack<T, kVec>(row + op * l.c + pt.ch0);
      const Pack<T, kVec> g = load_pack<T, kVec>(row + (2 + op) * l.c + pt.ch0);
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        col[k].v[i] = from_float<T>(to_float(p.v[k]) * trimul_sigmoid(to_float(g.v[k])) * m);
    } else {
      const Pack<T, kVec> x = load_pack<T, kVec>(row + pt.ch0);
#pragma unroll
      for (int k = 0; k < kVec; ++k) col[k].v[i] = x.v[k];
    }
  }
  T* dst = op == 0 ? dst0 : dst1;
#pragma unroll
  for (int k = 0; k < kVec; ++k) store_pack<T, kVec>(dst + channel_major(pt.r0, pt.ch0 + k, l), col[k]);
}

// Channel-major source -> rows. kGate: the source is d(operand blockIdx.z), and the rows
// written are the gradients of its projection and gate columns (blockIdx.z = 2: the output
// gate's gradient rows give its logits' columns); otherwise the value itself.
template <typename T, int kVec, bool kGate>
__global__ void __launch_bounds__(kThreads) channels_to_rows_kernel(const PairLayout l, const T* __restrict__ src0,
                                                                    const T* __restrict__ src1,
                                                                    const T* __restrict__ dgate, int64_t c_gate,
                                                                    const T* __restrict__ proj, int64_t ld,
                                                                    const float* __restrict__ mask,
                                                                    T* __restrict__ dst, int64_t ld_dst) {
  const Patch<kVec> pt;
  const int op = blockIdx.z;
  if (pt.r0 >= l.batch * l.plane) return;
  if (kGate && op == 2) {
    if (pt.ch0 >= c_gate) return;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t r = pt.r0 + i;
      const Pack<T, kVec> d = load_pack<T, kVec>(dgate + r * c_gate + pt.ch0);
      const Pack<T, kVec> g = load_pack<T, kVec>(proj + r * ld + 4 * l.c + pt.ch0);
      Pack<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(trimul_gate_gradient(to_float(d.v[k]), to_float(g.v[k])));
      store_pack<T, kVec>(dst + r * ld_dst + 4 * l.c + pt.ch0, out);
    }
    return;
  }
  if (pt.ch0 >= l.c) return;
  const T* src = op == 0 ? src0 : src1;
  Pack<T, kVec> col[kVec];  // col[k].v[i]: channel ch0 + k of row r0 + i
#pragma unroll
  for (int k = 0; k < kVec; ++k) col[k] = load_pack<T, kVec>(src + channel_major(pt.r0, pt.ch0 + k, l));
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    T* out = dst + (pt.r0 + i) * ld_dst;
    if constexpr (kGate) {
      const T* row = proj + (pt.r0 + i) * ld;
      const float m = mask != nullptr ? mask[pt.r0 + i] : 1.0f;
      const Pack<T, kVec> p = load_pack<T, kVec>(row + op * l.c + pt.ch0);
      const Pack<T, kVec> g = load_pack<T, kVec>(row + (2 + op) * l.c + pt.ch0);
      Pack<T, kVec> dp, dg;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float2 grads = trimul_operand_gradients(to_float(col[k].v[i]) * m, to_float(p.v[k]), to_float(g.v[k]));
        dp.v[k] = from_float<T>(grads.x);
        dg.v[k] = from_float<T>(grads.y);
      }
      store_pack<T, kVec>(out + op * l.c + pt.ch0, dp);
      store_pack<T, kVec>(out + (2 + op) * l.c + pt.ch0, dg);
    } else {
      Pack<T, kVec> x;
#pragma unroll
      for (int k = 0; k < kVec; ++k) x.v[k] = col[k].v[i];
      store_pack<T, kVec>(out + pt.ch0, x);
    }
  }
}

dim3 grid(const PairLayout& l, int operands, int vec, int64_t c_gate = 0) {
  const int64_t row_tiles = (l.batch * l.plane + kRowPatches * vec - 1) / (kRowPatches * vec);
  const int64_t channel_tiles = (std::max(l.c, c_gate) + kGroups * vec - 1) / (kGroups * vec);
  MF_CHECK(row_tiles < (int64_t{1} << 31) && channel_tiles < 65536, "triangle_multiplication: pair tensor too large");
  return dim3(static_cast<unsigned int>(row_tiles), static_cast<unsigned int>(channel_tiles), operands);
}

// Whether every pitch and count is a multiple of 8 elements and every pointer 16-byte aligned.
bool vectorizable(const PairLayout& l, std::initializer_list<int64_t> counts, std::initializer_list<const void*> ptrs) {
  bool ok = l.plane % 8 == 0 && l.c % 8 == 0;
  for (int64_t n : counts) ok = ok && n % 8 == 0;
  for (const void* q : ptrs) ok = ok && reinterpret_cast<uintptr_t>(q) % 16 == 0;
  return ok;
}

// Calls launch(T{}, kVec, stream) with T the layout's 16-bit type and kVec 8 when vec, else 1,
// unless there is nothing to do.
template <typename Launch>
void run(const PairLayout& l, bool vec, void* stream, Launch&& launch) {
  if (l.batch * l.plane == 0 || l.c == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  auto with_type = [&](auto t) {
    if (vec) launch(t, std::integral_constant<int, 8>{}, s);
    else launch(t, std::integral_constant<int, 1>{}, s);
  };
  if (l.dtype == DType::kBFloat16) with_type(__nv_bfloat16{});
  else if (l.dtype == DType::kFloat16) with_type(__half{});
  else MF_CHECK(false, "triangle_multiplication: the layout kernels take float16 or bfloat16");
  MF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void trimul_operands_forward(const PairLayout& l, const TrimulOperands& o, void* stream) {
  const bool vec = vectorizable(l, {o.ld, o.c_gate}, {o.proj, o.a, o.b, o.gate});
  run(l, vec, stream, [&](auto t, auto v, cudaStream_t s) {
    using T = decltype(t);
    launch_kernel(rows_to_channels_kernel<T, v(), true>, grid(l, o.c_gate > 0 ? 3 : 2, v(), o.c_gate), kThreads, 0,
                  s, l, static_cast<const T*>(o.proj), o.ld, o.mask, static_cast<T*>(o.a), static_cast<T*>(o.b),
                  static_cast<T*>(o.gate), o.c_gate);
  });
}

void trimul_operands_backward(const PairLayout& l, const TrimulOperands& o, void* stream) {
  const bool vec = vectorizable(l, {o.ld, o.c_gate}, {o.proj, o.a, o.b, o.gate, o.dproj});
  run(l, vec, stream, [&](auto t, auto v, cudaStream_t s) {
    using T = decltype(t);
    launch_kernel(channels_to_rows_kernel<T, v(), true>, grid(l, o.c_gate > 0 ? 3 : 2, v(), o.c_gate), kThreads, 0,
                  s, l, static_cast<const T*>(o.a), static_cast<const T*>(o.b), static_cast<const T*>(o.gate),
                  o.c_gate, static_cast<const T*>(o.proj), o.ld, o.mask, static_cast<T*>(o.dproj),
                  4 * l.c + o.c_gate);
  });
}

void channels_to_rows(const PairLayout& l, const void* src, void* dst, void* stream) {
  run(l, vectorizable(l, {}, {src, dst}), stream, [&](auto t, auto v, cudaStream_t s) {
    using T = decltype(t);
    launch_kernel(channels_to_rows_kernel<T, v(), false>, grid(l, 1, v()), kThreads, 0, s, l,
                  static_cast<const T*>(src), static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), 0,
                  static_cast<const T*>(nullptr), int64_t{0}, static_cast<const float*>(nullptr),
                  static_cast<T*>(dst), l.c);
  });
}

void rows_to_channels(const PairLayout& l, const void* src, void* dst, void* stream) {
  run(l, vectorizable(l, {}, {src, dst}), stream, [&](auto t, auto v, cudaStream_t s) {
    using T = decltype(t);
    launch_kernel(rows_to_channels_kernel<T, v(), false>, grid(l, 1, v()), kThreads, 0, s, l,
                  static_cast<const T*>(src), l.c, static_cast<const float*>(nullptr), static_cast<T*>(dst),
                  static_cast<T*>(nullptr), static_cast<T*>(nullptr), 0);
  });
}

}  // namespace megafold::ops::cuda
