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
  // Zero output weights: the head starts from uniform distributions over every output's bins.
  w_plddt_ = register_parameter("w_plddt", torch::zeros({kMaxAtomsPerToken, cfg_.plddt_bins, cfg.c_s}));
  w_resolved_ = register_parameter("w_resolved", torch::zeros({kMaxAtomsPerToken, 2, cfg.c_s}));
  w_pae_ = register_parameter("w_pae", torch::zeros({cfg_.error_bins, cfg.c_z}));
  w_pde_ = register_parameter("w_pde", torch::zeros({cfg_.error_bins, cfg.c_z}));
}

ConfidenceLogits ConfidenceHeadImpl::forward(const data::Batch& batch, const at::Tensor& s_inputs, const at::Tensor& s_trunk,
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
  // Lines 5-11: PAE from z_ij, PDE from z_ij + z_ji, pLDDT and resolved by one linear map per
  // atom slot of the token.
  const auto type = st.s.scalar_type();
  ConfidenceLogits out;
  out.pae = at::linear(st.z, w_pae_.to(type));
  out.pde = at::linear(st.z + st.z.transpose(1, 2), w_pde_.to(type));
  out.plddt = at::einsum("bnc,akc->bnak", {st.s, w_plddt_.to(type)}).reshape({B, N * kMaxAtomsPerToken, -1});
  out.resolved = at::einsum("bnc,akc->bnak", {st.s, w_resolved_.to(type)}).reshape({B, N * kMaxAtomsPerToken, 2});
  return out;
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

namespace {

// Rows of x [B, A, 3] at flat atom indices [B, ...] -> [B, ..., 3].
at::Tensor atoms_at(const at::Tensor& x, const at::Tensor& index) {
  const int64_t B = x.size(0);
  const at::Tensor flat = index.to(x.device()).reshape({B, -1});
  std::vector<int64_t> shape = index.sizes().vec();
  shape.push_back(3);
  return x.gather(1, flat.unsqueeze(-1).expand({B, flat.size(1), 3})).view(shape);
}

// Mask values [B, A] at flat atom indices [B, ...].
at::Tensor mask_at(const at::Tensor& mask, const at::Tensor& index) {
  const int64_t B = mask.size(0);
  return mask.gather(1, index.to(mask.device()).reshape({B, -1})).view(index.sizes());
}

// Alg. 30: every point x [B, N, 3] in every token frame (a, b, c) [B, N, 3, 3] -> [B, N (frame),
// N (point), 3].
at::Tensor in_frames(const at::Tensor& frame, const at::Tensor& x) {
  auto unit = [](const at::Tensor& v) { return v / (v.square().sum(-1, true) + 1e-8).sqrt(); };
  const at::Tensor a = frame.select(2, 0), b = frame.select(2, 1), c = frame.select(2, 2);
  const at::Tensor w1 = unit(a - b), w2 = unit(c - b);
  const at::Tensor e1 = unit(w1 + w2), e2 = unit(w2 - w1);
  const at::Tensor axes = at::stack({e1, e2, at::cross(e1, e2, -1)}, 2);  // [B, N, 3 (axis), 3]
  const at::Tensor d = x.unsqueeze(1) - b.unsqueeze(2);                    // [B, N, N, 3]
  return at::einsum("bijx,bikx->bijk", {d, axes});
}

// Token centre atoms of x [B, N * kMaxAtomsPerToken, 3] and whether they are resolved.
std::pair<at::Tensor, at::Tensor> centres(const at::Tensor& x, const data::Batch& batch, const at::Tensor& atom_mask) {
  const int64_t N = batch.n_tokens();
  const at::Tensor index = at::arange(N, batch.centre_slot.options()) * kMaxAtomsPerToken + batch.centre_slot;
  return {atoms_at(x, index), mask_at(atom_mask, index) * batch.token_mask.to(x.device())};
}

}  // namespace

PairErrors aligned_errors(const at::Tensor& x_pred, const data::Batch& batch) {
  const int64_t B = batch.size();
  const at::Tensor pred = x_pred.detach().to(at::kFloat).reshape({B, -1, 3});
  const at::Tensor gt = batch.atom_coords.to(pred.device()).reshape({B, -1, 3});
  const at::Tensor atom_mask = batch.atom_mask.to(pred.device()).reshape({B, -1});
  const at::Tensor frames = batch.frame_atoms.to(pred.device());
  const at::Tensor frame_ok = mask_at(atom_mask, frames).prod(-1) * batch.frame_mask.to(pred.device()) *
                              batch.token_mask.to(pred.device());
  const auto [x_pred_c, centre_ok] = centres(pred, batch, atom_mask);
  const at::Tensor x_gt_c = centres(gt, batch, atom_mask).first;
  const at::Tensor diff = in_frames(atoms_at(pred, frames), x_pred_c) - in_frames(atoms_at(gt, frames), x_gt_c);
  return {(diff.square().sum(-1) + 1e-8).sqrt(), frame_ok.unsqueeze(2) * centre_ok.unsqueeze(1)};
}

PairErrors distance_errors(const at::Tensor& x_pred, const data::Batch& batch) {
  const int64_t B = batch.size();
  const at::Tensor pred = x_pred.detach().to(at::kFloat).reshape({B, -1, 3});
  const at::Tensor gt = batch.atom_coords.to(pred.device()).reshape({B, -1, 3});
  const at::Tensor atom_mask = batch.atom_mask.to(pred.device()).reshape({B, -1});
  const auto [p, ok] = centres(pred, batch, atom_mask);
  const at::Tensor g = centres(gt, batch, atom_mask).first;
  auto distances = [](const at::Tensor& x) {
    return ((x.unsqueeze(2) - x.unsqueeze(1)).square().sum(-1) + 1e-8).sqrt();
  };
  return {(distances(p) - distances(g)).abs(), ok.unsqueeze(2) * ok.unsqueeze(1)};
}

at::Tensor pair_error_loss(const at::Tensor& logits, const PairErrors& e, double max) {
  const int64_t bins = logits.size(-1);
  const at::Tensor target = at::clamp(at::floor(e.error * (bins / max)), 0, bins - 1).to(at::kLong);
  const at::Tensor nll = -at::log_softmax(logits.to(at::kFloat), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);
  const at::Tensor pairs = e.mask.sum({1, 2});
  const at::Tensor has = (pairs > 0).to(at::kFloat);
  return ((nll * e.mask).sum({1, 2}) / pairs.clamp_min(1) * has).sum() / has.sum().clamp_min(1);
}

at::Tensor resolved_loss(const at::Tensor& logits, const data::Batch& batch) {
  const int64_t B = batch.size();
  const auto device = logits.device();
  const at::Tensor target = batch.atom_mask.to(device).reshape({B, -1}).to(at::kLong);
  const at::Tensor counted = (batch.ref.mask.to(device) * batch.token_mask.to(device).unsqueeze(-1)).reshape({B, -1});
  const at::Tensor nll = -at::log_softmax(logits.to(at::kFloat), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);
  const at::Tensor atoms = counted.sum(1);
  const at::Tensor has = (atoms > 0).to(at::kFloat);
  return ((nll * counted).sum(1) / atoms.clamp_min(1) * has).sum() / has.sum().clamp_min(1);
}

ConfidenceLoss confidence_loss(const ConfidenceLogits& logits, const at::Tensor& x_pred, const data::Batch& batch,
                               const ConfidenceConfig& cfg) {
  const PlddtLoss pl = plddt_loss(logits.plddt, x_pred, batch);
  ConfidenceLoss l;
  l.pae = pair_error_loss(logits.pae, aligned_errors(x_pred, batch), cfg.error_max);
  l.pde = pair_error_loss(logits.pde, distance_errors(x_pred, batch), cfg.error_max);
  l.resolved = resolved_loss(logits.resolved, batch);
  l.total = pl.loss + l.pde + l.resolved + cfg.pae_weight * l.pae;
  l.plddt = pl.loss.detach();
  l.pae = l.pae.detach(), l.pde = l.pde.detach(), l.resolved = l.resolved.detach();
  l.plddt_target = pl.target;
  return l;
}

}  // namespace megafold::model
