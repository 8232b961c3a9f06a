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
  const at::Tensor d_token = torch::where(
      same_residue, torch::clamp(pairwise(batch.token_index) + r, 0, 2 * r), 2 * r + 1);
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
  const int64_t width = s_inputs_width(cfg);
  w_s_ = register_parameter("w_s", lecun_normal(cfg.c_s, width));
  w_z_i_ = register_parameter("w_z_i", lecun_normal(cfg.c_z, width));
  w_z_j_ = register_parameter("w_z_j", lecun_normal(cfg.c_z, width));
  w_bond_ = register_parameter("w_bond", lecun_normal(cfg.c_z, 1));
  relpos_ = register_module("relpos",
                            RelativePositionEncoding(cfg.c_z, cfg.relpos_r_max, cfg.relpos_s_max));
  DiffusionConfig atom_cfg = cfg.diffusion;  // AF3 Alg. 2: the diffusion module's atom sizes, c_token = c_s
  atom_cfg.c_token = cfg.c_s;
  atoms_ = register_module("atom_encoder", AtomAttentionEncoder(atom_cfg, 0, 0));
}

Embedding InputEmbedderImpl::forward(const data::Batch& batch) {
  // AF3 SI Alg. 1 lines 1-6 (no templates).
  const AtomLayout layout(batch);
  const AtomWindows windows(layout.atoms(), batch.restype.device());
  const AtomConditioning cond = atoms_->condition(batch.ref, at::Tensor(), at::Tensor(), layout, windows);
  // Every atom the tokens have, resolved or not: the input never sees the structure.
  const at::Tensor a =
      atoms_->forward(cond.c, atoms_->pair_biases(cond.p), layout.exists, at::Tensor(), layout, windows).a;
  const auto dtype = w_s_.scalar_type();
  Embedding e;
  e.s_inputs = torch::cat({a.to(dtype), F::one_hot(batch.restype, data::kNumTokenTypes).to(dtype),
                           batch.profile.to(dtype), batch.deletion_mean.unsqueeze(-1).to(dtype)},
                          -1);
  e.s = torch::linear(e.s_inputs, w_s_);
  e.z = torch::linear(e.s_inputs, w_z_i_).unsqueeze(2) + torch::linear(e.s_inputs, w_z_j_).unsqueeze(1) +
        relpos_->forward(batch) + torch::linear(batch.token_bonds.unsqueeze(-1).to(dtype), w_bond_);
  // The residual streams stay in the parameters' precision (fp32 under autocast); only the
  // layers compute in bf16, so small updates are not rounded away over 48 blocks.
  e.s = e.s.to(w_s_.scalar_type());
  e.z = e.z.to(w_s_.scalar_type());
  return e;
}

}  // namespace megafold::model
