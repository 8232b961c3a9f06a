// Streaming kernels of residual_update (see residual_update_cuda.h). A thread handles 4
// consecutive channels of one row (16-byte fp32 / 8-byte 16-bit accesses) when c is a multiple
// of 4, else one channel; the grid strides over rows x channel groups. Index arithmetic runs in
// 32 bits when the tensor allows it: three divisions per vector locate the scale's element, and
// in 64 bits they would cost as much issue time as the memory traffic they serve.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/residual_update/residual_update_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

constexpr int kThreads = kBlockThreads;

template <typename T>
__device__ __forceinline__ float widen(T x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return mma::to_float(x);
}
template <typename T>
__device__ __forceinline__ T narrow(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return mma::from_float<T>(x);
}

// kVec consecutive values through one aligned access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};
template <typename T, int kVec>
__device__ __forceinline__ Vec<T, kVec> load(const void* base, int64_t at) {
  return *reinterpret_cast<const Vec<T, kVec>*>(static_cast<const T*>(base) + at);
}
template <typename T, int kVec>
__device__ __forceinline__ void store(void* base, int64_t at, const Vec<T, kVec>& x) {
  *reinterpret_cast<Vec<T, kVec>*>(static_cast<T*>(base) + at) = x;
}

// The scale of the kVec channels from col on, for vector v (row = v / groups).
template <typename Index, int kVec>
__device__ __forceinline__ void scale_of(const ResidualUpdateParams& p, Index row, Index col, float (&s)[kVec]) {
  if (p.scale == nullptr) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) s[k] = 1.0f;
    return;
  }
  const Index d1 = static_cast<Index>(p.d1), d2 = static_cast<Index>(p.d2);
  const Index q = row / d2, r2 = row - q * d2, r0 = q / d1, r1 = q - r0 * d1;
  const int64_t at = int64_t(r0) * p.scale_stride[0] + int64_t(r1) * p.scale_stride[1] +
                     int64_t(r2) * p.scale_stride[2] + int64_t(col) * p.scale_stride[3];
#pragma unroll
  for (int k = 0; k < kVec; ++k) s[k] = __ldg(p.scale + at + k * p.scale_stride[3]);
}

template <typename Z, typename U, int kVec, bool kBackward, typename Index>
__device__ __forceinline__ void body(const ResidualUpdateParams& p) {
  const Index groups = static_cast<Index>(p.c / kVec), total = static_cast<Index>(p.rows) * groups;
  for (Index v = blockIdx.x * Index{kThreads} + threadIdx.x; v < total; v += Index{gridDim.x} * kThreads) {
    const Index row = v / groups, col = (v - row * groups) * kVec;
    const int64_t at = int64_t(row) * p.c + col;
    float s[kVec];
    scale_of<Index, kVec>(p, row, col, s);
    if (p.gate != nullptr) {
      const Vec<U, kVec> g = load<U, kVec>(p.gate, at);
#pragma unroll
      for (int k = 0; k < kVec; ++k) s[k] *= widen(g.v[k]);
    }
    if constexpr (!kBackward) {
      const Vec<Z, kVec> z = load<Z, kVec>(p.z, at);
      const Vec<U, kVec> u = load<U, kVec>(p.update, at);
      Vec<Z, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) out.v[k] = narrow<Z>(widen(z.v[k]) + s[k] * widen(u.v[k]));
      store<Z, kVec>(p.out, at, out);
    } else {
      Vec<Z, kVec> g = load<Z, kVec>(p.grad, at);
      if (p.grad2 != nullptr) {
        const Vec<Z, kVec> g2 = load<Z, kVec>(p.grad2, at);
#pragma unroll
        for (int k = 0; k < kVec; ++k) g.v[k] = narrow<Z>(widen(g.v[k]) + widen(g2.v[k]));
        store<Z, kVec>(p.grad_sum, at, g);
      }
      Vec<U, kVec> du;
#pragma unroll
      for (int k = 0; k < kVec; ++k) du.v[k] = narrow<U>(widen(g.v[k]) * s[k]);
      store<U, kVec>(p.d_update, at, du);
      if (p.gate != nullptr) {
        // d gate = g * scale * update: the scale alone, without the gate folded in above.
        float s0[kVec];
        scale_of<Index, kVec>(p, row, col, s0);
        const Vec<U, kVec> u = load<U, kVec>(p.update, at);
        Vec<U, kVec> dg;
#pragma unroll
        for (int k = 0; k < kVec; ++k) dg.v[k] = narrow<U>(widen(g.v[k]) * s0[k] * widen(u.v[k]));
        store<U, kVec>(p.d_gate, at, dg);
      }
    }
  }
}

template <typename Z, typename U, int kVec, bool kBackward>
__global__ void __launch_bounds__(kThreads) residual_update_kernel(const ResidualUpdateParams p) {
  if (p.rows * (p.c / kVec) < (int64_t{1} << 31)) body<Z, U, kVec, kBackward, uint32_t>(p);
  else body<Z, U, kVec, kBackward, int64_t>(p);
}

template <bool kBackward>
void launch(const ResidualUpdateParams& p, void* stream) {
  if (p.rows == 0 || p.c == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const bool vec = p.c % 4 == 0;
  const int64_t work = p.rows * (vec ? p.c / 4 : p.c);
  // A streaming kernel: 16 blocks of 256 threads per SM keep enough loads in flight.
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16));
  auto go = [&](auto z, auto u) {
    using Z = decltype(z);
    using U = decltype(u);
    if (vec) launch_kernel(residual_update_kernel<Z, U, 4, kBackward>, blocks, kThreads, 0, s, p);
    else launch_kernel(residual_update_kernel<Z, U, 1, kBackward>, blocks, kThreads, 0, s, p);
  };
  // z in fp32 (the model's residual stream under autocast) or in the update's dtype.
  const DType zt = p.z_dtype, ut = p.u_dtype;
  if (zt == DType::kFloat32 && ut == DType::kFloat32) go(float{}, float{});
  else if (zt == DType::kFloat32 && ut == DType::kBFloat16) go(float{}, __nv_bfloat16{});
  else if (zt == DType::kFloat32 && ut == DType::kFloat16) go(float{}, __half{});
  else if (zt == DType::kBFloat16 && ut == DType::kBFloat16) go(__nv_bfloat16{}, __nv_bfloat16{});
  else if (zt == DType::kFloat16 && ut == DType::kFloat16) go(__half{}, __half{});
  else MF_CHECK(false, "residual_update: the kernels take z in fp32 or the update's dtype");
  MF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void residual_update_forward(const ResidualUpdateParams& p, void* stream) { launch<false>(p, stream); }
void residual_update_backward(const ResidualUpdateParams& p, void* stream) { launch<true>(p, stream); }

}  // namespace megafold::ops::cuda
