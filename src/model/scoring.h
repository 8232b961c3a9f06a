#pragma once
// Scores of predicted structures against a batch's ground truth (validation, `megafold eval`,
// `megafold predict`).
#include <ATen/core/Tensor.h>

#include "data/features.h"

namespace megafold::model {

struct StructureScores {
  at::Tensor lddt_ca;   // [R] lDDT over the polymer tokens' C-alpha / C1' atoms (pairs of different tokens)
  at::Tensor lddt_all;  // [R] lDDT over all resolved heavy atoms (pairs of different residues)
};

// Token index of every atom slot of the dense layout, [R, N * kMaxAtomsPerToken] int64: the
// residue ids that lDDT uses to skip pairs within one residue.
at::Tensor atom_token_index(int64_t R, int64_t N, const at::Device& device);

// pred [R, N * kMaxAtomsPerToken, 3] with R = B * samples rows, example-major (as sampled);
// scored on the atoms the batch resolves. Float64 arithmetic, no gradients.
StructureScores score_structures(const at::Tensor& pred, const data::Batch& batch);

}  // namespace megafold::model
