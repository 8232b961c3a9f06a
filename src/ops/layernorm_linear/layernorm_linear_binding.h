#pragma once
// For CUDA bindings of other ops that run a LayerNorm+Linear inside their own kernels and
// compute dx themselves (swiglu_transition's fused backward on H100/H200): the weight
// gradients of layernorm_linear from layernorm_linear's weight-gradient kernels
// (layernorm_linear_autograd.cpp). CUDA builds only.
//
//   x      [M, 128]  fp32, or the 16-bit type of w; contiguous, 16-byte aligned
//   ln_w   [128], ln_b [128]  fp32
//   w      [N, 128]  16-bit (the product type), N % 8 == 0
//   mean, rstd [M]   fp32: x's LayerNorm statistics
//   dy     [M, N]    w's type: the gradient of LayerNorm(x) @ w^T
// Returns fp32 d ln_w [128], d ln_b [128], dw [N, 128]; bitwise reproducible (no atomics).
#include <ATen/core/Tensor.h>

namespace megafold::ops {

struct LayerNormLinearWeightGrads {
  at::Tensor d_ln_w, d_ln_b, dw;
};

LayerNormLinearWeightGrads layernorm_linear_weight_gradients(const at::Tensor& x, const at::Tensor& ln_w,
                                                             const at::Tensor& ln_b, const at::Tensor& w,
                                                             const at::Tensor& mean, const at::Tensor& rstd,
                                                             const at::Tensor& dy);

}  // namespace megafold::ops
