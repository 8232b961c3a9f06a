#include "model/layers.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/sigmoid.h>

#include <cmath>

#include "model/recompute.h"
#include "ops/ops.h"

namespace megafold::model {
namespace {

at::Tensor ones(int64_t n) { return torch::ones({n}); }
at::Tensor zeros(int64_t n) { return torch::zeros({n}); }

// The projection weight with zero rows appended up to a multiple of 32 outputs: each pair's
// row of the projection then starts 64-byte aligned in bf16, so the Hopper attention kernels
// read q, k, v and the gate in place through TMA (which needs 16-byte rows), and every head's
// 64-byte piece is two whole sectors inside one 128-byte line. With 16-byte rows (520 wide for
// 4 heads of 32) half the pieces straddled a third sector and 3 in 8 a second line: the dQ and
// bias-gradient kernels were L2-bound at 92-96% of its throughput and took 1.35 ms against
// 1.11-1.15 ms at 544 (N = 768, H100), for 5% more projection bytes.
at::Tensor aligned_projection(const at::Tensor& w) {
  const int64_t pad = (32 - w.size(0) % 32) % 32;
  return pad == 0 ? w : at::cat({w, at::zeros({pad, w.size(1)}, w.options())});
}

}  // namespace

at::Tensor at_least_float32(const at::Tensor& t) { return t.to(at::promote_types(t.scalar_type(), at::kFloat)); }

at::Tensor lecun_normal(int64_t out, int64_t in) {
  // LeCun normal truncated at two standard deviations by resampling, with the std divided by
  // 0.87962566 (the std of a unit normal truncated at +-2) so the variance is 1/fan_in (AF2).
  at::Tensor w = torch::randn({out, in});
  for (at::Tensor bad = w.abs() > 2.0; bad.any().item<bool>(); bad = w.abs() > 2.0)
    w = torch::where(bad, torch::randn_like(w), w);
  return w.mul_(1.0 / (0.87962566103423978 * std::sqrt(static_cast<double>(in))));
}

TransitionImpl::TransitionImpl(int64_t c, int64_t n) {
  ln_w_ = register_parameter("ln_weight", ones(c));
  ln_b_ = register_parameter("ln_bias", zeros(c));
  w_in_ = register_parameter("w_in", lecun_normal(2 * n * c, c));
  w_out_ = register_parameter("w_out", torch::zeros({c, n * c}));
}

at::Tensor TransitionImpl::forward(const at::Tensor& x) {
  return ops::swiglu_transition(x, ln_w_, ln_b_, w_in_, w_out_);
}

at::Tensor TransitionImpl::residual_step(const at::Tensor& x) {
  // x passes through the transition so that its backward adds the residual's gradient to dx.
  const auto [update, x_through] = ops::swiglu_transition_passthrough(x, ln_w_, ln_b_, w_in_, w_out_);
  return ops::residual_update(x_through, update, std::nullopt, std::nullopt);
}

std::tuple<at::Tensor, at::Tensor> TransitionImpl::residual_step_forked(const at::Tensor& x) {
  const auto [update, x_through] = ops::swiglu_transition_passthrough(x, ln_w_, ln_b_, w_in_, w_out_);
  return ops::residual_update_forked(x_through, update, std::nullopt, std::nullopt);
}

TriangleMultiplicationImpl::TriangleMultiplicationImpl(int64_t c_z, int64_t c, bool outgoing)
    : outgoing_(outgoing) {
  ln_in_w_ = register_parameter("ln_in_weight", ones(c_z));
  ln_in_b_ = register_parameter("ln_in_bias", zeros(c_z));
  w_ab_ = register_parameter("w_ab", lecun_normal(4 * c, c_z));
  w_g_ = register_parameter("w_g", lecun_normal(c_z, c_z));
  ln_out_w_ = register_parameter("ln_out_weight", ones(c));
  ln_out_b_ = register_parameter("ln_out_bias", zeros(c));
  w_o_ = register_parameter("w_o", torch::zeros({c_z, c}));
}

TriangleMultiplicationImpl::Contracted TriangleMultiplicationImpl::contract(const at::Tensor& z,
                                                                           const at::Tensor& pair_mask) {
  const int64_t c = w_ab_.size(0) / 4;
  // z passes through the projection so that its backward adds the residual's gradient to dz.
  const auto [a, b, gate, z_through] =
      ops::triangle_multiplication_projection_passthrough(z, pair_mask, ln_in_w_, ln_in_b_, at::cat({w_ab_, w_g_}), c);
  // outgoing t_ij = sum_k a_ik b_jk; incoming sum_k a_ki b_kj, the outgoing form on transposed views.
  const at::Tensor t = outgoing_ ? ops::triangle_multiplication_contract(a, b)
                                 : ops::triangle_multiplication_contract(a.transpose(1, 2), b.transpose(1, 2));
  return {z_through, t, gate};
}

at::Tensor TriangleMultiplicationImpl::forward(const at::Tensor& z, const at::Tensor& pair_mask,
                                              const std::optional<at::Tensor>& scale) {
  const Contracted u = contract(z, pair_mask);
  return residual(u.z, u.t, u.gate, scale);
}

std::tuple<at::Tensor, at::Tensor> TriangleMultiplicationImpl::forward_forked(const at::Tensor& z,
                                                                             const at::Tensor& pair_mask,
                                                                             const std::optional<at::Tensor>& scale) {
  const Contracted u = contract(z, pair_mask);
  return ops::residual_update_forked(u.z, output(u.t), u.gate, scale);
}

at::Tensor TriangleMultiplicationImpl::output(const at::Tensor& t) {
  return ops::layernorm_linear(t, ln_out_w_, ln_out_b_, w_o_, std::nullopt);
}

at::Tensor TriangleMultiplicationImpl::residual(const at::Tensor& z, const at::Tensor& t, const at::Tensor& gate,
                                                const std::optional<at::Tensor>& scale) {
  return ops::residual_update(z, output(t), gate, scale);
}

at::Tensor TriangleMultiplicationImpl::forward_rows(const at::Tensor& z, const at::Tensor& pair_mask,
                                                   const dist::PairShard& shard,
                                                   const std::optional<at::Tensor>& scale) {
  const int64_t c = w_ab_.size(0) / 4;
  if (outgoing_) {
    // t_ij = sum_k a_ik b_jk: a of these rows, b of all rows. z passes through the projection
    // (see contract).
    const auto [a, b, gate, z_through] = ops::triangle_multiplication_projection_passthrough(
        z, dist::local_rows(pair_mask, shard), ln_in_w_, ln_in_b_, at::cat({w_ab_, w_g_}), c);
    return residual(z_through, dist::ring_contract(a, b, shard, &ops::triangle_multiplication_contract), gate, scale);
  }
  // t_ij = sum_k a_ki b_kj is the outgoing form on z^T, whose rows i are these rows of the
  // output; the gate is projected from z itself.
  const at::Tensor zt = dist::transpose_shards(z, shard);
  const auto [a, b, no_gate] = ops::triangle_multiplication_projection(
      zt, dist::local_rows_transposed(pair_mask, shard), ln_in_w_, ln_in_b_, w_ab_, c);
  const at::Tensor t = dist::ring_contract(a, b, shard, &ops::triangle_multiplication_contract);
  const at::Tensor gate = at::sigmoid(ops::layernorm_linear(z, ln_in_w_, ln_in_b_, w_g_, std::nullopt));
  return residual(z, t, gate, scale);
}

at::Tensor TriangleMultiplicationImpl::forward_chunked(const at::Tensor& z, const at::Tensor& pair_mask,
                                                      const std::optional<at::Tensor>& scale, int64_t rows) {
  const int64_t c = w_ab_.size(0) / 4;
  // a, b and the output gate from row chunks of z: the 640-wide projection never exists whole.
  auto project = [this, pair_mask, c](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>&, int64_t start) {
    const auto [a, b, gate] = ops::triangle_multiplication_projection(
        x[0], chunk_of(pair_mask, 1, start, x[0].size(1)), ln_in_w_, ln_in_b_, at::cat({w_ab_, w_g_}), c);
    return std::vector<at::Tensor>{a, b, gate};
  };
  const std::vector<at::Tensor> abg = chunked_checkpoint(project, {z}, {}, 1, rows);
  // outgoing t_ij = sum_k a_ik b_jk; incoming sum_k a_ki b_kj, the outgoing form on transposed views.
  const at::Tensor t = outgoing_ ? ops::triangle_multiplication_contract(abg[0], abg[1])
                                 : ops::triangle_multiplication_contract(abg[0].transpose(1, 2), abg[1].transpose(1, 2));
  const at::Tensor sc = scale ? *scale : at::Tensor();
  auto output = [this, sc](const std::vector<at::Tensor>& x, const std::vector<at::Tensor>&, int64_t start) {
    const at::Tensor s = chunk_of(sc, 1, start, x[0].size(1));
    return std::vector<at::Tensor>{residual(x[0], x[1], x[2], s.defined() ? std::optional<at::Tensor>(s) : std::nullopt)};
  };
  return chunked_checkpoint(output, {z, t, abg[2]}, {}, 1, rows)[0];
}

TriangleAttentionImpl::TriangleAttentionImpl(int64_t c_z, int64_t heads, int64_t head_dim,
                                             bool starting)
    : starting_(starting), heads_(heads), head_dim_(head_dim) {
  ln_w_ = register_parameter("ln_weight", ones(c_z));
  ln_b_ = register_parameter("ln_bias", zeros(c_z));
  w_proj_ = register_parameter("w_proj", lecun_normal(4 * heads * head_dim + heads, c_z));
  w_o_ = register_parameter("w_o", torch::zeros({c_z, heads * head_dim}));
}

at::Tensor TriangleAttentionImpl::forward(const at::Tensor& z, const at::Tensor& pair_mask) {
  if (starting_) return forward_rows(z, pair_mask, dist::PairShard{});
  const int64_t B = z.size(0), N = z.size(1), H = heads_, d = head_dim_;
  // AF3 SI Alg. 15: the starting-node computation on z^T, with rows turned into columns
  // through strides only (nothing copied): the op reads q, k, v, gate and b'[h, i, k] = b_ki
  // from the transposed projection and writes o with rows and columns swapped back.
  const at::Tensor proj = ops::layernorm_linear(z, ln_w_, ln_b_, aligned_projection(w_proj_), std::nullopt);
  const at::Tensor key_mask = pair_mask.defined() ? pair_mask.transpose(1, 2) : pair_mask;
  const at::Tensor o = ops::triangle_attention_projected(proj, std::nullopt, key_mask, H, d, true);
  return at::linear(o.transpose(1, 2).reshape({B, N, N, H * d}), w_o_);
}

at::Tensor TriangleAttentionImpl::forward_rows(const at::Tensor& x, const at::Tensor& row_mask,
                                               const dist::PairShard& shard) {
  const int64_t B = x.size(0), n = x.size(1), N = x.size(2), H = heads_, d = head_dim_;
  // AF3 SI Alg. 14: one fused LayerNorm+Linear for q, k, v, gate and the pair bias, which the
  // attention reads in place (and whose gradient its backward writes whole).
  const at::Tensor proj = ops::layernorm_linear(x, ln_w_, ln_b_, aligned_projection(w_proj_), std::nullopt);
  // Sharded, b[h, j, k] = b_jk over all rows j: every rank's share of the bias.
  std::optional<at::Tensor> bias;
  if (shard.sharded()) bias = dist::gather_rows(proj.narrow(-1, 4 * H * d, H), shard).permute({0, 3, 1, 2});
  const at::Tensor o = ops::triangle_attention_projected(proj, bias, row_mask, H, d, false);  // [B, n, N, H, d]
  return at::linear(o.reshape({B, n, N, H * d}), w_o_);
}

at::Tensor TriangleAttentionImpl::forward_chunked(const at::Tensor& z, const at::Tensor& pair_mask,
                                                 const std::optional<at::Tensor>& scale, int64_t rows) {
  const int64_t H = heads_, d = head_dim_;
  const at::Tensor w_qkvg = w_proj_.narrow(0, 0, 4 * H * d), w_bias = w_proj_.narrow(0, 4 * H * d, H);
  // The pair bias of every pair (AF3 SI Alg. 14/15 line 3): starting node b'[h, j, k] = b_jk,
  // ending node b'[h, i, k] = b_ki. Held in fp32, so its gradient sums over the chunks in fp32.
  const at::Tensor b = at_least_float32(ops::layernorm_linear(z, ln_w_, ln_b_, w_bias, std::nullopt));
  const at::Tensor bias = starting_ ? b.permute({0, 3, 1, 2}) : b.permute({0, 3, 2, 1});
  const int64_t dim = starting_ ? 1 : 2;  // chunks of the rows of z, or of its columns (the rows of z^T)
  const at::Tensor sc = scale ? *scale : at::Tensor();
  auto step = [this, pair_mask, sc, dim, w_qkvg, H, d](const std::vector<at::Tensor>& xs,
                                                       const std::vector<at::Tensor>& shared, int64_t start) {
    const at::Tensor& x = xs[0];
    const int64_t n = x.size(dim);
    // The chunk in the starting-node orientation: its rows r attend over their own N keys.
    const at::Tensor xr = starting_ ? x : x.transpose(1, 2);  // [B, n, N, c_z]
    at::Tensor mask = chunk_of(pair_mask, starting_ ? 1 : 2, start, n);
    if (mask.defined() && !starting_) mask = mask.transpose(1, 2);
    const std::vector<at::Tensor> p =
        ops::layernorm_linear(xr, ln_w_, ln_b_, w_qkvg, std::nullopt).unflatten(-1, {4, H, d}).unbind(-3);
    const at::Tensor o = ops::triangle_attention(p[0], p[1], p[2], shared[0], mask, p[3]);  // [B, n, N, H, d]
    at::Tensor update = at::linear(o.flatten(-2), w_o_);
    if (!starting_) update = update.transpose(1, 2);
    const at::Tensor s = chunk_of(sc, dim, start, n);
    return std::vector<at::Tensor>{
        ops::residual_update(x, update, std::nullopt, s.defined() ? std::optional<at::Tensor>(s) : std::nullopt)};
  };
  return chunked_checkpoint(step, {z}, {bias}, dim, rows)[0];
}

AttentionPairBiasImpl::AttentionPairBiasImpl(int64_t c_s, int64_t c_z, int64_t heads,
                                             int64_t head_dim)
    : heads_(heads) {
  ln_s_w_ = register_parameter("ln_s_weight", ones(c_s));
  ln_s_b_ = register_parameter("ln_s_bias", zeros(c_s));
  w_qkvg_ = register_parameter("w_qkvg", lecun_normal(4 * heads * head_dim, c_s));
  b_q_ = register_parameter("b_q", zeros(heads * head_dim));
  ln_z_w_ = register_parameter("ln_z_weight", ones(c_z));
  ln_z_b_ = register_parameter("ln_z_bias", zeros(c_z));
  w_z_ = register_parameter("w_z", lecun_normal(heads, c_z));
  w_o_ = register_parameter("w_o", torch::zeros({c_s, heads * head_dim}));
}

at::Tensor AttentionPairBiasImpl::forward(const at::Tensor& s, const at::Tensor& z,
                                          const at::Tensor& token_mask) {
  return ops::attention_pair_bias(s, z, token_mask, ln_s_w_, ln_s_b_, w_qkvg_, b_q_, ln_z_w_,
                                  ln_z_b_, w_z_, w_o_, heads_);
}

at::Tensor AttentionPairBiasImpl::forward_rows(const at::Tensor& s, const at::Tensor& z_rows,
                                               const at::Tensor& token_mask, const dist::PairShard& shard) {
  const at::Tensor bias_rows = ops::layernorm_linear(z_rows, ln_z_w_, ln_z_b_, w_z_, std::nullopt);  // [B, n, N, H]
  return ops::attention_with_pair_bias(s, dist::join_rows(bias_rows, shard), token_mask, ln_s_w_, ln_s_b_, w_qkvg_,
                                       b_q_, w_o_, heads_);
}

}  // namespace megafold::model
