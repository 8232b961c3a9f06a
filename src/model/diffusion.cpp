#include "model/diffusion.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <torch/nn/functional/activation.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/recompute.h"
#include "ops/ops.h"

namespace megafold::model {
namespace {

at::Tensor ones(int64_t n) { return torch::ones({n}); }
at::Tensor zeros(int64_t n) { return torch::zeros({n}); }
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  return at::layer_norm(x, {x.size(-1)}, w, b);
}

}  // namespace

FourierEmbeddingImpl::FourierEmbeddingImpl(int64_t dim) {
  w_ = register_buffer("w", torch::randn({dim}));
  b_ = register_buffer("b", torch::randn({dim}));
}

at::Tensor FourierEmbeddingImpl::forward(const at::Tensor& t) {
  return torch::cos(2 * M_PI * (t.unsqueeze(-1) * w_ + b_));
}

AdaptiveLayerNormImpl::AdaptiveLayerNormImpl(int64_t c_a, int64_t c_s) {
  ln_s_w_ = register_parameter("ln_s_weight", ones(c_s));
  w_gain_ = register_parameter("w_gain", lecun_normal(c_a, c_s));
  b_gain_ = register_parameter("b_gain", zeros(c_a));
  w_shift_ = register_parameter("w_shift", torch::zeros({c_a, c_s}));
}

at::Tensor AdaptiveLayerNormImpl::forward(const at::Tensor& a, const at::Tensor& s) {
  const at::Tensor a_n = at::layer_norm(a, {a.size(-1)});
  const at::Tensor s_n = layer_norm(s, ln_s_w_);
  return torch::sigmoid(at::linear(s_n, w_gain_, b_gain_)) * a_n + at::linear(s_n, w_shift_);
}

ConditionedTransitionImpl::ConditionedTransitionImpl(int64_t c_a, int64_t c_s, int64_t n) {
  ada_ = register_module("ada_ln", AdaptiveLayerNorm(c_a, c_s));
  w_ab_ = register_parameter("w_ab", lecun_normal(2 * n * c_a, c_a));
  w_out_ = register_parameter("w_out", torch::zeros({c_a, n * c_a}));
  w_gate_ = register_parameter("w_gate", torch::zeros({c_a, c_s}));
  b_gate_ = register_parameter("b_gate", torch::full({c_a}, -2.0));
}

at::Tensor ConditionedTransitionImpl::forward(const at::Tensor& a, const at::Tensor& s) {
  const auto ab = at::linear(ada_(a, s), w_ab_).chunk(2, -1);
  const at::Tensor b = torch::silu(ab[0]) * ab[1];
  return torch::sigmoid(at::linear(s, w_gate_, b_gate_)) * at::linear(b, w_out_);
}

ConditionedAttentionBase::ConditionedAttentionBase(int64_t c_x, int64_t c_cond, int64_t c_pair, int64_t heads,
                                                   const std::string& pair)
    : heads_(heads) {
  MF_CHECK(c_x % heads == 0, "conditioned attention: ", c_x, " channels are not a multiple of ", heads, " heads");
  ada_ = register_module("ada_ln", AdaptiveLayerNorm(c_x, c_cond));
  w_qkvg_ = register_parameter("w_qkvg", lecun_normal(4 * c_x, c_x));
  b_q_ = register_parameter("b_q", zeros(c_x));
  ln_pair_w_ = register_parameter("ln_" + pair + "_weight", ones(c_pair));
  ln_pair_b_ = register_parameter("ln_" + pair + "_bias", zeros(c_pair));
  w_pair_ = register_parameter("w_" + pair, lecun_normal(heads, c_pair));
  w_o_ = register_parameter("w_o", torch::zeros({c_x, c_x}));
  w_gate_ = register_parameter("w_gate", torch::zeros({c_x, c_cond}));
  b_gate_ = register_parameter("b_gate", torch::full({c_x}, -2.0));
}

at::Tensor ConditionedAttentionBase::project_qkvg(const at::Tensor& x, const at::Tensor& cond) {
  // Only q carries a bias (AF3 SI Alg. 24).
  const at::Tensor bias = at::cat({b_q_, torch::zeros({3 * b_q_.size(0)}, b_q_.options())});
  return at::linear(ada_(x, cond), w_qkvg_, bias);
}

at::Tensor ConditionedAttentionBase::pair_bias(const at::Tensor& pair) {
  return at_least_float32(ops::layernorm_linear(pair, ln_pair_w_, ln_pair_b_, w_pair_, std::nullopt));
}

at::Tensor ConditionedAttentionBase::gated_output(const at::Tensor& o, const at::Tensor& cond) {
  return torch::sigmoid(at::linear(cond, w_gate_, b_gate_)) * at::linear(o, w_o_);
}

ConditionedAttentionImpl::ConditionedAttentionImpl(int64_t c_a, int64_t c_s, int64_t c_z, int64_t heads)
    : ConditionedAttentionBase(c_a, c_s, c_z, heads, "z") {}

at::Tensor ConditionedAttentionImpl::bias(const at::Tensor& z) {
  return pair_bias(z).permute({0, 3, 1, 2});  // [B, H, N, N]
}

