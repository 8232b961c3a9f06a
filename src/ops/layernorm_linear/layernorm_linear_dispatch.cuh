#pragma once
// The element types of the layernorm_linear kernels (both kernel files): calls fn(Tin{}, T{})
// with Tin the type of x and dx (float or T) and T the 16-bit product type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/layernorm_linear/layernorm_linear_cuda.h"

namespace megafold::ops::cuda {

template <typename Fn>
void dispatch_layernorm_linear(const LayerNormLinearParams& p, Fn&& fn) {
  const bool x_float = p.x_dtype == DType::kFloat32;
  if (p.dtype == DType::kBFloat16) {
    if (x_float) fn(float{}, __nv_bfloat16{});
    else fn(__nv_bfloat16{}, __nv_bfloat16{});
  } else {
    if (x_float) fn(float{}, __half{});
    else fn(__half{}, __half{});
  }
}

}  // namespace megafold::ops::cuda
