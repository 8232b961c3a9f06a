#include "model/confidence.h"

#include <ATen/ATen.h>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/heads.h"
#include "model/layers.h"
#include "model/scoring.h"
#include "model/structure_losses.h"

namespace megafold::model {
namespace {

using data::kMaxAtomsPerToken;

ModelConfig head_pairformer(const ModelConfig& cfg) {
  ModelConfig c = cfg;
  c.n_blocks = cfg.confidence.n_blocks;
  // Four blocks on detached inputs: recomputed in backward only when the memory mode says so.
  c.checkpoint_blocks = false;
  return c;
}

}  // namespace

ConfidenceHeadImpl::ConfidenceHeadImpl(const ModelConfig& cfg, int64_t c_s_inputs) : cfg_(cfg.confidence) {
  w_z_i_ = register_parameter("w_z_i", lecun_normal(cfg.c_z, c_s_inputs));
  w_z_j_ = register_parameter("w_z_j", lecun_normal(cfg.c_z, c_s_inputs));
  w_dist_ = register_parameter("w_dist", lecun_normal(cfg.c_z, cfg_.distance_bins));
  pairformer_ = register_module("pairformer", PairformerStack(head_pairformer(cfg), /*offload_inputs=*/false));
  // Zero output weights: the head starts from a uniform distribution over lDDT bins.
  w_plddt_ = register_parameter("w_plddt", torch::zeros({kMaxAtomsPerToken, cfg_.plddt_bins, cfg.c_s}));
}

at::Tensor ConfidenceHeadImpl::forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& s_trunk,
                                       const at::Tensor& z_trunk, const at::Tensor& x_pred, uint64_t dropout_seed) {
  const int64_t B = batch.size(), N = batch.n_tokens();
  MF_CHECK(x_pred.dim() == 3 && x_pred.size(0) == B && x_pred.size(1) == N * kMaxAtomsPerToken,
           "confidence head: x_pred must be [", B, ", ", N * kMaxAtomsPerToken, ", 3], got ", x_pred.sizes());
  // AF3 Alg. 31 lines 1-4, with gradients stopped at the trunk and the structure.
  const at::Tensor si = s_inputs.detach();
  at::Tensor z = z_trunk.detach() + at::linear(si, w_z_i_).unsqueeze(2) + at::linear(si, w_z_j_).unsqueeze(1);
  const at::Tensor rep = slot_atoms(x_pred.detach().to(at::kFloat), batch.rep_slot);
  const at::Tensor bins = distogram_bins(rep, cfg_.distance_bins, cfg_.distance_min, cfg_.distance_max);
  z = z + at::linear(at::one_hot(bins, cfg_.distance_bins).to(w_dist_.scalar_type()), w_dist_);
  const at::Tensor token_mask = batch.token_mask;
  const at::Tensor pair_mask = token_mask.unsqueeze(2) * token_mask.unsqueeze(1);
  const PairformerState st = pairformer_->forward({s_trunk.detach(), z}, token_mask, pair_mask, dropout_seed);
  // Line 8: one linear map per atom slot of the token.
  const at::Tensor logits = at::einsum("bnc,akc->bnak", {st.s, w_plddt_.to(st.s.scalar_type())});
  return logits.reshape({B, N * kMaxAtomsPerToken, cfg_.plddt_bins});
}

at::Tensor slot_atoms(const at::Tensor& x, const at::Tensor& slot) {
  const int64_t B = slot.size(0), N = slot.size(1);
  const at::Tensor index = slot.to(x.device()).view({B, N, 1, 1}).expand({B, N, 1, 3});
  return x.view({B, N, kMaxAtomsPerToken, 3}).gather(2, index).squeeze(2);
}

at::Tensor plddt_from_logits(const at::Tensor& logits) {
  const int64_t bins = logits.size(-1);
  const at::Tensor centres = (at::arange(bins, logits.options().dtype(at::kFloat)) + 0.5) / bins;
  return 100 * at::matmul(at::softmax(logits.to(at::kFloat), -1), centres);
}

PlddtLoss plddt_loss(const at::Tensor& logits, const at::Tensor& x_pred, const data::Batch& batch) {
  const int64_t B = batch.size(), N = batch.n_tokens(), A = N * kMaxAtomsPerToken, bins = logits.size(-1);
  const at::Tensor pred = x_pred.detach().to(at::kFloat).reshape({B, A, 3});
  const at::Tensor gt = batch.atom_coords.to(at::kFloat).reshape({B, A, 3});
  const at::Tensor atom_mask = batch.atom_mask * batch.token_mask.unsqueeze(-1);  // [B, N, 24]
  // AF3 SI Sec. 4.3.1: lDDT of each atom against the polymer tokens' C-alpha / C1' atoms.
  const at::Tensor centre = batch.centre_slot.to(pred.device());
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(pred.device());
  const Lddt per = per_atom_lddt(pred, gt, atom_mask.reshape({B, A}), atom_token_index(B, N, pred.device()),
                                 slot_atoms(pred, centre), slot_atoms(gt, centre),
                                 batch.centre_mask * batch.token_mask, at::arange(N, i64).expand({B, N}));
  const at::Tensor valid = atom_mask.reshape({B, A}) * (per.pairs > 0).to(at::kFloat);
  const at::Tensor target = at::clamp(at::floor(per.score.to(at::kFloat) * bins), 0, bins - 1).to(at::kLong);
  const at::Tensor nll = -at::log_softmax(logits.to(at::kFloat), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);
  const at::Tensor atoms = valid.sum(1);
  const at::Tensor has = (atoms > 0).to(at::kFloat);
  const at::Tensor examples = has.sum().clamp_min(1);
  PlddtLoss l;
  l.loss = ((nll * valid).sum(1) / atoms.clamp_min(1) * has).sum() / examples;
  l.target = ((per.score.to(at::kFloat) * valid).sum() / valid.sum().clamp_min(1)).detach();
  return l;
}

}  // namespace megafold::model
