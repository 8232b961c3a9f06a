#include "ops/swiglu_transition/swiglu_transition.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/silu.h>

#include "ops/common.h"
#include "ops/layernorm_linear/layernorm_linear.h"

namespace megafold::ops {

void check_swiglu_transition_args(const at::Tensor& x, const at::Tensor& ln_weight,
                                  const at::Tensor& ln_bias, const at::Tensor& w_in,
                                  const at::Tensor& w_out) {
  constexpr const char* op = "swiglu_transition";
  if (x.dim() < 1) detail::fail(op, "argument 'x' must have at least 1 dim");
  const int64_t c = x.size(-1);
  detail::check_shape(op, "ln_weight", ln_weight, {c});
  detail::check_shape(op, "ln_bias", ln_bias, {c});
  detail::check_shape(op, "w_in", w_in, {-1, c});
  if (w_in.size(0) % 2 != 0)
    detail::fail(op, "argument 'w_in' must have an even number of rows (a and b halves), got " +
                         std::to_string(w_in.size(0)));
  detail::check_shape(op, "w_out", w_out, {c, w_in.size(0) / 2});
  detail::check_float_like(op, "x", x, x);
}

at::Tensor swiglu_transition_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                 const at::Tensor& ln_bias, const at::Tensor& w_in,
                                 const at::Tensor& w_out) {
  check_swiglu_transition_args(x, ln_weight, ln_bias, w_in, w_out);
  // AF3 SI Alg. 11
  // Through the dispatcher: the fused LayerNorm+Linear kernels serve c = 128 on a GPU.
  const at::Tensor ab = layernorm_linear(x, ln_weight, ln_bias, w_in, std::nullopt);  // [..., 2h]
  return at::linear(swiglu(ab), w_out);
}

at::Tensor swiglu_ref(const at::Tensor& ab) {
  if (ab.dim() < 1 || ab.size(-1) % 2 != 0)
    detail::fail("swiglu", "argument 'ab' must end in an even width (a and b halves), got " +
                               std::to_string(ab.dim() < 1 ? -1 : ab.size(-1)));
  const int64_t h = ab.size(-1) / 2;
  return at::silu(ab.narrow(-1, 0, h)) * ab.narrow(-1, h, h);
}

std::tuple<at::Tensor, at::Tensor> swiglu_transition_passthrough_ref(const at::Tensor& x, const at::Tensor& ln_weight,
                                                                     const at::Tensor& ln_bias, const at::Tensor& w_in,
                                                                     const at::Tensor& w_out) {
  // x itself: autograd then sums its two gradients as it would without the op.
  return {swiglu_transition_ref(x, ln_weight, ln_bias, w_in, w_out), x};
}

}  // namespace megafold::ops
