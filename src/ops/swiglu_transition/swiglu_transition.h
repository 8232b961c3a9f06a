#pragma once
// SwiGLU transition (AF3 SI Alg. 11): the feed-forward block of the pair and single stacks.
//   a, b = split(LayerNorm(x) @ w_in^T)      a, b: [..., n*c]
//   y    = (silu(a) * b) @ w_out^T
//
//   x          [..., c]
//   ln_weight  [c], ln_bias [c]
//   w_in       [2*h, c]   rows [0, h) project to a, rows [h, 2h) to b (h = n*c, AF3 n = 4)
//   w_out      [c, h]
//   returns    [..., c]   the update; the caller adds the residual.
// Registered as torch.ops.megafold.swiglu_transition. On CUDA with c = 128 or 384 and 16-bit
// products (16-bit inputs, or autocast) one fused kernel computes the forward with a, b and
// the hidden layer kept on chip (swiglu_transition_mma.cu); backward recomputes them with the
// LayerNorm+Linear and swiglu kernels. Anything else runs the reference.
#include <ATen/core/Tensor.h>

#include <tuple>

namespace megafold::ops {

at::Tensor swiglu_transition(const at::Tensor& x, const at::Tensor& ln_weight,
                             const at::Tensor& ln_bias, const at::Tensor& w_in,
                             const at::Tensor& w_out);

// For the residual step x + swiglu_transition(x): returns (update, x), x passed through
// unchanged to be the residual stream, so that the backward receives the residual's gradient
// of x and the fused backward kernel (H100/H200) adds it to dx itself instead of autograd
// summing x's two gradients in a separate pass. Same values as swiglu_transition; registered as
// torch.ops.megafold.swiglu_transition_passthrough.
std::tuple<at::Tensor, at::Tensor> swiglu_transition_passthrough(const at::Tensor& x, const at::Tensor& ln_weight,
                                                                 const at::Tensor& ln_bias, const at::Tensor& w_in,
                                                                 const at::Tensor& w_out);

// The gated activation silu(a) * b of ab = [a | b] ([..., 2h] -> [..., h]): a dispatcher op
// (torch.ops.megafold.swiglu) with a fused CUDA kernel for 16-bit tensors.
at::Tensor swiglu(const at::Tensor& ab);
at::Tensor swiglu_ref(const at::Tensor& ab);

// Shape, dtype and device checks shared by the reference and the CUDA path.
void check_swiglu_transition_args(const at::Tensor& x, const at::Tensor& ln_weight,
                                  const at::Tensor& ln_bias, const at::Tensor& w_in,
                                  const at::Tensor& w_out);

at::Tensor swiglu_transition_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                 const at::Tensor& ln_bias, const at::Tensor& w_in,
                                 const at::Tensor& w_out);
std::tuple<at::Tensor, at::Tensor> swiglu_transition_passthrough_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                                                     const at::Tensor& ln_bias, const at::Tensor& w_in,
                                                                     const at::Tensor& w_out);

}  // namespace megafold::ops
