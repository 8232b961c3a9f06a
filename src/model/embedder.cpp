#include "model/embedder.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/embedding.h>

#include "data/residue_constants.h"
#include "model/layers.h"

namespace megafold::model {
namespace F = torch::nn::functional;

RelativePositionEncodingImpl::RelativePositionEncodingImpl(int64_t c_z, int64_t r_max,
                                                           int64_t s_max)
    : r_max_(r_max), s_max_(s_max) {
  const int64_t features = 2 * (2 * r_max + 2) + 1 + (2 * s_max + 2);
  w_ = register_parameter("w", lecun_normal(c_z, features));
}

at::Tensor RelativePositionEncodingImpl::forward(const data::Batch& batch) {
  // AF3 SI Alg. 3; every pairwise quantity is [B, N, N].
  auto pairwise = [](const at::Tensor& x) { return x.unsqueeze(2) - x.unsqueeze(1); };
  auto same = [](const at::Tensor& x) { return x.unsqueeze(2) == x.unsqueeze(1); };
  const at::Tensor same_chain = same(batch.asym_id);
  const at::Tensor same_residue = same(batch.residue_index) & same_chain;
  const at::Tensor same_entity = same(batch.entity_id);
  const int64_t r = r_max_, sm = s_max_;
  const at::Tensor d_residue = torch::where(
      same_chain, torch::clamp(pairwise(batch.residue_index) + r, 0, 2 * r), 2 * r + 1);
  // One token per residue for proteins: the token index within a residue is 0 for all.
  const at::Tensor token_index = torch::zeros_like(batch.residue_index);
  const at::Tensor d_token = torch::where(
      same_residue, torch::clamp(pairwise(token_index) + r, 0, 2 * r), 2 * r + 1);
  // Copy offsets only mean something between copies of one entity: like AF3's released code
  // (the SI text conditions on the chain), pairs across entities get the extra bin.
  const at::Tensor d_chain = torch::where(
      same_entity, torch::clamp(pairwise(batch.sym_id) + sm, 0, 2 * sm),
      torch::full_like(same_entity, 2 * sm + 1, torch::kLong));
  const at::Tensor feats = torch::cat(
      {F::one_hot(d_residue, 2 * r + 2), F::one_hot(d_token, 2 * r + 2),
       same_entity.unsqueeze(-1).to(torch::kLong), F::one_hot(d_chain, 2 * sm + 2)},
      -1);
  return torch::linear(feats.to(w_.scalar_type()), w_);
}

InputEmbedderImpl::InputEmbedderImpl(const ModelConfig& cfg) {
  w_s_ = register_parameter("w_s", lecun_normal(cfg.c_s, kSInputs));
  w_z_i_ = register_parameter("w_z_i", lecun_normal(cfg.c_z, kSInputs));
  w_z_j_ = register_parameter("w_z_j", lecun_normal(cfg.c_z, kSInputs));
  relpos_ = register_module("relpos",
                            RelativePositionEncoding(cfg.c_z, cfg.relpos_r_max, cfg.relpos_s_max));
}

Embedding InputEmbedderImpl::forward(const data::Batch& batch) {
  // AF3 SI Alg. 1 lines 1-5 (no templates or token bonds yet).
  Embedding e;
  e.s_inputs = torch::cat({F::one_hot(batch.restype, data::kNumTokenTypes).to(w_s_.scalar_type()),
                           batch.profile.to(w_s_.scalar_type()),
                           batch.deletion_mean.unsqueeze(-1).to(w_s_.scalar_type())},
                          -1);
  e.s = torch::linear(e.s_inputs, w_s_);
  e.z = torch::linear(e.s_inputs, w_z_i_).unsqueeze(2) +
        torch::linear(e.s_inputs, w_z_j_).unsqueeze(1) + relpos_->forward(batch);
  // The residual streams stay in the parameters' precision (fp32 under autocast); only the
  // layers compute in bf16, so small updates are not rounded away over 48 blocks.
  e.s = e.s.to(w_s_.scalar_type());
  e.z = e.z.to(w_s_.scalar_type());
  return e;
}

}  // namespace megafold::model
