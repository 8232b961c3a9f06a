#include "ops/attention_pair_bias/attention_pair_bias.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/zeros.h>

#include <vector>

#include "ops/common.h"
#include "ops/layernorm_linear/layernorm_linear.h"
#include "ops/triangle_attention/triangle_attention.h"

namespace megafold::ops {

at::Tensor attention_with_pair_bias(const at::Tensor& s, const at::Tensor& pair_bias,
                                    const std::optional<at::Tensor>& mask, const at::Tensor& ln_s_weight,
                                    const at::Tensor& ln_s_bias, const at::Tensor& w_qkvg, const at::Tensor& b_q,
                                    const at::Tensor& w_o, int64_t n_heads) {
  constexpr const char* op = "attention_pair_bias";
  detail::check_shape(op, "s", s, {-1, -1, -1});
  const int64_t B = s.size(0), N = s.size(1), c_s = s.size(2), H = n_heads;
  if (H < 1) detail::fail(op, "n_heads must be >= 1, got " + std::to_string(H));
  detail::check_shape(op, "pair_bias", pair_bias, {B, N, N, H});
  detail::check_shape(op, "mask", mask, {B, N});
  detail::check_shape(op, "w_qkvg", w_qkvg, {-1, c_s});
  if (w_qkvg.size(0) % (4 * H) != 0)
    detail::fail(op, "argument 'w_qkvg' must have 4*H*d rows, got " +
                         std::to_string(w_qkvg.size(0)) + " for H=" + std::to_string(H));
  const int64_t d = w_qkvg.size(0) / (4 * H);
  detail::check_shape(op, "b_q", b_q, {H * d});
  detail::check_shape(op, "w_o", w_o, {c_s, H * d});

  // AF3 SI Alg. 24: only q carries a bias.
  const at::Tensor qkvg_bias = at::cat({b_q, at::zeros({3 * H * d}, b_q.options())});
  // unbind, not a select per part: backward stacks the four gradients in one pass.
  const std::vector<at::Tensor> qkvg =
      layernorm_linear_ref(s, ln_s_weight, ln_s_bias, w_qkvg, qkvg_bias).view({B, 1, N, 4, H, d}).unbind(3);
  std::optional<at::Tensor> row_mask;
  if (mask.has_value() && mask->defined()) row_mask = mask->view({B, 1, N});
  // Through the dispatcher: on a GPU the triangle-attention kernels serve this R = 1 case.
  const at::Tensor o = triangle_attention(qkvg[0], qkvg[1], qkvg[2], pair_bias.permute({0, 3, 1, 2}), row_mask,
                                          qkvg[3]);  // [B, 1, N, H, d]
  return at::linear(o.reshape({B, N, H * d}), w_o);
}

at::Tensor attention_pair_bias_ref(const at::Tensor& s, const at::Tensor& z,
                                   const std::optional<at::Tensor>& mask,
                                   const at::Tensor& ln_s_weight, const at::Tensor& ln_s_bias,
                                   const at::Tensor& w_qkvg, const at::Tensor& b_q,
                                   const at::Tensor& ln_z_weight, const at::Tensor& ln_z_bias,
                                   const at::Tensor& w_z, const at::Tensor& w_o,
                                   int64_t n_heads) {
  constexpr const char* op = "attention_pair_bias";
  detail::check_shape(op, "s", s, {-1, -1, -1});
  detail::check_shape(op, "z", z, {s.size(0), s.size(1), s.size(1), -1});
  detail::check_shape(op, "w_z", w_z, {n_heads, z.size(3)});
  // Through the dispatcher: the fused kernels serve the pair projection (c_z = 128) on a GPU.
  const at::Tensor pair_bias = layernorm_linear(z, ln_z_weight, ln_z_bias, w_z, std::nullopt);  // [B, N, N, H]
  return attention_with_pair_bias(s, pair_bias, mask, ln_s_weight, ln_s_bias, w_qkvg, b_q, w_o, n_heads);
}

}  // namespace megafold::ops
