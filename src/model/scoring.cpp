#include "model/scoring.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/confidence.h"
#include "model/permutation.h"
#include "model/structure_losses.h"

namespace megafold::model {

at::Tensor atom_token_index(int64_t R, int64_t N, const at::Device& device) {
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  return at::floor_divide(at::arange(N * data::kMaxAtomsPerToken, i64), data::kMaxAtomsPerToken).expand({R, -1});
}

at::Tensor mirror_images(const at::Tensor& x, const at::Tensor& ref, const at::Tensor& mask) {
  c10::AutoGradMode no_grad(false);
  const at::Tensor xd = x.detach().to(at::kDouble), rd = ref.detach().to(xd.device(), at::kDouble);
  const at::Tensor m = mask.detach().to(xd.device(), at::kDouble);
  auto rmsd_to = [&](const at::Tensor& target) {
    const at::Tensor moved = weighted_rigid_align(xd, target, m);
    return ((moved - target).pow(2).sum(-1) * m).sum(1) / m.sum(1).clamp_min(1);
  };
  const at::Tensor mirror = rmsd_to(-rd) < rmsd_to(rd);
  return (mirror & (m.sum(1) >= 4)).to(at::kFloat);
}

namespace {

// The resolved atoms of each row first, in order: index [R, K] into the dense atoms (K = the
// most resolved atoms of any row; padding repeats the last index) and its mask [R, K].
std::pair<at::Tensor, at::Tensor> resolved_first(const at::Tensor& mask) {
  const at::Tensor order = at::argsort((mask <= 0).to(at::kInt), /*stable=*/true, /*dim=*/1);
  const int64_t K = std::max<int64_t>(mask.gt(0).sum(1).max().item<int64_t>(), 1);
  const at::Tensor index = order.narrow(1, 0, K);
  return {index, mask.gather(1, index)};
}

at::Tensor take_rows(const at::Tensor& x, const at::Tensor& index) {  // x [R, A, ...], index [R, K]
  std::vector<int64_t> shape = index.sizes().vec();
  for (int64_t d = 2; d < x.dim(); ++d) shape.push_back(x.size(d));
  at::Tensor idx = index;
  for (int64_t d = 2; d < x.dim(); ++d) idx = idx.unsqueeze(-1);
  return x.gather(1, idx.expand(shape));
}

// score_structures for ground truth already matched to the prediction's chains.
StructureScores score_in_order(const at::Tensor& pred, const data::Batch& batch);

}  // namespace

StructureScores score_structures(const at::Tensor& pred, const data::Batch& batch) {
  const int64_t B = batch.size(), A = batch.n_tokens() * data::kMaxAtomsPerToken;
  MF_CHECK(pred.dim() == 3 && pred.size(1) == A && pred.size(0) % B == 0, "score_structures: predictions must be [",
           B, " * samples, ", A, ", 3], got ", pred.sizes());
  const int64_t S = pred.size(0) / B;
  if (S == 1) return score_in_order(pred, permute_ground_truth(pred, batch));
  // Each sample against the ground truth matched to its own chains; rows back example-major.
  std::vector<StructureScores> per_sample;
  const at::Tensor samples = pred.view({B, S, A, 3});
  for (int64_t s = 0; s < S; ++s) {
    const at::Tensor x = samples.select(1, s);
    per_sample.push_back(score_in_order(x, permute_ground_truth(x, batch)));
  }
  auto join = [&](at::Tensor StructureScores::*field) {
    std::vector<at::Tensor> parts;
    for (const StructureScores& sc : per_sample) parts.push_back(sc.*field);
    const at::Tensor stacked = at::stack(parts, 1);  // [B, S, ...]
    std::vector<int64_t> shape = stacked.sizes().vec();
    shape.erase(shape.begin());
    shape[0] = B * S;
    return stacked.reshape(shape);
  };
  return {join(&StructureScores::lddt_ca), join(&StructureScores::lddt_all), join(&StructureScores::lddt_by_type),
          join(&StructureScores::ligand_rmsd), join(&StructureScores::mirrored)};
}

namespace {

StructureScores score_in_order(const at::Tensor& pred, const data::Batch& batch) {
  using data::kMaxAtomsPerToken;
  c10::AutoGradMode no_grad(false);
  const int64_t B = batch.size(), N = batch.n_tokens(), A = N * kMaxAtomsPerToken;
  MF_CHECK(pred.dim() == 3 && pred.size(1) == A && pred.size(0) % B == 0, "score_structures: predictions must be [",
           B, " * samples, ", A, ", 3], got ", pred.sizes());
  const int64_t S = pred.size(0) / B;
  auto rows = [&](const at::Tensor& x) { return S == 1 ? x : x.repeat_interleave(S, 0); };
  const at::Tensor p = pred.to(at::kDouble);
  const at::Tensor gt = rows(batch.atom_coords.reshape({B, A, 3}).to(p.device(), at::kDouble));
  const at::Tensor mask = rows((batch.atom_mask * batch.token_mask.unsqueeze(-1)).reshape({B, A}).to(p.device(), at::kDouble));
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(p.device());
  const int64_t R = p.size(0);
  StructureScores out;
  // C-alpha lDDT over the polymer tokens' centre atoms (CA, C1').
  const at::Tensor centre = rows(batch.centre_slot.to(p.device()));
  const at::Tensor centre_mask = rows((batch.centre_mask * batch.token_mask).to(p.device(), at::kDouble));
  const at::Tensor token_ids = at::arange(N, i64).expand({R, N});
  const at::Tensor p_centres = slot_atoms(p, centre), gt_centres = slot_atoms(gt, centre);
  out.lddt_ca = lddt(p_centres, gt_centres, centre_mask, token_ids).score.to(at::kFloat);
  out.mirrored = mirror_images(p_centres, gt_centres, centre_mask);

  // All-atom lDDT per atom over the resolved atoms only, then globally and per molecule type.
  const auto [index, kmask] = resolved_first(mask);
  const at::Tensor kp = take_rows(p, index), kgt = take_rows(gt, index);
  const at::Tensor ktoken = at::floor_divide(index, kMaxAtomsPerToken);
  // AF3's inclusion radius: 30 A around nucleotide atoms, 15 A around the others.
  const at::Tensor kradius = take_rows(rows(atom_lddt_radius(batch.mol_type.to(p.device()))).to(at::kDouble), index);
  const Lddt per = per_atom_lddt(kp, kgt, kmask, ktoken, kp, kgt, kmask, ktoken, kradius);
  const at::Tensor kept = per.score.to(at::kDouble) * per.pairs;  // [R, K]
  out.lddt_all = (kept.sum(1) / per.pairs.sum(1).clamp_min(1)).to(at::kFloat);
  const at::Tensor kmol = rows(batch.mol_type.to(p.device())).gather(1, ktoken);  // [R, K]
  std::vector<at::Tensor> by_type;
  for (int m = 0; m < data::kNumMolTypes; ++m) {
    const at::Tensor of = (kmol == m).to(at::kDouble) * kmask;
    const at::Tensor pairs = (per.pairs * of).sum(1);
    by_type.push_back(at::where(pairs > 0, (kept * of).sum(1) / pairs.clamp_min(1), NAN));
  }
  out.lddt_by_type = at::stack(by_type, 1).to(at::kFloat);

  // Ligand RMSD after pocket superposition, per ligand chain.
  const at::Tensor asym = batch.asym_id.cpu(), mol = batch.mol_type.cpu(), tmask = batch.token_mask.cpu();
  std::vector<std::vector<int64_t>> ligands(B);  // asym ids of each example's ligand chains
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < N; ++i)
      if (tmask[b][i].item<float>() > 0 && mol[b][i].item<int64_t>() == static_cast<int64_t>(data::MolType::kLigand)) {
        const int64_t a = asym[b][i].item<int64_t>();
        if (std::find(ligands[b].begin(), ligands[b].end(), a) == ligands[b].end()) ligands[b].push_back(a);
      }
  int64_t L = 0;
  for (const auto& l : ligands) L = std::max<int64_t>(L, static_cast<int64_t>(l.size()));
  out.ligand_rmsd = at::full({R, L}, NAN, at::TensorOptions().dtype(at::kFloat));
  if (L == 0) return out;
  const at::Tensor atom_asym = rows(batch.asym_id.to(p.device())).repeat_interleave(kMaxAtomsPerToken, 1);  // [R, A]
  const at::Tensor polymer_centre = at::zeros({R, A}, p.options());  // resolved polymer centre atoms
  polymer_centre.scatter_(1, at::arange(N, i64).unsqueeze(0) * kMaxAtomsPerToken + centre,
                          centre_mask * (rows(batch.mol_type.to(p.device())) != static_cast<int64_t>(data::MolType::kLigand)).to(at::kDouble));
  for (int64_t r = 0; r < R; ++r)
    for (size_t k = 0; k < ligands[r / S].size(); ++k) {
      const at::Tensor lig = (atom_asym[r] == ligands[r / S][k]).to(at::kDouble) * mask[r];  // [A]
      if (lig.sum().item<double>() == 0) continue;
      const at::Tensor lig_idx = lig.nonzero().squeeze(1);
      const at::Tensor d = at::cdist(gt[r], gt[r].index_select(0, lig_idx)).amin(1);  // [A] to the ligand
      at::Tensor pocket = polymer_centre[r] * (d < kPocketRadius).to(at::kDouble);
      if (pocket.sum().item<double>() < 3) pocket = polymer_centre[r];
      if (pocket.sum().item<double>() < 3) continue;
      const at::Tensor moved = weighted_rigid_align(p[r].unsqueeze(0), gt[r].unsqueeze(0), pocket.unsqueeze(0))[0];
      const at::Tensor diff = (moved - gt[r]).index_select(0, lig_idx);
      out.ligand_rmsd[r][static_cast<int64_t>(k)] = std::sqrt(diff.pow(2).sum(1).mean().item<double>());
    }
  return out;
}

}  // namespace

}  // namespace megafold::model
