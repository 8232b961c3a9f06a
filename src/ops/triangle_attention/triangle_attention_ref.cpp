#include "ops/triangle_attention/triangle_attention.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/any.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>

#include <cmath>

#include "core/check.h"
#include "ops/common.h"

namespace megafold::ops {

void check_triangle_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& bias,
                                   const std::optional<at::Tensor>& mask,
                                   const std::optional<at::Tensor>& gate) {
  constexpr const char* op = "triangle_attention";
  detail::check_shape(op, "q", q, {-1, -1, -1, -1, -1});
  const int64_t B = q.size(0), R = q.size(1), N = q.size(2), H = q.size(3), d = q.size(4);
  detail::check_shape(op, "k", k, {B, R, N, H, d});
  detail::check_shape(op, "v", v, {B, R, N, H, d});
  detail::check_shape(op, "bias", bias, {B, H, N, N});
  detail::check_shape(op, "mask", mask, {B, R, N});
  detail::check_shape(op, "gate", gate, {B, R, N, H, d});
  detail::check_float_like(op, "q", q, q);
  detail::check_float_like(op, "k", k, q);
  detail::check_float_like(op, "v", v, q);
  if (bias.has_value() && bias->defined()) detail::check_float_like(op, "bias", *bias, q);
  if (gate.has_value() && gate->defined()) detail::check_float_like(op, "gate", *gate, q);
}

at::Tensor triangle_attention_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& bias,
                                  const std::optional<at::Tensor>& mask,
                                  const std::optional<at::Tensor>& gate) {
  check_triangle_attention_args(q, k, v, bias, mask, gate);
  const int64_t B = q.size(0), R = q.size(1), N = q.size(2), d = q.size(4);

  const at::Tensor qh = q.permute({0, 1, 3, 2, 4});  // [B, R, H, N, d]
  const at::Tensor kh = k.permute({0, 1, 3, 4, 2});  // [B, R, H, d, N]
  const at::Tensor vh = v.permute({0, 1, 3, 2, 4});  // [B, R, H, N, d]
  at::Tensor logits = at::matmul(qh, kh) * (1.0 / std::sqrt(static_cast<double>(d)));
  if (bias.has_value() && bias->defined()) logits = logits + bias->unsqueeze(1);  // [B,R,H,N,N]
  at::Tensor valid_row;
  if (mask.has_value() && mask->defined()) {
    const at::Tensor key = mask->ne(0).view({B, R, 1, 1, N});
    // A finite fill keeps fully masked rows NaN-free (uniform weights, zeroed below); fp16
    // logits get their lowest finite value, -1e9 is out of their range.
    const double fill = logits.scalar_type() == at::kHalf ? -65504.0 : -1e9;
    logits = logits.masked_fill(key.logical_not(), fill);
    valid_row = at::any(mask->ne(0), -1).view({B, R, 1, 1, 1});
  }
  // Softmax in at least fp32 (bf16 probabilities would lose the small weights).
  const at::Tensor p = at::softmax(logits, -1, at::promote_types(logits.scalar_type(), at::kFloat));
  at::Tensor o = at::matmul(p.to(vh.scalar_type()), vh);  // [B, R, H, N, d]
  if (valid_row.defined()) o = o * valid_row.to(o.scalar_type());
  o = o.permute({0, 1, 3, 2, 4});  // [B, R, N, H, d]
  if (gate.has_value() && gate->defined()) o = o * at::sigmoid(*gate);
  return o;
}

ProjectedOperands projected_operands(const at::Tensor& proj, int64_t heads, int64_t head_dim, bool transposed) {
  constexpr const char* op = "triangle_attention_projected";
  detail::check_shape(op, "proj", proj, {-1, -1, -1, -1});
  const int64_t H = heads, d = head_dim, width = 4 * H * d + H;
  MF_CHECK(H > 0 && d > 0, op, ": heads ", H, " and head_dim ", d, " must be positive");
  MF_CHECK(proj.size(3) >= width, op, ": proj has ", proj.size(3), " columns; q, k, v, gate and bias need ",
           width);
  MF_CHECK(!transposed || proj.size(1) == proj.size(2), op, ": the ending-node form needs a square pair grid, got ",
           proj.sizes());
  const at::Tensor P = transposed ? proj.transpose(1, 2) : proj;
  auto heads_of = [&](int64_t part) { return P.narrow(-1, part * H * d, H * d).unflatten(-1, {H, d}); };
  return {heads_of(0), heads_of(1), heads_of(2), heads_of(3), P.narrow(-1, 4 * H * d, H).permute({0, 3, 1, 2})};
}

at::Tensor triangle_attention_projected_ref(const at::Tensor& proj, const std::optional<at::Tensor>& bias,
                                            const std::optional<at::Tensor>& mask, int64_t heads,
                                            int64_t head_dim, bool transposed) {
  const ProjectedOperands x = projected_operands(proj, heads, head_dim, transposed);
  const at::Tensor b = bias.has_value() && bias->defined() ? *bias : x.bias;
  return triangle_attention_ref(x.q, x.k, x.v, b, mask, x.gate);
}

}  // namespace megafold::ops
