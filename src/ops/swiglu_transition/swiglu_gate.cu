// Gated activation of the SwiGLU transition (see swiglu_cuda.h). A thread handles 8
// consecutive hidden features of one row (16-byte loads and stores) when h is a multiple of 8,
// else one feature; the grid strides over rows x feature groups. What ATen did instead: silu,
// the product and their backward on strided halves of ab, plus a zero-filled gradient that
// the two halves were copied into.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "core/mma.cuh"
#include "ops/swiglu_transition/swiglu_cuda.h"
#include "ops/launch.cuh"

namespace megafold::ops::cuda {
namespace {

constexpr int kThreads = kBlockThreads;

using mma::from_float;
using mma::load_pack;
using mma::Pack;
using mma::store_pack;
using mma::to_float;

template <typename T, int kVec, bool kBackward>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const SwigluParams p) {
  const int64_t groups = p.h / kVec, total = p.M * groups;
  const T* ab = static_cast<const T*>(p.ab);
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / groups, col = (i - row * groups) * kVec;
    const T* ab_row = ab + row * 2 * p.h;
    const Pack<T, kVec> a = load_pack<T, kVec>(ab_row + col), b = load_pack<T, kVec>(ab_row + p.h + col);
    if constexpr (!kBackward) {
      Pack<T, kVec> out;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float x = to_float(a.v[k]);
        out.v[k] = from_float<T>(x / (1.0f + __expf(-x)) * to_float(b.v[k]));
      }
      store_pack<T, kVec>(static_cast<T*>(p.out) + row * p.h + col, out);
    } else {
      const Pack<T, kVec> dh = load_pack<T, kVec>(static_cast<const T*>(p.dh) + row * p.h + col);
      Pack<T, kVec> da, db, h;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float x = to_float(a.v[k]), g = to_float(dh.v[k]), bk = to_float(b.v[k]);
        const float s = 1.0f / (1.0f + __expf(-x));
        da.v[k] = from_float<T>(g * bk * s * (1.0f + x * (1.0f - s)));
        db.v[k] = from_float<T>(g * x * s);
        h.v[k] = from_float<T>(x * s * bk);
      }
      T* out_row = static_cast<T*>(p.out) + row * 2 * p.h;
      store_pack<T, kVec>(out_row + col, da);
      store_pack<T, kVec>(out_row + p.h + col, db);
      if (p.h_out != nullptr) store_pack<T, kVec>(static_cast<T*>(p.h_out) + row * p.h + col, h);
    }
  }
}

template <bool kBackward>
void launch(const SwigluParams& p, void* stream) {
  if (p.M == 0 || p.h == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  // Eight vectors in flight per SM thread slot is plenty for a streaming kernel; cap the grid.
  const bool vec = p.h % 8 == 0;
  const int64_t work = p.M * (vec ? p.h / 8 : p.h);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((work + kThreads - 1) / kThreads, 132 * 16));
  auto go = [&](auto t) {
    using T = decltype(t);
    if (vec) launch_kernel(swiglu_kernel<T, 8, kBackward>, blocks, kThreads, 0, s, p);
    else launch_kernel(swiglu_kernel<T, 1, kBackward>, blocks, kThreads, 0, s, p);
  };
  if (p.dtype == DType::kBFloat16) go(__nv_bfloat16{});
  else if (p.dtype == DType::kFloat16) go(__half{});
  else MF_CHECK(false, "swiglu: the kernels take float16 or bfloat16");
}

}  // namespace

void swiglu_forward(const SwigluParams& p, void* stream) { launch<false>(p, stream); }
void swiglu_backward(const SwigluParams& p, void* stream) { launch<true>(p, stream); }

}  // namespace megafold::ops::cuda
