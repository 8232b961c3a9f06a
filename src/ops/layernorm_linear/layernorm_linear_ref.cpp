#include "ops/layernorm_linear/layernorm_linear.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>

#include "ops/common.h"

namespace megafold::ops {

void check_layernorm_linear_args(const at::Tensor& x, const at::Tensor& ln_weight,
                                 const at::Tensor& ln_bias, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias) {
  constexpr const char* op = "layernorm_linear";
  if (x.dim() < 1) detail::fail(op, "argument 'x' must have at least 1 dim");
  const int64_t c_in = x.size(-1);
  detail::check_shape(op, "ln_weight", ln_weight, {c_in});
  detail::check_shape(op, "ln_bias", ln_bias, {c_in});
  detail::check_shape(op, "weight", weight, {-1, c_in});
  detail::check_shape(op, "bias", bias, {weight.size(0)});
  detail::check_float_like(op, "x", x, x);
  detail::check_float_like(op, "weight", weight, x);
}

at::Tensor layernorm_linear_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                const at::Tensor& ln_bias, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias) {
  check_layernorm_linear_args(x, ln_weight, ln_bias, weight, bias);
  const int64_t c_in = x.size(-1);
  const at::Tensor xn = at::layer_norm(x, {c_in}, ln_weight, ln_bias, kLayerNormEps);
  return at::linear(xn, weight, bias);
}

}  // namespace megafold::ops
