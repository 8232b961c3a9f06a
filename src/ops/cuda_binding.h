#pragma once
// What every op's CUDA binding (<op>_autograd.cpp, CUDA builds only) needs around its kernels:
// the kernel element type of a tensor, the dtype products run in, the current stream of its
// device, and rows laid out for 16-byte vector accesses.
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

#include "ops/kernel_dtype.h"

namespace megafold::ops {

inline bool is_16bit(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// float16 and bfloat16 as themselves, anything else as float32.
inline cuda::DType kernel_dtype(at::ScalarType t) {
  return t == at::kHalf ? cuda::DType::kFloat16 : t == at::kBFloat16 ? cuda::DType::kBFloat16 : cuda::DType::kFloat32;
}

// The dtype the products of an op with input x and weight run in, as its ATen reference would
// pick it: the autocast dtype for fp32 (or already-cast) x under CUDA autocast, the common
// 16-bit dtype of x and weight without it; kFloat when the 16-bit kernels do not apply.
inline at::ScalarType product_dtype(const at::Tensor& x, const at::Tensor& weight) {
  if (at::autocast::is_autocast_enabled(at::kCUDA)) {
    const at::ScalarType t = at::autocast::get_autocast_dtype(at::kCUDA);
    return x.scalar_type() == at::kFloat || x.scalar_type() == t ? t : at::kFloat;
  }
  return x.scalar_type() == weight.scalar_type() && is_16bit(x.scalar_type()) ? x.scalar_type() : at::kFloat;
}

inline void* current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// t contiguous and 16-byte aligned for the kernels' vector loads: a copy only for unusual views.
inline at::Tensor aligned_rows(const at::Tensor& t) {
  at::Tensor r = t.contiguous();
  return reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0 ? r : r.clone();
}

}  // namespace megafold::ops
