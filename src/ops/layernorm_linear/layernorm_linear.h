#pragma once
// LayerNorm followed by a linear projection: y = LayerNorm(x) @ weight^T + bias.
// Used at every projection site that starts from a normalised activation (q/k/v/g/bias of the
// attention ops, the s/z initial projections). One call per site: callers concatenate the
// weights of all projections that share an input into one `weight`.
//
//   x          [..., c_in]    any floating dtype; LayerNorm statistics in fp32 under autocast
//   ln_weight  [c_in]         LayerNorm scale
//   ln_bias    [c_in]         LayerNorm shift
//   weight     [c_out, c_in]
//   bias       [c_out]        optional
//   returns    [..., c_out]
// LayerNorm epsilon is 1e-5 (AF3). Autograd is supported; registered as
// torch.ops.megafold.layernorm_linear. On CUDA with c_in = 128 and 16-bit products (16-bit
// inputs, or autocast) it runs fused kernels (layernorm_linear_mma.cu); the rest runs the
// reference.
#include <ATen/core/Tensor.h>

#include <optional>

namespace megafold::ops {

inline constexpr double kLayerNormEps = 1e-5;

at::Tensor layernorm_linear(const at::Tensor& x, const at::Tensor& ln_weight,
                            const at::Tensor& ln_bias, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias);

// Shape, dtype and device checks shared by the reference and the CUDA path.
void check_layernorm_linear_args(const at::Tensor& x, const at::Tensor& ln_weight,
                                 const at::Tensor& ln_bias, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias);

// ATen reference (also the CPU path).
at::Tensor layernorm_linear_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                const at::Tensor& ln_bias, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias);

}  // namespace megafold::ops