at::Tensor ConditionedAttentionImpl::forward(const at::Tensor& a, const at::Tensor& s, const at::Tensor& bias,
                                             const at::Tensor& mask) {
  const int64_t B = bias.size(0), S = a.size(0) / B, N = a.size(1), c_a = a.size(2), H = heads_, d = c_a / H;
  MF_CHECK(S * B == a.size(0), "conditioned attention: ", a.size(0), " rows are not samples of ", B, " examples");
  // The S samples of an example are the attention's rows; all of them read the example's bias.
  // unbind, not a select per part: backward stacks the four gradients in one pass.
  const std::vector<at::Tensor> qkvg = project_qkvg(a, s).view({B, S, N, 4, H, d}).unbind(3);
  const at::Tensor o = ops::triangle_attention(qkvg[0], qkvg[1], qkvg[2], bias, mask.view({B, 1, N}).expand({B, S, N}),
                                               qkvg[3]);  // [B, S, N, H, d]
  return gated_output(o.reshape({B * S, N, c_a}), s);
}

DiffusionTransformerImpl::DiffusionTransformerImpl(int64_t c_a, int64_t c_s, int64_t c_z, int64_t blocks,
                                                   int64_t heads, int64_t n, bool recompute_blocks)
    : recompute_blocks_(recompute_blocks) {
  for (int64_t i = 0; i < blocks; ++i) {
    attn_.push_back(register_module("attn_" + std::to_string(i), ConditionedAttention(c_a, c_s, c_z, heads)));
    transition_.push_back(register_module("transition_" + std::to_string(i), ConditionedTransition(c_a, c_s, n)));
  }
}

std::vector<at::Tensor> DiffusionTransformerImpl::pair_biases(const at::Tensor& z) {
  std::vector<at::Tensor> biases;
  for (auto& attn : attn_) biases.push_back(attn->bias(z));
  return biases;
}

at::Tensor DiffusionTransformerImpl::forward(at::Tensor a, const at::Tensor& s, const std::vector<at::Tensor>& biases,
                                             const at::Tensor& mask) {
  MF_CHECK(biases.size() == attn_.size(), "diffusion transformer: ", biases.size(), " pair biases for ", attn_.size(),
           " blocks");
  const bool recompute = recompute_blocks_ && is_training() && at::GradMode::is_enabled();
  for (size_t i = 0; i < attn_.size(); ++i) {
    auto block = [this, i, mask](const std::vector<at::Tensor>& x) {
      const at::Tensor b = x[0] + attn_[i](x[0], x[1], x[2], mask);
      return std::vector<at::Tensor>{b + transition_[i](b, x[1])};
    };
    a = recompute ? checkpointed(block, {a, s, biases[i]})[0] : block({a, s, biases[i]})[0];
  }
  return a;
}

DiffusionConditioningImpl::DiffusionConditioningImpl(const DiffusionConfig& cfg, int64_t c_s, int64_t c_s_inputs,
                                                     int64_t c_z)
    : sigma_data_(cfg.sigma_data) {
  ln_z_w_ = register_parameter("ln_z_weight", ones(2 * c_z));
  ln_z_b_ = register_parameter("ln_z_bias", zeros(2 * c_z));
  w_z_ = register_parameter("w_z", lecun_normal(c_z, 2 * c_z));
  ln_s_w_ = register_parameter("ln_s_weight", ones(c_s + c_s_inputs));
  ln_s_b_ = register_parameter("ln_s_bias", zeros(c_s + c_s_inputs));
  w_s_ = register_parameter("w_s", lecun_normal(c_s, c_s + c_s_inputs));
  fourier_ = register_module("fourier", FourierEmbedding(cfg.fourier_dim));
  ln_n_w_ = register_parameter("ln_n_weight", ones(cfg.fourier_dim));
  ln_n_b_ = register_parameter("ln_n_bias", zeros(cfg.fourier_dim));
  w_n_ = register_parameter("w_n", lecun_normal(c_s, cfg.fourier_dim));
  for (int i = 0; i < 2; ++i) {
    z_trans_[i] = register_module("z_transition_" + std::to_string(i), Transition(c_z, cfg.transition_factor));
    s_trans_[i] = register_module("s_transition_" + std::to_string(i), Transition(c_s, cfg.transition_factor));
  }
}

Conditioning DiffusionConditioningImpl::forward(const at::Tensor& t, const at::Tensor& s_inputs,
                                                const at::Tensor& s_trunk, const at::Tensor& z_trunk,
                                                const at::Tensor& relpos) {
  return {single(t, single_base(s_inputs, s_trunk)), pair(z_trunk, relpos)};
}

at::Tensor DiffusionConditioningImpl::pair(const at::Tensor& z_trunk, const at::Tensor& relpos) {
  at::Tensor z = at::linear(layer_norm(at::cat({z_trunk, relpos}, -1), ln_z_w_, ln_z_b_), w_z_);
  for (auto& tr : z_trans_) z = z + tr(z);
  return z;
}

at::Tensor DiffusionConditioningImpl::single_base(const at::Tensor& s_inputs, const at::Tensor& s_trunk) {
  return at::linear(layer_norm(at::cat({s_trunk, s_inputs}, -1), ln_s_w_, ln_s_b_), w_s_);
}

at::Tensor DiffusionConditioningImpl::single(const at::Tensor& t, const at::Tensor& s_base) {
  at::Tensor s = s_base;
  const at::Tensor n = fourier_(0.25 * at::log(t / sigma_data_));  // [B, fourier_dim]
  s = s + at::linear(layer_norm(n, ln_n_w_, ln_n_b_), w_n_).unsqueeze(1);
  for (auto& tr : s_trans_) s = s + tr(s);
  return s;
}

}  // namespace megafold::model
