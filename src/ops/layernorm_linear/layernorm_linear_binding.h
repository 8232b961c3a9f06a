#pragma once
// For CUDA bindings of other ops built around layernorm_linear's kernels
// (layernorm_linear_autograd.cpp; CUDA builds only). For those that run a LayerNorm+Linear
// inside their own kernels and compute dx themselves (swiglu_transition's fused backward on
// H100/H200): the weight gradients of layernorm_linear from its weight-gradient kernels.
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

// For triangle_multiplication's CUDA binding, which runs the forward with its operands made in
// the epilogue (see TrimulEpilogue in layernorm_linear_cuda.h) and its own backward around
// layernorm_linear's. What the backward needs, in kernel layout, with the inputs' dtypes:
struct LayerNormLinearContext {
  at::Tensor x, ln_w, ln_b, w, mean, rstd;
  at::ScalarType x_dtype, ln_w_dtype, ln_b_dtype, w_dtype;
};

// Whether the fused forward serves z [B, n, N, 128] and w [4c + c_gate, 128] under the current
// autocast state on z's GPU (16-bit products, the sm_90a kernels, the epilogue's shapes).
bool layernorm_linear_trimul_fits(const at::Tensor& z, const at::Tensor& w, int64_t c);
// Triangle multiplication's operands from proj = layernorm_linear(z, ln_w, ln_b, w) (in the
// product dtype, never stored): a, b [B, c, n, N] channel-major, gate [B, n, N, c_gate] (mask
// [B, n, N] float or undefined). Returns the backward's context (z's statistics included).
LayerNormLinearContext layernorm_linear_trimul_forward(const at::Tensor& z, const at::Tensor& ln_w,
                                                       const at::Tensor& ln_b, const at::Tensor& w,
                                                       const at::Tensor& mask, int64_t c, at::Tensor& a,
                                                       at::Tensor& b, at::Tensor& gate);
// dx and the weight gradients (each in its input's dtype; db, the gradient of a bias, in float)
// from dy [.., N].
struct LayerNormLinearGrads {
  at::Tensor dx, d_ln_w, d_ln_b, dw, db;
};
LayerNormLinearGrads layernorm_linear_backward(const LayerNormLinearContext& ctx, const at::Tensor& dy);

}  // namespace megafold::ops
