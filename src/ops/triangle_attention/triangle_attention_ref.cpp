#include "ops/triangle_attention/triangle_attention.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/any.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>

#include <cmath>

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

}  // namespace megafold::ops
