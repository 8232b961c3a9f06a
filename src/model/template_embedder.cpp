#include "model/template_embedder.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "core/check.h"
#include "core/seed.h"
#include "data/residue_constants.h"
#include "model/layers.h"
#include "model/recompute.h"
#include "ops/layernorm_linear/layernorm_linear.h"

namespace megafold::model {
namespace {

// The trunk's settings with the template stack's sizes: the same PairStack, c channels wide.
ModelConfig stack_config(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  c.c_z = cfg.templates.c;
  c.tri_attn_heads = cfg.templates.tri_attn_heads;
  c.tri_attn_head_dim = cfg.templates.tri_attn_head_dim;
  c.tri_mul_hidden = cfg.templates.tri_mul_hidden;
  c.transition_factor = cfg.templates.transition_factor;
  return c;
}

at::Tensor unit(const at::Tensor& v) { return v / (v.square().sum(-1, true) + 1e-8).sqrt(); }

}  // namespace

at::Tensor template_pair_features(const data::Batch& batch, int64_t t, const TemplateConfig& cfg) {
  const at::Tensor x = at_least_float32(batch.template_coords.select(1, t));  // [B, N, 4, 3]
  const at::Tensor m = batch.template_mask.select(1, t).to(x.scalar_type());   // [B, N, 4]
  const at::Tensor n = x.select(2, 0), ca = x.select(2, 1), c = x.select(2, 2), cb = x.select(2, 3);
  const at::Tensor pb = m.select(2, 3);                                    // [B, N]
  const at::Tensor frame = m.select(2, 0) * m.select(2, 1) * m.select(2, 2);
  const at::Tensor pb_ij = pb.unsqueeze(2) * pb.unsqueeze(1);              // [B, N, N]
  const at::Tensor frame_ij = frame.unsqueeze(2) * frame.unsqueeze(1);
  // Distogram: the index of the last lower edge below d, none below the first.
  const at::Tensor d = (cb.unsqueeze(2) - cb.unsqueeze(1)).square().sum(-1).sqrt();  // [B, N, N]
  const at::Tensor lower = at::linspace(cfg.distogram_min, cfg.distogram_max, cfg.distogram_bins, d.options());
  const at::Tensor bin = at::bucketize(d, lower) - 1;  // lower[k] < d <= lower[k + 1]
  const at::Tensor dgram = at::one_hot(bin.clamp_min(0), cfg.distogram_bins).to(x.scalar_type()) *
                           (bin >= 0).to(x.scalar_type()).unsqueeze(-1);
  // Frames (AF2 Alg. 21): e1 along C - CA, e2 the part of N - CA orthogonal to it, e3 = e1 x e2.
  // In float64, which is exact on float32 coordinates and costs nothing at [B, N]: where N - CA
  // lies nearly along C - CA the orthogonal part cancels, and float32 rounding of the projection
  // would grow tenfold and more in e2 and e3.
  const at::Tensor n64 = n.to(at::kDouble), ca64 = ca.to(at::kDouble);
  const at::Tensor e1 = unit(c.to(at::kDouble) - ca64);
  const at::Tensor v2 = n64 - ca64;
  const at::Tensor e2 = unit(v2 - e1 * (e1 * v2).sum(-1, true));
  const at::Tensor e3 = at::linalg_cross(e1, e2, -1);
  const at::Tensor axes = at::stack({e1, e2, e3}, 2).to(x.scalar_type());  // [B, N, 3 (axis), 3]
  // CA_j - CA_i in frame i, the difference taken first and every step elementwise: a product
  // with absolute coordinates (an einsum, which autocast would run in bf16, 0.5-2 A apart at
  // 100-400 A from the origin) would lose a neighbour's 3.8 A to rounding.
  const at::Tensor ca_ij = ca.unsqueeze(1) - ca.unsqueeze(2);                    // [B, i, j, 3]
  const at::Tensor local = (axes.unsqueeze(2) * ca_ij.unsqueeze(3)).sum(-1);     // [B, i, j, 3]
  const at::Tensor same_chain = (batch.asym_id.unsqueeze(2) == batch.asym_id.unsqueeze(1)).to(x.scalar_type());
  return at::cat({dgram * pb_ij.unsqueeze(-1), frame_ij.unsqueeze(-1), unit(local) * frame_ij.unsqueeze(-1),
                  pb_ij.unsqueeze(-1)},
                 -1) *
         same_chain.unsqueeze(-1);
}

at::Tensor templates_present(const data::Batch& batch) {
  return (batch.template_mask.sum({2, 3}) > 0).to(at::kFloat);
}

TemplateEmbedderImpl::TemplateEmbedderImpl(const ModelConfig& cfg) : cfg_(cfg.templates), plan_(memory_plan(cfg)) {
  MF_CHECK(cfg_.n_blocks >= 1, "TemplateEmbedder: model.templates.n_blocks must be >= 1");
  const int64_t c = cfg_.c;
  ln_z_w_ = register_parameter("ln_z_weight", torch::ones({cfg.c_z}));
  ln_z_b_ = register_parameter("ln_z_bias", torch::zeros({cfg.c_z}));
  w_z_ = register_parameter("w_z", lecun_normal(c, cfg.c_z));
  w_a_ = register_parameter("w_a", lecun_normal(c, template_pair_width(cfg_)));
  w_restype_i_ = register_parameter("w_restype_i", lecun_normal(c, data::kNumTokenTypes));
  w_restype_j_ = register_parameter("w_restype_j", lecun_normal(c, data::kNumTokenTypes));
  const ModelConfig stack = stack_config(cfg);
  for (int64_t i = 0; i < cfg_.n_blocks; ++i)
    blocks_.push_back(register_module("block_" + std::to_string(i), PairStack(stack)));
  ln_v_w_ = register_parameter("ln_v_weight", torch::ones({c}));
  ln_v_b_ = register_parameter("ln_v_bias", torch::zeros({c}));
  w_out_ = register_parameter("w_out", torch::zeros({cfg.c_z, c}));
}

at::Tensor TemplateEmbedderImpl::embed_one(const data::Batch& batch, int64_t t, const at::Tensor& zp,
                                           const at::Tensor& pair_mask, uint64_t dropout_seed) {
  // AF3 Alg. 16 lines 5 and 8: the residue types of i and of j enter by their own projections,
  // which is the concatenation's projection without an [N, N, 64] one-hot.
  const auto type = w_a_.scalar_type();
  const at::Tensor restype = at::one_hot(batch.template_restype.select(1, t), data::kNumTokenTypes).to(type);
  at::Tensor v = zp + at::linear(template_pair_features(batch, t, cfg_).to(type), w_a_) +
                 at::linear(restype, w_restype_i_).unsqueeze(2) + at::linear(restype, w_restype_j_).unsqueeze(1);
  // The stack's residual stream in the parameters' precision, as the trunk's (under autocast
  // the projections come back in bf16, which would round every block's update away).
  v = v.to(type);
  for (size_t k = 0; k < blocks_.size(); ++k) v = blocks_[k]->forward(v, pair_mask, mix_seed(dropout_seed, k));
  return at::layer_norm(v, {cfg_.c}, ln_v_w_, ln_v_b_);
}

at::Tensor TemplateEmbedderImpl::forward(const data::Batch& batch, const at::Tensor& z, const at::Tensor& pair_mask,
                                         uint64_t dropout_seed) {
  const int64_t B = z.size(0), N = z.size(1);
  if (!batch.template_restype.defined() || batch.template_restype.size(1) == 0) return z;
  const int64_t T = batch.template_restype.size(1);
  MF_CHECK(batch.template_restype.sizes() == at::IntArrayRef({B, T, N}) &&
               batch.template_coords.sizes() == at::IntArrayRef({B, T, N, 4, 3}) &&
               batch.template_mask.sizes() == at::IntArrayRef({B, T, N, 4}),
           "template embedder: template_restype ", batch.template_restype.sizes(), ", template_coords ",
           batch.template_coords.sizes(), " and template_mask ", batch.template_mask.sizes(), " must be [", B, ", T, ",
           N, "], [", B, ", T, ", N, ", 4, 3] and [", B, ", T, ", N, ", 4]");
  const at::Tensor present = templates_present(batch);  // [B, T]
  const at::Tensor zp = ops::layernorm_linear(z, ln_z_w_, ln_z_b_, w_z_, std::nullopt);  // [B, N, N, c]
  const bool checkpoint = plan_.checkpoint_blocks && is_training() && at::GradMode::is_enabled();
  // The recomputations in backward keep their own handle on the batch (tensor handles).
  const auto held = checkpoint ? std::make_shared<const data::Batch>(batch) : nullptr;
  at::Tensor u;
  for (int64_t t = 0; t < T; ++t) {
    const uint64_t seed = mix_seed(dropout_seed, t);
    at::Tensor e;
    if (checkpoint) {
      // Each template's stack is recomputed in backward from zp: one template's activations at
      // a time.
      auto run = [this, held, t, pair_mask, seed](const std::vector<at::Tensor>& x) {
        return std::vector<at::Tensor>{embed_one(*held, t, x[0], pair_mask, seed)};
      };
      e = checkpointed(run, {zp})[0];
    } else {
      e = embed_one(batch, t, zp, pair_mask, seed);
    }
    e = e * present.select(1, t).view({B, 1, 1, 1}).to(e.scalar_type());
    u = u.defined() ? u + e : e;
  }
  // Lines 11-12: the mean over the example's templates (none: a zero update).
  u = u / present.sum(1).clamp_min(1).view({B, 1, 1, 1}).to(u.scalar_type());
  return z + at::linear(at::relu(u), w_out_).to(z.scalar_type());
}

}  // namespace megafold::model
