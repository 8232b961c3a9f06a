#include "ops/triangle_multiplication/triangle_multiplication.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sigmoid.h>

#include "ops/common.h"
#include "ops/layernorm_linear/layernorm_linear.h"

namespace megafold::ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_operands_ref(
    const at::Tensor& proj, const std::optional<at::Tensor>& mask, int64_t c) {
  if (c < 0 || proj.dim() < 1 || proj.size(-1) < 4 * c)
    detail::fail("triangle_multiplication", "the projection must have at least 4 * c = " + std::to_string(4 * c) +
                                                " columns, got " + std::to_string(proj.dim() < 1 ? 0 : proj.size(-1)));
  at::Tensor a = at::sigmoid(proj.narrow(-1, 2 * c, c)) * proj.narrow(-1, 0, c);
  at::Tensor b = at::sigmoid(proj.narrow(-1, 3 * c, c)) * proj.narrow(-1, c, c);
  if (mask.has_value() && mask->defined()) {
    const at::Tensor m = mask->unsqueeze(-1).to(a.scalar_type());
    a = a * m;
    b = b * m;
  }
  return {a, b, at::sigmoid(proj.narrow(-1, 4 * c, proj.size(-1) - 4 * c))};
}

// The two ops one after the other: the CPU path, and the CUDA path where the fused one does not
// serve the shape.
std::tuple<at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_projection_ref(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c) {
  const auto [a, b, gate] = triangle_multiplication_operands(layernorm_linear(z, ln_w, ln_b, w, std::nullopt), mask, c);
  return {a, b, gate};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> triangle_multiplication_projection_passthrough_ref(
    const at::Tensor& z, const std::optional<at::Tensor>& mask, const at::Tensor& ln_w, const at::Tensor& ln_b,
    const at::Tensor& w, int64_t c) {
  // z itself: autograd then sums its two gradients as it would without the op.
  const auto [a, b, gate] = triangle_multiplication_projection_ref(z, mask, ln_w, ln_b, w, c);
  return {a, b, gate, z};
}

at::Tensor triangle_multiplication_contract_ref(const at::Tensor& a, const at::Tensor& b) {
  // Channel-major views make the k-contraction one batched matmul per channel.
  const at::Tensor a_c = a.permute({0, 3, 1, 2});  // [B, c, i, k]
  const at::Tensor b_c = b.permute({0, 3, 1, 2});  // [B, c, j, k]
  return at::matmul(a_c, b_c.transpose(-1, -2)).permute({0, 2, 3, 1});  // [B, i, j, c]
}

at::Tensor triangle_multiplication_ref(const at::Tensor& z, const std::optional<at::Tensor>& mask,
                                       const at::Tensor& ln_in_weight,
                                       const at::Tensor& ln_in_bias, const at::Tensor& w_ab,
                                       const at::Tensor& w_g, const at::Tensor& ln_out_weight,
                                       const at::Tensor& ln_out_bias, const at::Tensor& w_o,
                                       bool outgoing) {
  constexpr const char* op = "triangle_multiplication";
  detail::check_shape(op, "z", z, {-1, -1, -1, -1});
  const int64_t B = z.size(0), N = z.size(1), c_z = z.size(3);
  if (z.size(2) != N)
    detail::fail(op, "argument 'z' must be square in dims 1 and 2, got " + detail::shape_string(z.sizes()));
  detail::check_shape(op, "mask", mask, {B, N, N});
  detail::check_shape(op, "ln_in_weight", ln_in_weight, {c_z});
  detail::check_shape(op, "ln_in_bias", ln_in_bias, {c_z});
  detail::check_shape(op, "w_ab", w_ab, {-1, c_z});
  if (w_ab.size(0) % 4 != 0)
    detail::fail(op, "argument 'w_ab' must have 4*c rows (p_a, p_b, g_a, g_b), got " +
                         std::to_string(w_ab.size(0)));
  const int64_t c = w_ab.size(0) / 4;
  detail::check_shape(op, "w_g", w_g, {c_z, c_z});
  detail::check_shape(op, "ln_out_weight", ln_out_weight, {c});
  detail::check_shape(op, "ln_out_bias", ln_out_bias, {c});
  detail::check_shape(op, "w_o", w_o, {c_z, c});
  detail::check_float_like(op, "z", z, z);

  // AF3 SI Alg. 12 / 13. The a/b projections and the output gate share LayerNorm_in(z): one
  // layernorm_linear (the fused kernels on a GPU), so the normalised z is never stored.
  const auto [a, b, gate] =
      triangle_multiplication_projection(z, mask, ln_in_weight, ln_in_bias, at::cat({w_ab, w_g}), c);
  // incoming t_ij = sum_k a_ki b_kj is the outgoing form on the transposed operands (views).
  const at::Tensor t = outgoing ? triangle_multiplication_contract(a, b)
                                : triangle_multiplication_contract(a.transpose(1, 2), b.transpose(1, 2));
  return gate * layernorm_linear(t, ln_out_weight, ln_out_bias, w_o, std::nullopt);
}

}  // namespace megafold::ops
