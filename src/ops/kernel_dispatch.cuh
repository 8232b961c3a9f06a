#pragma once
// The element types a kernel over rows is instantiated for (CUDA sources only).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/kernel_dtype.h"

namespace megafold::ops::cuda {

// Calls fn(Tin{}, T{}) with Tin the type of x and dx (float or T) and T the 16-bit product type.
template <typename Fn>
void dispatch_input_and_product(DType x_dtype, DType product, Fn&& fn) {
  const bool x_float = x_dtype == DType::kFloat32;
  if (product == DType::kBFloat16) {
    if (x_float) fn(float{}, __nv_bfloat16{});
    else fn(__nv_bfloat16{}, __nv_bfloat16{});
  } else {
    if (x_float) fn(float{}, __half{});
    else fn(__half{}, __half{});
  }
}

}  // namespace megafold::ops::cuda
