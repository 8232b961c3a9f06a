#include "model/scoring.h"

#include <ATen/ATen.h>

#include "core/check.h"
#include "data/residue_constants.h"
#include "model/confidence.h"
#include "model/structure_losses.h"

namespace megafold::model {

at::Tensor atom_token_index(int64_t R, int64_t N, const at::Device& device) {
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  return at::floor_divide(at::arange(N * data::kMaxAtomsPerToken, i64), data::kMaxAtomsPerToken).expand({R, -1});
}

StructureScores score_structures(const at::Tensor& pred, const data::Batch& batch) {
  using data::kMaxAtomsPerToken;
  const int64_t B = batch.size(), N = batch.n_tokens(), A = N * kMaxAtomsPerToken;
  MF_CHECK(pred.dim() == 3 && pred.size(1) == A && pred.size(0) % B == 0, "score_structures: predictions must be [",
           B, " * samples, ", A, ", 3], got ", pred.sizes());
  const int64_t S = pred.size(0) / B;
  auto rows = [&](const at::Tensor& x) { return S == 1 ? x : x.repeat_interleave(S, 0); };
  const at::Tensor p = pred.to(at::kFloat);
  const at::Tensor gt = rows(batch.atom_coords.reshape({B, A, 3}).to(p.device(), at::kFloat));
  const at::Tensor mask = rows((batch.atom_mask * batch.token_mask.unsqueeze(-1)).reshape({B, A}).to(p.device()));
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(p.device());
  const int64_t R = p.size(0);
  const at::Tensor residue = atom_token_index(R, N, p.device());
  // C-alpha lDDT over the polymer tokens' centre atoms (CA, C1').
  const at::Tensor centre = rows(batch.centre_slot.to(p.device()));
  const at::Tensor centre_mask = rows((batch.centre_mask * batch.token_mask).to(p.device()));
  return {lddt(slot_atoms(p, centre), slot_atoms(gt, centre), centre_mask, at::arange(N, i64).expand({R, N})).score,
          lddt(p, gt, mask, residue).score};
}

}  // namespace megafold::model
