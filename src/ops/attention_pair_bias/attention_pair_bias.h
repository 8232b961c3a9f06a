#pragma once
// Single-representation attention with pair bias (AF3 SI Alg. 24, the trunk form without
// AdaLN conditioning; the diffusion module adds that).
//   a      = LayerNorm_s(s)                                        [B, N, c_s]
//   q,k,v,g = a @ w_qkvg^T (+ b_q on q)                             [B, N, H, d] each
//   bias   = LayerNorm_z(z) @ w_z^T                                 [B, N, N, H]
//   o      = triangle_attention(q, k, v, bias, mask, g) with R = 1
//   out    = o @ w_o^T                                             [B, N, c_s]
//
//   s                 [B, N, c_s]
//   z                 [B, N, N, c_z]
//   mask              [B, N] optional token mask (nonzero = valid key)
//   ln_s_weight/bias  [c_s]
//   w_qkvg            [4*H*d, c_s]   row blocks q, k, v, g
//   b_q               [H*d]
//   ln_z_weight/bias  [c_z]
//   w_z               [H, c_z]
//   w_o               [c_s, H*d]
//   n_heads           H
// Registered as torch.ops.megafold.attention_pair_bias.
#include <ATen/core/Tensor.h>

#include <optional>

namespace megafold::ops {

at::Tensor attention_pair_bias(const at::Tensor& s, const at::Tensor& z,
                               const std::optional<at::Tensor>& mask,
                               const at::Tensor& ln_s_weight, const at::Tensor& ln_s_bias,
                               const at::Tensor& w_qkvg, const at::Tensor& b_q,
                               const at::Tensor& ln_z_weight, const at::Tensor& ln_z_bias,
                               const at::Tensor& w_z, const at::Tensor& w_o, int64_t n_heads);

// The same attention from an already projected pair bias [B, N, N, H] (= LayerNorm_z(z) @
// w_z^T), for callers that project z elsewhere: the row-sharded Pairformer projects its rows
// of z and gathers the bias (dist/shard.h). Not a registered op.
at::Tensor attention_with_pair_bias(const at::Tensor& s, const at::Tensor& pair_bias,
                                    const std::optional<at::Tensor>& mask, const at::Tensor& ln_s_weight,
                                    const at::Tensor& ln_s_bias, const at::Tensor& w_qkvg, const at::Tensor& b_q,
                                    const at::Tensor& w_o, int64_t n_heads);

at::Tensor attention_pair_bias_ref(const at::Tensor& s, const at::Tensor& z,
                                   const std::optional<at::Tensor>& mask,
                                   const at::Tensor& ln_s_weight, const at::Tensor& ln_s_bias,
                                   const at::Tensor& w_qkvg, const at::Tensor& b_q,
                                   const at::Tensor& ln_z_weight, const at::Tensor& ln_z_bias,
                                   const at::Tensor& w_z, const at::Tensor& w_o, int64_t n_heads);

}  // namespace megafold::ops
