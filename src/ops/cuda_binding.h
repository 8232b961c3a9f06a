#pragma once
// What every op's CUDA binding (<op>_autograd.cpp, CUDA builds only) needs around its kernels:
// the kernel element type of a tensor, the dtype products run in, the current stream of its
// device, and rows laid out for 16-byte vector accesses.
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <string>

#include "ops/kernel_dtype.h"
#include "ops/warn_once.h"

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

// Whether t's GPU runs the library's kernels: they are built for sm_80 and later (A100, A10,
// L40S, RTX 30/40, H100/H200). On an older GPU every op warns once and runs its ATen reference.
inline bool kernels_run_on(const at::Tensor& t, const char* op) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(t.device().index());
  if (prop->major >= 8) return true;
  warn_once(std::string("sm<80:") + op, std::string(op) + ": " + prop->name + " (sm_" + std::to_string(prop->major) +
                                            std::to_string(prop->minor) +
                                            ") predates the kernels (sm_80 and later); running the ATen reference");
  return false;
}

// Warns once per op and shape description that a shape leaves the op's kernels.
inline void warn_reference(const char* op, const std::string& shape) {
  warn_once(std::string(op) + ":" + shape, std::string(op) + ": no CUDA kernel for " + shape +
                                               "; running the ATen reference (slower, more memory)");
}

inline void* current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// t contiguous and 16-byte aligned for the kernels' vector loads: a copy only for unusual views
// (a parameter sliced from a flat buffer, say; a misaligned vector load would fault).
inline at::Tensor aligned_rows(const at::Tensor& t) {
  at::Tensor r = t.contiguous();
  return reinterpret_cast<uintptr_t>(r.data_ptr()) % 16 == 0 ? r : r.clone();
}

}  // namespace megafold::ops
